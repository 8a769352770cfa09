import Foundation

extension TelemetryBuffer {
    /// A log message written with string interpolation, whose interpolated values become its parameters:
    /// `"Upload finished in \(ms) ms"` is sent with the body `Upload finished in 412 ms`, the attribute
    /// `sentry.message.template` = `Upload finished in %s ms` and `sentry.message.parameter.0` = 412 (an
    /// integer), so Sentry can group the logs by template and search by parameter.
    ///
    /// Each interpolation is `%s` in the template; a literal `%` is written `%%`. Integers, floating-point
    /// numbers, booleans and strings keep their type (an unsigned integer beyond `Int64.max` is sent as a
    /// string, as the protocol asks); an optional is its value, or the string `nil`; anything else is sent
    /// as its description, a string. `\(value, name: "ms")` names the parameter
    /// (`sentry.message.parameter.ms`) instead of numbering it; a name that is empty, all digits or used
    /// before falls back to the number. A message without interpolations is a plain body: the protocol
    /// sends no template without parameters. For a message already in a `String`, use
    /// `Log(level:body:traceID:spanID:timestamp:severityNumber:attributes:)`: `"\(message)"` would make
    /// the whole message one parameter, and every such log one template.
    public struct LogMessage: Sendable, ExpressibleByStringInterpolation, ExpressibleByStringLiteral {
        /// The message with its values written in: the log's body.
        public let body: String
        /// The message with `%s` for each value; `nil` when it has none.
        public let template: String?
        /// The values, each with its attribute key (`sentry.message.parameter.<index or name>`), in order.
        public let parameters: [(key: String, value: AttributeValue)]

        /// A message without parameters.
        public init(stringLiteral value: String) {
            body = value
            template = nil
            parameters = []
        }

        /// A message whose interpolations are its parameters.
        public init(stringInterpolation interpolation: StringInterpolation) {
            body = interpolation.body
            template = interpolation.parameters.isEmpty ? nil : interpolation.template
            parameters = interpolation.parameters
        }

        /// Builds a `LogMessage` from string interpolation.
        public struct StringInterpolation: StringInterpolationProtocol, Sendable {
            var body = ""
            var template = ""
            var parameters: [(key: String, value: AttributeValue)] = []

            /// Reserves room for the literal text and the values.
            public init(literalCapacity: Int, interpolationCount: Int) {
                body.reserveCapacity(literalCapacity + 8 * interpolationCount)
                template.reserveCapacity(literalCapacity + 2 * interpolationCount)
                parameters.reserveCapacity(interpolationCount)
            }

            /// Literal text, in the body as it is and in the template with `%` doubled.
            public mutating func appendLiteral(_ literal: String) {
                body += literal
                template += literal.contains("%") ? literal.replacingOccurrences(of: "%", with: "%%") : literal
            }

            /// An integer parameter (a string if it does not fit in `Int64`).
            public mutating func appendInterpolation<T: BinaryInteger>(_ value: T, name: String? = nil) {
                let text = String(describing: value)
                append(text, Int64(exactly: value).map { .integer($0) } ?? .string(text), name)
            }

            /// A floating-point parameter: the value its description shows (a `Float` 0.1 is sent as 0.1).
            public mutating func appendInterpolation<T: BinaryFloatingPoint>(_ value: T, name: String? = nil) {
                let text = String(describing: value)
                append(text, .double(Double(text) ?? Double(value)), name)
            }

            /// A boolean parameter.
            public mutating func appendInterpolation(_ value: Bool, name: String? = nil) {
                append(String(describing: value), .boolean(value), name)
            }

            /// A string parameter.
            public mutating func appendInterpolation(_ value: String, name: String? = nil) {
                append(value, .string(value), name)
            }

            /// Any other value: a string parameter, its description.
            public mutating func appendInterpolation<T>(_ value: T, name: String? = nil) {
                let text = String(describing: value)
                append(text, .string(text), name)
            }

            /// An optional integer: its value, or the string `nil`.
            public mutating func appendInterpolation<T: BinaryInteger>(_ value: T?, name: String? = nil) {
                if let value { appendInterpolation(value, name: name) } else { append("nil", .string("nil"), name) }
            }

            /// An optional floating-point number: its value, or the string `nil`.
            public mutating func appendInterpolation<T: BinaryFloatingPoint>(_ value: T?, name: String? = nil) {
                if let value { appendInterpolation(value, name: name) } else { append("nil", .string("nil"), name) }
            }

            /// An optional boolean: its value, or the string `nil`.
            public mutating func appendInterpolation(_ value: Bool?, name: String? = nil) {
                if let value { appendInterpolation(value, name: name) } else { append("nil", .string("nil"), name) }
            }

            /// An optional string: its value, or the string `nil`.
            public mutating func appendInterpolation(_ value: String?, name: String? = nil) {
                append(value ?? "nil", .string(value ?? "nil"), name)
            }

            /// Any other optional: its value's description, or the string `nil`.
            public mutating func appendInterpolation<T>(_ value: T?, name: String? = nil) {
                let text = value.map { String(describing: $0) } ?? "nil"
                append(text, .string(text), name)
            }

            /// Adds a value under its name, or its position when the name is missing, empty, all digits (a
            /// position's form) or already used: every parameter keeps a key of its own.
            private mutating func append(_ text: String, _ value: AttributeValue, _ name: String?) {
                body += text
                template += "%s"
                let position = String(parameters.count)
                var suffix = position
                if let name, !name.isEmpty, !name.allSatisfy(\.isASCII) || !name.allSatisfy(\.isNumber),
                   !parameters.contains(where: { $0.key == "sentry.message.parameter.\(name)" }) {
                    suffix = name
                }
                parameters.append(("sentry.message.parameter.\(suffix)", value))
            }
        }
    }
}

/// `TelemetryBuffer.LogMessage`: the module and its main class share a name, so the qualified form
/// names the class's member (as needed where another module has a `LogMessage` too).
public typealias LogMessage = TelemetryBuffer.LogMessage

extension TelemetryBuffer.Log {
    /// A log whose message may carry parameters (see `LogMessage`): its body is the message with the
    /// values written in; a message with parameters adds `sentry.message.template` and one
    /// `sentry.message.parameter.<index or name>` attribute per value, after `attributes` (an attribute
    /// of `attributes` with one of those keys wins).
    ///
    /// - Parameters:
    ///   - level: How severe it is.
    ///   - message: The message, e.g. `"Upload finished in \(ms) ms"`.
    ///   - traceID: The trace it belongs to; by default ``TraceID/process``.
    ///   - spanID: The span that was active, if any.
    ///   - timestamp: When it happened; by default now.
    ///   - attributes: Typed attributes of its own.
    public init(level: Level, _ message: TelemetryBuffer.LogMessage, traceID: TelemetryBuffer.TraceID = .process,
                spanID: TelemetryBuffer.SpanID? = nil, timestamp: Date = Date(), attributes: TelemetryBuffer.Attributes = [:]) {
        var all = attributes
        if let template = message.template {
            if all["sentry.message.template"] == nil { all["sentry.message.template"] = .string(template) }
            for parameter in message.parameters where all[parameter.key] == nil { all[parameter.key] = parameter.value }
        }
        self.init(level: level, body: message.body, traceID: traceID, spanID: spanID, timestamp: timestamp, attributes: all)
    }

    /// A `trace` log (see ``Log/init(level:_:traceID:spanID:timestamp:attributes:)``).
    public static func trace(_ message: TelemetryBuffer.LogMessage, traceID: TelemetryBuffer.TraceID = .process,
                             spanID: TelemetryBuffer.SpanID? = nil, attributes: TelemetryBuffer.Attributes = [:]) -> Self {
        Self(level: .trace, message, traceID: traceID, spanID: spanID, attributes: attributes)
    }

    /// A `debug` log (see ``Log/init(level:_:traceID:spanID:timestamp:attributes:)``).
    public static func debug(_ message: TelemetryBuffer.LogMessage, traceID: TelemetryBuffer.TraceID = .process,
                             spanID: TelemetryBuffer.SpanID? = nil, attributes: TelemetryBuffer.Attributes = [:]) -> Self {
        Self(level: .debug, message, traceID: traceID, spanID: spanID, attributes: attributes)
    }

    /// An `info` log (see ``Log/init(level:_:traceID:spanID:timestamp:attributes:)``).
    public static func info(_ message: TelemetryBuffer.LogMessage, traceID: TelemetryBuffer.TraceID = .process,
                            spanID: TelemetryBuffer.SpanID? = nil, attributes: TelemetryBuffer.Attributes = [:]) -> Self {
        Self(level: .info, message, traceID: traceID, spanID: spanID, attributes: attributes)
    }

    /// A `warn` log (see ``Log/init(level:_:traceID:spanID:timestamp:attributes:)``).
    public static func warn(_ message: TelemetryBuffer.LogMessage, traceID: TelemetryBuffer.TraceID = .process,
                            spanID: TelemetryBuffer.SpanID? = nil, attributes: TelemetryBuffer.Attributes = [:]) -> Self {
        Self(level: .warn, message, traceID: traceID, spanID: spanID, attributes: attributes)
    }

    /// An `error` log (see ``Log/init(level:_:traceID:spanID:timestamp:attributes:)``).
    public static func error(_ message: TelemetryBuffer.LogMessage, traceID: TelemetryBuffer.TraceID = .process,
                             spanID: TelemetryBuffer.SpanID? = nil, attributes: TelemetryBuffer.Attributes = [:]) -> Self {
        Self(level: .error, message, traceID: traceID, spanID: spanID, attributes: attributes)
    }

    /// A `fatal` log (see ``Log/init(level:_:traceID:spanID:timestamp:attributes:)``).
    public static func fatal(_ message: TelemetryBuffer.LogMessage, traceID: TelemetryBuffer.TraceID = .process,
                             spanID: TelemetryBuffer.SpanID? = nil, attributes: TelemetryBuffer.Attributes = [:]) -> Self {
        Self(level: .fatal, message, traceID: traceID, spanID: spanID, attributes: attributes)
    }
}
