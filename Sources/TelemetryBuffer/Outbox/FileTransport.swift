import Foundation

extension TelemetryBuffer {
    /// Stores envelopes as files in one folder, the queue the uploader drains.
    ///
    /// Each envelope is written atomically and durably (temporary file in the folder → `fsync` → `rename`
    /// → `fsync` of the folder), so a reader never sees a partial envelope and a stored envelope survives
    /// power loss. File names sort by age: `<µs since 1970, 16 digits>-<counter>-<random>.envelope`.
    /// At most `maxEnvelopes` envelopes and `maxBytes` bytes are kept. Beyond either, the least important
    /// envelope goes first: the one whose highest log level is lowest (a span envelope counts as `info`),
    /// the oldest of those; its items are counted as `cache_overflow`. Upload order stays oldest first. The
    /// envelope under upload counts toward neither limit and is not evicted.
    /// Envelopes older than `maxAge` and temporary files left by a crash are removed when the transport
    /// opens the folder; the uploader removes an envelope older than `maxAge` when it reaches it.
    public final class FileTransport: Transport, Outbox, Sendable {
        /// The folder holding the envelopes.
        public let directory: URL
        private let directoryFD: FileDescriptor
        private let maxEnvelopes: Int
        private let maxBytes: Int
        private let maxAge: TimeInterval
        /// The time names record and ages are measured on (internal: tests move a clock by hand).
        private let clock: any Clock
        private let reports: ClientReportRecorder?
        private let diagnostics: Diagnostics
        /// A stored envelope file.
        private struct Stored {
            var name: String
            /// Its size, counted toward `maxBytes` as at most one byte more than any envelope the buffer
            /// writes: a larger file (planted, or sparse where a file may reach 2⁶³ − 1 bytes) is never sent,
            /// and sizes such as that added up past `Int.max`.
            var bytes: Int
            /// Its eviction rank (`EvictionRank`), read from the file when an eviction first compares it, with
            /// what its eviction counts as dropped.
            var rank: Int?
            var counts: [(DataCategory, Int)]?

            init(name: String, bytes: Int) {
                self.name = name
                self.bytes = min(max(bytes, 0), FileSystem.maxEnvelopeBytes + 1)
            }
        }
        /// Stored envelopes, oldest first, the counter of the next name, and the envelope under upload.
        /// Guarded by the lock; writes of one transport are also serialised by it, so the list always
        /// matches the folder.
        private let state: Locked<(stored: [Stored], counter: UInt64, uploading: String?)>
        /// Called after each envelope is stored (the uploader starts draining).
        private let stored = Locked<(@Sendable () -> Void)?>(nil)

        static let fileExtension = ".envelope"
        private static let temporarySuffix = ".tmp"

        /// Opens (creating if needed) `directory`, removes expired envelopes and leftovers of interrupted
        /// writes, and keeps at most `maxEnvelopes` envelopes and `maxBytes` bytes.
        ///
        /// - Parameters:
        ///   - directory: The folder; created `0700` if missing.
        ///   - maxEnvelopes: How many envelopes are kept; storing one more evicts the least important.
        ///   - maxBytes: How many bytes of envelopes are kept; storing more evicts the least important.
        ///   - maxAge: Seconds after which a stored envelope is removed when the folder is opened.
        /// - Throws: ``TelemetryBufferError`` for a folder that cannot be created or opened, or
        ///   ``TelemetryBufferError/Code/invalidOption`` for `maxEnvelopes` or `maxBytes` below 1.
        public convenience init(directory: URL, maxEnvelopes: Int = 30, maxBytes: Int = 10 << 20,
                                maxAge: TimeInterval = 7 * 24 * 3600) throws {
            try self.init(directory: directory, maxEnvelopes: maxEnvelopes, maxBytes: maxBytes, maxAge: maxAge,
                          reports: nil, diagnostics: Diagnostics(handler: nil))
        }

        /// Like the public `init`; without `tidies`, what is expired or beyond the bounds stays until `tidy()`
        /// (a buffer calls it on its background queue: a folder of thousands takes seconds to sort out).
        init(directory: URL, maxEnvelopes: Int, maxBytes: Int = 10 << 20, maxAge: TimeInterval, clock: any Clock = SystemClock(),
             reports: ClientReportRecorder?, diagnostics: Diagnostics, tidies: Bool = true) throws {
            guard maxEnvelopes >= 1 else {
                throw TelemetryBufferError.invalidOption(name: "maxCachedEnvelopes", reason: "must be at least 1")
            }
            guard maxBytes >= 1 else {
                throw TelemetryBufferError.invalidOption(name: "maxCacheBytes", reason: "must be at least 1")
            }
            try FileSystem.makeDirectory(directory)
            self.directory = directory
            self.maxEnvelopes = maxEnvelopes
            self.maxBytes = maxBytes
            self.maxAge = maxAge
            self.clock = clock
            self.reports = reports
            self.diagnostics = diagnostics
            directoryFD = try FileSystem.openDirectory(directory)

            let entries = (try? FileSystem.names(inDirectory: directoryFD, path: directory.path)) ?? []
            var stored: [Stored] = []
            for name in entries {
                if name.hasPrefix("."), name.hasSuffix(Self.temporarySuffix) {
                    // Ours only: a link or someone else's file under such a name is left alone.
                    guard FileSystem.isOurs(name, in: directoryFD) else { continue }
                    try? directoryFD.remove(name, path: directory.path)
                } else if name.hasSuffix(Self.fileExtension) {
                    stored.append(Stored(name: name, bytes: FileSystem.size(of: directory.appendingPathComponent(name).path)))
                }
            }
            state = Locked((stored.sorted { $0.name < $1.name }, 0, nil))
            if tidies { tidy() }
        }

        /// Removes the envelopes older than `maxAge` and evicts beyond the bounds (both counted as
        /// `cache_overflow`): what opening the folder leaves to it.
        func tidy() {
            let now = clock.now()
            let expired: [String] = state.withLock { state in
                let (old, kept) = state.stored.reduce(into: ([String](), [Stored]())) { split, file in
                    if file.name != state.uploading, isExpired(file.name, now: now) {
                        split.0.append(file.name)
                    } else {
                        split.1.append(file)
                    }
                }
                state.stored = kept
                return old
            }
            for name in expired { discard(name, reason: .cacheOverflow, why: "older than maxEnvelopeAge") }
            evictOverflow()
        }

        deinit { directoryFD.close() }

        /// Writes the envelope durably, then evicts the least important envelopes beyond the limits.
        ///
        /// - Parameter envelope: The envelope, stored as its bytes.
        /// - Throws: `TelemetryBufferError.fileSystem` if it could not be written and synced.
        public func send(_ envelope: Envelope) throws {
            try state.withLock { state in
                let name = Self.name(now: clock.now(), counter: state.counter)
                state.counter &+= 1
                try FileSystem.writeAtomically(
                    envelope.bytes, name: name, temporaryName: "." + name + Self.temporarySuffix,
                    directoryFD: directoryFD, directoryPath: directory.path)
                state.stored.append(Stored(name: name, bytes: envelope.bytes.count))
            }
            evictOverflow()
            stored.withLock { $0 }?()
        }

        /// Moves complete envelope files (on the same file system), in order, into the folder under new
        /// names: renames, so each appears whole; then evicts beyond the limit. The folder is not synced: a
        /// rename that power loss undoes leaves a synced file where it was, and the buffer's start-up recovery
        /// moves it again; a caller that moves files before syncing them syncs them, then `syncAdopted()`.
        func adopt(_ files: [String]) throws {
            try state.withLock { state in
                for (position, file) in files.enumerated() {
                    if position == 1 { Failpoint.moveOne.hit() }
                    let name = Self.name(now: clock.now(), counter: state.counter)
                    state.counter &+= 1
                    let target = directory.path + "/" + name
                    try SystemCall.retrying("rename", target) { rename(file, target) }
                    state.stored.append(Stored(name: name, bytes: FileSystem.size(of: target)))
                }
            }
            evictOverflow()
            stored.withLock { $0 }?()
        }

        /// Makes the folder's entries durable (envelopes `adopt`ed before their sync, see `DoubleRotatingBuffer`),
        /// or without `flushingDrive` hands them to the drive, for a durable sync after it to flush.
        func syncAdopted(flushingDrive: Bool) throws {
            try FileSystem.sync([], directoryFD: directoryFD, directoryPath: directory.path, flushingDrive: flushingDrive)
        }

        /// Makes every stored envelope and the folder durable.
        func syncStored() throws {
            try FileSystem.sync(state.withLock { $0.stored.map(\.name) }, directoryFD: directoryFD, directoryPath: directory.path)
        }

        /// Sets what to call after each stored envelope.
        func onStore(_ body: @escaping @Sendable () -> Void) { stored.withLock { $0 = body } }

        /// Removes a stored envelope (sent, or refused by the server); with `reason`, its items count as dropped.
        func remove(_ url: URL, countingAs reason: DiscardReason? = nil, why: String = "") {
            let name = url.lastPathComponent
            let known = state.withLock { state in
                guard let index = state.stored.firstIndex(where: { $0.name == name }) else { return false }
                state.stored.remove(at: index)
                return true
            }
            guard known else { return }
            if let reason { discard(name, reason: reason, why: why) } else {
                try? directoryFD.remove(name, path: directory.path)
            }
        }

        /// Removes `url` if it is older than `maxAge` (its items count as `cache_overflow`, as at the folder's
        /// opening) and returns `true`; an envelope the server keeps failing stops holding the queue then.
        func removeIfExpired(_ url: URL) -> Bool {
            guard isExpired(url.lastPathComponent, now: clock.now()) else { return false }
            remove(url, countingAs: .cacheOverflow, why: "older than maxEnvelopeAge")
            return true
        }

        /// Whether the envelope `name` is more than `maxAge` old, or dated more than that ahead (written while
        /// the clock was that far wrong, or it went back since: an age that never comes would keep it for good).
        /// A time before `earliestTrustedTime`, now or in the name, is a clock not set yet (a device without a
        /// real-time clock, before the network gave it the time): it ages nothing, rather than every envelope.
        private func isExpired(_ name: String, now: Date) -> Bool {
            guard now >= Self.earliestTrustedTime,
                  let created = Self.creationDate(ofName: name, path: directory.path + "/" + name),
                  created >= Self.earliestTrustedTime else { return false }
            return abs(now.timeIntervalSince(created)) > maxAge
        }

        /// 2025-01-01, before this library was written: no envelope of it was stored earlier.
        static let earliestTrustedTime = Date(timeIntervalSince1970: 1_735_689_600)

        /// Deletes every envelope in the folder, not counted as dropped (the app asked for it), and makes
        /// the deletions durable. It lists the folder, so a file the list lost track of goes too; a
        /// directory under an envelope's name is no envelope and is left alone. Every file is tried; the
        /// first failure is thrown, and what failed stays listed.
        func removeAll() throws {
            var failure: (any Error)?
            state.withLock { state in
                var names = Set(state.stored.map(\.name))
                do {
                    names.formUnion(try FileSystem.names(inDirectory: directoryFD, path: directory.path))
                } catch {
                    failure = error
                }
                let kept = Self.removeEnvelopes(names, in: directoryFD, path: directory.path, failure: &failure)
                state.stored.removeAll { !kept.contains($0.name) }
            }
            Self.syncFolder(directoryFD, path: directory.path, failure: &failure)
            if let failure { throw failure }
        }

        /// `removeAll()` for a folder no transport of this process keeps (a default transport's, from runs
        /// before the app chose a custom one), opened once and used through its descriptor: nothing if
        /// there is none, or if it is not a folder (a link to one is not followed); nothing is created.
        static func removeAll(in directory: URL) throws {
            let directoryFD: FileDescriptor
            do {
                let flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC
                directoryFD = try FileDescriptor.currentDirectory.open(directory.path, flags)
            } catch {
                if [ENOENT, ENOTDIR, ELOOP].contains(error.rawValue) { return }
                throw error.fileSystem("open", directory.path)
            }
            defer { directoryFD.close() }
            var failure: (any Error)?
            _ = removeEnvelopes(try FileSystem.names(inDirectory: directoryFD, path: directory.path),
                                in: directoryFD, path: directory.path, failure: &failure)
            syncFolder(directoryFD, path: directory.path, failure: &failure)
            if let failure { throw failure }
        }

        /// Unlinks the envelopes among `names` (not folders under their names); returns those it could
        /// not unlink, `failure` set to the first error.
        private static func removeEnvelopes(
            _ names: some Sequence<String>, in directoryFD: FileDescriptor, path: String, failure: inout (any Error)?
        ) -> Set<String> {
            var kept = Set<String>()
            for name in names where name.hasSuffix(fileExtension) {
                if let status = directoryFD.status(of: name), status.st_mode & S_IFMT == S_IFDIR { continue }
                do {
                    try directoryFD.remove(name, path: path)
                } catch {
                    failure = failure ?? error
                    kept.insert(name)
                }
            }
            return kept
        }

        /// Makes the folder's unlinks durable; `failure` set if it is the first error.
        private static func syncFolder(_ directoryFD: FileDescriptor, path: String, failure: inout (any Error)?) {
            do {
                try FileSystem.sync([], directoryFD: directoryFD, directoryPath: path)
            } catch {
                failure = failure ?? error
            }
        }

        /// What is stored, by the kind of item each envelope holds (`log`, `span`), and when the oldest
        /// envelope was stored. It reads every envelope: for diagnostics, not a hot path.
        func summary() -> (stored: [String: QueueStats.Stored], oldest: Date?) {
            var stored: [String: QueueStats.Stored] = [:]
            var oldest: Date?
            for url in storedEnvelopes() {
                // Bounded: a file larger than any envelope is skipped (the uploader deletes it).
                guard let data = FileSystem.contents(of: url.path, limit: FileSystem.maxEnvelopeBytes) else { continue }
                oldest = oldest ?? Self.creationDate(ofName: url.lastPathComponent)
                guard let envelope = try? EnvelopeReader(data) else { continue }
                let kind = envelope.items.first { $0.type != "client_report" }?.type ?? envelope.items.first?.type ?? "empty"
                // Counts read from a file: saturated, never trapping on a crafted `item_count`.
                let items = envelope.items.filter { $0.type == kind }.reduce(0) { $0.saturatingAdding(max(0, $1.itemCount ?? 1)) }
                stored[kind, default: .init()].envelopes += 1
                stored[kind, default: .init()].bytes += data.count
                stored[kind, default: .init()].items = stored[kind, default: .init()].items.saturatingAdding(items)
            }
            return (stored, oldest)
        }

        /// The stored envelope files, oldest first.
        public func storedEnvelopes() -> [URL] {
            state.withLock { $0.stored.map { directory.appendingPathComponent($0.name) } }
        }

        /// Marks `url` as the envelope the uploader is sending, if it is still stored (else returns
        /// `false`: an eviction took it, and counted its items). It is on its way out: it counts toward
        /// neither bound and is not evicted, since its items may reach the server (counting them as
        /// `cache_overflow` too would report a loss that did not happen).
        func beginUpload(_ url: URL) -> Bool {
            state.withLock { state in
                guard state.stored.contains(where: { $0.name == url.lastPathComponent }) else { return false }
                state.uploading = url.lastPathComponent
                return true
            }
        }

        /// Ends the mark `beginUpload` set, after the uploader removed a delivered envelope. One whose
        /// upload failed counts toward the bounds again from the next envelope stored.
        func endUpload() { state.withLock { $0.uploading = nil } }

        /// Evicts the least important envelopes until both bounds hold: the lowest rank, the oldest of those.
        private func evictOverflow() {
            let evicted: [(file: Stored, why: String)] = state.withLock { state in
                let uploading = state.uploading
                var count = state.stored.count(where: { $0.name != uploading })
                var bytes = state.stored.reduce(0) { $0.saturatingAdding($1.name == uploading ? 0 : $1.bytes) }
                // The last one stays, whatever its size: evicting it would only lose it.
                func over() -> Bool { count > maxEnvelopes || (bytes > maxBytes && count > 1) }
                guard over() else { return [] }
                // Read once per file; one that cannot be read now (locked, no descriptor) is tried again next time.
                for index in state.stored.indices where state.stored[index].rank == nil && state.stored[index].name != uploading {
                    let ranked = EvictionRank.of(file: directory.path + "/" + state.stored[index].name, limit: FileSystem.maxEnvelopeBytes)
                    (state.stored[index].rank, state.stored[index].counts) = (ranked?.rank, ranked?.counts)
                }
                // The lowest rank first, the oldest of equals: one linear search when a store went one beyond
                // the count, else one sort (a start on a folder of thousands, after a run with a higher bound,
                // took minutes searching again for each victim).
                let candidates = state.stored.indices.filter { state.stored[$0].name != uploading }
                let precedes = { (a: Int, b: Int) in (state.stored[a].rank ?? 0, a) < (state.stored[b].rank ?? 0, b) }
                let one = count == maxEnvelopes + 1 && bytes <= maxBytes
                let order = one ? [candidates.min(by: precedes)!] : candidates.sorted(by: precedes)
                var evicted: [(file: Stored, why: String)] = []
                var victims = Set<Int>()
                for index in order where over() {
                    evicted.append((state.stored[index], count > maxEnvelopes ? "more than maxCachedEnvelopes" : "more than maxCacheBytes"))
                    victims.insert(index)
                    count -= 1
                    // Saturating, as the sum is: where `Int` has 32 bits, a few thousand files can reach its end.
                    bytes = bytes.saturatingAdding(-state.stored[index].bytes)
                }
                state.stored = state.stored.indices.filter { !victims.contains($0) }.map { state.stored[$0] }
                return evicted
            }
            for envelope in evicted { discard(envelope.file.name, counts: envelope.file.counts, reason: .cacheOverflow, why: envelope.why) }
        }

        /// Deletes a stored envelope and counts its items as dropped for `reason` (see `dropped(in:ranked:)`).
        private func discard(_ name: String, counts: [(DataCategory, Int)]? = nil, reason: DiscardReason, why: String) {
            // Counted before the removal, so that `stats()` never sees the file gone and the drop not yet counted.
            if let reports, let counts = dropped(in: name, ranked: counts) {
                for (category, quantity) in counts { reports.record(reason, category, quantity: quantity) }
            }
            do {
                try directoryFD.remove(name, path: directory.path)
                diagnostics.log(.warning, "dropped envelope \(name): \(why)")
            } catch {
                diagnostics.log(.error, "could not remove envelope \(name): \(error)")
            }
        }

        /// What discarding the stored envelope `name` drops: `ranked`, the counts its ranking read (a stored
        /// file does not change), while the file is still there; else what it holds, or what its first bytes
        /// name if it cannot be parsed (or is larger than any of ours). Nothing for a file another party
        /// deleted (a closed buffer's upload that ended late): that was no loss here.
        private func dropped(in name: String, ranked: [(DataCategory, Int)]?) -> [(DataCategory, Int)]? {
            if let ranked, directoryFD.status(of: name) != nil { return ranked }
            return EnvelopeReader.discardCounts(ofFile: directory.path + "/" + name)
        }

        /// `<16-digit µs>-<6-digit counter>-<8 hex random>.envelope`: lexical order is age order.
        static func name(now: Date, counter: UInt64) -> String {
            let micros = UInt64(max(0, now.timeIntervalSince1970 * 1_000_000))
            let random = UInt32.random(in: .min ... .max)
            return pad(String(micros), 16) + "-" + pad(String(counter % 1_000_000), 6) + "-"
                + pad(String(random, radix: 16), 8) + fileExtension
        }

        /// The time a name produced by `name(now:counter:)` records.
        static func creationDate(ofName name: String) -> Date? {
            guard name.count > 17, let micros = UInt64(name.prefix(16)) else { return nil }
            return Date(timeIntervalSince1970: Double(micros) / 1_000_000)
        }

        /// When the envelope `name` at `path` was stored: the time its name records, else (a file this class
        /// did not name) its modification date.
        private static func creationDate(ofName name: String, path: String) -> Date? {
            creationDate(ofName: name) ?? (try? FileManager.default.attributesOfItem(atPath: path))?[.modificationDate] as? Date
        }

        private static func pad(_ text: String, _ width: Int) -> String {
            String(repeating: "0", count: max(0, width - text.count)) + text
        }
    }
}

/// `TelemetryBuffer.FileTransport`: the module and its main class share a name, so the qualified form
/// names the class's member (as needed where another module has a `FileTransport` too).
public typealias FileTransport = TelemetryBuffer.FileTransport
