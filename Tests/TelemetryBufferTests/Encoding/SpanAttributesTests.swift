import Foundation
import XCTest
@testable import TelemetryBuffer

/// The protocol's common span attributes from a span's fields: `sentry.op`, `sentry.segment.id` and
/// `sentry.segment.name` on every span of a segment, `sentry.segment.name.source` on segment spans (a MUST),
/// `thread.id` and `thread.name`; a span's own attribute of such a key wins.
final class SpanAttributesTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory.remove() }

    func testSegmentAndChildCarryTheCommonAttributes() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.release = "app@1"; $0.environment = "prod" })
        defer { buffer.close() }
        let trace = TraceID(high: 1, low: 2), segment = SpanID(0x9C1D_2E3F_4A5B_6C7D), start = Date()
        buffer.add(span: Span(traceID: trace, spanID: SpanID(0x0A1B_2C3D_4E5F_6A7B), parentSpanID: segment, name: "GET /cart",
                              isSegment: false, startTimestamp: start, endTimestamp: start, op: "http.client",
                              segmentID: segment, segmentName: "Checkout", threadID: 259, threadName: "main"))
        buffer.add(span: Span(traceID: trace, spanID: segment, name: "Checkout", isSegment: true,
                              startTimestamp: start, endTimestamp: start, op: "ui.load", source: .component))
        buffer.add(span: Span(traceID: trace, spanID: SpanID(7), name: "Plain segment", isSegment: true,
                              startTimestamp: start, endTimestamp: start))
        buffer.add(span: Span(traceID: trace, spanID: SpanID(8), name: "Plain child", isSegment: false,
                              startTimestamp: start, endTimestamp: start))
        let spans = try storedAttributes(buffer)
        let child = try XCTUnwrap(spans["GET /cart"]), root = try XCTUnwrap(spans["Checkout"])
        XCTAssertEqual(child["sentry.op"]?["value"] as? String, "http.client")
        XCTAssertEqual(child["sentry.segment.id"]?["value"] as? String, "9c1d2e3f4a5b6c7d")
        XCTAssertEqual(child["sentry.segment.name"]?["value"] as? String, "Checkout")
        XCTAssertNil(child["sentry.segment.name.source"], "only on segment spans")
        XCTAssertEqual(child["thread.id"]?["value"] as? Int, 259)
        XCTAssertEqual(child["thread.id"]?["type"] as? String, "integer")
        XCTAssertEqual(child["thread.name"]?["value"] as? String, "main")
        XCTAssertEqual(child["sentry.release"]?["value"] as? String, "app@1")
        XCTAssertEqual(child["sentry.environment"]?["value"] as? String, "prod")
        XCTAssertEqual(root["sentry.segment.id"]?["value"] as? String, "9c1d2e3f4a5b6c7d", "a segment is its own")
        XCTAssertEqual(root["sentry.segment.name"]?["value"] as? String, "Checkout")
        XCTAssertEqual(root["sentry.segment.name.source"]?["value"] as? String, "component")
        XCTAssertEqual(root["sentry.op"]?["value"] as? String, "ui.load")
        XCTAssertEqual(spans["Plain segment"]?["sentry.segment.name.source"]?["value"] as? String, "custom", "the MUST, by default")
        let plain = try XCTUnwrap(spans["Plain child"])
        XCTAssertFalse(plain.keys.contains { $0.hasPrefix("sentry.segment") || $0 == "sentry.op" || $0.hasPrefix("thread.") },
                       "nothing the app did not say")
    }

    /// A key set for every item (`setAttribute`) that a span's field also gives: the field wins, and the
    /// key is written once. Empty strings are left out; a thread ID beyond Int64 goes as a string.
    func testFieldsWinOverAttributesSetForEveryItem() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory))
        defer { buffer.close() }
        buffer.setAttribute("global", forKey: "sentry.op")
        buffer.setAttribute("global", forKey: "sentry.segment.name")
        buffer.setAttribute(1, forKey: "thread.id")
        let start = Date(), trace = TraceID(high: 1, low: 2)
        buffer.add(span: Span(traceID: trace, spanID: SpanID(5), name: "Root", isSegment: true, startTimestamp: start,
                              endTimestamp: start, op: "field", threadID: UInt64.max))
        buffer.add(span: Span(traceID: trace, spanID: SpanID(6), name: "Child", isSegment: false, startTimestamp: start,
                              endTimestamp: start, op: "", threadName: ""))
        let spans = try storedAttributes(buffer)
        XCTAssertEqual(spans["Root"]?["sentry.op"]?["value"] as? String, "field")
        XCTAssertEqual(spans["Root"]?["sentry.segment.name"]?["value"] as? String, "Root", "a segment's name is its own")
        XCTAssertEqual(spans["Root"]?["thread.id"]?["value"] as? String, String(UInt64.max))
        XCTAssertEqual(spans["Child"]?["sentry.op"]?["value"] as? String, "global", "an empty op is left out")
        XCTAssertEqual(spans["Child"]?["thread.id"]?["value"] as? Int, 1)
        XCTAssertNil(spans["Child"]?["thread.name"], "an empty name is left out")
        for payload in try walkEnvelopes(in: buffer.envelopesDirectory).flatMap(\.items).map({ String(decoding: $0.payload, as: UTF8.self) }) {
            for key in ["sentry.op", "sentry.segment.name", "thread.id"] {
                XCTAssertEqual(payload.components(separatedBy: "\"\(key)\"").count - 1, 2, "\(key): once per span")
            }
        }
    }

    func testTheSpansOwnAttributeWinsAndIsNotDuplicated() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory))
        defer { buffer.close() }
        let start = Date()
        buffer.add(span: Span(traceID: TraceID(high: 1, low: 2), spanID: SpanID(5), name: "Root", isSegment: true,
                              startTimestamp: start, endTimestamp: start, attributes: ["sentry.segment.name.source": "route", "sentry.op": "own"],
                              op: "field"))
        let root = try XCTUnwrap(try storedAttributes(buffer)["Root"])
        XCTAssertEqual(root["sentry.segment.name.source"]?["value"] as? String, "route")
        XCTAssertEqual(root["sentry.op"]?["value"] as? String, "own")
        let json = String(decoding: try XCTUnwrap(walkEnvelopes(in: buffer.envelopesDirectory).first?.items.first?.payload), as: UTF8.self)
        XCTAssertEqual(json.components(separatedBy: "\"sentry.op\"").count, 2, "the key appears once")
        XCTAssertEqual(json.components(separatedBy: "\"sentry.segment.name.source\"").count, 2)
    }
}
