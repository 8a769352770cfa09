import Dispatch

extension TelemetryBuffer {
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
}

/// Sends diagnostics to the user's handler, if any: asynchronously and in order, on one serial queue of
/// their own, so that a handler may call any method of any buffer (a handler run on the queue that
/// reported, or under its wait, would deadlock there) and never delays the reporting thread.
struct Diagnostics: Sendable {
    let handler: (@Sendable (Diagnostic) -> Void)?
    private static let queue = DispatchQueue(label: "io.telemetrybuffer.diagnostics")
    private static let onQueue = DispatchSpecificKey<Bool>()
    private static let marked: Void = queue.setSpecific(key: onQueue, value: true)

    init(handler: (@Sendable (Diagnostic) -> Void)?) {
        self.handler = handler
        _ = Self.marked
    }

    func log(_ level: Diagnostic.Level, _ message: @autoclosure () -> String) {
        guard let handler else { return }
        let diagnostic = Diagnostic(level: level, message: message())
        Self.queue.async { handler(diagnostic) }
    }

    /// Waits (at most `timeout` seconds) until every diagnostic reported so far has been handled, unless
    /// called from a handler; `close()` and a graceful exit do, so that nothing reported is lost.
    static func drain(timeout: Double = 2) {
        // In a forked child the queue's thread is the parent's: nothing queued there would run.
        guard DispatchQueue.getSpecific(key: onQueue) == nil, !TelemetryBuffer.isForkedChild else { return }
        let done = DispatchSemaphore(value: 0)
        queue.async { done.signal() }
        _ = done.wait(timeout: .now() + timeout)
    }
}

/// `TelemetryBuffer.Diagnostic`: the module and its main class share a name, so the qualified form
/// names the class's member (as needed where another module has a `Diagnostic` too).
public typealias Diagnostic = TelemetryBuffer.Diagnostic
