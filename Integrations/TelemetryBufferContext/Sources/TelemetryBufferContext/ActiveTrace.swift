import Instrumentation
import TelemetryBuffer

/// The trace (and span) a task's work belongs to, which logs and metrics sent meanwhile carry.
///
/// It lives in the task's `ServiceContext`. `TelemetryBufferTracer` puts it in the context of each span it
/// starts, so inside `withSpan` it is that span's. Without a tracer, set it around the work with
/// `ActiveTrace.withValue(_:operation:)`. Either way the task and its children see it, until a span or a
/// `withValue` inside sets another: the innermost wins.
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

    /// The current task's trace: the one its `ServiceContext` carries; `nil` outside any span of
    /// `TelemetryBufferTracer` and any `withValue`. One task-local read.
    public static var current: ActiveTrace? { ServiceContext.current?.activeTrace }

    /// Runs `operation` with `trace` as the current task's (in a copy of the task's `ServiceContext`).
    public static func withValue<Result>(_ trace: ActiveTrace?, operation: () throws -> Result) rethrows -> Result {
        try ServiceContext.withValue(context(with: trace), operation: operation)
    }

    /// Runs `operation` with `trace` as the current task's (in a copy of the task's `ServiceContext`).
    public static func withValue<Result>(_ trace: ActiveTrace?, isolation: isolated (any Actor)? = #isolation,
                                         operation: () async throws -> Result) async rethrows -> Result {
        try await ServiceContext.withValue(context(with: trace), isolation: isolation, operation: operation)
    }

    private static func context(with trace: ActiveTrace?) -> ServiceContext {
        var context = ServiceContext.current ?? .topLevel
        context.activeTrace = trace
        return context
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
