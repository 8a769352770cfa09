import Foundation
#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Thin, honest wrappers of the POSIX calls the storage layer makes; failures become
/// `TelemetryBufferError.fileSystem` with the errno and the path.
enum FileSystem {
    /// Creates `url` and its parents if missing, and checks it is a writable directory.
    static func makeDirectory(_ url: URL) throws {
        let path = url.path
        do {
            try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        } catch {
            throw TelemetryBufferError.unusableCacheDirectory(path: path, reason: "cannot create it (\(error))")
        }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw TelemetryBufferError.unusableCacheDirectory(path: path, reason: "it is not a directory")
        }
        guard access(path, W_OK | X_OK) == 0 else {
            throw TelemetryBufferError.unusableCacheDirectory(path: path, reason: "it is not writable (\(errnoText()))")
        }
    }

    /// An open descriptor of a directory, for `fsync` after renames into it.
    static func openDirectory(_ url: URL) throws -> Int32 {
        let fd = open(url.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw error("open", url.path) }
        return fd
    }

    /// Writes `bytes` to `name` in the directory `directoryFD` atomically and durably: a temporary file
    /// in the same directory, `fsync`, `rename`, then `fsync` of the directory. A reader listing the
    /// directory sees either no file or the whole file, never a part; after a power loss, the same.
    static func writeAtomically(
        _ bytes: [UInt8], name: String, temporaryName: String, directoryFD: Int32, directoryPath: String
    ) throws {
        let fd = openat(directoryFD, temporaryName, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw error("open", directoryPath + "/" + temporaryName) }
        var renamed = false
        defer { if !renamed { unlinkat(directoryFD, temporaryName, 0) } }
        do {
            defer { close(fd) }
            try writeAll(fd, bytes, path: directoryPath + "/" + temporaryName)
            guard fsync(fd) == 0 else { throw error("fsync", directoryPath + "/" + temporaryName) }
        }
        guard renameat(directoryFD, temporaryName, directoryFD, name) == 0 else {
            throw error("rename", directoryPath + "/" + name)
        }
        renamed = true
        guard fsync(directoryFD) == 0 else { throw error("fsync", directoryPath) }
    }

    /// `write` until every byte is written, retrying on EINTR and short writes.
    static func writeAll(_ fd: Int32, _ bytes: [UInt8], path: String) throws {
        try bytes.withUnsafeBytes { try writeAll(fd, pieces: [$0], path: path) }
    }

    /// `writev` until every byte of `pieces` is written, in order: 1024 pieces per call (the smallest
    /// `IOV_MAX` of the supported systems), retrying on EINTR and short writes.
    static func writeAll(_ fd: Int32, pieces: [UnsafeRawBufferPointer], path: String) throws {
        var vectors = pieces.filter { !$0.isEmpty }.map {
            iovec(iov_base: UnsafeMutableRawPointer(mutating: $0.baseAddress), iov_len: $0.count)
        }
        var first = 0
        while first < vectors.count {
            let count = min(vectors.count - first, 1024)
            let written = vectors.withUnsafeBufferPointer { writev(fd, $0.baseAddress! + first, Int32(count)) }
            if written < 0 {
                if errno == EINTR { continue }
                throw error("writev", path)
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

    /// The whole file, read straight into the array (one `fstat`, then `read` until the end); `nil` if it
    /// cannot be opened or read.
    static func contents(of path: String) -> [UInt8]? {
        contents(of: path, prefix: 0) { _ in .max }
    }

    /// The file's first `prefix` bytes, then more up to `length(first bytes)` bytes in all, never past its
    /// end: a file whose header says how much of it matters is read no further. `nil` if it cannot be
    /// opened or read.
    static func contents(of path: String, prefix: Int, length: (UnsafeRawBufferPointer) -> Int) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var status = stat()
        guard fstat(fd, &status) == 0 else { return nil }
        let size = Int(status.st_size)
        var first = [UInt8](repeating: 0, count: min(prefix, size))
        guard let got = first.withUnsafeMutableBytes({ readFully(fd, into: $0) }) else { return nil }
        first.removeLast(first.count - got)
        let wanted = min(size, first.withUnsafeBytes(length))
        guard wanted > first.count, got == prefix else { return first }
        var failed = false
        let bytes = [UInt8](unsafeUninitializedCapacity: wanted) { buffer, count in
            count = UnsafeMutableBufferPointer(rebasing: buffer[..<first.count]).initialize(from: first).1
            guard let got = readFully(fd, into: UnsafeMutableRawBufferPointer(UnsafeMutableBufferPointer(rebasing: buffer[count...]))) else {
                failed = true
                return
            }
            count += got
        }
        return failed ? nil : bytes
    }

    /// Reads until `buffer` is full or the file ends; the number of bytes read, or `nil` on an error.
    private static func readFully(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) -> Int? {
        var count = 0
        while count < buffer.count {
            let got = read(fd, buffer.baseAddress! + count, buffer.count - count)
            if got < 0, errno == EINTR { continue }
            guard got >= 0 else { return nil }
            if got == 0 { break }
            count += got
        }
        return count
    }

    /// `fsync`s the named files of the directory (a missing one is skipped: it was sent or removed),
    /// then the directory.
    static func sync(_ names: [String], directoryFD: Int32, directoryPath: String) throws {
        for name in names {
            let fd = openat(directoryFD, name, O_RDONLY | O_CLOEXEC)
            if fd < 0, errno == ENOENT { continue }
            guard fd >= 0 else { throw error("open", directoryPath + "/" + name) }
            defer { close(fd) }
            guard fsync(fd) == 0 else { throw error("fsync", directoryPath + "/" + name) }
        }
        guard fsync(directoryFD) == 0 else { throw error("fsync", directoryPath) }
    }

    /// Removes `name` from the directory; a missing file is not an error.
    static func remove(_ name: String, directoryFD: Int32, directoryPath: String) throws {
        guard unlinkat(directoryFD, name, 0) == 0 || errno == ENOENT else {
            throw error("unlink", directoryPath + "/" + name)
        }
    }

    /// `close(2)`, for types that have a `close()` method of their own.
    static func closeDescriptor(_ fd: Int32) { _ = close(fd) }

    static func error(_ operation: String, _ path: String) -> TelemetryBufferError {
        .fileSystem(operation: operation, path: path, errno: errno)
    }

    static func errnoText(_ code: Int32 = errno) -> String { String(cString: strerror(code)) }
}
