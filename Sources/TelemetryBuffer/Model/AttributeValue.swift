extension TelemetryBuffer {
    /// A typed attribute value of a log or span (Sentry attributes 1.6.0).
    ///
    /// Arrays are homogeneous by construction; they are sent with type `array`. A non-finite double
    /// (NaN, +∞, −∞) has no JSON number form: it is sent as a `string` attribute holding `"NaN"`,
    /// `"Infinity"` or `"-Infinity"`, and a double array containing one is sent as an array of such strings,
    /// so the JSON is always valid and nothing is silently changed to another number.
    public enum AttributeValue: Sendable, Hashable {
        /// A UTF-8 string.
        case string(String)
        /// A signed 64-bit integer. Send unsigned 64-bit values as `.string`.
        case integer(Int64)
        /// A 64-bit float, written in its shortest form that parses back to the same value.
        case double(Double)
        /// A boolean.
        case boolean(Bool)
        /// A homogeneous array of strings.
        case stringArray([String])
        /// A homogeneous array of integers.
        case integerArray([Int64])
        /// A homogeneous array of doubles.
        case doubleArray([Double])
        /// A homogeneous array of booleans.
        case booleanArray([Bool])
    }
}

extension AttributeValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByBooleanLiteral {
    /// A `.string` value.
    public init(stringLiteral value: String) { self = .string(value) }
    /// An `.integer` value.
    public init(integerLiteral value: Int64) { self = .integer(value) }
    /// A `.double` value.
    public init(floatLiteral value: Double) { self = .double(value) }
    /// A `.boolean` value.
    public init(booleanLiteral value: Bool) { self = .boolean(value) }
}

/// `TelemetryBuffer.AttributeValue`: the module and its main class share a name, so the qualified form
/// names the class's member (as needed where another module has a `AttributeValue` too).
public typealias AttributeValue = TelemetryBuffer.AttributeValue
