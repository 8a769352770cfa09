import Foundation

extension TelemetryBuffer {
    /// A Sentry trace metric (metrics protocol 2.x): a counter, a gauge or a distribution, sent as a
    /// `trace_metric` item. Encoded to JSON once, when it is added to a `TelemetryBuffer`.
    public struct Metric: Sendable, Hashable {
        /// What kind of measure it is (`type` on the wire).
        public enum Kind: String, Sendable, Hashable, CaseIterable {
            /// A count of events, summed by Sentry.
            case counter
            /// A value at a moment (the last one counts).
            case gauge
            /// One sample of a distribution (percentiles, averages).
            case distribution
        }

        /// A metric's number: a signed 64-bit integer or a 64-bit double.
        public enum Value: Sendable, Hashable {
            case integer(Int64)
            case double(Double)
        }

        /// The metric's name, dotted (`api.response_time`).
        public var name: String
        /// The kind of measure.
        public var kind: Kind
        /// The measured value. A double must be finite: ``TelemetryBuffer/add(metric:)`` refuses NaN and infinities.
        public var value: Value
        /// The unit, as Sentry names units (`millisecond`, `byte`, `percent`…), if any.
        public var unit: String?
        /// Typed attributes. They take precedence over the buffer's default attributes with the same key.
        public var attributes: Attributes
        /// The trace it belongs to.
        public var traceID: TraceID
        /// The active span, if any.
        public var spanID: SpanID?
        /// When it was measured; sent in seconds since 1970 with microsecond precision.
        public var timestamp: Date

        /// A metric.
        ///
        /// - Parameters:
        ///   - name: Dotted, e.g. `api.response_time`.
        ///   - kind: Counter, gauge or distribution.
        ///   - value: The number (finite).
        ///   - unit: Sentry's unit name, if any.
        ///   - attributes: Typed attributes, sent in this order after the buffer's defaults.
        ///   - traceID: The trace it belongs to; by default the process's (``TraceID/process``).
        ///   - spanID: The span that was active, if any.
        ///   - timestamp: When it was measured; by default now.
        public init(name: String, kind: Kind, value: Value, unit: String? = nil, attributes: Attributes = [:],
                    traceID: TraceID = .process, spanID: SpanID? = nil, timestamp: Date = Date()) {
            self.name = name
            self.kind = kind
            self.value = value
            self.unit = unit
            self.attributes = attributes
            self.traceID = traceID
            self.spanID = spanID
            self.timestamp = timestamp
        }

        /// A counter of `value` (1 by default).
        public static func counter(_ name: String, value: Int64 = 1, unit: String? = nil, attributes: Attributes = [:],
                                   traceID: TraceID = .process) -> Metric {
            Metric(name: name, kind: .counter, value: .integer(value), unit: unit, attributes: attributes, traceID: traceID)
        }

        /// A gauge at `value`.
        public static func gauge(_ name: String, value: Double, unit: String? = nil, attributes: Attributes = [:],
                                 traceID: TraceID = .process) -> Metric {
            Metric(name: name, kind: .gauge, value: .double(value), unit: unit, attributes: attributes, traceID: traceID)
        }

        /// One sample `value` of a distribution.
        public static func distribution(_ name: String, value: Double, unit: String? = nil, attributes: Attributes = [:],
                                        traceID: TraceID = .process) -> Metric {
            Metric(name: name, kind: .distribution, value: .double(value), unit: unit, attributes: attributes, traceID: traceID)
        }

        /// Whether the value can be sent (JSON has no form for NaN or the infinities).
        var isFinite: Bool {
            if case .double(let double) = value { return double.isFinite }
            return true
        }
    }
}

/// `TelemetryBuffer.Metric`: the module and its main class share a name, so the qualified form names the
/// class's member (as needed where another module has a `Metric` too).
public typealias Metric = TelemetryBuffer.Metric
