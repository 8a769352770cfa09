/// Start-up recovery of a `telemetry-buffer/` folder, whatever strategy wrote it.
///
/// It runs in two parts so that creating a buffer never waits on reading and publishing old files. `claim`
/// (in `init`) renames every buffer file an earlier process left, the lists, IO caches and their
/// `awaiting-sync-x` copies, stream caches, detected-termination files and an earlier `recovered` file, to
/// `recovering-<n>-<name>`; the new buffer's files then start empty beside them. `run` (the first task of
/// the background queue) reads the claimed files. Publication markers say which staged envelopes are
/// authoritative: a `captured` file's items are already in its staged envelopes, so they are skipped; a
/// `publishing` file's staged envelopes are incomplete, so they are deleted and the file's items count.
/// Envelopes need not be synced when they are marked `captured` (nor when a published list's IO cache waits
/// as `awaiting-sync-x`), so both are trusted only if the claimed `boot` file of their generation names
/// this boot: then the envelopes are synced and the copies dropped. From another boot, after power loss or
/// a restart, a `captured` file counts as `publishing` and an `awaiting-sync-x` copy as live items: at
/// least once. After a process death the claimed files are crash-safe lists whose IO caches hold nothing
/// the lists lack: then each list is published as it is, under its own marker, and removed with its cache
/// once its envelopes are synced, after the first forward (see `RecoverySettlement`).
/// Otherwise (a crash handler's files, a stream cache, a list missing what its cache holds) the remaining
/// items are deduplicated by item ID, put in order of arrival, written as `recovered` (and `recovered-N`
/// parts past 8 MiB; each an atomic rename: the commit point), the claimed files are removed, and each
/// part is published as staged envelopes with its own marker. A crash at any step leaves files the next
/// start claims and reads to the same result: nothing lost, nothing twice.
enum Recovery {

    /// Renames the buffer files of earlier processes, among `names` (the folder's entries), to claimed
    /// names; returns whether there is anything for `run` to do. The renames are not synced here, so the
    /// creating thread never waits for the disk: `run` syncs them first. Until then power loss can only
    /// undo them together with everything the new buffer did after them (journaling file systems commit
    /// metadata changes in order).
    /// The file `boot` goes with the files it dates; `recordBoot` then writes this process's own, on the
    /// background queue before any forward (a file creation less for the creating thread).
    static func claim(folder: BufferFolder, names: [String]) throws -> Bool {
        let generation = unusedGeneration(names)
        var claimedNames = names.filter { BufferFile(name: $0)?.claim != nil }
        // A link, FIFO or someone else's file with a buffer file's name is not ours to move.
        let toClaim = names.filter { name in BufferFile(name: name).map { $0.claim == nil && $0.holdsRecords } == true && folder.isOurs(name) }
        // The boot first, as a copy (`boot` stays until this process records its own): a generation then
        // never holds files without the boot they were written in, whatever stops the claim part-way (a
        // kill, a failed rename); without it, published copies would count as live and go out again. Where
        // no copy can be made (a full disk), the boot itself, renamed: that needs no room, and only a kill
        // before the files' claims (on that full disk) then leaves them without it.
        if !toClaim.isEmpty, names.contains(BufferFile.boot.name), folder.isOurs(BufferFile.boot.name) {
            let claimedBoot = BufferFile.claimed(generation: generation, .boot).name
            if !folder.copyBoot(BufferFile.boot.name, to: claimedBoot) {
                try folder.rename(BufferFile.boot.name, to: claimedBoot)
            }
        }
        for name in toClaim {
            let claimed = BufferFile.claimed(generation: generation, BufferFile(name: name)!).name
            try folder.rename(name, to: claimed)
            claimedNames.append(claimed)
        }
        Failpoint.recoveryClaimed.hit()
        let claimed = !claimedNames.isEmpty
        // Before this process stages anything: its envelopes must never carry the indices a claimed file's
        // marker names (a later recovery removes a `publishing` one's range). A marker that cannot be
        // read fails the start rather than be guessed (the files stay claimed for the next start).
        folder.holdBack(markers: try claimedNames.compactMap { try FramedFile.marker(folder: folder.path, name: $0) })
        return claimed || names.contains { BufferFile(name: $0)?.stagedIndex != nil }
    }

    /// The smallest generation no claimed file among `names` has: unique, and never past what `claimedName`
    /// reads back (a planted `recovering-2147483647-x` made the next one unreadable, orphaning what it claimed).
    private static func unusedGeneration(_ names: [String]) -> Int {
        let taken = Set(names.compactMap { BufferFile(name: $0)?.claim?.generation })
        return (0...).first { !taken.contains($0) }!
    }

    /// The generation and original role of a claimed file's name.
    private static func claimedName(_ name: String) -> (generation: Int, original: BufferFile)? {
        BufferFile(name: name)?.claim
    }

    /// Publishes the claimed files. Background queue, before any other publication. `syncEnvelopes`
    /// makes every envelope stored so far durable; `unsynced` takes what is published and not synced yet,
    /// even when a later step fails.
    static func run(folder: BufferFolder, batcher: EnvelopeBatcher, unsynced: inout RecoverySettlement?,
                    syncEnvelopes: () throws -> Void) throws -> RecoveryReport {
        try Failpoint.recoveryFails.failIfArmed("read", folder.path)
        let claimed = try folder.names().filter { claimedName($0) != nil }
        try folder.sync()  // the claims
        var report = RecoveryReport()
        let boots = claimed.filter { claimedName($0)?.original == .boot }
        // A claimed file that cannot be read (no descriptor left, an I/O error) stops recovery: read later,
        // with the others, rather than published without it (its items could then come twice).
        var sources = try claimed.filter { !boots.contains($0) }.compactMap { try FramedFile.read(folder: folder.path, name: $0) }
        sources.sort { ($0.created, $0.name) < ($1.created, $1.name) }

        // Publications of this boot are complete even if never synced; of another, only what was synced.
        let thisBoot = Set(boots.filter { namesThisBoot($0, in: folder) }.compactMap { claimedName($0)?.generation })
        var settled: [String] = [], trusted = false
        for index in sources.indices.reversed() {
            let claimed = claimedName(sources[index].name)!
            let sameBoot = thisBoot.contains(claimed.generation)
            if case .awaitingSync = claimed.original {
                // The copy of a published list: redundant once its envelopes are synced, live otherwise.
                guard sameBoot else { continue }
                settled.append(sources.remove(at: index).name)
                trusted = true
            } else if sources[index].publication.state == .captured {
                if sameBoot { trusted = true } else { sources[index].publication.state = .publishing }
            }
        }
        if trusted { try syncEnvelopes() }
        for name in settled { folder.remove(name) }
        report.files = sources.compactMap { claimedName($0.name)?.original.name }
        report.setAside = claimed.filter { name in
            !boots.contains(name) && !settled.contains(name) && !sources.contains { $0.name == name }
        }
        // A later version's publication stays as it is: the envelopes its marker names are not orphans.
        let setAside = try report.setAside.compactMap { try FramedFile.marker(folder: folder.path, name: $0) }
        folder.leave(markers: setAside)

        // Markers: captured files are already published; publishing ones were interrupted.
        var published = Set<ItemID>()
        for source in sources {
            switch source.publication.state {
            case .captured:
                // Unknown signals' too: a later version published them, and copies of them are not to be kept.
                _ = source.withRecords {
                    $0.forEachRecord(unknown: { published.insert(RecordFraming.Cursor.id(ofRecord: $0)) }) { published.insert($0.id) }
                }
            case .publishing: folder.removeStaged(source.publication)
            case .idle: break
            }
        }

        try removeOrphans(folder: folder, sources: sources, leaving: setAside, into: &report)

        if let lists = listsHoldingTheirCaches(sources) {
            try publish(lists, folder: folder, batcher: batcher, into: &report, unsynced: &unsynced)
            removeSpentBoots(folder: folder)
            return report
        }

        // Live items, once each, in order of arrival (per buffer lifetime, by sequence). Those of a signal
        // this build does not know, once each too, are kept as they are for a version that knows them.
        var seen = published
        var items: [(id: ItemID, category: ItemCategory, payload: [UInt8])] = []
        var kept: [UInt8] = [], keptIDs = Set<ItemID>()
        var lifetimes: [UInt64: Int] = [:]
        for source in sources where source.publication.state != .captured {
            if source.kind == nil { report.discardedBytes += source.bytes.count }
            let scan = source.withRecords { records in
                records.forEachRecord(unknown: { record in
                    let id = RecordFraming.Cursor.id(ofRecord: record)
                    guard !published.contains(id), keptIDs.insert(id).inserted else { return }
                    kept += record
                }) { record in
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
        report.keptForALaterVersion = keptIDs.count

        // Commit point: durable files holding every live item, in parts that each read back whole (one file
        // past `maxFramedFileBytes` was never read again: everything gathered stayed unpublished). A crash
        // between parts leaves the sources too; the next start deduplicates them by item ID.
        var parts = 0
        var rest = items[...]
        while !rest.isEmpty {
            var count = 0, used = 0
            for item in rest {
                let size = RecordFraming.recordHeaderSize + item.payload.count
                guard count == 0 || used + size <= FileSystem.maxFramedFileBytes - RecordFraming.headerSize else { break }
                (count, used) = (count + 1, used + size)
            }
            let part = rest.prefix(count)
            let region = RecordRegion(recordCapacity: part.reduce(0) { $0 + RecordFraming.recordHeaderSize + $1.payload.count },
                                      kind: .recovered)
            for item in part {
                item.payload.withUnsafeBytes {
                    region.append(category: item.category, id: item.id, payload: $0, payloadCRC: CRC32C.checksum($0))
                }
            }
            try FramedFile.write(records: Array(region.records(lane: 0)), kind: .recovered, name: BufferFile.recovered(parts).name, in: folder)
            parts += 1
            rest = rest.dropFirst(part.count)
        }
        // Before the sources go, as the parts: a crash in between leaves both, and the next start keeps them once.
        var keptParts = 0, keptRest = kept[...]
        while !keptRest.isEmpty {
            // Whole records, each part no larger than a framed file is read back at.
            var end = keptRest.startIndex
            while end < keptRest.endIndex {
                let length = Int(UInt32(littleEndian: keptRest.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: end - keptRest.startIndex, as: UInt32.self) }))
                let next = end + RecordFraming.recordHeaderSize + length
                guard end == keptRest.startIndex || next - keptRest.startIndex <= FileSystem.maxFramedFileBytes - RecordFraming.headerSize else { break }
                end = next
            }
            try FramedFile.write(records: Array(keptRest[..<end]), kind: .recovered, name: BufferFile.kept(keptParts).name, in: folder)
            keptParts += 1
            keptRest = keptRest[end...]
        }
        if parts > 0 { Failpoint.recoveryWritten.hit() }
        for source in sources { folder.remove(source.name) }
        removeSpentBoots(folder: folder)
        try folder.sync()
        Failpoint.recoveryRemoved.hit()

        // Each part stays, `captured`, until all are published: its marker names its staged envelopes, which
        // a crash in a later part's publication would otherwise leave as orphans, judged by their bytes.
        for part in 0..<parts {
            try publishRecovered(part, folder: folder, batcher: batcher)
            Failpoint.recoveryPartDone.hit()
        }
        for part in 0..<parts { folder.remove(BufferFile.recovered(part).name) }
        if parts > 0 { try folder.sync() }
        report.envelopes = try folder.stagedEnvelopes().count
        return report
    }

    /// Staged envelopes that no `captured` marker names were staged by a forward whose buffer is gone with
    /// its process (FlushAll's memory, after a SIGKILL) or that committed and reset its list before it
    /// moved them: they are the only copy of their items, and are moved if whole. One that does not read as
    /// an envelope was torn by the kill: removed, its bytes counted as discarded. One that holds an item a
    /// source still holds live belongs to a publication that never committed (or whose marker was damaged):
    /// removed, since recovery publishes that item from its source.
    private static func removeOrphans(folder: BufferFolder, sources: [FramedFile], leaving setAside: [RecordFraming.Publication],
                                      into report: inout RecoveryReport) throws {
        let named = (sources.filter { $0.publication.state == .captured }.map(\.publication) + setAside).map(\.envelopes)
        let orphans = try folder.stagedEnvelopes().filter { staged in !named.contains { $0.contains(staged.index) } }
        guard !orphans.isEmpty else { return }
        var live = Set<[UInt8]>()
        for source in sources where source.publication.state != .captured {
            // Records of signals this build does not know are live too (kept for a later version).
            _ = source.withRecords {
                $0.forEachRecord(unknown: { live.insert(Array($0[RecordFraming.recordHeaderSize...])) }) { live.insert(Array($0.payload)) }
            }
        }
        for (_, name) in orphans {
            let bytes: [UInt8]
            do {
                bytes = try FileSystem.readFile(folder.path + "/" + name, prefix: 0, limit: FileSystem.maxEnvelopeBytes) { _ in .max } ?? []
            } catch let tooLarge as FileSystem.TooLarge {
                report.discardedBytes = report.discardedBytes.saturatingAdding(tooLarge.size)
                folder.remove(name)
                continue
            } catch {
                continue
            }
            // Judged by its bytes, not its headers: damage to them must not hide a live item.
            if EnvelopeReader.elements(in: bytes).contains(where: { live.contains(Array($0)) }) {
                folder.remove(name)
            } else if (try? EnvelopeReader(bytes)) == nil {
                report.discardedBytes += bytes.count
                folder.remove(name)
            }
        }
    }

    /// A claimed crash-safe list, its claimed IO cache if any, how many records each holds, and the bytes
    /// that are not valid records (as the deduplicating path counts them: not those of a `captured` list,
    /// which it does not read).
    private struct ListWithCache {
        var list: FramedFile
        var cache: FramedFile?
        var items: Int
        var copies: Int
        var discarded: Int
    }

    /// The claimed crash-safe lists, oldest first, when they and their IO caches are all the sources and
    /// each cache holds only records its list holds: the case after a process death. Then every item is in
    /// a list once, and each list can be published as it is. A cache may end in a torn record (a kill in
    /// the middle of its write) or lack its header (a kill in the middle of its creation), a list may end
    /// in a damaged record (power loss): the deduplicating path reads no further either.
    private static func listsHoldingTheirCaches(_ sources: [FramedFile]) -> [ListWithCache]? {
        struct Key: Hashable { var generation: Int, number: Int }
        var ids: [String: Set<ItemID>] = [:]
        var lists: [Key: ListWithCache] = [:]
        var caches: [Key: (file: FramedFile, discarded: Int)] = [:]
        for source in sources {
            guard let claimed = claimedName(source.name) else { return nil }
            var held = Set<ItemID>()
            let scan = source.withRecords { $0.forEachRecord { held.insert($0.id) } }
            // Records to keep for a later version take the other path, which keeps them.
            guard scan.unknownRecords == 0 else { return nil }
            ids[source.name] = held
            switch claimed.original {
            case .crashSafeList(let number) where source.kind != nil:
                lists[Key(generation: claimed.generation, number: number)] =
                    ListWithCache(list: source, cache: nil, items: held.count, copies: 0,
                                  discarded: source.publication.state == .captured ? 0 : scan.discardedBytes)
            case .asyncIOCache(let number):
                // Without a header, it holds no records: its bytes are discarded, as the other path counts them.
                caches[Key(generation: claimed.generation, number: number)] =
                    (source, source.kind == nil ? source.bytes.count : scan.discardedBytes)
            default:
                return nil
            }
        }
        for (key, cache) in caches {
            guard let list = lists[key], ids[cache.file.name]!.isSubset(of: ids[list.list.name]!) else { return nil }
            lists[key]!.cache = cache.file
            lists[key]!.copies = ids[cache.file.name]!.count
            lists[key]!.discarded += cache.discarded
        }
        return sources.compactMap { source in lists.values.first { $0.list.name == source.name } }
    }

    /// Publishes each list that holds items under its own marker, straight from its file. An empty list is
    /// removed at once (nothing of it can be lost or sent twice), and so is one already `captured`, whose
    /// removal is synced before its envelopes move on. A crash in between leaves a list `publishing` (its
    /// envelopes are deleted and it is published again) or `captured` (its items, and their copies in its
    /// cache, are skipped): nothing lost, nothing twice.
    ///
    /// A marker is judged by the claimed boot of its file's generation, so a list is first moved (with its
    /// cache) into a generation of this process, whose boot is a copy of the one it recorded before
    /// recovery: else a list filled in an earlier boot, marked now and left behind (a failed removal) would
    /// be judged by that boot, and published again. Such lists wait for their sync in `unsynced` (set after
    /// each list, so that what was published before a failure is synced too). Without room for the copy,
    /// or where the boot is unknown, the lists are marked where they are, synced and removed at once:
    /// trusted less, never lost; so is a list whose envelopes would leave more than `UnsyncedFiles.maxWaiting`
    /// open and waiting (staging syncs and closes all but the last ones of a list of hundreds).
    private static func publish(_ lists: [ListWithCache], folder: BufferFolder, batcher: EnvelopeBatcher,
                                into report: inout RecoveryReport, unsynced: inout RecoverySettlement?) throws {
        let generation = unusedGeneration(try folder.names())
        let boot = BufferFile.claimed(generation: generation, .boot).name
        // An empty list (every list a clean close left) has nothing to publish: it is only removed.
        let toPublish = { (entry: ListWithCache) in entry.list.publication.state != .captured && entry.items > 0 }
        let owned = lists.contains(where: toPublish) && folder.copyBoot(BufferFile.boot.name, to: boot)
        // The sync may wait only where a kill before it leaves markers this boot's next start trusts: the
        // lists' generation dated by a copy that names this boot (`boot` may be older, if recording it failed).
        let defers = owned && namesThisBoot(boot, in: folder)
        var envelopes: [UnsyncedFiles] = [], spent: [(list: String, cache: String?)] = [], removed = false
        for entry in lists {
            var (list, cache) = (entry.list.name, entry.cache?.name)
            report.discardedBytes += entry.discarded
            if toPublish(entry) {
                if owned {
                    // Its marker as this recovery reads it first: a `captured` one from another boot counts as
                    // `publishing` (its envelopes are gone), and must not read as this boot's after the move.
                    try FramedFile.mark(.idle, name: list, in: folder)
                    let moved = { (name: String) in BufferFile.claimed(generation: generation, claimedName(name)!.original).name }
                    for name in [list, cache].compactMap({ $0 }) { try folder.rename(name, to: moved(name)) }
                    (list, cache) = (moved(list), cache.map(moved))
                    Failpoint.recoveryListMoved.hit()
                }
                report.items += entry.items
                report.duplicates += entry.copies
                // Staged inside: the batches point into the file's bytes.
                let staged = try entry.list.withRecords { records in
                    try batcher.stage(batcher.batches(records), in: folder) {
                        try FramedFile.mark($0, name: list, in: folder)
                    }
                }
                // At most `UnsyncedFiles.maxWaiting` envelopes wait open (each list's beyond its last full
                // `maxWaiting` were synced as staged): past that, a list is synced at once.
                if defers, envelopes.reduce(staged.count, { $0 + $1.count }) <= UnsyncedFiles.maxWaiting {
                    envelopes.append(staged)
                    spent.append((list, cache))
                    unsynced = RecoverySettlement(folder: folder, envelopes: envelopes, spent: spent, boot: boot)
                } else {
                    try staged.sync()
                    remove(list: list, cache: cache, in: folder)
                    removed = true
                }
            } else {
                remove(list: list, cache: cache, in: folder)
                // A captured list must not come back after power loss once its envelopes moved on (its marker
                // would then read as another boot's, and its items would go out again).
                removed = removed || entry.items > 0
            }
            Failpoint.recoveryListDone.hit()
        }
        if removed { try folder.sync() }
        report.envelopes = try folder.stagedEnvelopes().count
    }

    /// Whether the boot file `name` holds this boot's ID (never where the boot is unknown). Read up to the
    /// ID's length: what else is there is not this boot's (a planted 3 GB file was read whole).
    private static func namesThisBoot(_ name: String, in folder: BufferFolder) -> Bool {
        BootSession.current.map { FileSystem.contents(of: folder.path + "/" + name, limit: $0.utf8.count) == Array($0.utf8) } ?? false
    }

    /// Removes a list's cache, then the list: a cache left without its list would be read as live items.
    static func remove(list: String, cache: String?, in folder: BufferFolder) {
        guard cache.map(folder.remove) ?? true else { return }
        if (try? Failpoint.recoveryKeepsFiles.failIfArmed("unlink", list)) != nil { folder.remove(list) }
    }

    /// Removes the claimed boots no claimed file of their generation needs any more: a file set aside, or
    /// one that could not be removed, keeps its generation's, by which its marker is judged.
    static func removeSpentBoots(folder: BufferFolder) {
        guard let claimed = try? folder.names().compactMap({ name in claimedName(name).map { (name, $0) } }) else { return }
        let needed = Set(claimed.filter { $0.1.original != .boot }.map(\.1.generation))
        for (name, claim) in claimed where claim.original == .boot && !needed.contains(claim.generation) { folder.remove(name) }
    }

    /// Publishes a part of what recovery gathered as staged envelopes, guarded by its marker (the caller
    /// removes it).
    private static func publishRecovered(_ part: Int, folder: BufferFolder, batcher: EnvelopeBatcher) throws {
        let name = BufferFile.recovered(part).name
        guard let file = try FramedFile.read(folder: folder.path, name: name) else { return }
        // Staged inside: the batches point into the file's bytes.
        try file.withRecords { records in
            _ = try batcher.stage(batcher.batches(records), in: folder) {
                try FramedFile.mark($0, name: name, in: folder)
            }.sync()
        }
    }

}
