import CoreMetrics
import Foundation
import Instrumentation
import TelemetryBuffer
@testable import TelemetryBufferMetrics
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

    /// A series' value is released once its last `Meter` is destroyed (a series per connection would keep
    /// every value ever seen otherwise): a new `Meter` of it starts from 0; one still alive keeps it.
    func testASeriesIsForgottenOnceItsLastMeterIsDestroyed() throws {
        let kept = Meter(label: "conn.bytes", dimensions: [("conn", "1")], factory: factory)
        kept.increment(by: 5)
        let twice = Meter(label: "conn.bytes", dimensions: [("conn", "1")], factory: factory)
        twice.destroy()
        twice.destroy()  // swift-metrics does not stop it: released once all the same
        kept.increment(by: 1)
        kept.destroy()
        Meter(label: "conn.bytes", dimensions: [("conn", "1")], factory: factory).increment(by: 1)
        XCTAssertEqual(try storedMetrics().map(summary), ["conn.bytes gauge 5.0", "conn.bytes gauge 6.0", "conn.bytes gauge 1.0"])
    }

    /// A series is its label and its dimensions as Sentry sees them: in any order, a repeated key's last
    /// value (the one its attributes keep).
    func testASeriesIgnoresTheDimensionsOrderAndRepeatedKeys() throws {
        Meter(label: "pool", dimensions: [("a", "1"), ("b", "2")], factory: factory).increment(by: 2)
        Meter(label: "pool", dimensions: [("b", "2"), ("a", "1")], factory: factory).increment(by: 3)
        Meter(label: "pool", dimensions: [("a", "0"), ("b", "2"), ("a", "1")], factory: factory).increment(by: 1)
        XCTAssertEqual(try storedMetrics().map(summary), ["pool gauge 2.0", "pool gauge 5.0", "pool gauge 6.0"])
    }

    /// As swift-metrics' own meter has it, an increment or decrement that is negative or zero is illegal and
    /// ignored; NaN or infinite ones, and a floating-point counter's, are dropped and counted as `invalid`.
    func testIllegalAmountsAreIgnoredAndNonFiniteOnesCounted() throws {
        let meter = Meter(label: "depth", factory: factory)
        meter.increment(by: 2)
        meter.increment(by: -5)
        meter.decrement(by: -5)
        meter.increment(by: 0)
        meter.decrement(by: Double.infinity)
        meter.decrement(by: 1)
        let counter = FloatingPointCounter(label: "load", factory: factory)
        for amount in [Double.nan, .infinity, -.infinity] { counter.increment(by: amount) }
        XCTAssertEqual(try storedMetrics().map(summary), ["depth gauge 2.0", "depth gauge 1.0"])
        XCTAssertEqual(buffer.stats().drops["invalid/trace_metric"], 4)
    }

    /// A `beforeSendMetric` hook that moves a meter of the same factory (sending one of its own) neither
    /// deadlocks (the series' lock was held while the value was sent) nor loses the values.
    func testAHookThatMovesAMeterDoesNotDeadlock() throws {
        let box = Locked<TelemetryBufferMetricsFactory?>(nil)
        var options = buffer.options
        options.cacheDirectory = folder.appendingPathComponent("hooked")
        options.beforeSendMetric = { metric in
            if metric.name == "outer" { Meter(label: "inner", factory: box.withLock { $0 }!).increment(by: 1) }
            return metric
        }
        let hooked = try TelemetryBuffer(options: options)
        defer { hooked.close() }
        box.withLock { $0 = TelemetryBufferMetricsFactory(buffer: hooked) }
        let done = DispatchSemaphore(value: 0)
        Thread {
            Meter(label: "outer", factory: box.withLock { $0 }!).increment(by: 1)
            done.signal()
        }.start()
        XCTAssertEqual(done.wait(timeout: .now() + 20), .success, "the meter's update never returned")
        hooked.flush()
        let names = try FileManager.default.contentsOfDirectory(atPath: hooked.envelopesDirectory.path).filter { $0.hasSuffix(".envelope") }
        let bodies = try names.map { String(decoding: try Data(contentsOf: hooked.envelopesDirectory.appendingPathComponent($0)), as: UTF8.self) }
        XCTAssertTrue(bodies.contains { $0.contains("\"name\":\"inner\"") } && bodies.contains { $0.contains("\"name\":\"outer\"") }, "\(bodies)")
    }

    /// A value sent while one is sent (a `beforeSendMetric` that counts the metrics it sees) is sent; one
    /// sent while sending that is not, and is counted dropped: the hook counted its own count without end
    /// (a stack overflow).
    func testAMetricMadeWhileSendingOneIsSentButNoDeeper() throws {
        let box = Locked<TelemetryBufferMetricsFactory?>(nil)
        var options = buffer.options
        options.cacheDirectory = folder.appendingPathComponent("counting")
        options.beforeSendMetric = { metric in
            Counter(label: "seen", factory: box.withLock { $0 }!).increment()
            return metric
        }
        buffer.close()
        buffer = try TelemetryBuffer(options: options)
        box.withLock { $0 = TelemetryBufferMetricsFactory(buffer: buffer) }
        Counter(label: "orders", factory: box.withLock { $0 }!).increment()
        XCTAssertEqual(try storedMetrics().map(summary).sorted(), ["orders counter 1", "seen counter 1"])
        XCTAssertEqual(buffer.stats().drops["internal_sdk_error/trace_metric"], 1)
    }

    /// A series' timestamps: each a microsecond after the last when the clock has not moved on, and the
    /// clock's again once it is set back by more than a second (before, the series went on from its last
    /// time, ahead of every other item's until the clock caught up).
    func testASeriesTimestampsGoOnAndFollowAClockSetBack() {
        let values = MeterValues()
        values.retain("s")
        let start = Date(timeIntervalSince1970: 1_767_261_600)
        func moved(at time: Date) -> Double { values.move("s", now: { time }) { $0 + 1 }.timestamp.timeIntervalSince1970 }
        XCTAssertEqual(moved(at: start), start.timeIntervalSince1970)
        XCTAssertEqual(moved(at: start), start.timeIntervalSince1970 + 0.000_001, accuracy: 1e-7)
        XCTAssertEqual(moved(at: start.addingTimeInterval(-0.5)), start.timeIntervalSince1970 + 0.000_002, accuracy: 1e-7,
                       "half a second back: a jitter, the series goes on")
        XCTAssertEqual(moved(at: start.addingTimeInterval(-3600)), start.timeIntervalSince1970 - 3600, "an hour back: followed")
    }

    /// A hook that waits for a lock of the app's while another thread, holding that lock, moves a meter of
    /// another series: the meter's update returns. Before, every meter of the factory waited for the one
    /// lock under which the hook ran: with the hook waiting for the app's lock, a deadlock.
    func testAMeterMovesWhileAHookWaitsForALockTheMovingThreadHolds() throws {
        let appLock = NSLock()
        let hookWaits = DispatchSemaphore(value: 0)
        var options = buffer.options
        options.cacheDirectory = folder.appendingPathComponent("hooked")
        options.beforeSendMetric = { metric in
            if metric.name == "b" {
                hookWaits.signal()
                appLock.lock()
                appLock.unlock()
            }
            return metric
        }
        let hooked = try TelemetryBuffer(options: options)
        defer { hooked.close() }
        let factory = TelemetryBufferMetricsFactory(buffer: hooked)
        let (a, b) = (Meter(label: "a", factory: factory), Meter(label: "b", factory: factory))
        appLock.lock()
        let hookDone = DispatchSemaphore(value: 0)
        Thread {
            b.set(1)
            hookDone.signal()
        }.start()
        XCTAssertEqual(hookWaits.wait(timeout: .now() + 20), .success, "the hook never ran")
        let moved = DispatchSemaphore(value: 0)
        Thread {
            a.set(2)  // as the thread holding the app's lock would
            moved.signal()
        }.start()
        // A deadline, not a timing: on the code before, this thread's update never returned.
        XCTAssertEqual(moved.wait(timeout: .now() + 20), .success, "a's update waited for b's hook")
        appLock.unlock()
        XCTAssertEqual(hookDone.wait(timeout: .now() + 20), .success)
    }

    /// A meter moved from many threads at once: every change is sent, with the value it reached, each
    /// value's timestamp later than the one before it (in whatever order they reach the buffer; fewer than
    /// one batch's worth, so that none can find the buffer full).
    func testAMeterMovedFromManyThreadsSendsEveryValueItReached() throws {
        let meter = Meter(label: "inflight", factory: factory)
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            for _ in 0..<12 { meter.increment(by: 1) }
        }
        let points = try storedMetrics().compactMap { metric -> (Double, Double)? in
            guard let time = (metric["timestamp"] as? NSNumber)?.doubleValue, let value = (metric["value"] as? NSNumber)?.doubleValue
            else { return nil }
            return (time, value)
        }.sorted { $0.0 < $1.0 }
        XCTAssertEqual(points.map(\.1), (1...96).map(Double.init), "each value reached, in the order of their timestamps")
        XCTAssertEqual(Set(points.map(\.0)).count, 96, "no two values of a series share a timestamp")
    }
}

/// A value shared with a closure the buffer calls.
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<Result>(_ body: (inout Value) -> Result) -> Result { lock.withLock { body(&value) } }
}
