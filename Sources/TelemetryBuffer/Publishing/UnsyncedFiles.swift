import Foundation

/// Files of a `BufferFolder` written but not yet `fsync`ed, kept open.
///
/// Written bytes are in the page cache: any later reader sees them whole and they survive the death of
/// the process. `sync()` makes them, and their names in the folder, durable against power loss as well.
/// The open descriptors let that happen later, after the files were renamed elsewhere.
///
/// Filled on one queue, then handed to another (through `async`) to be synced: the files are under a
/// lock, never contended.
final class UnsyncedFiles: Sendable {
    private let folder: BufferFolder
    /// Each file, with whether its link count showed it named when it was taken over (see `prepare`).
    private let files = Locked<[(fd: FileDescriptor, path: String, bytes: Int, named: Bool)]>([])

    /// Files a publication holds open while it stages (more are synced and closed as it goes), and the most
    /// a buffer's publications, or recovery's, leave waiting for a later sync: each holds a descriptor open
    /// (macOS gives a process 256 by default), and a list of spans makes an envelope per trace.
    static let maxWaiting = 64

    init(in folder: BufferFolder) { self.folder = folder }

    deinit { for file in files.withLock({ $0 }) { file.fd.close() } }

    /// How many files it holds open.
    var count: Int { files.withLock { $0.count } }

    /// Bytes written to the files it holds open: what their sync will write to the disk.
    var bytes: Int { files.withLock { $0.reduce(0) { $0 + $1.bytes } } }

    /// Takes over `fd`, a file just created in the folder, which holds `bytes` bytes once written.
    func append(_ fd: FileDescriptor, path: String, bytes: Int) {
        let named = (try? fd.status(path: path).st_nlink).map { $0 > 0 } ?? false
        files.withLock { $0.append((fd, path, bytes, named)) }
    }

    /// Makes the files of several sets durable (not their folder), with one flush of the drive's cache for
    /// them all, at the last file (Apple platforms; see `FileDescriptor.handOff`), or none without
    /// `flushingDrive` (a durable sync after this call flushes them): a sync round takes the envelopes of
    /// every publication since the last one. Returns how many files it synced.
    @discardableResult
    static func sync(_ sets: [UnsyncedFiles], flushingDrive: Bool = true) throws -> Int {
        for files in sets { try files.prepare() }
        let last = flushingDrive ? sets.lastIndex { $0.count > 0 } : nil
        var synced = 0
        for (index, files) in sets.enumerated() {
            synced += try files.sync(withFolder: false, flushingDrive: index == last, prepared: true)
        }
        return synced
    }

    /// Closes the files deleted since they were written (sent by the uploader, evicted, or taken by a custom
    /// transport): nothing of them is left to keep, and their dirty pages go with the last descriptor
    /// instead of staying in memory, and reaching the disk if anything syncs it, until their round; a sync
    /// would write them, and flush the drive, for nothing. The round's folder syncs make their deletion
    /// durable. (Only files whose link count said they were named when they were created: some FUSE file
    /// systems report 0 for every file.)
    func closeDeleted() {
        files.withLock { Self.closeDeleted(in: &$0) }
    }

    private static func closeDeleted(in files: inout [(fd: FileDescriptor, path: String, bytes: Int, named: Bool)]) {
        files.removeAll { file in
            guard file.named, file.fd.isDeleted else { return false }
            file.fd.close()
            return true
        }
    }

    /// Readies the files for their syncs: closes the deleted ones (`closeDeleted`), then starts writing every
    /// other file to the disk, so that the syncs wait for all of them together; throws, as a failed sync, the
    /// error of a write that failed (see `FileDescriptor.startWriteback`).
    private func prepare() throws {
        try files.withLock { files in
            Self.closeDeleted(in: &files)
            for file in files {
                let code = Failpoint.writebackFails.isArmed ? EIO : file.fd.startWriteback()
                guard code == 0 else { throw Errno(rawValue: code).fileSystem("sync_file_range", file.path) }
            }
        }
    }

    /// Makes every file not deleted meanwhile durable (see `prepare`), then the folder (unless its caller
    /// syncs it once for several); closes the files and returns how many it synced. The drive is flushed
    /// once, at the folder's sync or else the last file's; without `flushingDrive`, the files are only handed
    /// to the drive, for a durable sync after them to flush. All under the lock: an append meanwhile waits,
    /// and is synced by the next call.
    @discardableResult
    func sync(withFolder: Bool = true, flushingDrive: Bool = true, prepared: Bool = false) throws -> Int {
        if !prepared { try prepare() }
        return try files.withLock { files in
            for (index, file) in files.enumerated() {
                // One flush of the drive's cache for them all (Apple platforms; `fsync` alone flushes elsewhere),
                // at the folder's sync if there is one: a list of spans makes an envelope per trace.
                let flushes = flushingDrive && !withFolder && index == files.count - 1
                let synced = flushes ? file.fd.durableSync() : file.fd.handOff()
                guard synced == 0 else { throw FileSystem.error("fsync", file.path) }
            }
            if withFolder { try folder.sync() }
            for file in files { file.fd.close() }
            defer { files = [] }
            return files.count
        }
    }
}
