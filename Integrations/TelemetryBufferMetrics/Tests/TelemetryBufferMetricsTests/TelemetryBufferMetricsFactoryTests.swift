import CoreMetrics
import Foundation
import Instrumentation
import TelemetryBuffer
import TelemetryBufferMetrics
import XCTest

/// The factory against a real buffer in a temporary folder; what it stored is read back from the envelope
/// files, each walked by its framing (header line, item header with `length`, payload).
final class TelemetryBufferMetricsFactoryTests: XCTestCase {
    private var folder: URL!
    private var buffer: TelemetryBuffer!
    private var factory: TelemetryBufferMetricsFactory!

    override func setUpWithError() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("tb-metrics-\(UUID().uuidString)")
        var options = Options(dsn: "https://key@o1.ingest.example.com/1")
        options.cacheDirectory = folder
        options.upload = false
        buffer = try TelemetryBuffer(options: options)
        factory = TelemetryBufferMetricsFactory(buffer: buffer)
    }

    override func tearDown() {
        buffer.close()
        try? FileManager.default.removeItem(at: folder)
    }

    /// Every metric stored so far, as JSON objects, oldest first.
    private func storedMetrics() throws -> [[String: Any]] {
        buffer.flush()
        let names = try FileManager.default.contentsOfDirectory(atPath: buffer.envelopesDirectory.path)
            .filter { $0.hasSuffix(".envelope") }.sorted()
        return try names.flatMap { name -> [[String: Any]] in
            let bytes = try Data(contentsOf: buffer.envelopesDirectory.appendingPathComponent(name))
            var offset = try XCTUnwrap(bytes.firstIndex(of: 0x0A)) + 1
            var metrics: [[String: Any]] = []
            while offset < bytes.count {
                let headerEnd = try XCTUnwrap(bytes[offset...].firstIndex(of: 0x0A))
                let header = try XCTUnwrap(JSONSerialization.jsonObject(with: bytes[offset..<headerEnd]) as? [String: Any])
                let length = try XCTUnwrap(header["length"] as? Int)
                let payload = bytes[(headerEnd + 1)..<(headerEnd + 1 + length)]
                let items = try XCTUnwrap(JSONSerialization.jsonObject(with: payload) as? [String: Any])["items"] as? [[String: Any]]
                if header["type"] as? String == "trace_metric" { metrics += items ?? [] }
                offset = headerEnd + 1 + length + 1
            }
            return metrics
        }
    }

    /// A metric's name, type, value and unit, for comparing.
    private func summary(_ metric: [String: Any]) -> String {
        let value = (metric["value"] as? NSNumber).map { "\($0)" } ?? "?"
        return "\(metric["name"] ?? "?") \(metric["type"] ?? "?") \(value)" + ((metric["unit"] as? String).map { " " + $0 } ?? "")
    }

    func testEachKindOfMetricBecomesItsTraceMetric() throws {
        Counter(label: "orders.placed", factory: factory).increment(by: 3)
        FloatingPointCounter(label: "revenue", factory: factory).increment(by: 2.5)
        let meter = Meter(label: "queue.depth", factory: factory)
        meter.set(5)
        meter.increment(by: 2)
        meter.decrement(by: 4)
        Recorder(label: "payload.size", factory: factory).record(512)
        Gauge(label: "battery", factory: factory).record(0.75)
        Timer(label: "db.query", factory: factory).recordNanoseconds(1_500_000)
        Timer(label: "http.request", preferredDisplayUnit: .milliseconds, factory: factory).recordNanoseconds(2_500_000)
        XCTAssertEqual(try storedMetrics().map(summary), [
            "orders.placed counter 3", "revenue counter 2.5",
            "queue.depth gauge 5.0", "queue.depth gauge 7.0", "queue.depth gauge 3.0",
            "payload.size distribution 512", "battery gauge 0.75",
            "db.query distribution 1500000 nanosecond", "http.request distribution 2.5 millisecond",
        ])
    }

    /// Dimensions become string attributes. A value's trace: the task's `ActiveTrace` (here from its
    /// `ServiceContext`, where a tracer keeps its active span), else the provider's, else the process's.
    func testDimensionsAreAttributesAndTheActiveTraceIsEachValues() throws {
        let trace = TraceID.random(), span = SpanID.random()
        let traced = TelemetryBufferMetricsFactory(buffer: buffer) { ActiveTrace(traceID: trace, spanID: span) }
        Counter(label: "checkout", dimensions: [("region", "eu"), ("plan", "pro")], factory: traced).increment()
        Counter(label: "untraced", factory: factory).increment()
        var context = ServiceContext.topLevel
        let active = ActiveTrace(traceID: .random(), spanID: .random())
        context.activeTrace = active
        ServiceContext.withValue(context) { Counter(label: "in a span", factory: traced).increment() }
        let metrics = try storedMetrics()
        XCTAssertEqual(metrics.count, 3)
        let attributes = try XCTUnwrap(metrics[0]["attributes"] as? [String: [String: Any]])
        XCTAssertEqual(attributes["region"]?["value"] as? String, "eu")
        XCTAssertEqual(attributes["plan"]?["type"] as? String, "string")
        XCTAssertEqual(metrics[0]["trace_id"] as? String, trace.description)
        XCTAssertEqual(metrics[0]["span_id"] as? String, span.description)
        XCTAssertEqual(metrics[1]["trace_id"] as? String, TraceID.process.description)
        XCTAssertNil(metrics[1]["span_id"])
        XCTAssertEqual(metrics[2]["trace_id"] as? String, active.traceID.description)
        XCTAssertEqual(metrics[2]["span_id"] as? String, active.spanID?.description)
    }

    /// A value JSON cannot carry is dropped and counted by the buffer as `invalid`; the rest go on.
    func testANonFiniteValueIsDroppedAndCounted() throws {
        let recorder = Recorder(label: "ratio", factory: factory)
        recorder.record(Double.nan)
        recorder.record(0.5)
        XCTAssertEqual(try storedMetrics().map(summary), ["ratio distribution 0.5"])
        XCTAssertEqual(buffer.stats().drops["invalid/trace_metric"], 1)
    }

    /// Every `Meter` of a series (label and dimensions) moves one value, as Sentry keeps one gauge per
    /// series; another series has its own. A step to NaN is dropped (counted) and leaves the value as it was.
    func testMetersOfOneSeriesShareTheirValue() throws {
        Meter(label: "connections", dimensions: [("pool", "a")], factory: factory).increment(by: 2)
        Meter(label: "connections", dimensions: [("pool", "a")], factory: factory).decrement(by: 1)
        Meter(label: "connections", dimensions: [("pool", "b")], factory: factory).increment(by: 5)
        let meter = Meter(label: "connections", dimensions: [("pool", "a")], factory: factory)
        meter.increment(by: Double.nan)
        meter.increment(by: 1)
        XCTAssertEqual(try storedMetrics().map(summary), [
            "connections gauge 2.0", "connections gauge 1.0", "connections gauge 5.0", "connections gauge 2.0",
        ])
        XCTAssertEqual(buffer.stats().drops["invalid/trace_metric"], 1)
    }

    /// A counter only goes up: an increment of 0 or less is not sent.
    func testACountersIncrementOfZeroOrLessIsNotSent() throws {
        let counter = Counter(label: "jobs", factory: factory)
        counter.increment(by: 0)
        counter.increment(by: -3)
        counter.increment(by: 2)
        let floating = FloatingPointCounter(label: "load", factory: factory)
        floating.increment(by: -0.5)
        floating.increment(by: 0.25)
        XCTAssertEqual(try storedMetrics().map(summary), ["jobs counter 2", "load counter 0.25"])
    }

    /// A meter moved from many threads at once: every change is sent, with the value it reached, in the
    /// order reached (fewer than one batch's worth, so that none can find the buffer full).
    func testAMeterMovedFromManyThreadsSendsEveryValueItReached() throws {
        let meter = Meter(label: "inflight", factory: factory)
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            for _ in 0..<12 { meter.increment(by: 1) }
        }
        let values = try storedMetrics().compactMap { ($0["value"] as? NSNumber)?.doubleValue }
        XCTAssertEqual(values, (1...96).map(Double.init), "each value reached, in the order reached")
    }
}
