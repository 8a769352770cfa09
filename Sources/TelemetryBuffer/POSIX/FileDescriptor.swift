import Foundation

/// An open descriptor of one of the buffer's files or folders: a type of its own, so that it is never
/// confused with a count, a flag or an errno, with the few calls made on every descriptor as methods.
/// Other calls take `rawValue`.
struct FileDescriptor: RawRepresentable, Hashable, Sendable {
    let rawValue: Int32

    init(rawValue: Int32) { self.rawValue = rawValue }

    /// The working directory, for `openat`-style calls given a path.
    static let currentDirectory = FileDescriptor(rawValue: AT_FDCWD)

    /// Closes the descriptor (errors are not actionable: the descriptor is gone either way).
    func close() { _ = closeDescriptor(rawValue) }

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
