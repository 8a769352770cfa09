import CTelemetrySignals
import Foundation

/// A regular file of a fixed size mapped `MAP_SHARED`, read-write.
///
/// Bytes stored into the mapping are in the kernel's page cache at once: they survive the death of the
/// process by any signal, SIGKILL included (not a kernel crash or power loss). The file is fully
/// allocated on disk at creation, so a full disk fails here with an error and never later as SIGBUS
/// when a page is first touched. On other file systems (copy-on-write, log-structured, or layered so that
/// the one below cannot be told) a store can need new space however the file was allocated: there `init`
/// throws `WritesCanFault` rather than map it.
///
/// The file stays open while mapped, so that the crash handler can `fsync` it.
final class MappedFile {
    let base: UnsafeMutableRawPointer
    let size: Int
    let descriptor: FileDescriptor
    let path: String
    /// Whether the file was empty when opened (new): its mapping holds nothing but zeros then.
    let wasEmpty: Bool

    /// The file system of `path` may look for new space when a page of the mapping is stored into (see
    /// `overwritesInPlace`): a full disk would raise SIGBUS in the storing thread, a nearly full one stall it.
    /// A file `init` created is removed again.
    struct WritesCanFault: Error, CustomStringConvertible {
        var path: String
        var description: String { "stores into a mapping of \(path) may need new disk space (not ext2/3/4, XFS or tmpfs; on Apple platforms, not a local APFS or HFS+ volume)" }
    }

    /// Opens or creates `path`, makes it exactly `size` bytes with every block allocated, and maps it.
    ///
    /// - Throws: `WritesCanFault` where a store into the mapping could need new space; a file system error.
    init(path: String, size: Int) throws {
        let fd = try FileSystem.openFile(path, O_RDWR | O_CREAT)
        do {
            guard !Failpoint.mappingFaults.isArmed, Self.overwritesInPlace(fd, path: path) else {
                if (try? fd.status(path: path))?.st_size == 0 { unlink(path) }
                throw WritesCanFault(path: path)
            }
            wasEmpty = try fd.status(path: path).st_size == 0
            try fd.truncate(to: size, path: path)
            try Self.allocate(fd, size: size, path: path)
            guard let mapping = mmap(nil, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.rawValue, 0),
                  mapping != MAP_FAILED
            else { throw FileSystem.error("mmap", path) }
            // No read-ahead: the first store would read (for a fresh file, zero) a window of pages, most of a
            // list, on the creating thread; each page is read when it is first written instead. Only this
            // process's stores go through the mapping (recovery reads the files with `read`).
            madvise(mapping, size, MADV_RANDOM)
            self.base = mapping
        } catch {
            fd.close()
            throw error
        }
        self.size = size
        self.path = path
        descriptor = fd
    }

    /// Writes the mapping's changed pages to the file, and the file to stable storage (`F_FULLFSYNC` on
    /// Apple platforms, where `msync` reaches only the drive's cache).
    func sync() throws {
        guard msync(base, size, MS_SYNC) == 0 else { throw FileSystem.error("msync", path) }
        guard descriptor.durableSync() == 0 else { throw FileSystem.error("fsync", path) }
    }

    deinit {
        munmap(base, size)
        descriptor.close()
    }

    /// Whether a store into a mapped page of the file never asks its file system for new space once the
    /// file is allocated. Linux: ext2/3/4, XFS, tmpfs (`tb_file_overwrites_in_place`). Apple platforms: a
    /// local APFS or HFS+ volume (before macOS 13.3 and iOS 16.4, when the type cannot be read, APFS only),
    /// which overwrite a file's own blocks in place (only blocks a clone or a snapshot shares are copied); a
    /// network volume may fail a store when its server goes away, and exFAT, FAT or FUSE volumes promise
    /// nothing. Asked through URL resource values, not `fstatfs`, which Apple lists among the disk-space
    /// APIs that need a reason in a privacy manifest (none of its reasons fits).
    private static func overwritesInPlace(_ fd: FileDescriptor, path: String) -> Bool {
        #if canImport(Darwin)
        let url = URL(fileURLWithPath: path)
        guard (try? url.resourceValues(forKeys: [.volumeIsLocalKey]))?.volumeIsLocal == true else { return false }
        if #available(macOS 13.3, iOS 16.4, tvOS 16.4, watchOS 9.4, *) {
            let type = (try? url.resourceValues(forKeys: [.volumeTypeNameKey]))?.volumeTypeName?.lowercased()
            return type == "apfs" || type == "hfs"
        }
        // Before those, APFS is what clones files (and HFS+ is taken for one that may not overwrite in place).
        return (try? url.resourceValues(forKeys: [.volumeSupportsFileCloningKey]))?.volumeSupportsFileCloning == true
        #else
        return tb_file_overwrites_in_place(fd.rawValue) == 1
        #endif
    }

    private static func allocate(_ fd: FileDescriptor, size: Int, path: String) throws {
        #if os(Linux)
        // It returns the error rather than setting errno; on tmpfs a pending signal interrupts it (EINTR).
        var status = posix_fallocate(fd.rawValue, 0, off_t(size))
        while status == EINTR { status = posix_fallocate(fd.rawValue, 0, off_t(size)) }
        if status == 0 { return }
        guard status == EOPNOTSUPP || status == EINVAL else {
            throw TelemetryBufferError.fileSystem(operation: "posix_fallocate", path: path, errno: status)
        }
        #endif
        // Elsewhere (and on file systems without fallocate): write zeros, which allocates every block.
        let zeros = [UInt8](repeating: 0, count: 64 * 1024)
        for offset in stride(from: 0, to: size, by: zeros.count) {
            try zeros.withUnsafeBytes { try fd.write(UnsafeRawBufferPointer(rebasing: $0[..<min($0.count, size - offset)]), at: offset, path: path) }
        }
    }
}
