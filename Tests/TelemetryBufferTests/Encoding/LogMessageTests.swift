import Foundation
import XCTest
@testable import TelemetryBuffer

/// Logs written with string interpolation: the body has the values, `sentry.message.template` has `%s`
/// for each, and each value is a typed `sentry.message.parameter.<index or name>`; no template without
/// parameters.
final class LogMessageTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory.remove() }

    func testNoParametersMeansNoTemplate() throws {
        let log = Log.info("Cache warmed")
        XCTAssertEqual(log.body, "Cache warmed")
        XCTAssertEqual(log.traceID, TraceID.process)
        XCTAssertFalse(log.attributes.contains { $0.key.hasPrefix("sentry.message.") })
    }

    func testOneParameter() throws {
        let ms = 412
        let log = Log.info("Upload finished in \(ms) ms")
        XCTAssertEqual(log.body, "Upload finished in 412 ms")
        XCTAssertEqual(log.attributes["sentry.message.template"], .string("Upload finished in %s ms"))
        XCTAssertEqual(log.attributes["sentry.message.parameter.0"], .integer(412))
        XCTAssertEqual(log.level, .info)
    }

    func testEveryKindOfParameterKeepsItsTypeAndNamesWork() throws {
        struct Point: CustomStringConvertible { var description: String { "(1, 2)" } }
        let user = "ada", ratio = 0.75, cached = false, bytes: UInt8 = 7
        let log = Log.warn("\(user) got \(ratio, name: "ratio") at 100% (cached \(cached), \(bytes) B, point \(Point()))",
                           attributes: ["own": 1])
        XCTAssertEqual(log.body, "ada got 0.75 at 100% (cached false, 7 B, point (1, 2))")
        XCTAssertEqual(log.attributes["sentry.message.template"], .string("%s got %s at 100%% (cached %s, %s B, point %s)"))
        XCTAssertEqual(log.attributes["sentry.message.parameter.0"], .string("ada"))
        XCTAssertEqual(log.attributes["sentry.message.parameter.ratio"], .double(0.75))
        XCTAssertEqual(log.attributes["sentry.message.parameter.2"], .boolean(false))
        XCTAssertEqual(log.attributes["sentry.message.parameter.3"], .integer(7))
        XCTAssertEqual(log.attributes["sentry.message.parameter.4"], .string("(1, 2)"))
        XCTAssertEqual(log.attributes["own"], .integer(1))
        XCTAssertEqual(Array(log.attributes).first?.key, "own", "the log's own attributes first, then the template's")
    }

    func testOptionalsHugeIntegersFloatsAndNamesThatCollide() throws {
        let some: Int? = 412, none: Int? = nil, huge = UInt64.max, small: Float = 0.1
        let log = Log.info("\(some) \(none) \(huge) \(small) \(1, name: "n") \(2, name: "n") \(3, name: "1") \(4, name: "")")
        XCTAssertEqual(log.body, "412 nil 18446744073709551615 0.1 1 2 3 4")
        XCTAssertEqual(log.attributes["sentry.message.parameter.0"], .integer(412), "an optional is its value")
        XCTAssertEqual(log.attributes["sentry.message.parameter.1"], .string("nil"))
        XCTAssertEqual(log.attributes["sentry.message.parameter.2"], .string("18446744073709551615"), "beyond Int64: a string")
        XCTAssertEqual(log.attributes["sentry.message.parameter.3"], .double(0.1), "the value the Float shows")
        XCTAssertEqual(log.attributes["sentry.message.parameter.n"], .integer(1))
        XCTAssertEqual(log.attributes["sentry.message.parameter.5"], .integer(2), "a name used before: the position")
        XCTAssertEqual(log.attributes["sentry.message.parameter.6"], .integer(3), "a name of digits: the position")
        XCTAssertEqual(log.attributes["sentry.message.parameter.7"], .integer(4), "an empty name: the position")
        XCTAssertEqual(log.attributes.filter { $0.key.hasPrefix("sentry.message.parameter.") }.count, 8, "one key per value")
    }

    func testTheLogsOwnAttributesWin() throws {
        let ms = 5
        let log = Log.info("took \(ms) ms", attributes: ["sentry.message.template": "custom", "sentry.message.parameter.0": "own"])
        XCTAssertEqual(log.attributes["sentry.message.template"], .string("custom"))
        XCTAssertEqual(log.attributes["sentry.message.parameter.0"], .string("own"))
    }

    func testTemplatesAreStoredAsTheProtocolAsks() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory))
        defer { buffer.close() }
        let ms = 412
        buffer.add(log: .info("Upload finished in \(ms) ms", traceID: TraceID(high: 1, low: 2)))
        buffer.add(log: .error("Plain failure"))
        let stored = try storedAttributes(buffer)
        let templated = try XCTUnwrap(stored["Upload finished in 412 ms"])
        XCTAssertEqual(templated["sentry.message.template"]?["value"] as? String, "Upload finished in %s ms")
        XCTAssertEqual(templated["sentry.message.template"]?["type"] as? String, "string")
        XCTAssertEqual(templated["sentry.message.parameter.0"]?["value"] as? Int, 412)
        XCTAssertEqual(templated["sentry.message.parameter.0"]?["type"] as? String, "integer")
        let plain = try XCTUnwrap(stored["Plain failure"])
        XCTAssertFalse(plain.keys.contains { $0.hasPrefix("sentry.message.") }, "never a template without parameters")
    }
}
