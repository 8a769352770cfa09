import Foundation
import TelemetryBuffer
import TelemetryBufferContext
import Tracing

/// A swift-distributed-tracing `Tracer` whose finished spans go to a `TelemetryBuffer` as span v2 items,
/// and which carries a trace across HTTP calls with Sentry's and W3C's headers.
///
/// ```swift
/// let buffer = try TelemetryBuffer(options: Options(dsn: dsn))
/// InstrumentationSystem.bootstrap(TelemetryBufferTracer(buffer: buffer))
/// try await withSpan("checkout") { span in … }
/// ```
///
/// A span without a local parent (a root, or the first of this process in a trace an incoming request
/// carried) is a **segment**; its descendants carry its ID and name (`sentry.segment.id`/`.name`), the
/// name as it is when they end (Hummingbird's middleware names a request's segment after its handler
/// returns: children that ended before carry its first name, `HTTP GET route not found`). Only
/// ended spans of sampled traces enter the buffer. Head sampling happens at a segment without a decision
/// to follow: `tracesSampler`, if set, else `tracesSampleRate`, against the trace's `sample_rand`. A trace
/// that is not sampled records nothing and still propagates (`-0`). The envelopes of a trace's spans carry
/// the dynamic sampling context it propagates (`TelemetryBuffer.setSamplingContext`): the caller's for a
/// continued trace, else the one this process's first segment of it took (without `transaction` for a
/// server's segment, whose name is a placeholder until the request is routed).
public struct TelemetryBufferTracer: Tracer {
    /// How the tracer samples.
    public struct Options: Sendable {
        /// The share of new traces recorded, from 0 to 1 (default 1: all).
        public var tracesSampleRate: Double = 1
        /// Decides a new trace's sample rate instead of `tracesSampleRate`, from what it is given.
        public var tracesSampler: (@Sendable (SamplingContext) -> Double)?

        /// Every trace recorded.
        public init() {}
    }

    /// What `Options.tracesSampler` decides from: the segment's operation and kind, the caller's decision
    /// if one came with the trace, and the device's state where the platform reports it (`nil` where it
    /// does not: Low Power Mode and the thermal state are known on Apple platforms only).
    public struct SamplingContext: Sendable {
        /// The segment's operation name.
        public var operationName: String
        /// The segment's kind.
        public var kind: SpanKind
        /// The decision an incoming trace carried, if any (without a sampler, it is followed).
        public var parentSampled: Bool?
        /// Whether Low Power Mode is on; `nil` where unknown.
        public var isLowPowerModeEnabled: Bool?
        /// The thermal state (`nominal`, `fair`, `serious`, `critical`); `nil` where unknown.
        public var thermalState: String?
    }

    /// The buffer the spans go to.
    public let buffer: TelemetryBuffer
    /// How the tracer samples.
    public let options: Options

    /// A tracer sending to `buffer`.
    public init(buffer: TelemetryBuffer, options: Options = Options()) {
        self.buffer = buffer
        self.options = options
    }

    /// Starts a span: a child of the context's span of this tracer, or a segment (continuing the trace an
    /// extracted context carries, if any, else a new trace, sampled here).
    public func startSpan<Instant: TracerInstant>(
        _ operationName: String, context: @autoclosure () -> InstrumentationContext, ofKind kind: SpanKind,
        at instant: @autoclosure () -> Instant, function: String, file fileID: String, line: UInt
    ) -> TelemetryBufferSpan {
        var context = context()
        let parent = SentrySpanContext.current(in: context)
        let spanID = SpanID.random()
        var span: SentrySpanContext
        if let parent, let segment = parent.segment {
            span = parent
            span.spanID = spanID
            span.segment = segment
        } else {
            let traceID = parent?.traceID ?? .random()
            // The first segment of an extracted trace decides for the next ones started from the same context.
            let decided = parent?.head?.decision ?? decide(traceID, parent: parent, operationName: operationName, kind: kind)
            let (sampled, dsc) = parent?.head?.settle(decided) ?? decided
            span = SentrySpanContext(traceID: traceID, spanID: spanID, sampled: sampled, dynamicSamplingContext: dsc,
                                     foreignBaggage: parent?.foreignBaggage ?? [], traceState: parent?.traceState)
            span.segment = (spanID, SegmentName(operationName))
            // The envelopes of the trace's spans carry the DSC that was propagated.
            if sampled { buffer.setSamplingContext(dsc, forTrace: traceID) }
        }
        SentrySpanContext.set(span, in: &context)
        // What the swift-log and swift-metrics integrations read: logs and metrics carry the span they ran in
        // (only its trace if it is not sampled: the span is never sent).
        context.activeTrace = ActiveTrace(traceID: span.traceID, spanID: span.sampled == true ? span.spanID : nil)
        return TelemetryBufferSpan(operationName: operationName, kind: kind, context: context, span: span,
                                   parentSpanID: parent?.spanID, isSegment: parent?.segment == nil,
                                   start: instant().nanosecondsSinceEpoch, buffer: buffer)
    }

    /// A segment's sampling decision, and the trace's DSC. The sampler decides when set (seeing the caller's
    /// decision), else the caller's decision, else the rate, against the trace's `sample_rand`: the caller's,
    /// else one derived from the trace ID, so that every process of the trace that derives one decides alike.
    /// An incoming DSC is kept as it came (its `sample_rand` filled in if it had none that is valid), even
    /// where this process decides (a sampler, a caller that deferred): the trace's head fixes it. Else the
    /// DSC is this segment's, at the rate the decision was taken (the caller's decision stands for 1 or 0).
    private func decide(_ traceID: TraceID, parent: SentrySpanContext?, operationName: String,
                        kind: SpanKind) -> (sampled: Bool, dsc: [String: String]) {
        // The caller's DSC, if it came with the trace (a DSC of another trace did not: see `extract`).
        var dsc = parent?.dynamicSamplingContext ?? [:]
        let continued = dsc["trace_id"] != nil
        let sampleRand: Double
        if let callers = dsc["sample_rand"].flatMap(Double.init), (0..<1).contains(callers) {
            sampleRand = callers
        } else if let parent {
            sampleRand = traceID.derivedSampleRand(sampled: parent.sampled,
                                                   rate: continued ? dsc["sample_rate"].flatMap(Double.init) : nil)
            if continued { dsc["sample_rand"] = String(format: "%.6f", sampleRand) }
        } else {
            sampleRand = Double(Int.random(in: 0..<1_000_000)) / 1e6
        }
        var rate = Self.clamped(options.tracesSampleRate)
        let sampled: Bool
        if let sampler = options.tracesSampler {
            rate = Self.clamped(sampler(SamplingContext(
                operationName: operationName, kind: kind, parentSampled: parent?.sampled,
                isLowPowerModeEnabled: DeviceState.isLowPowerModeEnabled, thermalState: DeviceState.thermalState)))
            sampled = sampleRand < rate
        } else if let decided = parent?.sampled {
            (sampled, rate) = (decided, decided ? 1 : 0)
        } else {
            sampled = sampleRand < rate
        }
        // A server's segment goes without its name, which is a placeholder until the request is routed (Sentry
        // wants a `transaction` only of good quality).
        if !continued {
            dsc = ownDynamicSamplingContext(traceID, sampleRand: sampleRand, sampled: sampled, rate: rate,
                                            transaction: kind == .server ? nil : operationName)
        }
        return (sampled, dsc)
    }

    /// A rate within 0...1; NaN is 0.
    private static func clamped(_ rate: Double) -> Double { rate.isNaN ? 0 : min(max(rate, 0), 1) }

    /// The DSC this process starts a trace with: its DSN's public key and organization, release,
    /// environment and the segment's name, if given. `sample_rand` is a whole number of millionths, which
    /// 6 decimals write exactly.
    private func ownDynamicSamplingContext(_ traceID: TraceID, sampleRand: Double, sampled: Bool, rate: Double,
                                           transaction: String?) -> [String: String] {
        var dsc = ["trace_id": traceID.description, "sample_rand": String(format: "%.6f", sampleRand),
                   "sampled": sampled ? "true" : "false", "sample_rate": String(rate)]
        if let transaction { dsc["transaction"] = transaction }
        let dsn = URLComponents(string: buffer.options.dsn)
        if let key = dsn?.user { dsc["public_key"] = key }
        // `o<digits>.` leading the host names the organization.
        if let host = dsn?.host, host.hasPrefix("o"), let dot = host.firstIndex(of: "."),
           let organization = UInt64(host[host.index(after: host.startIndex)..<dot]) {
            dsc["org_id"] = String(organization)
        }
        // An empty one is none, as the buffer has it.
        if let release = buffer.options.release, !release.isEmpty { dsc["release"] = release }
        if let environment = buffer.options.environment, !environment.isEmpty { dsc["environment"] = environment }
        return dsc
    }

    /// Stores what the buffer holds, waiting at most 2 s.
    public func forceFlush() {
        buffer.flush(timeout: 2)
    }

    /// Writes the context's trace as `sentry-trace`, `baggage` (the DSC, then foreign members),
    /// `traceparent` and, if one came in, `tracestate`. Nothing for a context without a span of this tracer.
    public func inject<Carrier, Inject: Injector>(_ context: InstrumentationContext, into carrier: inout Carrier,
                                                  using injector: Inject) where Inject.Carrier == Carrier {
        guard let span = SentrySpanContext.current(in: context) else { return }
        injector.inject(TraceHeaders.sentryTrace(span), forKey: TraceHeaders.sentryTrace, into: &carrier)
        if let baggage = TraceHeaders.baggage(span) { injector.inject(baggage, forKey: TraceHeaders.baggage, into: &carrier) }
        injector.inject(TraceHeaders.traceparent(span), forKey: TraceHeaders.traceparent, into: &carrier)
        if let state = span.traceState { injector.inject(state, forKey: TraceHeaders.tracestate, into: &carrier) }
    }

    /// Reads an incoming trace: `sentry-trace` (with `baggage`'s DSC), else `traceparent`; the first span
    /// started in the context continues it as a segment whose parent is the caller's span. Logs and metrics
    /// sent in the context before that span starts carry the trace, without a span.
    public func extract<Carrier, Extract: Extractor>(_ carrier: Carrier, into context: inout InstrumentationContext,
                                                     using extractor: Extract) where Extract.Carrier == Carrier {
        let traceparent = extractor.extract(key: TraceHeaders.traceparent, from: carrier).flatMap(TraceHeaders.parseTraceparent)
        let trace: TraceID, span: SpanID, sampled: Bool?
        if let header = extractor.extract(key: TraceHeaders.sentryTrace, from: carrier),
           let parsed = TraceHeaders.parseSentryTrace(header) {
            (trace, span, sampled) = parsed
        } else if let traceparent {
            (trace, span, sampled) = traceparent
        } else {
            return
        }
        let baggage = extractor.extract(key: TraceHeaders.baggage, from: carrier).map(TraceHeaders.parseBaggage)
        // A DSC, or a `tracestate`, of another trace is not this one's.
        let dsc = baggage?.sentry["trace_id"]?.lowercased() == trace.description ? baggage?.sentry ?? [:] : [:]
        let state = traceparent?.0 == trace ? extractor.extract(key: TraceHeaders.tracestate, from: carrier) : nil
        var extracted = SentrySpanContext(traceID: trace, spanID: span, sampled: sampled, dynamicSamplingContext: dsc,
                                          foreignBaggage: baggage?.foreign ?? [], traceState: state)
        extracted.head = TraceHead()
        SentrySpanContext.set(extracted, in: &context)
        context.activeTrace = ActiveTrace(traceID: trace)
    }
}
