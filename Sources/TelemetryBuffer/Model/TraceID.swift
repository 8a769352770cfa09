extension TelemetryBuffer {
    /// A 16-byte W3C / Sentry trace ID, written as 32 lowercase hex digits.
    public struct TraceID: Hashable, Sendable, CustomStringConvertible {
        /// The first eight bytes, big-endian.
        public let high: UInt64
        /// The last eight bytes, big-endian.
        public let low: UInt64

        /// A trace ID from its two halves.
        public init(high: UInt64, low: UInt64) {
            self.high = high
            self.low = low
        }

        /// Parses 32 hex digits (either case); `nil` for anything else.
        public init?(_ hex: String) {
            let utf8 = Array(hex.utf8)
            guard utf8.count == 32,
                  let high = HexDigits.parse(utf8[0..<16]), let low = HexDigits.parse(utf8[16..<32])
            else { return nil }
            self.init(high: high, low: low)
        }

        /// A new random trace ID.
        public static func random() -> TraceID {
            var generator = SystemRandomNumberGenerator()
            return TraceID(high: generator.next(), low: generator.next())
        }

        /// A random trace ID made once per process: the trace of logs that have none of their own (what
        /// Sentry SDKs take from their propagation context when no span is active).
        public static let process = TraceID.random()

        /// 32 lowercase hex digits.
        public var description: String { HexDigits.string(high) + HexDigits.string(low) }
    }
}

extension TelemetryBuffer {
    /// An 8-byte span ID, written as 16 lowercase hex digits.
    public struct SpanID: Hashable, Sendable, CustomStringConvertible {
        /// The eight bytes, big-endian.
        public let value: UInt64

        /// A span ID from its eight bytes.
        public init(_ value: UInt64) { self.value = value }

        /// Parses 16 hex digits (either case); `nil` for anything else.
        public init?(_ hex: String) {
            let utf8 = Array(hex.utf8)
            guard utf8.count == 16, let value = HexDigits.parse(utf8[...]) else { return nil }
            self.init(value)
        }

        /// A new random, non-zero span ID.
        public static func random() -> SpanID {
            var generator = SystemRandomNumberGenerator()
            return SpanID(generator.next() | 1)
        }

        /// 16 lowercase hex digits.
        public var description: String { HexDigits.string(value) }
    }
}

/// Hex conversions shared by the IDs and the encoders.
enum HexDigits {
    /// (Not `String(unsafeUninitializedCapacity:)`: that needs macOS 11 and iOS 14. Descriptions only,
    /// not the encoders' path.)
    static func string(_ value: UInt64) -> String {
        String(decoding: (0..<16).map { digit(UInt8(truncatingIfNeeded: value >> UInt64(60 - 4 * $0)) & 0xF) }, as: UTF8.self)
    }

    @inline(__always)
    static func digit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? nibble &+ 0x30 : nibble &+ 0x57
    }

    /// Parses up to 16 hex digits; `nil` on any other byte or an empty input.
    static func parse<C: Collection<UInt8>>(_ digits: C) -> UInt64? {
        guard !digits.isEmpty, digits.count <= 16 else { return nil }
        var value: UInt64 = 0
        for byte in digits {
            let nibble: UInt8
            switch byte {
            case 0x30...0x39: nibble = byte - 0x30
            case 0x61...0x66: nibble = byte - 0x57
            case 0x41...0x46: nibble = byte - 0x37
            default: return nil
            }
            value = value << 4 | UInt64(nibble)
        }
        return value
    }
}

/// `TelemetryBuffer.TraceID`: the module and its main class share a name, so the qualified form
/// names the class's member (as needed where another module has a `TraceID` too).
public typealias TraceID = TelemetryBuffer.TraceID

/// `TelemetryBuffer.SpanID`: the module and its main class share a name, so the qualified form
/// names the class's member (as needed where another module has a `SpanID` too).
public typealias SpanID = TelemetryBuffer.SpanID
