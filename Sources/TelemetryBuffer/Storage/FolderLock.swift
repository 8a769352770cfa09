import CTelemetrySignals
import Foundation

/// An exclusive advisory lock (`flock`) on a folder's `lock` file, held for the owner's lifetime.
///
/// A second holder, in this process or another, fails at once with `TelemetryBufferError.folderInUse`
/// instead of writing into the same buffer files. The kernel releases the lock when the process dies, and
/// the child of a `fork()` closes its copy of the descriptor as it starts (`tb_folder_lock_register`), so
/// that it does not keep the lock after the parent released it (a parent that releases and takes it again
/// at once, before the child ran that far, may still find it taken).
final class FolderLock {
    private var fd: FileDescriptor?

    /// The lock file's name.
    static let name = "lock"

    init(folder: String) throws {
        let path = folder + "/" + Self.name
        // No `fork()` between the open and the registration: the child would keep a copy no one closes.
        tb_folder_locks_hold()
        defer { tb_folder_locks_release() }
        let fd = try FileSystem.openFile(path, O_RDWR | O_CREAT)
        self.fd = fd
        guard flock(fd.rawValue, LOCK_EX | LOCK_NB) == 0 else {
            let code = errno
            fd.close()
            self.fd = nil
            if code == EWOULDBLOCK { throw TelemetryBufferError.folderInUse(path: folder) }
            throw TelemetryBufferError.fileSystem(operation: "flock", path: path, errno: code)
        }
        tb_folder_lock_register(fd.rawValue)
    }

    /// Releases the lock (closing the descriptor releases it); later calls do nothing, and so does a call in
    /// the child of a `fork()`, which closed its copy already (the number may be another file's by now).
    func release() {
        guard let fd, tb_in_forked_child() == 0 else { return }
        tb_folder_locks_hold()
        tb_folder_lock_unregister(fd.rawValue)
        fd.close()
        tb_folder_locks_release()
        self.fd = nil
    }

    deinit { release() }
}
