import Foundation
import XCTest
@testable import TelemetryBuffer

/// Every attribute key the library writes in logs, spans and metrics is one Sentry's semantic conventions
/// registry knows, of the registry's type, and not deprecated (the app's own keys aside). Without
/// `sentry-conventions` the test skips (see `ConventionsRegistry.require()`).
final class ConventionsTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory.remove() }

    func testEveryAttributeKeyTheLibraryWritesIsInTheRegistry() throws {
        try ConventionsRegistry.require()
        let buffer = try TelemetryBuffer(options: testOptions(directory) {
            $0.environment = "conventions"
            $0.release = "r@1"
            $0.sendDefaultPii = true
        })
        buffer.setUser(id: "42", email: "a@example.com", username: "ann")
        buffer.setAttribute("checkout", forKey: "app.screen")
        let (count, ratio) = (3, 0.5)
        buffer.add(log: .info("Loaded \(count) items at \(ratio, name: "ratio")", attributes: ["cart.total": 12.5]))
        buffer.add(log: .test("plain"))
        let trace = TraceID.random(), segment = SpanID.random(), start = Date()
        buffer.add(span: Span(traceID: trace, spanID: segment, name: "Checkout", isSegment: true, startTimestamp: start,
                              endTimestamp: start, op: "ui.load", source: .component, threadID: 1, threadName: "main"))
        buffer.add(span: Span(traceID: trace, spanID: SpanID.random(), parentSpanID: segment, name: "GET /cart",
                              isSegment: false, startTimestamp: start, endTimestamp: start, op: "http.client",
                              segmentID: segment, segmentName: "Checkout", threadID: 2, threadName: "worker"))
        buffer.add(metric: .distribution("api.response_time", value: 12.5, unit: "millisecond", attributes: ["route": "/cart"]))
        buffer.close()
        let (seen, problems) = try ConventionsRegistry.check(buffer.envelopesDirectory, ignoring: ["app.screen", "cart.total", "route"])
        for key in ["sentry.sdk.name", "sentry.timestamp.sequence", "sentry.message.template", "sentry.message.parameter.0",
                    "sentry.segment.name.source", "sentry.op", "thread.id", "user.id", "os.name"] {
            XCTAssertNotNil(seen[key], "\(key) was written: \(seen.keys.sorted())")
        }
        XCTAssertEqual(problems, [], "seen: \(seen)")
    }
}
