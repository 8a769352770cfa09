import Instrumentation
import TelemetryBuffer

/// The trace (and span) a task's work belongs to, which logs and metrics sent meanwhile carry.
///
/// `TelemetryBufferTracer` keeps it in the `ServiceContext` of each span it starts, so that inside
/// `withSpan` it is that span's. Without a tracer, set it around the work with
/// `ActiveTrace.$current.withValue(…)`; the task and its children see it.
public struct ActiveTrace: Sendable, Hashable {
    /// The trace.
    public var traceID: TraceID
    /// The span the work runs in, if any.
    public var spanID: SpanID?

    /// A trace, and optionally the span within it.
    public init(traceID: TraceID, spanID: SpanID? = nil) {
        self.traceID = traceID
        self.spanID = spanID
    }

    /// The trace set with `withValue` for the current task; `nil` outside any.
    @TaskLocal public static var current: ActiveTrace?

    /// The current task's trace: `current` if set, else the one its `ServiceContext` carries (the active
    /// span of `TelemetryBufferTracer`), else `nil`. Two task-local reads.
    public static var ofCurrentTask: ActiveTrace? {
        current ?? ServiceContext.current?.activeTrace
    }
}

extension ServiceContext {
    /// The trace and span the context's work belongs to; a tracer sets it for each span it starts.
    public var activeTrace: ActiveTrace? {
        get { self[ActiveTraceKey.self] }
        set { self[ActiveTraceKey.self] = newValue }
    }
}

private enum ActiveTraceKey: ServiceContextKey {
    typealias Value = ActiveTrace
    static var nameOverride: String? { "telemetry-buffer-active-trace" }
}
