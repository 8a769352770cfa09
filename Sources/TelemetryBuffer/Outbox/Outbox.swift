import Foundation

/// Where the strategies hand finished envelopes: complete files staged in the buffer folder, taken oldest
/// first. The one contract between publishing and whatever stores or sends envelopes: `FileTransport`
/// (a rename into its folder, which the uploader drains) or `ForwardingOutbox` (a custom `Transport`).
protocol Outbox: Sendable {
    /// Takes the staged envelope files at `paths`, oldest first: on return they are the outbox's and gone
    /// from the buffer folder. On a throw, the files not yet taken stay staged.
    func adopt(_ paths: [String]) throws

    /// Makes the outbox's record of what `adopt` took durable (its folder entries), once the files
    /// themselves were synced; without `flushingDrive`, only hands it to the drive (Apple platforms; see
    /// `FileDescriptor.handOff`), for a durable sync after it to flush.
    func syncAdopted(flushingDrive: Bool) throws

    /// Makes everything the outbox holds durable.
    func syncStored() throws
}

extension Outbox {
    /// Takes every envelope staged in `folder` (none once the folder is released). A failure is logged;
    /// what was not taken stays staged for the next forward or start.
    func takeStaged(from folder: BufferFolder, diagnostics: Diagnostics) {
        do {
            let paths = try folder.stagedPaths()
            guard !paths.isEmpty else { return }
            try adopt(paths)
        } catch {
            diagnostics.log(.error, "could not move staged envelopes to the transport: \(error)")
        }
    }
}

/// The outbox for a custom `Transport`: each staged envelope is read, sent, then deleted. A crash between
/// a send and the deletion sends that envelope again at the next start: at least once. What the transport
/// refuses (it threw) stays staged, to be offered again first, within the cache's bounds.
struct ForwardingOutbox: Outbox {
    let transport: any Transport
    /// How many envelopes, and bytes of them, may wait staged while the transport refuses
    /// (``Options/maxCachedEnvelopes``, ``Options/maxCacheBytes``).
    let maxEnvelopes: Int
    let maxBytes: Int
    let reports: ClientReportRecorder
    let diagnostics: Diagnostics
    /// The eviction rank of each staged file ranked so far, with its size then: a file is read once while
    /// it waits, not at every refused forward (up to `maxBytes` of them each time).
    private let ranked = Locked<[String: (bytes: Int, rank: (rank: Int, counts: [(DataCategory, Int)]?)?)]>([:])

    func adopt(_ paths: [String]) throws {
        for (position, path) in paths.enumerated() {
            let bytes: [UInt8]
            do {
                guard let read = try FileSystem.readFile(path, prefix: 0, limit: Self.maxStagedBytes, length: { _ in .max })
                else { continue }
                bytes = read
            } catch is FileSystem.TooLarge {
                continue  // larger than any the buffer stages: not its own, left alone
            }
            do {
                try transport.send(Envelope(bytes: bytes))
            } catch {
                evictBeyondBounds(waiting: paths[position...])
                throw error
            }
            guard unlink(path) == 0 || errno == ENOENT else { throw FileSystem.error("unlink", path) }
        }
    }

    /// The largest staged file that is an envelope: recovery by an earlier version could stage one envelope
    /// per trace from up to a `recovered` file's worth of spans (now each keeps within `maxBatchBytes`).
    private static let maxStagedBytes = FileSystem.maxFramedFileBytes + FileSystem.maxEnvelopeBytes

    /// Deletes envelopes of `waiting` (staged, not taken) while more than `maxEnvelopes` of them, or more
    /// than `maxBytes`, wait (the last one stays, whatever its size), in the order `FileTransport` evicts
    /// in (`EvictionRank`: the lowest rank first, the oldest of equals); their items count as
    /// `cache_overflow`. A transport that keeps throwing would otherwise leave every forward's envelopes in
    /// the folder. Only what `adopt` would send counts and goes: regular files no larger than any staged
    /// envelope (looked at again right before the unlink, which never follows a link).
    private func evictBeyondBounds(waiting: ArraySlice<String>) {
        func size(_ path: String) -> Int? {
            var status = stat()
            guard lstat(path, &status) == 0, status.st_mode & S_IFMT == S_IFREG, status.st_size <= Self.maxStagedBytes else { return nil }
            return Int(status.st_size)
        }
        let envelopes = waiting.compactMap { path in size(path).map { (path: path, bytes: $0) } }
        var count = envelopes.count
        var bytes = envelopes.reduce(0) { $0 + $1.bytes }
        func over() -> Bool { count > maxEnvelopes || (bytes > maxBytes && count > 1) }
        guard over() else { return }
        let ranked = self.ranked.withLock { known in
            // Only what waits now is kept; a file of another size under a known name is read again.
            known = Dictionary(uniqueKeysWithValues: envelopes.map { envelope in
                let rank = known[envelope.path].flatMap { $0.bytes == envelope.bytes ? $0.rank : nil }
                    ?? EvictionRank.of(file: envelope.path, limit: Self.maxStagedBytes)
                return (envelope.path, (envelope.bytes, rank))
            })
            return envelopes.map { known[$0.path]!.rank }
        }
        let order = envelopes.indices.sorted { (ranked[$0]?.rank ?? 0, $0) < (ranked[$1]?.rank ?? 0, $1) }
        for index in order where over() {
            let (path, listed) = envelopes[index]
            // Gone meanwhile (taken by a removal), or no longer a file `adopt` sends: one fewer waits, and
            // nothing was lost here.
            let ours = size(path) != nil
            let counts = ours ? ranked[index]?.counts ?? EnvelopeReader.discardCounts(ofFile: path) : nil
            let removed = ours && unlink(path) == 0
            guard removed || size(path) == nil else { continue }
            if removed {
                for (category, quantity) in counts ?? [] { reports.record(.cacheOverflow, category, quantity: quantity) }
                diagnostics.log(.warning, "dropped staged envelope \(path.split(separator: "/").last ?? ""): the transport refused it, and more wait")
            }
            count -= 1
            bytes -= listed
        }
    }

    /// Nothing to do: `send` returns only once the envelope is safe.
    func syncAdopted(flushingDrive: Bool) {}

    /// Nothing to do: `send` returns only once the envelope is safe.
    func syncStored() {}
}
