import Foundation

extension TelemetryBuffer {
    /// A finished span (span protocol v2). Encoded to JSON once, when it is added to a `TelemetryBuffer`.
    public struct Span: Sendable, Hashable {
        /// The span's outcome; the protocol knows only these two.
        public enum Status: String, Sendable, Hashable {
            case ok, error
        }

        /// How a segment's name was chosen (`sentry.segment.name.source`, sent on segment spans).
        public enum Source: String, Sendable, Hashable {
            case custom, url, route, view, component, task
        }

        /// A link to another span, e.g. the previous trace (`sentry.link.type` = `previous_trace`).
        public struct Link: Sendable, Hashable {
            /// The linked span's trace.
            public var traceID: TraceID
            /// The linked span.
            public var spanID: SpanID
            /// Whether the linked trace was sampled, if known.
            public var sampled: Bool?
            /// Typed attributes of the link.
            public var attributes: Attributes

            /// A link to `spanID` in `traceID`.
            public init(traceID: TraceID, spanID: SpanID, sampled: Bool? = nil, attributes: Attributes = [:]) {
                self.traceID = traceID
                self.spanID = spanID
                self.sampled = sampled
                self.attributes = attributes
            }
        }

        /// The trace; spans are sent in one envelope per trace.
        public var traceID: TraceID
        /// This span.
        public var spanID: SpanID
        /// The parent span; `nil` for a root.
        public var parentSpanID: SpanID?
        /// A low-cardinality name, e.g. `GET /cart`.
        public var name: String
        /// The outcome.
        public var status: Status
        /// Whether this span is a segment (the root of its service's part of the trace).
        public var isSegment: Bool
        /// When the span started.
        public var startTimestamp: Date
        /// When the span ended.
        public var endTimestamp: Date
        /// Typed attributes. They take precedence over the buffer's default attributes with the same key.
        public var attributes: Attributes
        /// Links to other spans.
        public var links: [Link]
        /// The operation, e.g. `http.client`: `sentry.op`.
        public var op: String?
        /// How the segment's name was chosen: `sentry.segment.name.source` on a segment span (`custom` if `nil`).
        /// An attribute under the deprecated key `sentry.span.source` is sent as it is, not read: set this.
        public var source: Source?
        /// The segment this span belongs to, `sentry.segment.id` (a segment span is its own).
        public var segmentID: SpanID?
        /// The segment's name, `sentry.segment.name` (a segment span's is its own name).
        public var segmentName: String?
        /// The thread the span ran on, `thread.id` and `thread.name`, where the app knows them.
        public var threadID: UInt64?
        /// See ``Span/threadID``.
        public var threadName: String?

        /// A finished span.
        ///
        /// - Parameters:
        ///   - traceID: The trace it belongs to.
        ///   - spanID: Its own ID.
        ///   - parentSpanID: The span it ran in, `nil` for a trace's root.
        ///   - name: What it measured.
        ///   - status: Whether it ended well.
        ///   - isSegment: Whether it is the root of its service's part of the trace.
        ///   - startTimestamp: When it started.
        ///   - endTimestamp: When it ended; one before `startTimestamp` (the wall clock set back while it ran)
        ///     is sent as `startTimestamp`.
        ///   - attributes: Typed attributes, sent in this order after the buffer's defaults and the
        ///     common attributes below; one with a key of theirs replaces it.
        ///   - links: Links to spans of other traces.
        ///   - op: The operation (`sentry.op`).
        ///   - source: How a segment's name was chosen (`sentry.segment.name.source`; `custom` if `nil`).
        ///   - segmentID: The segment it belongs to; a segment span is its own.
        ///   - segmentName: The segment's name; a segment span's is its own name.
        ///   - threadID: The thread it ran on, if known.
        ///   - threadName: That thread's name, if known.
        ///
        /// The protocol's common span attributes come from these: `sentry.op`, `sentry.segment.id` and
        /// `sentry.segment.name` on every span of a segment, `sentry.segment.name.source` on segment spans,
        /// `thread.id` and `thread.name`. An attribute of `attributes` with one of those keys wins.
        public init(
            traceID: TraceID, spanID: SpanID, parentSpanID: SpanID? = nil, name: String,
            status: Status = .ok, isSegment: Bool, startTimestamp: Date, endTimestamp: Date,
            attributes: Attributes = [:], links: [Link] = [], op: String? = nil, source: Source? = nil,
            segmentID: SpanID? = nil, segmentName: String? = nil, threadID: UInt64? = nil, threadName: String? = nil
        ) {
            self.op = op
            self.source = source
            self.segmentID = segmentID
            self.segmentName = segmentName
            self.threadID = threadID
            self.threadName = threadName
            self.traceID = traceID
            self.spanID = spanID
            self.parentSpanID = parentSpanID
            self.name = name
            self.status = status
            self.isSegment = isSegment
            self.startTimestamp = startTimestamp
            self.endTimestamp = endTimestamp
            self.attributes = attributes
            self.links = links
        }
    }
}

/// `TelemetryBuffer.Span`: the module and its main class share a name, so the qualified form
/// names the class's member (as needed where another module has a `Span` too).
public typealias Span = TelemetryBuffer.Span
