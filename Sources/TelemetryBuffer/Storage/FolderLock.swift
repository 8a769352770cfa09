import Foundation

/// An exclusive advisory lock (`flock`) on a folder's `lock` file, held for the owner's lifetime.
///
/// A second holder, in this process or another, fails at once with `TelemetryBufferError.folderInUse`
/// instead of writing into the same buffer files. The kernel releases the lock when the process dies.
final class FolderLock {
    private var fd: Int32

    init(folder: String) throws {
        let path = folder + "/lock"
        fd = try FileSystem.openFile(path, O_RDWR | O_CREAT)
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let code = errno
            close(fd)
            if code == EWOULDBLOCK { throw TelemetryBufferError.folderInUse(path: folder) }
            throw TelemetryBufferError.fileSystem(operation: "flock", path: path, errno: code)
        }
    }

    /// Releases the lock (closing the descriptor releases it); later calls do nothing.
    func release() {
        guard fd >= 0 else { return }
        close(fd)
        fd = -1
    }

    deinit { release() }
}
