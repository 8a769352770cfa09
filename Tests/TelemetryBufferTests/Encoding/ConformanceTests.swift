import Foundation
import XCTest
@testable import TelemetryBuffer

/// Every kind of envelope the library writes, stored and as sent (with `sent_at` and a client report), is
/// parsed by the official Sentry Python SDK (`sentry_sdk.envelope.Envelope.deserialize_from`, sentry-sdk
/// 2.75.0) and by the strict byte walk. Without sentry-sdk the test skips (see `OfficialParser.require()`).
final class ConformanceTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory.remove() }

    func testTheOfficialParserAcceptsEveryKindOfEnvelope() throws {
        try OfficialParser.require()
        let buffer = try TelemetryBuffer(options: testOptions(directory) {
            $0.maxBatchBytes = 8192
            $0.maxLogsPerBatch = 7
            $0.maxSpansPerBatch = 4
            $0.environment = "conformance"
            $0.release = "r@1"
        })
        // A drop, so that the sent forms carry a client report.
        buffer.add(log: .test(String(repeating: "x", count: 9000)))
        let tricky = "quote \" backslash \\ newline \n tab \t nul \u{0} bell \u{7} unicode Grüße 🚀 \u{2028}"
        for index in 0..<20 {
            if index % 5 == 0 { buffer.flush() }  // small regions: keep this burst below overflow
            buffer.add(log: .test("\(tricky) \(index)", attributes: [
                "s": .string(tricky), "i": .integer(Int64(index)), "d": .double(Double(index) / 3),
                "b": .boolean(index % 2 == 0), "nan": .double(.nan), "arr": .stringArray([tricky, ""]),
            ]))
        }
        // Templated logs: a numbered and a named parameter of every type.
        let (count, ratio, flag) = (3, 0.5, true)
        buffer.add(log: .info("\(tricky) \(count) \(ratio, name: "ratio") \(flag) 100%"))
        // One trace with the sampling context its head froze (escapes in a value), the others the buffer's own.
        buffer.setSamplingContext(["public_key": "caller", "sample_rand": "0.5", "transaction": tricky], forTrace: TraceID(high: 2, low: 7))
        for trace in 1...3 {
            buffer.flush()
            for index in 0..<6 {
                var span = Span.test("span \(trace).\(index) \(tricky)", trace: TraceID(high: UInt64(trace), low: 7))
                // The common span attributes from the span's fields, with escapes in every string.
                (span.isSegment, span.op, span.segmentName, span.threadID, span.threadName) = (index == 0, tricky, tricky, 3, tricky)
                span.segmentID = SpanID(9)
                buffer.add(span: span)
            }
        }
        let report = try XCTUnwrap(buffer.pendingDiscards)
        buffer.close()

        // The wire forms the uploader sends: `sent_at` in the header, the client report as one more item.
        let wire = directory.url.appendingPathComponent("wire")
        try FileManager.default.createDirectory(at: wire, withIntermediateDirectories: true)
        for envelope in try walkEnvelopes(in: buffer.envelopesDirectory) {
            try Data(Uploader.body(envelope.bytes, sentAt: Date(), report: report)).write(to: wire.appendingPathComponent(envelope.name))
        }
        let stored = try walkEnvelopes(in: buffer.envelopesDirectory), sent = try walkEnvelopes(in: wire)
        XCTAssertEqual(stored.flatMap(\.elements).count, 20 + 1 + 18)
        XCTAssertEqual(Set(stored.flatMap { $0.items.map(\.type) }), ["log", "span"])
        let logs = stored.flatMap { $0.items.filter { $0.type == "log" }.flatMap(\.elements) }
        XCTAssertTrue(logs.allSatisfy {
            ($0["attributes"] as? [String: [String: Any]])?["sentry.timestamp.sequence"]?["type"] as? String == "integer"
        }, "every log carries sentry.timestamp.sequence")
        XCTAssertTrue(sent.allSatisfy { $0.items.last?.type == "client_report" && $0.discards["invalid/log_item"] == 1 })
        XCTAssertTrue(sent.allSatisfy { $0.header["sent_at"] is String })
        let summaries = try OfficialParser.parse(buffer.envelopesDirectory, wire)
        XCTAssertEqual(summaries.count, stored.count + sent.count)
        for (folder, envelopes) in [(buffer.envelopesDirectory, stored), (wire, sent)] {
            for envelope in envelopes {
                let summary = try XCTUnwrap(summaries[folder.appendingPathComponent(envelope.name).path])
                try assertAgree(summary, envelope)
            }
        }
    }

    /// What the Python parser saw equals what the strict walk saw.
    func assertAgree(_ summary: [String: Any], _ envelope: WalkedEnvelope, file: StaticString = #filePath, line: UInt = #line) throws {
        XCTAssertEqual(summary["trailing_bytes"] as? Int, 0, file: file, line: line)
        XCTAssertEqual(summary["headers"] as? [String], envelope.header.keys.sorted(), file: file, line: line)
        let items = try XCTUnwrap(summary["items"] as? [[String: Any]], file: file, line: line)
        XCTAssertEqual(items.map { $0["type"] as? String }, envelope.items.map(\.type), file: file, line: line)
        for (parsed, walked) in zip(items, envelope.items) {
            XCTAssertEqual(parsed["payload_bytes"] as? Int, walked.payload.count, file: file, line: line)
            XCTAssertEqual(parsed["length"] as? Int, walked.payload.count, file: file, line: line)
            if walked.type != "client_report" {
                XCTAssertEqual(parsed["elements"] as? Int, parsed["item_count"] as? Int, "item_count = items.length", file: file, line: line)
            }
        }
        if let trace = summary["trace_id"] as? String {
            let spans = envelope.items.flatMap(\.elements)
            XCTAssertTrue(spans.allSatisfy { $0["trace_id"] as? String == trace }, "one trace per envelope", file: file, line: line)
        }
    }
}
