import Foundation

/// System calls made the one way the library makes them: retried while interrupted by a signal (`EINTR`),
/// and on failure the `errno` read first, before anything else can change it.
enum SystemCall {
    /// Calls `body` until it does not fail with `EINTR`; returns its result, or throws the `errno` of the
    /// failure.
    @discardableResult @inline(__always)
    static func call<Result: SignedInteger>(_ body: () -> Result) throws(Errno) -> Result {
        while true {
            let result = body()
            if result >= 0 { return result }
            let code = Errno.current
            if code.rawValue != EINTR { throw code }
        }
    }

    /// As `call`, the failure thrown as `TelemetryBufferError.fileSystem` naming `operation` and `path`.
    @discardableResult @inline(__always)
    static func retrying<Result: SignedInteger>(_ operation: String, _ path: String, _ body: () -> Result) throws -> Result {
        do {
            return try call(body)
        } catch {
            throw error.fileSystem(operation, path)
        }
    }
}
