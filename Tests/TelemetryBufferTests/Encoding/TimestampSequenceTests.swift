import Foundation
import XCTest
@testable import TelemetryBuffer

/// `sentry.timestamp.sequence` on every log: 0 at start, +1 per log, back to 0 whenever the millisecond of
/// the timestamp changes; one buffer's numbers are its own; an app's own attribute of that name wins.
final class TimestampSequenceTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory.remove() }

    /// The logs' sequence numbers, by body, from the envelopes stored so far.
    private func sequences(_ buffer: TelemetryBuffer) throws -> [String: Int] {
        buffer.flush()
        var result: [String: Int] = [:]
        for log in try walkEnvelopes(in: buffer.envelopesDirectory).flatMap(\.elements) {
            let attributes = try XCTUnwrap(log["attributes"] as? [String: [String: Any]])
            let sequence = try XCTUnwrap(attributes["sentry.timestamp.sequence"])
            XCTAssertEqual(sequence["type"] as? String, "integer")
            result[try XCTUnwrap(log["body"] as? String)] = try XCTUnwrap(sequence["value"] as? Int)
        }
        return result
    }

    private static func log(_ body: String, at seconds: Double, attributes: Attributes = [:]) -> Log {
        Log(level: .info, body: body, traceID: TraceID(high: 1, low: 2), timestamp: Date(timeIntervalSince1970: seconds),
            attributes: attributes)
    }

    func testFrozenClockCountsUpAndANewMillisecondStartsAgain() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory))
        defer { buffer.close() }
        let frozen = 1_767_261_600.125
        for index in 0..<4 { buffer.add(log: Self.log("frozen \(index)", at: frozen)) }
        // Within the same millisecond, sub-millisecond steps keep counting.
        buffer.add(log: Self.log("same millisecond", at: frozen + 0.0004))
        buffer.add(log: Self.log("next millisecond", at: frozen + 0.001))
        buffer.add(log: Self.log("next millisecond again", at: frozen + 0.0012))
        // Back to an earlier millisecond: a change too, so 0 again.
        buffer.add(log: Self.log("back", at: frozen))
        // Before 1970 the millisecond still counts.
        buffer.add(log: Self.log("old", at: -5))
        buffer.add(log: Self.log("old again", at: -5))
        buffer.add(log: Self.log("older", at: -6))
        // The millisecond of the timestamp as sent (rounded to the microsecond): x.0009997 goes out as x.001.
        buffer.add(log: Self.log("rounded up", at: 100.000_999_7))
        buffer.add(log: Self.log("same as sent", at: 100.001))
        XCTAssertEqual(try sequences(buffer), [
            "frozen 0": 0, "frozen 1": 1, "frozen 2": 2, "frozen 3": 3, "same millisecond": 4,
            "next millisecond": 0, "next millisecond again": 1, "back": 0, "old": 0, "old again": 1, "older": 0,
            "rounded up": 0, "same as sent": 1,
        ])
    }

    func testEveryBufferStartsAtZero() throws {
        let first = try TelemetryBuffer(options: testOptions(directory))
        first.add(log: Self.log("first 0", at: 10))
        first.add(log: Self.log("first 1", at: 10))
        XCTAssertEqual(try sequences(first), ["first 0": 0, "first 1": 1])
        first.close()
        let second = try TelemetryBuffer(options: testOptions(directory))
        defer { second.close() }
        second.add(log: Self.log("second 0", at: 10))
        XCTAssertEqual(try sequences(second)["second 0"], 0)
    }

    func testThreadsAddingInTheSameMillisecondGetDistinctNumbers() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.flushInterval = 30 })
        defer { buffer.close() }
        DispatchQueue.concurrentPerform(iterations: 4) { thread in
            for index in 0..<20 { XCTAssertTrue(buffer.add(log: Self.log("\(thread).\(index)", at: 42))) }
        }
        XCTAssertEqual(try sequences(buffer).values.sorted(), Array(0..<80))
    }

    func testTheAppsOwnAttributeWinsAndIsNotDuplicated() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory))
        defer { buffer.close() }
        buffer.add(log: Self.log("own", at: 7, attributes: ["sentry.timestamp.sequence": 99]))
        XCTAssertEqual(try sequences(buffer), ["own": 99])
        let payload = try XCTUnwrap(walkEnvelopes(in: buffer.envelopesDirectory).first?.items.first?.payload)
        XCTAssertEqual(String(decoding: payload, as: UTF8.self).components(separatedBy: "sentry.timestamp.sequence").count, 2,
                       "the key appears once")
    }
}
