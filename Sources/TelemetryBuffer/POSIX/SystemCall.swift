import Foundation

/// System calls made the one way the library makes them: retried while interrupted by a signal (`EINTR`),
/// and on failure the `errno` read first, before anything else can change it.
enum SystemCall {
    /// Calls `body` until it does not fail with `EINTR`; returns its result, or throws
    /// `TelemetryBufferError.fileSystem` naming `operation`, `path` and the `errno` of the failure.
    @discardableResult @inline(__always)
    static func retrying<Result: SignedInteger>(_ operation: String, _ path: String, _ body: () -> Result) throws -> Result {
        while true {
            let result = body()
            if result >= 0 { return result }
            let code = errno
            if code == EINTR { continue }
            throw TelemetryBufferError.fileSystem(operation: operation, path: path, errno: code)
        }
    }
}
