/// What start-up recovery found in the buffer folder and turned into envelopes.
public struct RecoveryReport: Sendable, Equatable {
    /// Items recovered from buffer files, each published once.
    public var items = 0
    /// Copies of those items found in more than one file (a list and its IO cache), not published again.
    public var duplicates = 0
    /// Envelopes staged for `envelopes/`, including any an interrupted flush or recovery left.
    public var envelopes = 0
    /// Bytes of buffer files that were not valid records (a torn tail, a file without a header), skipped.
    public var discardedBytes = 0
    /// The buffer files read.
    public var files: [String] = []
}

/// Start-up recovery of a `telemetry-buffer/` folder, whatever strategy wrote it.
///
/// It runs in two parts so that creating a buffer never waits on reading and publishing old files.
/// `claim` (in `init`) renames every buffer file an earlier process left, the lists, IO caches, stream
/// caches, detected-termination files and an earlier `recovered` file, to `recovering-<n>-<name>`;
/// the new buffer's files then start empty beside them. `run` (the first task of the background queue)
/// reads the claimed files. Publication markers say which staged envelopes are authoritative: a `captured`
/// file's items are already in its staged envelopes, so they are skipped; a `publishing` file's staged
/// envelopes are incomplete, so they are deleted and the file's items count. The remaining items are
/// deduplicated by item ID, put in order of arrival, written as one `recovered` file (atomic rename: the
/// commit point), the claimed files are removed, and `recovered` is published as staged envelopes with its
/// own marker. A crash at any step leaves files the next start claims and reads to the same result:
/// nothing lost, nothing twice.
enum Recovery {
    static let claimedPrefix = "recovering-"

    /// Renames the buffer files of earlier processes to claimed names (durably: one `fsync` of the
    /// folder); returns whether there is anything for `run` to do.
    static func claim(folder: BufferFolder) throws -> Bool {
        let names = folder.names()
        let generation = names.compactMap { claimedName($0)?.generation }.max().map { $0 + 1 } ?? 0
        var claimed = false
        for name in names {
            if claimedName(name) != nil { claimed = true; continue }
            guard isSource(name) else { continue }
            try folder.rename(name, to: "\(claimedPrefix)\(generation)-\(name)")
            claimed = true
        }
        if claimed { folder.sync() }
        return claimed || !folder.stagedEnvelopes().isEmpty
    }

    /// The generation and original name of a claimed file.
    private static func claimedName(_ name: String) -> (generation: Int, original: String)? {
        guard name.hasPrefix(claimedPrefix) else { return nil }
        let rest = name.dropFirst(claimedPrefix.count)
        guard let dash = rest.firstIndex(of: "-"), let generation = Int(rest[..<dash]) else { return nil }
        return (generation, String(rest[rest.index(after: dash)...]))
    }

    /// Publishes the claimed files. Background queue, before any other publication.
    static func run(folder: BufferFolder, batcher: EnvelopeBatcher) throws -> RecoveryReport {
        var report = RecoveryReport()
        var sources = folder.names().filter { claimedName($0) != nil }.compactMap { FramedFile(folder: folder.path, name: $0) }
        sources.sort { ($0.created, $0.name) < ($1.created, $1.name) }
        report.files = sources.compactMap { claimedName($0.name)?.original }

        // Markers: captured files are already published; publishing ones were interrupted.
        var published = Set<ItemID>()
        for source in sources {
            switch source.publication.state {
            case .captured: _ = source.withRecords { RecordFraming.forEachRecord(in: $0) { published.insert($0.id) } }
            case .publishing: folder.removeStaged(source.publication)
            case .idle: break
            }
        }

        // Live items, once each, in order of arrival (per buffer lifetime, by sequence).
        var seen = published
        var items: [(id: ItemID, category: ItemCategory, payload: [UInt8])] = []
        var lifetimes: [UInt64: Int] = [:]
        for source in sources where source.publication.state != .captured {
            if source.kind == nil { report.discardedBytes += source.bytes.count }
            let scan = source.withRecords { records in
                RecordFraming.forEachRecord(in: records) { record in
                    if seen.insert(record.id).inserted {
                        items.append((record.id, record.category, Array(record.payload)))
                        if lifetimes[record.id.nonce] == nil { lifetimes[record.id.nonce] = lifetimes.count }
                    } else if !published.contains(record.id) {
                        report.duplicates += 1
                    }
                }
            }
            report.discardedBytes += scan.discardedBytes
        }
        items.sort { (lifetimes[$0.id.nonce]!, $0.id.sequence) < (lifetimes[$1.id.nonce]!, $1.id.sequence) }
        report.items = items.count

        // Commit point: one durable file holding every live item.
        if !items.isEmpty {
            let region = RecordRegion(recordCapacity: items.reduce(0) { $0 + RecordFraming.recordHeaderSize + $1.payload.count },
                                      kind: .recovered)
            for item in items {
                item.payload.withUnsafeBytes {
                    region.append(category: item.category, id: item.id, payload: $0, payloadCRC: CRC32C.checksum($0))
                }
            }
            try FramedFile.write(records: Array(region.records), kind: .recovered, name: BufferFolder.recovered, in: folder)
            Failpoint.recoveryWritten.hit()
        }
        for source in sources { folder.remove(source.name) }
        folder.sync()
        Failpoint.recoveryRemoved.hit()

        if !items.isEmpty { try publishRecovered(folder: folder, batcher: batcher) }
        report.envelopes = folder.stagedEnvelopes().count
        return report
    }

    /// Publishes `recovered` as staged envelopes, guarded by its marker, then removes it.
    private static func publishRecovered(folder: BufferFolder, batcher: EnvelopeBatcher) throws {
        guard let file = FramedFile(folder: folder.path, name: BufferFolder.recovered) else { return }
        // Staged inside: the batches point into the file's bytes.
        try file.withRecords { records in
            try batcher.stage(batcher.batches(records), in: folder) { try FramedFile.mark($0, name: BufferFolder.recovered, in: folder) }
        }
        folder.remove(BufferFolder.recovered)
        folder.sync()
    }

    /// Whether a file of the folder, as a buffer names it, can hold records.
    static func isSource(_ name: String) -> Bool {
        name.hasPrefix("crash-safe-list-") || name.hasPrefix("async-io-cache-")
            || name.hasPrefix(BufferFolder.terminationPrefix)
            || [BufferFolder.streamCache, BufferFolder.streamFlushing, BufferFolder.recovered].contains(name)
    }
}
