/// Why a `TelemetryBuffer` (or a `FileTransport`) could not be created or could not store data.
public enum TelemetryBufferError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The DSN cannot be parsed; `reason` says which part is wrong. The DSN is given with its secret key
    /// (if any) replaced by `***`.
    case invalidDSN(String, reason: String)
    /// An option is out of its allowed range.
    case invalidOption(name: String, reason: String)
    /// The cache directory cannot be created, is not a directory, or is not writable.
    case unusableCacheDirectory(path: String, reason: String)
    /// A file-system call failed.
    case fileSystem(operation: String, path: String, errno: Int32)
    /// Another buffer, in this process or another, already uses this DSN's buffer folder.
    case folderInUse(path: String)
    /// The crash handler cannot take this buffer; create it with `Options.crashDetection = false`.
    case crashHandlerUnavailable(reason: String)
    /// The buffer was closed, and its folder may be another buffer's by now: ask a buffer open on the DSN.
    case closed(path: String)

    /// A sentence naming the problem and the value at fault.
    public var description: String {
        switch self {
        case .invalidDSN(let dsn, let reason):
            "invalid DSN '\(dsn)': \(reason)"
        case .invalidOption(let name, let reason):
            "invalid option \(name): \(reason)"
        case .unusableCacheDirectory(let path, let reason):
            "unusable cache directory '\(path)': \(reason)"
        case .fileSystem(let operation, let path, let code):
            "\(operation) '\(path)' failed: \(FileSystem.errnoText(code)) (errno \(code))"
        case .crashHandlerUnavailable(let reason):
            "the crash handler cannot take this buffer: \(reason); set Options.crashDetection = false to go without"
        case .closed(let path):
            "the TelemetryBuffer of '\(path)' is closed; use a buffer open on its DSN"
        case .folderInUse(let path):
            "another TelemetryBuffer (in this or another process) is using '\(path)'; use one buffer per DSN"
        }
    }
}
