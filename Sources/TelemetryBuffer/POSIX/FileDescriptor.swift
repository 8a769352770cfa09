import CTelemetrySignals
import Foundation

/// An open descriptor of one of the buffer's files or folders: a type of its own, so that it is never
/// confused with a count, a flag or an errno, with the calls made on descriptors as methods (each retried
/// while interrupted, its failure thrown with the `errno` read at the call). Calls made in one place only
/// take `rawValue`.
struct FileDescriptor: RawRepresentable, Hashable, Sendable {
    let rawValue: Int32

    init(rawValue: Int32) { self.rawValue = rawValue }

    /// The working directory, for `openat`-style calls given a path.
    static let currentDirectory = FileDescriptor(rawValue: AT_FDCWD)

    /// Closes the descriptor (errors are not actionable: the descriptor is gone either way).
    func close() { _ = closeDescriptor(rawValue) }

    /// Writes all of `bytes` at `offset` (`pwrite`, again after a short write); throws
    /// `TelemetryBufferError.fileSystem` for `path` with the failing call's `errno`.
    func write(_ bytes: UnsafeRawBufferPointer, at offset: Int, path: String) throws {
        var done = 0
        while done < bytes.count {
            let written = try SystemCall.retrying("pwrite", path) {
                pwrite(rawValue, bytes.baseAddress! + done, bytes.count - done, off_t(offset + done))
            }
            // A write that takes nothing would be tried for ever (a file system that answers so).
            guard written > 0 else {
                throw TelemetryBufferError.fileSystem(operation: "pwrite", path: path, reason: "wrote nothing")
            }
            done += written
        }
    }

    /// Sets the file's size (`ftruncate`).
    func truncate(to size: Int, path: String) throws {
        try SystemCall.retrying("ftruncate", path) { ftruncate(rawValue, off_t(size)) }
    }

    /// The file's status (`fstat`).
    func status(path: String) throws -> stat {
        var status = stat()
        try SystemCall.retrying("fstat", path) { fstat(rawValue, &status) }
        return status
    }

    /// Whether the file was deleted while open: its link count is 0 (`fstat`). `false` if `fstat` fails.
    var isDeleted: Bool {
        var status = stat()
        return fstat(rawValue, &status) == 0 && status.st_nlink == 0
    }

    /// Reads into `buffer` until it is full or the file ends; returns the bytes read.
    func read(into buffer: UnsafeMutableRawBufferPointer, path: String) throws -> Int {
        var count = 0
        while count < buffer.count {
            let got = try SystemCall.retrying("read", path) {
                Foundation.read(rawValue, buffer.baseAddress! + count, buffer.count - count)
            }
            if got == 0 { break }
            count += got
        }
        return count
    }

    // MARK: As an open directory (`path` names it, for errors)

    /// Opens `name` in this directory (`openat`).
    func open(_ name: String, _ flags: Int32, mode: mode_t = 0o600) throws(Errno) -> FileDescriptor {
        FileDescriptor(rawValue: try SystemCall.call { openat(rawValue, name, flags, mode) })
    }

    /// The status of the entry `name` in this directory, a link not followed (`fstatat`); `nil` where there
    /// is none (or it cannot be read).
    func status(of name: String) -> stat? {
        var status = stat()
        return (try? SystemCall.call { fstatat(rawValue, name, &status, AT_SYMLINK_NOFOLLOW) }) == nil ? nil : status
    }

    /// Renames `name` to `newName` within this directory (`renameat`).
    func rename(_ name: String, to newName: String, path: String) throws {
        try SystemCall.retrying("rename", path + "/" + name) { renameat(rawValue, name, rawValue, newName) }
    }

    /// Removes `name` from this directory (`unlinkat`); a missing entry is not an error.
    func remove(_ name: String, path: String) throws {
        do {
            try SystemCall.call { unlinkat(rawValue, name, 0) }
        } catch {
            guard error.rawValue == ENOENT else {
                throw error.fileSystem("unlink", path + "/" + name)
            }
        }
    }

    /// Makes the file's data, or a folder's entries, durable: `fsync`, except on Apple platforms, where
    /// `fsync` only hands the data to the drive (which may keep it in its cache) and `fcntl(F_FULLFSYNC)`
    /// is the flush to stable storage (with `fsync` where the file system does not support it; any other
    /// failure, such as an I/O error, is the sync's). Returns 0, or -1 with `errno` set.
    func durableSync() -> Int32 {
        Self.durableSyncs.withLock { $0 += 1 }
        #if canImport(Darwin)
        return Self.syncFalling(back: { fcntl(rawValue, F_FULLFSYNC) }, to: { fsync(rawValue) })
        #else
        return fsync(rawValue)
        #endif
    }

    #if canImport(Darwin)
    /// `sync`, retried while interrupted, or `fallback` if the file system does not support it; any other
    /// failure is returned as it is (an `fsync` after an I/O error could report success for data lost).
    private static func syncFalling(back sync: () -> Int32, to fallback: () -> Int32) -> Int32 {
        var result = sync()
        while result != 0, errno == EINTR { result = sync() }
        guard result != 0 else { return 0 }
        return [ENOTSUP, EINVAL, ENOTTY].contains(errno) ? fallback() : result
    }
    #endif

    /// How many times this process called `durableSync`: each flushes the drive's whole cache on Apple
    /// platforms, what a phone pays most for in a sync.
    static let durableSyncs = Locked(0)

    /// Hands the file's data and metadata to the drive: `fsync`. That is `durableSync` except on Apple
    /// platforms, where the drive may keep them in its cache until any file's `durableSync`: its
    /// `F_FULLFSYNC` flushes the whole cache. So files made durable together cost one flush there, each
    /// handed off and the last one synced durably. Returns 0, or -1 with `errno` set.
    func handOff() -> Int32 { fsync(rawValue) }

    /// Starts writing the file's changed data to the disk without waiting (Linux; elsewhere nothing): files
    /// synced one after another then wait for the disk once together rather than one round trip each.
    /// Makes nothing durable. Returns 0, or the `errno` of a write that failed, which the `fsync` after it
    /// may no longer report (ext4 drops the pages of a write it gives up on): take it for the sync's
    /// failure. Where the call is not supported, 0: the `fsync` does it all.
    func startWriteback() -> Int32 {
        let code = tb_start_writeback(rawValue)
        return [ENOSYS, EINVAL, ESPIPE, EOPNOTSUPP].contains(code) ? 0 : code
    }

    /// Hands the file's data to the disk for the periodic syncs, not necessarily its times: `fdatasync`
    /// (one journal write less). On Apple platforms, which have no `fdatasync`, `fcntl(F_BARRIERFSYNC)`
    /// (`fsync` where it is not supported; any other failure is the sync's): the writes reach the drive,
    /// ordered before any later ones, but stay in its cache until its next flush (a publication's
    /// `F_FULLFSYNC`, or the drive's own) instead of flushing the whole cache each time, which a phone pays
    /// for. Against power loss that widens the window there beyond the sync interval; a crash or a kill
    /// loses nothing either way.
    /// Returns 0, or -1 with `errno` set.
    func dataSync() -> Int32 {
        #if canImport(Darwin)
        return Self.syncFalling(back: { fcntl(rawValue, F_BARRIERFSYNC) }, to: { fsync(rawValue) })
        #else
        return fdatasync(rawValue)
        #endif
    }
}

/// `close(2)`, out of reach of the `close()` methods of the types that call it.
private func closeDescriptor(_ fd: Int32) -> Int32 { close(fd) }
