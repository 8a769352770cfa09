import TelemetryBuffer

/// The trace a task's logs belong to: set it with `ActiveTrace.$current.withValue(…)` around the work,
/// and every message a `TelemetryBufferLogHandler` sends meanwhile, in that task and its children, carries
/// it.
public struct ActiveTrace: Sendable, Hashable {
    /// The trace.
    public var traceID: TraceID
    /// The span the messages were logged in, if any.
    public var spanID: SpanID?

    /// A trace, and optionally the span within it.
    public init(traceID: TraceID, spanID: SpanID? = nil) {
        self.traceID = traceID
        self.spanID = spanID
    }

    /// The active trace of the current task; `nil` outside any `withValue`.
    @TaskLocal public static var current: ActiveTrace?
}
