import Instrumentation
import TelemetryBuffer
import TelemetryBufferContext
import XCTest

/// The task's active trace, as the integrations read it: the innermost one set, by `withValue` or by a
/// tracer's span context, seen by child tasks too.
final class ActiveTraceTests: XCTestCase {
    private let outer = ActiveTrace(traceID: TraceID(high: 1, low: 1))
    private let span = ActiveTrace(traceID: TraceID(high: 2, low: 2), spanID: SpanID(3))
    private let inner = ActiveTrace(traceID: TraceID(high: 4, low: 4), spanID: SpanID(5))

    /// A span's context as `TelemetryBufferTracer` makes it: the current one, carrying the span's trace.
    private func withSpanContext<Result>(_ trace: ActiveTrace, _ body: () -> Result) -> Result {
        var context = ServiceContext.current ?? .topLevel
        context.activeTrace = trace
        return ServiceContext.withValue(context, operation: body)
    }

    func testTheInnermostTraceWins() {
        XCTAssertNil(ActiveTrace.current)
        ActiveTrace.withValue(outer) {
            XCTAssertEqual(ActiveTrace.current, outer)
            withSpanContext(span) {
                XCTAssertEqual(ActiveTrace.current, span, "a span inside a trace set by hand")
                ActiveTrace.withValue(inner) { XCTAssertEqual(ActiveTrace.current, inner, "a trace set inside a span") }
                XCTAssertEqual(ActiveTrace.current, span)
            }
            ActiveTrace.withValue(nil) { XCTAssertNil(ActiveTrace.current, "cleared inside") }
            XCTAssertEqual(ActiveTrace.current, outer)
        }
        XCTAssertNil(ActiveTrace.current)
    }

    func testChildTasksSeeTheTraceAndOtherContextValuesStay() async {
        var context = ServiceContext.topLevel
        context[OtherKey.self] = "kept"
        await ServiceContext.withValue(context) {
            await ActiveTrace.withValue(span) {
                let seen = await Task { ActiveTrace.current }.value
                XCTAssertEqual(seen, span)
                XCTAssertEqual(ServiceContext.current?[OtherKey.self], "kept", "withValue copies the task's context")
            }
        }
    }

    private enum OtherKey: ServiceContextKey { typealias Value = String }
}
