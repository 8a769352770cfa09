import Foundation

/// An `errno` value, read at the call that failed (before anything else can change it): what a system
/// call throws through `SystemCall.call`.
struct Errno: Error, Hashable, Sendable, CustomStringConvertible {
    let rawValue: Int32

    /// The calling thread's `errno` now.
    static var current: Errno { Errno(rawValue: errno) }

    var description: String { FileSystem.errnoText(rawValue) }

    /// The error the library throws for it: `TelemetryBufferError.fileSystem`, naming `operation` and `path`.
    func fileSystem(_ operation: String, _ path: String) -> TelemetryBufferError {
        .fileSystem(operation: operation, path: path, errno: rawValue)
    }
}
