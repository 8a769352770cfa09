import Foundation

/// Thin, honest wrappers of the POSIX calls the storage layer makes; failures become
/// `TelemetryBufferError.fileSystem` with the errno and the path.
enum FileSystem {
    /// Creates `url` and its parents if missing, and checks it is a writable directory.
    static func makeDirectory(_ url: URL) throws {
        let path = url.path
        // Private: other users have no business listing or planting files here. One `mkdir` where the parent
        // exists (every start but the first): FileManager walks and checks every component of the path.
        if mkdir(path, 0o700) != 0 && errno != EEXIST {
            do {
                try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true,
                                                        attributes: [.posixPermissions: 0o700])
            } catch {
                throw TelemetryBufferError.unusableCacheDirectory(path: path, reason: "cannot create it (\(error))")
            }
        }
        var status = stat()
        guard stat(path, &status) == 0, status.st_mode & S_IFMT == S_IFDIR else {
            throw TelemetryBufferError.unusableCacheDirectory(path: path, reason: "it is not a directory")
        }
        guard access(path, W_OK | X_OK) == 0 else {
            throw TelemetryBufferError.unusableCacheDirectory(path: path, reason: "it is not writable (\(errnoText()))")
        }
    }

    /// An open descriptor of a directory, for `fsync` after renames into it.
    static func openDirectory(_ url: URL) throws -> FileDescriptor {
        do {
            return try FileDescriptor.currentDirectory.open(url.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        } catch {
            throw error.fileSystem("open", url.path)
        }
    }

    /// A file in the folder that is not the buffer's: a symbolic link, a FIFO, a device, a folder, another
    /// user's file or one with other names (hard links). Left alone, and said.
    struct ForeignFile: Error, CustomStringConvertible {
        var path: String
        var description: String { "'\(path)' is not a regular file of this user with one name; left alone" }
    }

    /// Opens `name` (in `directoryFD`, or a path) only if it is a file of ours: never through a symbolic
    /// link (`O_NOFOLLOW`), never waiting on a FIFO or a device (`O_NONBLOCK`, cleared once open), and
    /// only a regular file of this user with one name, checked with `fstat` before `O_TRUNC` takes effect
    /// (truncation is done after the check). Throws `ForeignFile` for anything else.
    static func openFile(_ name: String, _ flags: Int32, in directory: FileDescriptor = .currentDirectory,
                         path: String? = nil) throws -> FileDescriptor {
        let path = path ?? name
        let fd: FileDescriptor
        do {
            fd = try directory.open(name, (flags & ~O_TRUNC) | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        } catch {
            // A symbolic link (ELOOP), or a FIFO without a reader (ENXIO): not ours.
            if error.rawValue == ELOOP || error.rawValue == ENXIO { throw ForeignFile(path: path) }
            throw error.fileSystem("open", path)
        }
        do {
            let status = try fd.status(path: path)
            guard status.st_mode & S_IFMT == S_IFREG, status.st_uid == geteuid(), status.st_nlink == 1 else {
                throw ForeignFile(path: path)
            }
            try SystemCall.retrying("fcntl", path) { fcntl(fd.rawValue, F_SETFL, fcntl(fd.rawValue, F_GETFL) & ~O_NONBLOCK) }
            if flags & O_TRUNC != 0 { try fd.truncate(to: 0, path: path) }
        } catch {
            fd.close()
            throw error
        }
        return fd
    }

    /// Whether `name` in `directoryFD` is a regular file of this user with one name, looked at without
    /// following a link (for files renamed, not opened).
    static func isOurs(_ name: String, in directory: FileDescriptor) -> Bool {
        guard let status = directory.status(of: name) else { return false }
        return status.st_mode & S_IFMT == S_IFREG && status.st_uid == geteuid() && status.st_nlink == 1
    }

    /// Writes `bytes` to `name` in the directory `directoryFD` atomically and durably: a temporary file
    /// in the same directory, `fsync`, `rename`, then `fsync` of the directory. A reader listing the
    /// directory sees either no file or the whole file, never a part; after a power loss, the same. Without
    /// `durably`, no `fsync`: the same for every reader while the system runs (the death of the process
    /// included), and after a power loss either file, or none, or a part.
    static func writeAtomically(
        _ bytes: [UInt8], name: String, temporaryName: String, directoryFD: FileDescriptor, directoryPath: String,
        durably: Bool = true
    ) throws {
        let fd = try openFile(temporaryName, O_WRONLY | O_CREAT | O_TRUNC, in: directoryFD,
                              path: directoryPath + "/" + temporaryName)
        var renamed = false
        defer { if !renamed { try? directoryFD.remove(temporaryName, path: directoryPath) } }
        do {
            defer { fd.close() }
            try writeAll(fd, bytes, path: directoryPath + "/" + temporaryName)
            guard !durably || fd.durableSync() == 0 else { throw error("fsync", directoryPath + "/" + temporaryName) }
        }
        try directoryFD.rename(temporaryName, to: name, path: directoryPath)
        renamed = true
        guard !durably || directoryFD.durableSync() == 0 else { throw error("fsync", directoryPath) }
    }

    /// `write` until every byte is written, retrying on EINTR and short writes.
    static func writeAll(_ fd: FileDescriptor, _ bytes: [UInt8], path: String) throws {
        try bytes.withUnsafeBytes { try writeAll(fd, pieces: [$0], path: path) }
    }

    /// `writev` until every byte of `pieces` is written, in order: 1024 pieces per call (the smallest
    /// `IOV_MAX` of the supported systems), retrying on EINTR and short writes.
    static func writeAll(_ fd: FileDescriptor, pieces: [UnsafeRawBufferPointer], path: String) throws {
        var vectors = pieces.filter { !$0.isEmpty }.map {
            iovec(iov_base: UnsafeMutableRawPointer(mutating: $0.baseAddress), iov_len: $0.count)
        }
        var first = 0
        while first < vectors.count {
            let count = min(vectors.count - first, 1024)
            let written = try SystemCall.retrying("writev", path) {
                vectors.withUnsafeBufferPointer { writev(fd.rawValue, $0.baseAddress! + first, Int32(count)) }
            }
            // A write that takes nothing would be tried for ever (a file system that answers so).
            guard written > 0 else {
                throw TelemetryBufferError.fileSystem(operation: "writev", path: path, reason: "wrote nothing")
            }
            // Skip what was written: whole vectors, then part of the next.
            var left = written
            while left > 0, left >= vectors[first].iov_len {
                left -= vectors[first].iov_len
                first += 1
            }
            if left > 0 {
                vectors[first].iov_base += left
                vectors[first].iov_len -= left
            }
        }
    }

    /// The size of the file at `path` (a link's own, not followed), 0 if there is none.
    static func size(of path: String) -> Int {
        var status = stat()
        return lstat(path, &status) == 0 ? Int(clamping: status.st_size) : 0
    }

    /// The whole file, read straight into the array (one `fstat`, then `read` until the end); `nil` if it
    /// cannot be opened or read, or is larger than `limit`.
    static func contents(of path: String, limit: Int = .max) -> [UInt8]? {
        (try? readFile(path, prefix: 0, limit: limit) { _ in .max }) ?? nil
    }

    /// `readFile(_:prefix:length:)`, with `nil` for any failure.
    static func contents(of path: String, prefix: Int, length: (UnsafeRawBufferPointer) -> Int) -> [UInt8]? {
        (try? readFile(path, prefix: prefix, length: length)) ?? nil
    }

    /// A file larger than any the buffer writes there: not read.
    struct TooLarge: Error, CustomStringConvertible {
        var path: String
        var size: Int
        var description: String { "'\(path)' holds \(size) bytes, more than the buffer ever writes there; not read" }
    }

    /// The most bytes an envelope file of the buffer holds (`maxBatchBytes` is at most 1 MiB of items, plus
    /// headers), with room to spare.
    static let maxEnvelopeBytes = 2 << 20
    /// The most bytes a framed buffer file holds (a list and its IO cache are at most 1 MiB of records; a
    /// `recovered` file holds what several did), with room to spare.
    static let maxFramedFileBytes = 8 << 20

    /// The file's first `prefix` bytes, then more up to `length(first bytes)` bytes in all, never past its
    /// end: a file whose header says how much of it matters is read no further. `nil` if there is no such
    /// file; a file larger than `limit` throws `TooLarge` (memory stays bounded whatever is planted);
    /// any other failure (no descriptor left, an I/O error) throws, so that a file that exists is never
    /// taken for one that does not.
    static func readFile(_ path: String, prefix: Int, limit: Int = .max,
                         length: (UnsafeRawBufferPointer) -> Int) throws -> [UInt8]? {
        let fd: FileDescriptor
        do {
            fd = try openFile(path, O_RDONLY)
        } catch let error as TelemetryBufferError where error.errno == ENOENT {
            return nil
        }
        defer { fd.close() }
        let size = Int(clamping: try fd.status(path: path).st_size)  // a 64-bit size: a huge file must not trap where `Int` has 32 bits
        guard size <= limit else { throw TooLarge(path: path, size: size) }
        var first = [UInt8](repeating: 0, count: min(prefix, size))
        let got = try first.withUnsafeMutableBytes { try fd.read(into: $0, path: path) }
        first.removeLast(first.count - got)
        let wanted = min(size, first.withUnsafeBytes(length))
        guard wanted > first.count, got == prefix else { return first }
        return try [UInt8](unsafeUninitializedCapacity: wanted) { buffer, count in
            count = UnsafeMutableBufferPointer(rebasing: buffer[..<first.count]).initialize(from: first).1
            count += try fd.read(into: UnsafeMutableRawBufferPointer(UnsafeMutableBufferPointer(rebasing: buffer[count...])), path: path)
        }
    }

    /// `fsync`s the named files of the directory (a missing one is skipped: it was sent or removed),
    /// then the directory, which with `flushingDrive` flushes the drive for them all (Apple platforms; see
    /// `FileDescriptor.handOff`); without it, a durable sync after this call does.
    static func sync(_ names: [String], directoryFD: FileDescriptor, directoryPath: String, flushingDrive: Bool = true) throws {
        for name in names {
            let fd: FileDescriptor
            do {
                fd = try openFile(name, O_RDONLY, in: directoryFD, path: directoryPath + "/" + name)
            } catch let error as TelemetryBufferError where error.errno == ENOENT {
                continue
            } catch is ForeignFile {
                continue
            }
            defer { fd.close() }
            guard fd.handOff() == 0 else { throw error("fsync", directoryPath + "/" + name) }
        }
        guard (flushingDrive ? directoryFD.durableSync() : directoryFD.handOff()) == 0 else { throw error("fsync", directoryPath) }
    }

    /// The entries of the open directory `directoryFD` (at `path`, for errors), sorted, without `.` and
    /// `..`. Listed through a descriptor of its own for that directory (`openat` of "."): no path is looked
    /// up again, and listings on other threads do not share its position. Throws if it cannot be listed
    /// (no descriptor left): an empty list would pass for a folder with nothing in it.
    static func names(inDirectory directoryFD: FileDescriptor, path: String) throws -> [String] {
        let own: FileDescriptor
        do {
            own = try directoryFD.open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        } catch {
            throw error.fileSystem("open", path)
        }
        guard let directory = fdopendir(own.rawValue) else {
            let failure = error("fdopendir", path)
            own.close()
            throw failure
        }
        defer { closedir(directory) }
        var names: [String] = []
        while true {
            errno = 0
            guard let entry = readdir(directory) else {
                if errno != 0 { throw error("readdir", path) }
                break
            }
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    static func error(_ operation: String, _ path: String) -> TelemetryBufferError {
        .fileSystem(operation: operation, path: path, errno: errno)
    }

    static func errnoText(_ code: Int32 = errno) -> String { String(cString: strerror(code)) }
}
