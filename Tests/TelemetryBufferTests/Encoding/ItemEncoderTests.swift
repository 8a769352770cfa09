import Foundation
import XCTest
@testable import TelemetryBuffer

final class ItemEncoderTests: XCTestCase {
    private let trace = TraceID("4f2b8e1c9a7d43e6b0c5d1e2f3a4b5c6")!

    private func encoded(defaults: Attributes = [:], _ encode: (ItemEncoder, inout JSONWriter) -> Void) -> String {
        let buffer = ByteBuffer(capacity: 64)
        var writer = JSONWriter(appendingTo: buffer)
        encode(ItemEncoder(logDefaults: defaults, spanDefaults: defaults), &writer)
        writer.finish()
        return String(decoding: buffer.toArray(), as: UTF8.self)
    }

    private func encoded(_ log: Log, defaults: Attributes = [:]) -> String {
        encoded(defaults: defaults) { $0.encode(log, into: &$1) }
    }

    private func encoded(_ span: Span) -> String { encoded { $0.encode(span, into: &$1) } }

    func testLogBytes() {
        let log = Log(level: .warn, body: "Disk \"cache\" near limit", traceID: trace,
                      spanID: SpanID("9c1d2e3f4a5b6c7d"), timestamp: Date(timeIntervalSince1970: 1_767_261_601.5),
                      attributes: ["cache.files": 29])
        XCTAssertEqual(encoded(log, defaults: ["sentry.sdk.name": "x"]), #"""
            {"timestamp":1767261601.5,"trace_id":"4f2b8e1c9a7d43e6b0c5d1e2f3a4b5c6","span_id":"9c1d2e3f4a5b6c7d","level":"warn","severity_number":13,"body":"Disk \"cache\" near limit","attributes":{"sentry.sdk.name":{"value":"x","type":"string"},"sentry.timestamp.sequence":{"value":0,"type":"integer"},"cache.files":{"value":29,"type":"integer"}}}
            """#)
    }

    func testEveryAttributeType() {
        let log = Log(level: .info, body: "", traceID: trace, timestamp: Date(timeIntervalSince1970: 1), attributes: [
            "s": "text", "i": -7, "d": 0.25, "b": true,
            "sa": .stringArray(["a", "b\n"]), "ia": .integerArray([1, -2]), "da": .doubleArray([0.5, 2]),
            "ba": .booleanArray([true, false]), "empty": .stringArray([]),
        ])
        XCTAssertEqual(encoded(log), #"""
            {"timestamp":1,"trace_id":"4f2b8e1c9a7d43e6b0c5d1e2f3a4b5c6","level":"info","severity_number":9,"body":"","attributes":{"sentry.timestamp.sequence":{"value":0,"type":"integer"},"s":{"value":"text","type":"string"},"i":{"value":-7,"type":"integer"},"d":{"value":0.25,"type":"double"},"b":{"value":true,"type":"boolean"},"sa":{"value":["a","b\n"],"type":"array"},"ia":{"value":[1,-2],"type":"array"},"da":{"value":[0.5,2.0],"type":"array"},"ba":{"value":[true,false],"type":"array"},"empty":{"value":[],"type":"array"}}}
            """#)
    }

    func testNonFiniteDoublesBecomeStrings() throws {
        let log = Log(level: .info, body: "", traceID: trace, timestamp: Date(timeIntervalSince1970: 1), attributes: [
            "nan": .double(.nan), "inf": .double(.infinity), "ninf": .double(-.infinity),
            "mixed": .doubleArray([1.5, .nan, -.infinity]),
        ])
        let json = encoded(log)
        XCTAssertTrue(json.contains(#""nan":{"value":"NaN","type":"string"}"#))
        XCTAssertTrue(json.contains(#""inf":{"value":"Infinity","type":"string"}"#))
        XCTAssertTrue(json.contains(#""ninf":{"value":"-Infinity","type":"string"}"#))
        XCTAssertTrue(json.contains(#""mixed":{"value":["1.5","NaN","-Infinity"],"type":"array"}"#))
        XCTAssertNoThrow(try JSONSerialization.jsonObject(with: Data(json.utf8)))
    }

    func testItemAttributesWinOverDefaults() throws {
        let log = Log(level: .info, body: "b", traceID: trace, attributes: ["sentry.environment": "staging"])
        let json = encoded(log, defaults: ["sentry.environment": "production", "sentry.sdk.name": "sdk"])
        let object = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
        let attributes = try XCTUnwrap(object["attributes"] as? [String: [String: Any]])
        XCTAssertEqual(attributes["sentry.environment"]?["value"] as? String, "staging")
        XCTAssertEqual(attributes["sentry.sdk.name"]?["value"] as? String, "sdk")
        XCTAssertEqual(json.components(separatedBy: "sentry.environment").count, 2, "the key appears once")
    }

    /// An item key as long as a default key but another one takes the defaults' one-copy path: the bytes
    /// are those of the key-by-key path, every default once, in order. One that is a default key (or the
    /// sequence's) replaces it.
    func testAKeyAsLongAsADefaultKeyReplacesNothing() throws {
        let defaults: Attributes = ["os.name": "Linux", "os.version": "6.1", "sentry.sdk.name": "sdk"]
        let at = Date(timeIntervalSince1970: 1)
        let sameLength = Log(level: .info, body: "", traceID: trace, timestamp: at, attributes: ["http.route": "/a"])
        XCTAssertEqual(encoded(sameLength, defaults: defaults), #"""
            {"timestamp":1,"trace_id":"4f2b8e1c9a7d43e6b0c5d1e2f3a4b5c6","level":"info","severity_number":9,"body":"","attributes":{"os.name":{"value":"Linux","type":"string"},"os.version":{"value":"6.1","type":"string"},"sentry.sdk.name":{"value":"sdk","type":"string"},"sentry.timestamp.sequence":{"value":0,"type":"integer"},"http.route":{"value":"/a","type":"string"}}}
            """#)
        let replacing = Log(level: .info, body: "", traceID: trace, timestamp: at,
                            attributes: ["os.version": "7.0", "sentry.timestamp.sequence": 9])
        XCTAssertEqual(encoded(replacing, defaults: defaults), #"""
            {"timestamp":1,"trace_id":"4f2b8e1c9a7d43e6b0c5d1e2f3a4b5c6","level":"info","severity_number":9,"body":"","attributes":{"os.name":{"value":"Linux","type":"string"},"sentry.sdk.name":{"value":"sdk","type":"string"},"os.version":{"value":"7.0","type":"string"},"sentry.timestamp.sequence":{"value":9,"type":"integer"}}}
            """#)
    }

    /// A span's own attribute with a key the encoder writes from a field (`sentry.op`) wins over the
    /// field, and leaves the defaults in their one copy, in order.
    func testASpansOwnReservedKeyLeavesTheDefaultsWhole() {
        let span = Span(traceID: trace, spanID: SpanID(1), name: "n", isSegment: false,
                        startTimestamp: Date(timeIntervalSince1970: 1), endTimestamp: Date(timeIntervalSince1970: 2),
                        attributes: ["sentry.op": "http.client", "server.address": "a"], op: "db")
        let json = encoded(defaults: ["os.name": "Linux", "sentry.sdk.name": "sdk"]) { $0.encode(span, into: &$1) }
        XCTAssertEqual(json, #"""
            {"trace_id":"4f2b8e1c9a7d43e6b0c5d1e2f3a4b5c6","span_id":"0000000000000001","name":"n","status":"ok","is_segment":false,"start_timestamp":1,"end_timestamp":2,"attributes":{"os.name":{"value":"Linux","type":"string"},"sentry.sdk.name":{"value":"sdk","type":"string"},"sentry.op":{"value":"http.client","type":"string"},"server.address":{"value":"a","type":"string"}}}
            """#)
    }

    func testVeryLargeAndUnicodeBodiesRoundTrip() throws {
        for body in [String(repeating: "ä\"\\\u{1}x", count: 200_000), String(repeating: "🚀", count: 1000)] {
            let json = encoded(Log(level: .fatal, body: body, traceID: trace))
            let object = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
            XCTAssertEqual(object["body"] as? String, body)
            XCTAssertEqual(object["severity_number"] as? Int, 21)
        }
    }

    func testSpanBytesAndTraceIDPrefix() throws {
        let span = Span(traceID: trace, spanID: SpanID("0a1b2c3d4e5f6a7b")!, parentSpanID: SpanID("9c1d2e3f4a5b6c7d"),
                        name: "GET /cart", status: .error, isSegment: false,
                        startTimestamp: Date(timeIntervalSince1970: 1_767_261_599.9),
                        endTimestamp: Date(timeIntervalSince1970: 1_767_261_600.35),
                        attributes: ["http.response.status_code": 503],
                        links: [.init(traceID: trace, spanID: SpanID(1), sampled: true, attributes: ["sentry.link.type": "previous_trace"])])
        let json = encoded(span)
        XCTAssertEqual(json, #"""
            {"trace_id":"4f2b8e1c9a7d43e6b0c5d1e2f3a4b5c6","parent_span_id":"9c1d2e3f4a5b6c7d","span_id":"0a1b2c3d4e5f6a7b","name":"GET /cart","status":"error","is_segment":false,"start_timestamp":1767261599.9,"end_timestamp":1767261600.35,"attributes":{"http.response.status_code":{"value":503,"type":"integer"}},"links":[{"trace_id":"4f2b8e1c9a7d43e6b0c5d1e2f3a4b5c6","span_id":"0000000000000001","sampled":true,"attributes":{"sentry.link.type":{"value":"previous_trace","type":"string"}}}]}
            """#)
        let bytes = Array(json.utf8)
        XCTAssertEqual(bytes.withUnsafeBytes { ItemEncoder.traceID(ofSpan: $0) }, trace)
        XCTAssertNil(Array("{\"span_id\":\"x\"}".utf8).withUnsafeBytes { ItemEncoder.traceID(ofSpan: $0) })
    }

    /// A span that ended before it started (the wall clock set back while it ran) ends when it started:
    /// Sentry takes an end before the start for an invalid span.
    func testASpanEndingBeforeItStartedEndsAtItsStart() throws {
        let span = Span(traceID: trace, spanID: SpanID(2), name: "clock set back", isSegment: true,
                        startTimestamp: Date(timeIntervalSince1970: 1_767_261_600.5), endTimestamp: Date(timeIntervalSince1970: 1_767_261_590))
        let json = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(encoded(span).utf8)) as? [String: Any])
        XCTAssertEqual(json["start_timestamp"] as? Double, 1_767_261_600.5)
        XCTAssertEqual(json["end_timestamp"] as? Double, 1_767_261_600.5)
    }

    func testIDsParseAndPrint() {
        XCTAssertEqual(TraceID("4F2B8E1C9A7D43E6B0C5D1E2F3A4B5C6")?.description, "4f2b8e1c9a7d43e6b0c5d1e2f3a4b5c6")
        XCTAssertNil(TraceID("4f2b"))
        XCTAssertNil(TraceID("zz2b8e1c9a7d43e6b0c5d1e2f3a4b5c6"))
        XCTAssertNil(SpanID("9c1d2e3f4a5b6c7"))
        XCTAssertEqual(SpanID("9c1d2e3f4a5b6c7d")?.value, 0x9C1D_2E3F_4A5B_6C7D)
        XCTAssertNotEqual(TraceID.random(), TraceID.random())
    }
}
