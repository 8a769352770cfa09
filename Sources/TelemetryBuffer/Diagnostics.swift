/// A message the buffer reports about itself: drops, I/O failures, recovery results.
public struct Diagnostic: Sendable, CustomStringConvertible {
    /// How serious the message is.
    public enum Level: String, Sendable, Comparable, CaseIterable {
        case debug, info, warning, error

        /// Orders levels from `debug` to `error`.
        public static func < (lhs: Level, rhs: Level) -> Bool {
            allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
        }
    }

    /// How serious it is.
    public let level: Level
    /// What happened, in one sentence.
    public let message: String

    /// `[level] message`.
    public var description: String { "[\(level.rawValue)] \(message)" }
}

/// Sends diagnostics to the user's handler, if any. Never called while a buffer lock is held.
struct Diagnostics: Sendable {
    let handler: (@Sendable (Diagnostic) -> Void)?

    func log(_ level: Diagnostic.Level, _ message: @autoclosure () -> String) {
        handler?(Diagnostic(level: level, message: message()))
    }
}
