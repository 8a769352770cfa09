/// Why a `TelemetryBuffer` (or a `FileTransport`) could not be created or could not store data.
///
/// Switch on `code`; the other properties say what the error concerns, where that applies. A struct
/// rather than an enum, so that a later version can add a code without breaking a caller's `switch`
/// (which takes a `default`), as swift-system's `Errno` does.
public struct TelemetryBufferError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What kind of failure an error is. Later versions may add codes.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Kind: String, Hashable, Sendable {
            case invalidDSN, invalidOption, unusableCacheDirectory, fileSystem, folderInUse, crashHandlerUnavailable, closed
            case forkedChild
        }

        private let kind: Kind

        private init(_ kind: Kind) { self.kind = kind }

        /// The DSN cannot be parsed: `reason` says which part is wrong, `dsn` is the DSN with its secret key
        /// (if any) replaced by `***`.
        public static let invalidDSN = Code(.invalidDSN)
        /// An option is out of its allowed range: `option` names it.
        public static let invalidOption = Code(.invalidOption)
        /// The cache directory (`path`) cannot be created, is not a directory, is not writable, or holds a
        /// file where the buffer keeps its own (a link, a FIFO, another user's file).
        public static let unusableCacheDirectory = Code(.unusableCacheDirectory)
        /// A file-system call (`operation`) failed on `path`, with `errno` where the system gave one.
        public static let fileSystem = Code(.fileSystem)
        /// Another buffer, in this process or another, already uses the DSN's buffer folder (`path`).
        public static let folderInUse = Code(.folderInUse)
        /// The crash handler cannot take this buffer; create it with `Options.crashDetection = false`.
        public static let crashHandlerUnavailable = Code(.crashHandlerUnavailable)
        /// The buffer was closed, and its folder (`path`) may be another buffer's by now: ask a buffer open on
        /// the DSN.
        public static let closed = Code(.closed)

        /// The process is the child of a `fork()` (without `exec`) of one that created a buffer: a buffer there
        /// would take nothing (see the Crash detection article); create buffers in the parent, or after `exec`.
        public static let forkedChild = Code(.forkedChild)

        /// The code's name, as written in Swift (`invalidDSN`).
        public var description: String { kind.rawValue }
    }

    /// What kind of failure this is.
    public let code: Code
    /// What went wrong, in words.
    public let reason: String
    /// The file or folder concerned, if any.
    public let path: String?
    /// The option concerned (``TelemetryBufferError/Code/invalidOption``).
    public let option: String?
    /// The DSN concerned, its secret key replaced by `***` (``TelemetryBufferError/Code/invalidDSN``).
    public let dsn: String?
    /// The call that failed (``TelemetryBufferError/Code/fileSystem``): `open`, `fsync`, `rename`…
    public let operation: String?
    /// The `errno` the failing call set (``TelemetryBufferError/Code/fileSystem``), read right after it; `nil` where
    /// the failure was not a system call's (a file that is not the buffer's, a list the crash handler holds).
    public let errno: Int32?

    private init(_ code: Code, reason: String, path: String? = nil, option: String? = nil, dsn: String? = nil,
                 operation: String? = nil, errno: Int32? = nil) {
        (self.code, self.reason, self.path, self.option, self.dsn, self.operation, self.errno) =
            (code, reason, path, option, dsn, operation, errno)
    }

    static func invalidDSN(_ dsn: String, reason: String) -> Self {
        Self(.invalidDSN, reason: reason, dsn: dsn)
    }

    static func invalidOption(name: String, reason: String) -> Self {
        Self(.invalidOption, reason: reason, option: name)
    }

    static func unusableCacheDirectory(path: String, reason: String) -> Self {
        Self(.unusableCacheDirectory, reason: reason, path: path)
    }

    static func fileSystem(operation: String, path: String, errno: Int32) -> Self {
        Self(.fileSystem, reason: FileSystem.errnoText(errno), path: path, operation: operation, errno: errno)
    }

    /// A file-system step that failed without a system call's `errno`: `reason` says why.
    static func fileSystem(operation: String, path: String, reason: String) -> Self {
        Self(.fileSystem, reason: reason, path: path, operation: operation)
    }

    static func folderInUse(path: String) -> Self {
        Self(.folderInUse, reason: "another TelemetryBuffer (in this or another process) is using it", path: path)
    }

    static func crashHandlerUnavailable(reason: String) -> Self {
        Self(.crashHandlerUnavailable, reason: reason)
    }

    static func closed(path: String) -> Self {
        Self(.closed, reason: "the buffer is closed", path: path)
    }

    static let forkedChild = Self(
        .forkedChild,
        reason: "this process is the child of a fork() (without exec) of one that created a buffer, whose files and threads it shares")

    /// A sentence naming the problem and the value at fault.
    public var description: String {
        switch code {
        case .invalidDSN:
            "invalid DSN '\(dsn ?? "")': \(reason)"
        case .invalidOption:
            "invalid option \(option ?? ""): \(reason)"
        case .unusableCacheDirectory:
            "unusable cache directory '\(path ?? "")': \(reason)"
        case .fileSystem:
            "\(operation ?? "") '\(path ?? "")' failed: \(reason)" + (errno.map { " (errno \($0))" } ?? "")
        case .crashHandlerUnavailable:
            "the crash handler cannot take this buffer: \(reason); set Options.crashDetection = false to go without"
        case .closed:
            "the TelemetryBuffer of '\(path ?? "")' is closed; use a buffer open on its DSN"
        case .folderInUse:
            "another TelemetryBuffer (in this or another process) is using '\(path ?? "")'; use one buffer per DSN"
        default:
            "\(code): \(reason)"
        }
    }
}
