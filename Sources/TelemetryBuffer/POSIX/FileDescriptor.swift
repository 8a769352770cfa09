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

    /// Makes the file's data, or a folder's entries, durable: `fsync`, except on Apple platforms, where
    /// `fsync` only hands the data to the drive (which may keep it in its cache) and `fcntl(F_FULLFSYNC)`
    /// is the flush to stable storage (with `fsync` where the file system does not support it).
    /// Returns 0, or -1 with `errno` set.
    func durableSync() -> Int32 {
        #if canImport(Darwin)
        if fcntl(rawValue, F_FULLFSYNC) == 0 { return 0 }
        #endif
        return fsync(rawValue)
    }

    /// Hands the file's data to the disk for the periodic syncs, not necessarily its times: `fdatasync`
    /// (one journal write less). On Apple platforms, which have no `fdatasync`, `fcntl(F_BARRIERFSYNC)`
    /// (`fsync` where it is not supported): the writes reach the drive, ordered before any later ones, but
    /// stay in its cache until its next flush (a publication's `F_FULLFSYNC`, or the drive's own) instead
    /// of flushing the whole cache each time, which a phone pays for. Against power loss that widens the
    /// window there beyond the sync interval; a crash or a kill loses nothing either way.
    /// Returns 0, or -1 with `errno` set.
    func dataSync() -> Int32 {
        #if canImport(Darwin)
        if fcntl(rawValue, F_BARRIERFSYNC) == 0 { return 0 }
        return fsync(rawValue)
        #else
        return fdatasync(rawValue)
        #endif
    }
}

/// `close(2)`, out of reach of the `close()` methods of the types that call it.
private func closeDescriptor(_ fd: Int32) -> Int32 { close(fd) }
