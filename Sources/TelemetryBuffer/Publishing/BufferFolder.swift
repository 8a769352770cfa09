import Foundation

/// The `telemetry-buffer/` folder of one DSN: the buffer files of every strategy, the staged
/// `envelope-x` files, and the lock that keeps a second buffer out.
///
/// ```
/// crash-safe-list-1, -2     mapped lists (DoubleRotatingBuffer)      cache, flushing   (FileStreamCache)
/// async-io-cache-1, -2      their background copies                  recovered(-N)     (start-up recovery)
/// awaiting-sync-x           a published list's copy, until synced    envelope-x        staged envelopes
/// spare-x                   such a copy emptied, for reuse           boot              the boot they are from
/// detected-termination-x    lists written by the crash handler        client-report     drop counts not sent
/// ```
/// Staged envelopes are complete envelopes not yet moved into `envelopes/`; moving them is a rename on
/// the same file system. Used at start-up and on the buffer's background queue (and by the uploader's
/// queue, which removes `client-report` before a request takes its counts); once `release()`d
/// (at `close()`), staging and moving do nothing, so a closed buffer never touches a folder another
/// buffer may have opened since.
///
/// `@unchecked Sendable`: its counters and ranges are touched at start-up, before the background queue
/// runs, then on that queue only; `released` is behind a lock.
final class BufferFolder: @unchecked Sendable {
    let path: String
    private let lock: FolderLock
    private let released = Locked(false)
    private let fd: FileDescriptor
    private var nextEnvelope: UInt64

    static let name = "telemetry-buffer"
    private static let temporarySuffix = ".tmp"

    /// The folder's entries once the lock was taken, less the temporary files `init` removed, sorted: what
    /// start-up works from (nothing else adds files while the lock is held and the buffer not yet started).
    let found: [String]

    /// Opens the folder, which its caller made, and takes its lock (or keeps `lock`, taken before), or
    /// throws `folderInUse`.
    init(path: String, lock: FolderLock? = nil) throws {
        self.lock = try lock ?? FolderLock(folder: path)
        self.path = path
        let fd = try FileSystem.openDirectory(URL(fileURLWithPath: path, isDirectory: true))
        self.fd = fd
        nextEnvelope = 0
        var names = try FileSystem.names(inDirectory: fd, path: path)
        // What interrupted atomic writes left (`.<name>.tmp`): ours only, a link or someone else's file
        // under such a name is left alone.
        names.removeAll { name in
            guard name.hasPrefix("."), name.hasSuffix(Self.temporarySuffix), FileSystem.isOurs(name, in: fd) else { return false }
            return (try? fd.remove(name, path: path)) != nil
        }
        found = names
        nextEnvelope = names.compactMap { BufferFile(name: $0)?.stagedIndex }.max().map { $0 + 1 } ?? 0
    }

    deinit { fd.close() }

    /// Gives the folder up for a later buffer: releases the lock; staging and moving stop.
    func release() {
        released.withLock { released in
            released = true
            lock.release()
        }
    }

    /// Whether `release()` gave the folder up: from then on nothing here changes its files.
    var isReleased: Bool { released.withLock { $0 } }

    /// The folder's entries, sorted. Throws if it cannot be listed (no descriptor left): an empty list
    /// would pass for a folder with nothing to recover.
    func names() throws -> [String] { try FileSystem.names(inDirectory: fd, path: path) }

    /// Staged envelopes, by index (a file with such a name that is not a regular file of ours is left alone).
    func stagedEnvelopes() throws -> [(index: UInt64, name: String)] {
        try names().compactMap { name in BufferFile(name: name)?.stagedIndex.map { ($0, name) } }
            .filter { FileSystem.isOurs($0.name, in: fd) }.sorted { $0.index < $1.index }
    }

    /// Whether the folder has an entry `name`, of any kind (a link is not followed).
    func contains(_ name: String) -> Bool {
        fd.status(of: name) != nil
    }

    /// Whether `name` is a regular file of ours (see `FileSystem.isOurs`).
    func isOurs(_ name: String) -> Bool { FileSystem.isOurs(name, in: fd) }

    /// Names for `count` new detected-termination files, numbered after any already there.
    func terminationNames(_ count: Int) -> [String] {
        let taken = ((try? names()) ?? []).compactMap { name in
            if case .detectedTermination(let number) = BufferFile(name: name) { number } else { nil }
        }
        return BufferFile.freshNumbers(count, taken: Set(taken)).map { BufferFile.detectedTermination($0).name }
    }

    /// Until recovery has dealt with what earlier processes left (`nil` after): the envelope ranges their
    /// claimed files' markers name, which reservations avoid (a later recovery removes a `publishing`
    /// marker's range), and the indices this process reserved, the only staged envelopes it moves
    /// meanwhile (moved before recovery, an interrupted publication's envelopes came twice).
    private var beforeRecovery: (heldRanges: [Range<UInt64>], own: Set<UInt64>)? = ([], [])

    /// Reservations avoid the ranges `markers` name until `recoveryDone()`. Call before anything is staged.
    func holdBack(markers: [RecordFraming.Publication]) {
        let ranges = markers.filter { $0.state != .idle }.map(\.envelopes)
        beforeRecovery?.heldRanges = ranges
        nextEnvelope = max(nextEnvelope, ranges.map(\.upperBound).max() ?? 0)
    }

    /// Recovery dealt with what earlier processes left (or there was nothing): every staged envelope may move.
    func recoveryDone() { beforeRecovery = nil }

    /// The staged envelopes the markers of files recovery set aside name (a later format version's): for
    /// that version, never moved, removed or reused by this one.
    private var setAside: [Range<UInt64>] = []

    /// Staged envelopes a strategy holds back from moving until its publication is complete (see
    /// `withhold`). Background queue.
    private var withheld: [Range<UInt64>] = []

    /// Keeps the staged envelopes `range` names from moving until `release(_:)`: while no file says they
    /// are published (a list in memory whose cache could not be retired), a kill must find them staged,
    /// for recovery to judge them against the cache that holds their items.
    func withhold(_ range: Range<UInt64>) { if !withheld.contains(range) { withheld.append(range) } }

    /// Lets the envelopes `withhold` kept back move again.
    func release(_ range: Range<UInt64>) { withheld.removeAll { $0 == range } }

    /// Leaves the envelopes `markers` name to the version that wrote them (see `setAside`).
    func leave(markers: [RecordFraming.Publication]) {
        setAside = markers.filter { $0.state != .idle }.map(\.envelopes)
        nextEnvelope = max(nextEnvelope, setAside.map(\.upperBound).max() ?? 0)
    }

    /// Indices for `count` new staged envelopes, as a publication marker in state `publishing`: the next
    /// ones no staged envelope and no held-back range uses, wrapping once at 2^32.
    func reserve(_ count: Int) throws -> RecordFraming.Publication {
        let width = UInt64(count)
        let taken = (beforeRecovery?.heldRanges ?? []) + setAside + (try names()).compactMap { BufferFile(name: $0)?.stagedIndex }.map { $0..<$0 + 1 }
        var start = nextEnvelope, wrapped = false
        while true {
            if start + width > UInt64(UInt32.max) {
                guard !wrapped else { throw TelemetryBufferError.fileSystem(operation: "reserve", path: path, errno: ENOSPC) }
                (start, wrapped) = (0, true)
            }
            guard let clash = taken.first(where: { $0.overlaps(start..<start + width) }) else { break }
            start = clash.upperBound
        }
        nextEnvelope = start + width
        beforeRecovery?.own.formUnion(start..<start + width)
        return .init(state: .publishing, firstEnvelope: UInt32(start), envelopeCount: UInt16(count))
    }

    /// Writes envelopes as `envelope-<first+i>`, complete on return but not yet synced (see
    /// `UnsyncedFiles`), except every `UnsyncedFiles.maxWaiting`: those are synced and closed before the
    /// next, so that a list of spans of many traces (an envelope each) does not run out of descriptors. No
    /// temporary names: until the caller marks the publication `captured`, recovery deletes these files
    /// whole, whatever state they are in. On a failure, the files this call created are removed again, and
    /// only they.
    func stage(_ envelopes: [EnvelopeParts], as publication: RecordFraming.Publication) throws -> UnsyncedFiles {
        guard !isReleased else { throw TelemetryBufferError.folderInUse(path: path) }
        let written = UnsyncedFiles(in: self)
        var created: [String] = []
        do {
            for (offset, envelope) in envelopes.enumerated() {
                let name = BufferFile.stagedEnvelope(UInt64(publication.firstEnvelope) + UInt64(offset)).name
                // Never over a file already there: it is someone's envelope.
                let file = try FileSystem.openFile(name, O_WRONLY | O_CREAT | O_EXCL, in: fd, path: path + "/" + name)
                created.append(name)
                written.append(file, path: path + "/" + name, bytes: envelope.byteCount)
                try envelope.withPieces { try FileSystem.writeAll(file, pieces: $0, path: path + "/" + name) }
                if written.count >= UnsyncedFiles.maxWaiting { try written.sync(withFolder: false) }
            }
        } catch {
            for name in created { remove(name) }
            throw error
        }
        return written
    }

    /// Makes every staged envelope durable: each file, then the folder.
    func syncStaged() throws {
        try FileSystem.sync(try stagedEnvelopes().map(\.name), directoryFD: fd, directoryPath: path)
    }

    /// Records the boot this process runs in (`BootSession`) as the file `boot`, without a sync: if
    /// power loss loses or tears it, recovery only trusts less.
    func recordBoot() throws {
        // Overwritten in place (the ID's length never changes), not truncated: no block freed and reallocated.
        let boot = BufferFile.boot.name
        let file = try FileSystem.openFile(boot, O_WRONLY | O_CREAT, in: fd, path: path + "/" + boot)
        defer { file.close() }
        let id = Array((BootSession.current ?? "").utf8)
        try FileSystem.writeAll(file, id, path: path + "/" + boot)
        try file.truncate(to: id.count, path: path + "/" + boot)
    }

    /// Copies the small file `name` (at most `limit` bytes) to the new file `newName`, without a sync (lost
    /// to power loss, a boot's copy only makes recovery trust less); whether it did. A larger file, planted,
    /// is not copied; a copy that failed part-way is removed.
    func copyBoot(_ name: String, to newName: String, limit: Int = 256) -> Bool {
        guard !isReleased, let bytes = FileSystem.contents(of: path + "/" + name, limit: limit),
              let file = try? FileSystem.openFile(newName, O_WRONLY | O_CREAT | O_EXCL, in: fd, path: path + "/" + newName)
        else { return false }
        defer { file.close() }
        guard (try? FileSystem.writeAll(file, bytes, path: path + "/" + newName)) != nil else {
            remove(newName)
            return false
        }
        return true
    }

    /// Removes the staged envelopes a marker names (an interrupted publication).
    func removeStaged(_ publication: RecordFraming.Publication) {
        guard !isReleased else { return }
        for index in publication.envelopes { remove(BufferFile.stagedEnvelope(index).name) }
    }

    /// The paths of the staged envelopes to move, oldest first: before recovery is done only this
    /// process's, and none once the folder is released (they are then the next buffer's to move); never
    /// those of a file set aside, nor those withheld.
    func stagedPaths() throws -> [String] {
        guard !isReleased else { return [] }
        let excluded = setAside + withheld
        let staged = try stagedEnvelopes().filter { staged in !excluded.contains { $0.contains(staged.index) } }
        // Called between publications, with nothing reserved and not yet staged: what is no longer staged
        // was moved or removed, so the set stays as small as what waits (a recovery that failed would
        // otherwise let it grow with every forward).
        beforeRecovery?.own.formIntersection(staged.map(\.index))
        return staged.filter { beforeRecovery?.own.contains($0.index) ?? true }.map { path + "/" + $0.name }
    }

    /// Writes `name` whole (see `FileSystem.writeAtomically`), durably unless told otherwise.
    func writeAtomically(_ bytes: [UInt8], name: String, durably: Bool = true) throws {
        guard !isReleased else { throw TelemetryBufferError.folderInUse(path: path) }
        try FileSystem.writeAtomically(
            bytes, name: name, temporaryName: "." + name + Self.temporarySuffix, directoryFD: fd, directoryPath: path,
            durably: durably)
    }

    func rename(_ name: String, to newName: String) throws {
        guard !isReleased else { throw TelemetryBufferError.folderInUse(path: path) }
        try fd.rename(name, to: newName, path: path)
    }

    /// Cuts the records off the framed file `name`, keeping its header.
    func empty(_ name: String) throws {
        guard !isReleased else { throw TelemetryBufferError.folderInUse(path: path) }
        guard truncate(path + "/" + name, off_t(RecordFraming.headerSize)) == 0 else {
            throw FileSystem.error("truncate", path + "/" + name)
        }
    }

    /// Removes `name`; returns whether it is gone (an absent file is), `false` once the folder is released.
    @discardableResult
    func remove(_ name: String) -> Bool {
        guard !isReleased else { return false }
        return (try? fd.remove(name, path: path)) != nil
    }

    /// Removes every buffer file of this process (not what recovery claimed from others): what it holds
    /// may not be sent (the server refused the DSN's key). What is not a regular file of ours stays.
    func removeBufferFiles() {
        for name in (try? names()) ?? [] where BufferFile(name: name).map({ $0.claim == nil }) ?? false && isOurs(name) {
            remove(name)
        }
    }

    /// Removes the files that hold items no forward takes any more: what start-up recovery could not
    /// publish, copies kept after a failed sync, a `flushing` file that could not be published, staged
    /// envelopes. For `removeAllData`, after a forward; the strategy's own files stay, and so does what
    /// is not a regular file of ours (never the buffer's).
    func removeLeftovers() throws {
        for name in try names() where isOurs(name) {
            switch BufferFile(name: name) {
            case .claimed?, .awaitingSync?, .streamFlushing?, .recovered?, .detectedTermination?, .stagedEnvelope?, .kept?:
                try fd.remove(name, path: path)
            default:
                continue
            }
        }
    }

    /// Makes the files `names` (those present and the buffer's), then the folder's entries (new files,
    /// removals, renames) durable.
    func sync(_ names: [String] = []) throws {
        try FileSystem.sync(names, directoryFD: fd, directoryPath: path)
    }
}
