import Foundation
import TelemetryBuffer
import Tracing

/// What a span of this tracer leaves in the `InstrumentationContext` for its children and the propagation
/// headers: its trace and span, the trace's sampling decision, its
/// segment, and the trace's dynamic sampling context (DSC), frozen at the segment's start.
public struct SentrySpanContext: Sendable, Hashable {
    /// The trace.
    public var traceID: TraceID
    /// The span (for an extracted context: the remote parent).
    public var spanID: SpanID
    /// Whether the trace is sampled: its spans are recorded only then; it propagates either way. `nil`
    /// only for an extracted context whose caller deferred the decision (a `sentry-trace` without a flag).
    public var sampled: Bool?
    /// The local segment (the first span of this process in the trace); `nil` for a context extracted
    /// from a remote parent, whose first local span becomes a segment.
    public var segmentID: SpanID? { segment?.id }
    /// The segment's name as it is now (a server's middleware names its segment once the route is known,
    /// after its children started).
    public var segmentName: String? { segment?.name.value }
    /// The segment, and its name as the segment span holds it.
    var segment: (id: SpanID, name: SegmentName)?
    /// The trace's dynamic sampling context, as `sentry-` baggage members (without the prefix).
    public var dynamicSamplingContext: [String: String]
    /// The other members of an incoming `baggage` header, passed on as they came.
    public var foreignBaggage: [String]
    /// An incoming W3C `tracestate` header, passed on as it came.
    public var traceState: String?
    /// For an extracted context: the decision and DSC its first segment took, for the next ones.
    var head: TraceHead?

    /// A span context.
    public init(traceID: TraceID, spanID: SpanID, sampled: Bool?, dynamicSamplingContext: [String: String] = [:],
                foreignBaggage: [String] = [], traceState: String? = nil) {
        self.traceID = traceID
        self.spanID = spanID
        self.sampled = sampled
        self.dynamicSamplingContext = dynamicSamplingContext
        self.foreignBaggage = foreignBaggage
        self.traceState = traceState
    }

    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.traceID == rhs.traceID && lhs.spanID == rhs.spanID && lhs.sampled == rhs.sampled && lhs.segmentID == rhs.segmentID
            && lhs.segment?.name === rhs.segment?.name && lhs.dynamicSamplingContext == rhs.dynamicSamplingContext
            && lhs.foreignBaggage == rhs.foreignBaggage && lhs.traceState == rhs.traceState
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(traceID)
        hasher.combine(spanID)
    }

    private enum Key: InstrumentationContextKey {
        typealias Value = SentrySpanContext
        static var nameOverride: String? { "sentry-span-context" }
    }

    /// The span context a context carries, if any.
    public static func current(in context: InstrumentationContext) -> SentrySpanContext? { context[Key.self] }

    /// `context` carrying `span` from now on.
    static func set(_ span: SentrySpanContext?, in context: inout InstrumentationContext) { context[Key.self] = span }
}

/// A segment's name, which its span may change while its children run; they read it when they end.
final class SegmentName: @unchecked Sendable {
    // @unchecked: `name` is touched only under `lock`.
    private let lock = NSLock()
    private var name: String

    init(_ name: String) { self.name = name }

    var value: String {
        get { lock.withLock { name } }
        set { lock.withLock { name = newValue } }
    }
}

/// The sampling decision and DSC the first segment of an extracted trace took: the segments started later
/// from the same context follow it, as a process downstream would, instead of deciding again (and of
/// replacing the DSC the envelopes of the trace carry).
final class TraceHead: @unchecked Sendable {
    // @unchecked: `decided` is touched only under `lock`.
    private let lock = NSLock()
    private var decided: (sampled: Bool, dsc: [String: String])?

    /// The decision taken, if any.
    var decision: (sampled: Bool, dsc: [String: String])? { lock.withLock { decided } }

    /// The decision taken first: `decision`, or the one taken meanwhile by another segment (the sampler is
    /// not called under the lock: it may start spans).
    func settle(_ decision: (sampled: Bool, dsc: [String: String])) -> (sampled: Bool, dsc: [String: String]) {
        lock.withLock {
            if let decided { return decided }
            decided = decision
            return decision
        }
    }
}
