import Foundation
import XCTest
@testable import TelemetryBuffer

/// Trace metrics, the third signal: encoded as the metrics protocol says, batched at most
/// `maxMetricsPerBatch` to a `trace_metric` item without a `trace` header, counted in client reports as
/// `trace_metric` and `trace_metric_byte`, numbered continuously, and recovered from a list like logs.
final class MetricsTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory.remove() }

    private func metricItems(_ folder: URL) throws -> [WalkedEnvelope.Item] {
        try walkEnvelopes(in: folder).flatMap(\.items).filter { $0.type == "trace_metric" }
    }

    func testMetricsGoAsTraceMetricItemsWithTheirFieldsAndDefaults() throws {
        for strategy in Options.Strategy.allCases {
            let buffer = try TelemetryBuffer(options: testOptions(directory) {
                $0.strategy = strategy
                $0.environment = "production"
            })
            let trace = TraceID(high: 7, low: 8)
            XCTAssertTrue(buffer.add(metric: .counter("checkout.done", attributes: ["route": "/pay"], traceID: trace)))
            XCTAssertTrue(buffer.add(metric: .gauge("queue.depth", value: 12.5, traceID: trace)))
            XCTAssertTrue(buffer.add(metric: Metric(name: "api.response_time", kind: .distribution, value: .double(412.75),
                                                    unit: "millisecond", traceID: trace, spanID: SpanID(0xABC))))
            buffer.close()
            let envelopes = try walkEnvelopes(in: buffer.envelopesDirectory)
            XCTAssertEqual(envelopes.count, 1, "\(strategy)")
            let envelope = try XCTUnwrap(envelopes.first)
            XCTAssertNil(envelope.header["trace"], "\(strategy): metrics of any traces, no trace header")
            let item = try XCTUnwrap(envelope.items.first)
            XCTAssertEqual(item.type, "trace_metric")
            XCTAssertEqual(item.header["item_count"] as? Int, 3)
            XCTAssertEqual(item.header["content_type"] as? String, "application/vnd.sentry.items.trace-metric+json")
            let metrics = item.elements
            XCTAssertEqual(metrics.compactMap { $0["name"] as? String }, ["checkout.done", "queue.depth", "api.response_time"])
            XCTAssertEqual(metrics.compactMap { $0["type"] as? String }, ["counter", "gauge", "distribution"])
            XCTAssertEqual(metrics[0]["value"] as? Int, 1)
            XCTAssertEqual(metrics[1]["value"] as? Double, 12.5)
            XCTAssertEqual(metrics[2]["unit"] as? String, "millisecond")
            XCTAssertEqual(metrics[2]["span_id"] as? String, "0000000000000abc")
            XCTAssertNil(metrics[0]["unit"])
            XCTAssertEqual(metrics.compactMap { $0["trace_id"] as? String }, Array(repeating: trace.description, count: 3))
            let attributes = metrics.map { $0["attributes"] as? [String: [String: Any]] ?? [:] }
            XCTAssertEqual(attributes.compactMap { $0["sentry.timestamp.sequence"]?["value"] as? Int }, [0, 1, 2],
                           "\(strategy): numbered continuously")
            XCTAssertEqual(attributes[0]["route"]?["value"] as? String, "/pay")
            XCTAssertEqual(attributes[0]["sentry.environment"]?["value"] as? String, "production")
            XCTAssertNotNil(attributes[0]["sentry.sdk.name"])
            XCTAssertNil(attributes[0]["os.name"], "the metrics protocol's defaults only")
            try FileManager.default.removeItem(at: buffer.directory)
        }
    }

    /// At most `maxMetricsPerBatch` to an envelope; reaching it forwards the batch.
    func testMetricsGoAtMostTheLimitToAnEnvelope() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.maxMetricsPerBatch = 40 })
        for index in 0..<100 { XCTAssertTrue(buffer.add(metric: .counter("c\(index)"))) }
        buffer.close()
        let items = try metricItems(buffer.envelopesDirectory)
        XCTAssertTrue(items.allSatisfy { $0.elements.count <= 40 }, "\(items.map(\.elements.count))")
        XCTAssertEqual(items.flatMap(\.elements).compactMap { $0["name"] as? String }, (0..<100).map { "c\($0)" })
        XCTAssertThrowsError(try TelemetryBuffer(options: testOptions(directory) { $0.maxMetricsPerBatch = 101 }))
    }

    /// Drops are counted as `trace_metric` with their `trace_metric_byte`s: a value JSON cannot carry
    /// (`invalid`), one `beforeSendMetric` drops (`before_send`).
    func testEveryDroppedMetricIsCountedWithItsBytes() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory) {
            $0.beforeSendMetric = { $0.name == "secret" ? nil : $0 }
        })
        defer { buffer.close() }
        XCTAssertFalse(buffer.add(metric: .gauge("nan", value: .nan)))
        XCTAssertFalse(buffer.add(metric: .distribution("infinite", value: -.infinity)))
        XCTAssertFalse(buffer.add(metric: .counter("secret")))
        XCTAssertTrue(buffer.add(metric: .counter("kept")))
        let report = try XCTUnwrap(buffer.pendingDiscards)
        XCTAssertEqual(report.quantity(.invalid, .traceMetric), 2)
        XCTAssertGreaterThan(report.quantity(.invalid, .traceMetricByte), 100, "what they would have taken, with a finite value")
        XCTAssertEqual(report.quantity(.beforeSend, .traceMetric), 1)
        XCTAssertGreaterThan(report.quantity(.beforeSend, .traceMetricByte), 50)
    }

    /// With the previous batch still being written (a transport held), metrics that find no room are
    /// refused and counted as `buffer_overflow` (`trace_metric` and `trace_metric_byte`), with each strategy;
    /// every one accepted arrives.
    func testOverflowingMetricsAreCountedAndTheAcceptedOnesArrive() throws {
        for strategy in Options.Strategy.allCases {
            let folder = try TemporaryDirectory()
            defer { folder.remove() }
            let transport = try GatedTransport(directory: folder.url.appendingPathComponent("out"))
            let buffer = try TelemetryBuffer(options: testOptions(folder) {
                $0.strategy = strategy
                $0.transport = transport
                $0.maxBatchBytes = 4096
            })
            XCTAssertTrue(buffer.add(metric: .counter("first")))
            buffer.didEnterBackground()
            transport.waitUntilHeld()
            var accepted = ["first"], refused = 0
            for index in 0..<100 {
                let name = "fill.\(index)." + String(repeating: "f", count: 300)
                if buffer.add(metric: .counter(name)) { accepted.append(name) } else { refused += 1 }
            }
            XCTAssertGreaterThan(refused, 0, strategy.rawValue)
            XCTAssertEqual(buffer.pendingDiscards?.quantity(.bufferOverflow, .traceMetric), refused, strategy.rawValue)
            XCTAssertGreaterThan(buffer.pendingDiscards?.quantity(.bufferOverflow, .traceMetricByte) ?? 0, refused * 300, strategy.rawValue)
            transport.open()
            buffer.close()
            XCTAssertEqual(try metricItems(transport.inner.directory).flatMap(\.elements).compactMap { $0["name"] as? String }, accepted,
                           strategy.rawValue)
        }
    }

    /// Metrics a list holds when the process dies are recovered as logs are: each once, in a
    /// `trace_metric` envelope of their own, beside the logs.
    func testMetricsInALeftListAreRecoveredOnce() throws {
        let folder = try directory.makeBufferFolder()
        let list = RecordRegion(mapping: try MappedFile(path: folder + "/crash-safe-list-1", size: 8192 + 32), kind: .crashSafeList)
        let encoder = ItemEncoder(logDefaults: [:], spanDefaults: [:])
        for (index, name) in ["m0", "m1"].enumerated() {
            let scratch = ByteBuffer(capacity: 512)
            var writer = JSONWriter(appendingTo: scratch)
            encoder.encode(Metric.counter(name), into: &writer)
            writer.finish()
            let offset = list.committedRecordBytes(lane: 0)
            list.write(category: .traceMetric, id: ItemID(nonce: 3, sequence: UInt64(index)), payload: scratch.bytes,
                       payloadCRC: CRC32C.checksum(scratch.bytes), lane: 0, at: offset)
            list.commit(lane: 0, from: offset, to: offset + RecordFraming.recordHeaderSize + scratch.bytes.count)
        }
        appendLogs(["l0"], to: list, nonce: 3, from: 2)
        let buffer = try TelemetryBuffer(options: testOptions(directory))
        XCTAssertEqual(buffer.recovery.items, 3)
        buffer.close()
        XCTAssertEqual(try metricItems(buffer.envelopesDirectory).flatMap(\.elements).compactMap { $0["name"] as? String }, ["m0", "m1"])
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["l0"])
    }
}
