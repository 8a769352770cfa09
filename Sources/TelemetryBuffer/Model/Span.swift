import Foundation

extension TelemetryBuffer {
    /// A finished span (span protocol v2). Encoded to JSON once, when it is added to a `TelemetryBuffer`.
    public struct Span: Sendable, Hashable {
        /// The span's outcome; the protocol knows only these two.
        public enum Status: String, Sendable, Hashable {
            case ok, error
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
        ///   - endTimestamp: When it ended.
        ///   - attributes: Typed attributes, sent in this order after the buffer's defaults.
        ///   - links: Links to spans of other traces.
        public init(
            traceID: TraceID, spanID: SpanID, parentSpanID: SpanID? = nil, name: String,
            status: Status = .ok, isSegment: Bool, startTimestamp: Date, endTimestamp: Date,
            attributes: Attributes = [:], links: [Link] = []
        ) {
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
