import Foundation

/// A background file copy of a crash-safe list, for power loss: the mapped list already survives the
/// death of the process, but only `fdatasync`ed bytes survive the machine's.
///
/// It holds the list's records after a header of its own, one lane's run after another's as they were
/// committed (so not in order of arrival across lanes: recovery orders what it reads from caches by item
/// sequence). Each `catchUp` writes everything a lane committed since the last one in a single `write`, so
/// many items cost one call per lane, and `sync` makes them durable. It never runs on the calling thread;
/// its owner calls it on one serial queue, and its file is created there too, by its first use.
final class AsyncIOCache {
    private let path: String
    /// `nil` until the first use.
    private var fd: FileDescriptor?
    /// Created by the first use and its name not yet synced: the next `sync` has the folder synced too.
    private var nameUnsynced = false
    /// Record bytes of each lane of the list already written to the file, one lane's after another's.
    private var mirrored: [Int] = []
    /// Something was written after the header since the file was created or retired: a write that failed
    /// part-way may have left records that `mirrored` does not count.
    private var written = false
    private var unsynced = false
    /// `retire` moved the file away but no empty file has taken its place yet.
    private(set) var moved = false

    /// A cache whose file `path` is created (or emptied) with a fresh header by its first use: not by the
    /// thread that creates a buffer (a file's creation took 0.1 ms on ext4 here).
    init(path: String) {
        self.path = path
    }

    deinit { fd?.close() }

    /// The file, created by the first call.
    private func file() throws -> FileDescriptor {
        if let fd { return fd }
        let created = try Self.create(path)
        (fd, nameUnsynced) = (created, true)
        return created
    }

    /// Opens the file at `path`, writes a fresh header and cuts off whatever follows it: truncated
    /// (`O_TRUNC`) when `truncating`, else cut to its header after writing it (a spare keeps its block).
    private static func create(_ path: String, truncating: Bool = true) throws -> FileDescriptor {
        let fd = try FileSystem.openFile(path, O_RDWR | O_CREAT | (truncating ? O_TRUNC : 0))
        var header = [UInt8](repeating: 0, count: RecordFraming.headerSize)
        header.withUnsafeMutableBytes {
            RecordFraming.writeHeader(kind: .asyncIOCache, createdMicros: RecordFraming.createdNow(),
                                      to: $0.baseAddress!)
        }
        do {
            try header.withUnsafeBytes { try fd.write($0, at: 0, path: path) }
            // A spare that still holds records (its emptying lost to power loss, or not ours to trust) would
            // have them read back after the new header as this cache's, and published twice.
            if !truncating { try fd.truncate(to: RecordFraming.headerSize, path: path) }
        } catch {
            fd.close()
            throw error
        }
        return fd
    }

    /// Record bytes of the list written to the file so far, every lane.
    var mirroredBytes: Int { mirrored.reduce(0, +) }

    /// Whether it holds no records: nothing was written since it was created or retired, not even in part
    /// (and a retirement is not half done).
    var isEmpty: Bool { !moved && !written }

    /// Appends the list's records committed since the last call; returns whether it wrote anything.
    @discardableResult
    func catchUp(with list: RecordRegion) throws -> Bool {
        if mirrored.count != list.laneCount { mirrored = Array(repeating: 0, count: list.laneCount) }
        // Nothing new creates no file (the timer's run on a list just rotated in, a close with nothing held).
        guard (0..<list.laneCount).contains(where: { list.records(lane: $0).count > mirrored[$0] }) else { return false }
        let fd = try file()
        var wrote = false
        for lane in 0..<list.laneCount {
            let records = list.records(lane: lane)
            guard records.count > mirrored[lane] else { continue }
            written = true
            try fd.write(UnsafeRawBufferPointer(rebasing: records[mirrored[lane]...]),
                         at: RecordFraming.headerSize + mirrored.reduce(0, +), path: path)
            mirrored[lane] = records.count
            // At once: if the next lane's write throws, this one's bytes are still synced by the next `sync`.
            (wrote, unsynced) = (true, true)
        }
        return wrote
    }

    /// Makes the file durable whatever was written through it (its truncation as a spare included); a file
    /// not created yet holds nothing to make durable.
    func syncFile() throws {
        guard let fd else { return }
        guard fd.durableSync() == 0 else { throw FileSystem.error("fsync", path) }
        unsynced = false
    }

    /// Makes everything written durable; the first time after the file was created, `syncFolder` too, for its
    /// name (else power loss could keep the synced bytes under no name).
    func sync(syncFolder: () throws -> Void = {}) throws {
        guard unsynced, let fd else { return }
        guard fd.dataSync() == 0 else { throw FileSystem.error("fdatasync", path) }
        if nameUnsynced {
            try syncFolder()
            nameUnsynced = false
        }
        unsynced = false
    }

    /// Once its list is published: renames the file to `newPath` (same folder), where it stays as the
    /// power-loss copy of those items until their envelopes are synced, and starts an empty file in its
    /// place for the list's next items: `spare`, an earlier copy cut to its header, if given (no inode
    /// created and freed per forward: ext4 without a journal skips recently freed inodes when it
    /// allocates one, checking each, which slows every later file creation).
    ///
    /// If it throws after the file was moved (no file could take its place: a full disk), a retry with
    /// the same `newPath` does not move it again; it only starts the empty file.
    func retire(as newPath: String, reusing spare: String?) throws {
        if !moved {
            // The copy must be there for the sync to empty, even of a cache never written.
            _ = try file()
            try Failpoint.retireFails.failIfArmed("rename", path)
            try SystemCall.retrying("rename", path) { rename(path, newPath) }
            moved = true
        }
        try Failpoint.retireRestartFails.failIfArmed("open", path)
        let fresh: FileDescriptor
        if let spare {
            // Made ready under its own name, then moved into place: a kill in between leaves a spare, never a
            // cache holding the spare's old records.
            fresh = try Self.create(spare, truncating: false)
            do {
                try SystemCall.retrying("rename", spare) { rename(spare, path) }
            } catch {
                fresh.close()
                throw error
            }
        } else {
            fresh = try Self.create(path)
        }
        fd?.close()
        fd = fresh
        moved = false
        mirrored = []
        written = false
        unsynced = false
    }
}
