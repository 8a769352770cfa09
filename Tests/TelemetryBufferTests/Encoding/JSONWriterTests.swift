import Foundation
import XCTest
@testable import TelemetryBuffer

final class JSONWriterTests: XCTestCase {
    private func written(_ body: (inout JSONWriter) -> Void) -> String {
        let buffer = ByteBuffer(capacity: 8)  // tiny, so every test also exercises growth
        var writer = JSONWriter(appendingTo: buffer)
        body(&writer)
        writer.finish()
        return String(decoding: buffer.toArray(), as: UTF8.self)
    }

    func testEscapesQuoteBackslashAndEveryControlCharacter() {
        XCTAssertEqual(written { $0.string("a\"b\\c/d") }, #""a\"b\\c/d""#)
        XCTAssertEqual(written { $0.string("\n\r\t\u{08}\u{0C}") }, #""\n\r\t\b\f""#)
        XCTAssertEqual(written { $0.string("\u{00}\u{01}\u{1F}\u{7F}") }, "\"\\u0000\\u0001\\u001f\u{7F}\"")
        for scalar in 0..<0x20 {
            let text = String(UnicodeScalar(UInt8(scalar)))
            let json = written { $0.string(text) }
            XCTAssertFalse(json.utf8.dropFirst().dropLast().contains { $0 < 0x20 }, "raw control byte \(scalar)")
            let decoded = try? JSONSerialization.jsonObject(with: Data("[\(json)]".utf8)) as? [String]
            XCTAssertEqual(decoded, [text], "control character \(scalar) must round-trip")
        }
    }

    /// Escapes at every position of strings across the scan's 4-, 8- and 16-byte block sizes round-trip.
    func testEscapesAtEveryPositionRoundTrip() {
        for length in 1...40 {
            for position in 0..<length {
                for special in ["\"", "\\", "\n", "\u{01}", "é"] {
                    var characters = Array(repeating: "a", count: length)
                    characters[position] = special
                    let text = characters.joined()
                    let json = written { $0.string(text) }
                    let decoded = try? JSONSerialization.jsonObject(with: Data("[\(json)]".utf8)) as? [String]
                    XCTAssertEqual(decoded, [text], "length \(length), position \(position)")
                }
            }
        }
    }

    /// Two bytes to escape at every pair of positions, among multi-byte UTF-8, give what escaping byte by
    /// byte gives.
    func testTwoEscapesAtEveryPairOfPositionsMatchByteByByteEscaping() {
        func reference(_ text: String) -> String {
            var json = "\""
            for scalar in text.unicodeScalars {
                switch scalar {
                case "\"": json += "\\\""
                case "\\": json += "\\\\"
                case "\n": json += "\\n"
                case "\u{01}": json += "\\u0001"
                default: json.unicodeScalars.append(scalar)
                }
            }
            return json + "\""
        }
        for length in 1...36 {
            for first in 0..<length {
                for second in first..<length {
                    var characters = (0..<length).map { $0 % 3 == 0 ? "é" : "a" }
                    characters[first] = "\""
                    characters[second] = second % 2 == 0 ? "\n" : "\u{01}"
                    let text = characters.joined()
                    XCTAssertEqual(written { $0.string(text) }, reference(text), "length \(length), \(first), \(second)")
                }
            }
        }
    }

    func testNonASCIIIsCopiedAsUTF8() {
        let text = "Grüße, 世界 🚀 e\u{301}"
        XCTAssertEqual(written { $0.string(text) }, "\"\(text)\"")
        XCTAssertEqual(written { $0.string("") }, "\"\"")
    }

    func testIntegers() {
        XCTAssertEqual(written { $0.integer(0) }, "0")
        XCTAssertEqual(written { $0.integer(-42) }, "-42")
        XCTAssertEqual(written { $0.integer(.max) }, "9223372036854775807")
        XCTAssertEqual(written { $0.integer(.min) }, "-9223372036854775808")
    }

    /// Every power of ten and its neighbours, where the digit count changes, and each power of two.
    func testUnsignedAtEveryDigitCountBoundary() {
        var values: [UInt64] = [0, 1, .max, .max - 1]
        var power: UInt64 = 1
        for _ in 0...19 {
            values += [power - 1, power, power + 1]
            power = power.multipliedReportingOverflow(by: 10).partialValue
        }
        values += (0..<64).flatMap { bit in [UInt64(1) << bit, (UInt64(1) << bit) - 1] }
        for value in values {
            XCTAssertEqual(written { $0.unsigned(value) }, String(value))
        }
    }

    func testDoublesRoundTripExactly() {
        var values: [Double] = [0, -0.0, 0.1, 0.75, 1, -1.5, 1e-300, .leastNonzeroMagnitude, .greatestFiniteMagnitude,
                                .leastNormalMagnitude, 123456789.123456789, 1e16, 3.141592653589793]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2000 { values.append(Double(bitPattern: generator.next() & ~(0x7FF << 52) | (UInt64.random(in: 1...2046) << 52))) }
        for value in values {
            let text = written { $0.double(value) }
            let parsed = (try? JSONSerialization.jsonObject(with: Data("[\(text)]".utf8))) as? [Double]
            XCTAssertNotNil(parsed, "\(text) is not JSON")
            XCTAssertEqual(Double(text)?.bitPattern, value.bitPattern, "\(text) does not round-trip \(value)")
        }
        XCTAssertEqual(written { $0.double(0.75) }, "0.75")
    }

    /// The fast form for short decimals must write what `description` writes (the shortest form).
    func testShortDecimalsMatchDescription() {
        var values: [Double] = [412.75, 200, -3, 0.1, 0.2 + 0.1, 0.0001, 1e-4 * 3, 999_999_999_999_999, 123_456.789_012_345, 1e14 + 0.5]
        for _ in 0..<20_000 {
            let digits = Int.random(in: 0...9)
            var power = 1.0
            for _ in 0..<digits { power *= 10 }
            values.append(Double(Int64.random(in: -10_000_000_000...10_000_000_000)) / power)
            values.append(Double.random(in: 1e-4...1e6))
        }
        for value in values where value.magnitude >= 1e-4 && value.magnitude < 1e15 {
            XCTAssertEqual(written { $0.double(value) }, value.description, "bits \(value.bitPattern)")
        }
    }

    func testTimestampsHaveMicrosecondPrecision() {
        XCTAssertEqual(written { $0.timestamp(Date(timeIntervalSince1970: 1_767_261_600.125)) }, "1767261600.125")
        XCTAssertEqual(written { $0.timestamp(Date(timeIntervalSince1970: 1_767_261_601.5)) }, "1767261601.5")
        XCTAssertEqual(written { $0.timestamp(Date(timeIntervalSince1970: 1_767_261_599.80123)) }, "1767261599.80123")
        XCTAssertEqual(written { $0.timestamp(Date(timeIntervalSince1970: 1_767_261_600.000001)) }, "1767261600.000001")
        XCTAssertEqual(written { $0.timestamp(Date(timeIntervalSince1970: 1.0000004)) }, "1")
        XCTAssertEqual(written { $0.timestamp(Date(timeIntervalSince1970: -1.25)) }, "-1.25")
        XCTAssertEqual(written { $0.timestamp(Date(timeIntervalSince1970: .nan)) }, "0")
    }

    func testHex() {
        XCTAssertEqual(written { $0.hex(0x9C1D_2E3F_4A5B_6C7D) }, "9c1d2e3f4a5b6c7d")
        XCTAssertEqual(written { $0.hex(1) }, "0000000000000001")
    }
}
