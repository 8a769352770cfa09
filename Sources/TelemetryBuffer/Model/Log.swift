import Foundation

extension TelemetryBuffer {
    /// A Sentry log (logs protocol 2.x). Encoded to JSON once, when it is added to a `TelemetryBuffer`.
    public struct Log: Sendable, Hashable {
        /// The log's level, sent as `level` together with the minimum `severity_number` of its range.
        public enum Level: String, Sendable, Hashable, CaseIterable {
            case trace, debug, info, warn, error, fatal

            /// The OpenTelemetry severity number Sentry infers for the level: 1, 5, 9, 13, 17, 21.
            public var severityNumber: Int {
                switch self {
                case .trace: 1
                case .debug: 5
                case .info: 9
                case .warn: 13
                case .error: 17
                case .fatal: 21
                }
            }
        }

        /// When the log happened; sent in seconds since 1970 with microsecond precision.
        public var timestamp: Date
        /// The trace the log belongs to (from the propagation context).
        public var traceID: TraceID
        /// The active span, if any.
        public var spanID: SpanID?
        /// The level.
        public var level: Level
        /// The message.
        public var body: String
        /// The severity number, by default `level.severityNumber`.
        public var severityNumber: Int
        /// Typed attributes. They take precedence over the buffer's default attributes with the same key.
        public var attributes: Attributes

        /// A log; `timestamp` defaults to now and `severityNumber` to the level's.
        ///
        /// - Parameters:
        ///   - level: How severe it is.
        ///   - body: The message.
        ///   - traceID: The trace it belongs to (every log has one in Sentry's protocol).
        ///   - spanID: The span that was active, if any.
        ///   - timestamp: When it happened.
        ///   - severityNumber: The OpenTelemetry severity number, if not the level's.
        ///   - attributes: Typed attributes, sent in this order after the buffer's defaults.
        public init(
            level: Level, body: String, traceID: TraceID, spanID: SpanID? = nil,
            timestamp: Date = Date(), severityNumber: Int? = nil, attributes: Attributes = [:]
        ) {
            self.timestamp = timestamp
            self.traceID = traceID
            self.spanID = spanID
            self.level = level
            self.body = body
            self.severityNumber = severityNumber ?? level.severityNumber
            self.attributes = attributes
        }
    }
}

/// `TelemetryBuffer.Log`: the module and its main class share a name, so the qualified form
/// names the class's member (as needed where another module has a `Log` too).
public typealias Log = TelemetryBuffer.Log
