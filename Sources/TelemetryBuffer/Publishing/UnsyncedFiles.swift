import Foundation

/// Files of a `BufferFolder` written but not yet `fsync`ed, kept open.
///
/// Written bytes are in the page cache: any later reader sees them whole and they survive the death of
/// the process. `sync()` makes them, and their names in the folder, durable against power loss as well.
/// The open descriptors let that happen later, after the files were renamed elsewhere.
///
/// Thread safety: filled by one queue, then handed to another (through `async`) to be synced.
final class UnsyncedFiles: @unchecked Sendable {
    private let folder: BufferFolder
    private var files: [(fd: FileDescriptor, path: String)] = []

    init(in folder: BufferFolder) { self.folder = folder }

    deinit { for file in files { file.fd.close() } }

    /// How many files it holds open.
    var count: Int { files.count }

    /// Takes over `fd`, a file just created in the folder.
    func append(_ fd: FileDescriptor, path: String) { files.append((fd, path)) }

    /// `fsync`s every file, then the folder (unless its caller syncs it once for several); closes the files.
    func sync(withFolder: Bool = true) throws {
        for file in files {
            guard file.fd.durableSync() == 0 else { throw FileSystem.error("fsync", file.path) }
        }
        if withFolder { try folder.sync() }
        for file in files { file.fd.close() }
        files = []
    }
}
