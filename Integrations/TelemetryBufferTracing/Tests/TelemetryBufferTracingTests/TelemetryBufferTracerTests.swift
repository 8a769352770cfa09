import Foundation
import TelemetryBuffer
import TelemetryBufferContext
import TelemetryBufferTracing
import Tracing
import XCTest

/// HTTP headers as a dictionary, for inject and extract.
struct HeaderInjector: Injector {
    func inject(_ value: String, forKey key: String, into carrier: inout [String: String]) { carrier[key] = value }
}

struct HeaderExtractor: Extractor {
    func extract(key: String, from carrier: [String: String]) -> String? { carrier[key] }
}

/// The tracer against a real buffer in a temporary folder; its spans are read back from the envelope files.
final class TelemetryBufferTracerTests: XCTestCase {
    private var folder: URL!
    private var buffer: TelemetryBuffer!

    override func setUpWithError() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("tb-tracing-\(UUID().uuidString)")
        var options = Options(dsn: "https://abc123@o1.ingest.example.com/1")
        options.cacheDirectory = folder
        options.upload = false
        options.release = "app@2"
        options.environment = "test"
        buffer = try TelemetryBuffer(options: options)
    }

    override func tearDown() {
        buffer.close()
        try? FileManager.default.removeItem(at: folder)
    }

    private func tracer(rate: Double = 1) -> TelemetryBufferTracer {
        var options = TelemetryBufferTracer.Options()
        options.tracesSampleRate = rate
        return TelemetryBufferTracer(buffer: buffer, options: options)
    }

    /// Every span stored so far, by name, with the `trace` header of its envelope.
    private func storedSpans() throws -> [String: (span: [String: Any], trace: [String: Any]?)] {
        buffer.flush()
        var spans: [String: (span: [String: Any], trace: [String: Any]?)] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: buffer.envelopesDirectory.path) where name.hasSuffix(".envelope") {
            let bytes = try Data(contentsOf: buffer.envelopesDirectory.appendingPathComponent(name))
            let headerEnd = try XCTUnwrap(bytes.firstIndex(of: 0x0A))
            let envelopeHeader = try XCTUnwrap(JSONSerialization.jsonObject(with: bytes[..<headerEnd]) as? [String: Any])
            var offset = headerEnd + 1
            while offset < bytes.count {
                let itemEnd = try XCTUnwrap(bytes[offset...].firstIndex(of: 0x0A))
                let header = try XCTUnwrap(JSONSerialization.jsonObject(with: bytes[offset..<itemEnd]) as? [String: Any])
                let length = try XCTUnwrap(header["length"] as? Int)
                let payload = bytes[(itemEnd + 1)..<(itemEnd + 1 + length)]
                if header["type"] as? String == "span" {
                    let items = try XCTUnwrap(JSONSerialization.jsonObject(with: payload) as? [String: Any])["items"] as? [[String: Any]]
                    for span in items ?? [] { spans[span["name"] as? String ?? ""] = (span, envelopeHeader["trace"] as? [String: Any]) }
                }
                offset = itemEnd + 1 + length + 1
            }
        }
        return spans
    }

    private func attribute(_ span: [String: Any], _ key: String) -> Any? {
        (span["attributes"] as? [String: [String: Any]])?[key]?["value"]
    }

    /// A span ended while one is sent (a `beforeSendSpan` that traces what it does) is sent; one ended while
    /// sending that is not, and is counted dropped: a hook that traced each span it saw traced its own without
    /// end (a stack overflow).
    func testASpanEndedWhileSendingOneIsSentButNoDeeper() throws {
        buffer.close()
        final class Box: @unchecked Sendable {  // @unchecked: its one field is guarded by the lock
            private let lock = NSLock()
            private var stored: TelemetryBufferTracer?
            var tracer: TelemetryBufferTracer? {
                get { lock.withLock { stored } }
                set { lock.withLock { stored = newValue } }
            }
        }
        let box = Box()
        var options = buffer.options
        options.beforeSendSpan = { span in
            box.tracer?.withSpan("saw \(span.name)") { _ in }
            return span
        }
        buffer = try TelemetryBuffer(options: options)
        box.tracer = tracer()
        box.tracer?.withSpan("outer") { _ in }
        XCTAssertEqual(Set(try storedSpans().keys), ["outer", "saw outer"])
        XCTAssertEqual(buffer.stats().drops["internal_sdk_error/span"], 1)
    }

    /// A root span is a segment; a span started in its context is its child and carries the segment.
    func testNestedSpansMakeASegmentAndItsChild() throws {
        let tracer = tracer()
        tracer.withSpan("checkout", ofKind: .server) { root in
            root.attributes["cart.items"] = 3
            tracer.withSpan("SELECT cart", context: root.context) { child in
                child.attributes["db.system"] = "postgresql"
            }
        }
        let spans = try storedSpans()
        let root = try XCTUnwrap(spans["checkout"]?.span), child = try XCTUnwrap(spans["SELECT cart"]?.span)
        XCTAssertEqual(root["is_segment"] as? Bool, true)
        XCTAssertNil(root["parent_span_id"])
        XCTAssertEqual(child["is_segment"] as? Bool, false)
        XCTAssertEqual(child["parent_span_id"] as? String, root["span_id"] as? String)
        XCTAssertEqual(child["trace_id"] as? String, root["trace_id"] as? String)
        XCTAssertEqual(attribute(child, "sentry.segment.id") as? String, root["span_id"] as? String)
        XCTAssertEqual(attribute(child, "sentry.segment.name") as? String, "checkout")
        XCTAssertEqual(attribute(root, "sentry.op") as? String, "http.server")
        XCTAssertEqual(attribute(child, "sentry.op") as? String, "db")
        XCTAssertEqual(attribute(root, "cart.items") as? Int, 3)
    }

    /// A segment renamed while its child runs (as a server's middleware does once the route is known): the
    /// child sends the segment's name as it is when the child ends.
    func testAChildSendsTheSegmentsNameAsItIsWhenItEnds() throws {
        let tracer = tracer()
        tracer.withSpan("HTTP GET route not found", ofKind: .server) { root in
            let child = tracer.startSpan("query", context: root.context)
            root.operationName = "GET /checkout"
            child.end()
        }
        let child = try XCTUnwrap(try storedSpans()["query"]?.span)
        XCTAssertEqual(attribute(child, "sentry.segment.name") as? String, "GET /checkout")
        XCTAssertEqual(attribute(try XCTUnwrap(try storedSpans()["GET /checkout"]?.span), "sentry.segment.name.source") as? String, "custom")
        // Named by its route, as a server's middleware does: the name's source is `route`.
        tracer.withSpan("/cart/:id", ofKind: .server) { $0.attributes["http.route"] = "/cart/:id" }
        XCTAssertEqual(attribute(try XCTUnwrap(try storedSpans()["/cart/:id"]?.span), "sentry.segment.name.source") as? String, "route")
    }

    /// A server names its segment once it has routed the request (Hummingbird's middleware starts it as
    /// `HTTP GET route not found`): the DSC a server segment starts a trace with has no `transaction`, which
    /// Sentry wants only of good quality, as it would propagate the placeholder to every service called.
    func testAServerSegmentStartsItsTraceWithoutATransactionName() throws {
        let tracer = tracer()
        var headers: [String: String] = [:]
        tracer.withSpan("HTTP GET route not found", ofKind: .server) { segment in
            segment.operationName = "/cart"
            tracer.withSpan("GET /stock", ofKind: .client) { tracer.inject($0.context, into: &headers, using: HeaderInjector()) }
        }
        let baggage = headers["baggage"] ?? ""
        XCTAssertTrue(baggage.contains("sentry-trace_id="), baggage)
        XCTAssertFalse(baggage.contains("sentry-transaction="), baggage)
        XCTAssertNil((try storedSpans()["/cart"]?.trace as? [String: String])?["transaction"])
    }

    /// Injected headers carry the trace, the span and the decision, and the DSC as `sentry-` baggage.
    func testInjectWritesSentryAndW3CHeaders() throws {
        let tracer = tracer()
        var headers: [String: String] = [:]
        var traceID = "", spanID = ""
        tracer.withSpan("GET /cart", ofKind: .client) { span in
            tracer.inject(span.context, into: &headers, using: HeaderInjector())
            let stored = SentrySpanContext.current(in: span.context)
            (traceID, spanID) = (stored?.traceID.description ?? "", stored?.spanID.description ?? "")
        }
        XCTAssertEqual(headers["sentry-trace"], "\(traceID)-\(spanID)-1")
        XCTAssertEqual(headers["traceparent"], "00-\(traceID)-\(spanID)-01")
        let baggage = Set((headers["baggage"] ?? "").split(separator: ",").map(String.init))
        XCTAssertTrue(baggage.isSuperset(of: ["sentry-trace_id=\(traceID)", "sentry-public_key=abc123", "sentry-sampled=true",
                                              "sentry-sample_rate=1.0", "sentry-release=app@2", "sentry-environment=test",
                                              "sentry-transaction=GET%20/cart"]), "\(baggage)")
        XCTAssertTrue(baggage.contains { $0.hasPrefix("sentry-sample_rand=0.") }, "\(baggage)")
        // The envelope's `trace` header is the DSC the baggage propagated.
        let header = try XCTUnwrap(try storedSpans()["GET /cart"]?.trace as? [String: String])
        let propagated = Dictionary(uniqueKeysWithValues: baggage.map { member -> (String, String) in
            let parts = member.dropFirst("sentry-".count).split(separator: "=", maxSplits: 1)
            return (String(parts[0]), String(parts[1]).removingPercentEncoding ?? "")
        })
        XCTAssertEqual(header, propagated)
    }

    /// An incoming `sentry-trace` is continued: the first span is a segment of that trace whose parent is
    /// the caller's span; the incoming DSC and foreign baggage members go on unchanged.
    func testAnIncomingSentryTraceIsContinued() throws {
        let tracer = tracer(rate: 0)  // the caller's decision wins over the rate
        let incoming = ["sentry-trace": "4f2b8e1c9a7d43e6b0c5d1e2f3a4b5c6-9c1d2e3f4a5b6c7d-1",
                        "baggage": "other=1,sentry-trace_id=4f2b8e1c9a7d43e6b0c5d1e2f3a4b5c6,sentry-sample_rate=0.5,sentry-sample_rand=0.25,sentry-public_key=caller"]
        var context = InstrumentationContext.topLevel
        tracer.extract(incoming, into: &context, using: HeaderExtractor())
        var outgoing: [String: String] = [:]
        tracer.withSpan("POST /pay", context: context, ofKind: .server) { span in
            tracer.inject(span.context, into: &outgoing, using: HeaderInjector())
        }
        let stored = try XCTUnwrap(try storedSpans()["POST /pay"])
        let span = stored.span
        XCTAssertEqual(stored.trace as? [String: String], ["trace_id": "4f2b8e1c9a7d43e6b0c5d1e2f3a4b5c6", "sample_rate": "0.5",
                                                          "sample_rand": "0.25", "public_key": "caller"], "the envelope carries the caller's DSC")
        XCTAssertEqual(span["trace_id"] as? String, "4f2b8e1c9a7d43e6b0c5d1e2f3a4b5c6")
        XCTAssertEqual(span["parent_span_id"] as? String, "9c1d2e3f4a5b6c7d")
        XCTAssertEqual(span["is_segment"] as? Bool, true)
        let baggage = Set((outgoing["baggage"] ?? "").split(separator: ",").map(String.init))
        XCTAssertEqual(baggage, ["sentry-trace_id=4f2b8e1c9a7d43e6b0c5d1e2f3a4b5c6", "sentry-sample_rate=0.5", "sentry-sample_rand=0.25",
                                 "sentry-public_key=caller", "other=1"])
    }

    /// A `traceparent` is read when no `sentry-trace` came; an unsampled incoming trace records nothing and
    /// still propagates its decision.
    func testAnUnsampledTraceparentRecordsNothingAndPropagates() throws {
        let tracer = tracer()
        var context = InstrumentationContext.topLevel
        tracer.extract(["traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", "tracestate": "vendor=x"],
                       into: &context, using: HeaderExtractor())
        var outgoing: [String: String] = [:]
        tracer.withSpan("job", context: context, ofKind: .consumer) { span in
            XCTAssertFalse(span.isRecording)
            tracer.inject(span.context, into: &outgoing, using: HeaderInjector())
        }
        XCTAssertTrue(try storedSpans().isEmpty)
        XCTAssertTrue(outgoing["sentry-trace"]?.hasPrefix("0af7651916cd43dd8448eb211c80319c-") == true)
        XCTAssertTrue(outgoing["sentry-trace"]?.hasSuffix("-0") == true)
        XCTAssertEqual(outgoing["tracestate"], "vendor=x")
    }

    /// A rate of 0 records no new trace; a sampler decides instead of the rate when set.
    func testTheRateAndTheSamplerDecideNewTraces() throws {
        tracer(rate: 0).withSpan("dropped") { _ in }
        var options = TelemetryBufferTracer.Options()
        options.tracesSampleRate = 0
        options.tracesSampler = { $0.operationName == "kept" ? 1 : 0 }
        let sampling = TelemetryBufferTracer(buffer: buffer, options: options)
        sampling.withSpan("kept") { _ in }
        sampling.withSpan("not kept") { _ in }
        XCTAssertEqual(Set(try storedSpans().keys), ["kept"])
    }

    /// A recorded error makes the status `error` and names the error.
    func testARecordedErrorMakesTheSpanFail() throws {
        struct Declined: Error {}
        let tracer = tracer()
        XCTAssertThrowsError(try tracer.withSpan("pay") { _ in throw Declined() })
        let span = try XCTUnwrap(try storedSpans()["pay"]?.span)
        XCTAssertEqual(span["status"] as? String, "error")
        XCTAssertEqual(attribute(span, "exception.type") as? String, String(reflecting: Declined.self))
    }

    /// Malformed headers start a new trace instead.
    func testMalformedHeadersStartANewTrace() throws {
        let tracer = tracer()
        for headers in [["sentry-trace": "nothex-9c1d2e3f4a5b6c7d-1"], ["traceparent": "00-00000000000000000000000000000000-b7ad6b7169203331-01"],
                        ["sentry-trace": "4f2b8e1c9a7d43e6b0c5d1e2f3a4b5c6-9c1d2e3f4a5b6c7d-x"]] {
            var context = InstrumentationContext.topLevel
            tracer.extract(headers, into: &context, using: HeaderExtractor())
            XCTAssertNil(SentrySpanContext.current(in: context), "\(headers)")
        }
    }

    /// Every attribute key the tracer writes (with the library's) is one Sentry's conventions registry knows,
    /// of its type, not deprecated; checked by the core's `Tests/Conformance/check_conventions.py`. Skips
    /// without `sentry-conventions` (pip install sentry-conventions==0.29.0), unless `TB_REQUIRE_PARSER=1`.
    func testEveryAttributeKeyTheTracerWritesIsInSentrysRegistry() throws {
        struct Declined: Error {}
        let tracer = tracer()
        try? tracer.withSpan("checkout", ofKind: .server) { root in
            // As Hummingbird's middleware records them (`-` in a header's name as `_`): one value as a string,
            // several as an array.
            root.attributes["http.request.method"] = "GET"
            root.attributes["url.path"] = "/checkout"
            root.attributes["http.request.header.user_agent"] = "tests"
            root.attributes["http.request.header.accept"] = ["text/plain", "application/json"]
            root.attributes["http.response.header.content-length"] = "2"
            root.attributes["http.response.status_code"] = 200
            tracer.withSpan("query", context: root.context) { $0.attributes["db.system"] = "postgresql" }
            tracer.withSpan("publish", context: root.context, ofKind: .producer) { producer in
                producer.attributes["messaging.system"] = "kafka"
                producer.attributes["messaging.destination.name"] = "orders"
                tracer.withSpan("process", context: producer.context, ofKind: .consumer) { consumer in
                    consumer.addLink(SpanLink(context: producer.context, attributes: ["sentry.link.type": "previous_trace"]))
                }
            }
            throw Declined()
        }
        buffer.flush()
        // This file is Integrations/TelemetryBufferTracing/Tests/TelemetryBufferTracingTests/<name>.swift.
        var root = URL(fileURLWithPath: #filePath)
        for _ in 0..<5 { root.deleteLastPathComponent() }
        let script = root.appendingPathComponent("Tests/Conformance/check_conventions.py")
        // Published on its own (Scripts/publish-integration.sh), the integration has no core beside it.
        guard FileManager.default.fileExists(atPath: script.path) else { throw XCTSkip("the conventions check is the core repository's") }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script.path,
                             buffer.envelopesDirectory.path]
        let output = Pipe(), errors = Pipe()
        (process.standardOutput, process.standardError) = (output, errors)
        try process.run()
        let printed = output.fileHandleForReading.readDataToEndOfFile()
        let complaint = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        if process.terminationStatus == 3 || process.terminationStatus == 127 {
            let missing = "needs sentry-conventions==0.29.0: \(complaint)"
            if ProcessInfo.processInfo.environment["TB_REQUIRE_PARSER"] == "1" { return XCTFail(missing) }
            throw XCTSkip(missing)
        }
        XCTAssertEqual(process.terminationStatus, 0, complaint)
        let result = try XCTUnwrap(JSONSerialization.jsonObject(with: printed) as? [String: Any])
        let seen = try XCTUnwrap(result["seen"] as? [String: String])
        for key in ["sentry.op", "sentry.segment.name.source", "exception.type", "exception.message", "db.system.name",
                    "http.request.header.user_agent", "http.request.header.accept", "messaging.system", "sentry.link.type"] {
            XCTAssertNotNil(seen[key], "\(key) was written: \(seen.keys.sorted())")
        }
        XCTAssertEqual(result["problems"] as? [String], [], "seen: \(seen)")
    }

    /// Inside `withSpan` the task's `ActiveTrace` (what logs and metrics carry) is that span's (an unsampled
    /// one's trace only); in a context extracted from a request, the caller's trace without a span;
    /// outside, there is none.
    func testTheActiveTraceIsTheSpanWithSpanRuns() throws {
        let tracer = tracer()
        XCTAssertNil(ActiveTrace.current)
        tracer.withSpan("outer") { outer in
            let ids = SentrySpanContext.current(in: outer.context)
            XCTAssertEqual(ActiveTrace.current?.traceID, ids?.traceID)
            XCTAssertEqual(ActiveTrace.current?.spanID, ids?.spanID)
            tracer.withSpan("inner") { inner in
                XCTAssertEqual(ActiveTrace.current?.spanID, SentrySpanContext.current(in: inner.context)?.spanID)
                XCTAssertEqual(ActiveTrace.current?.traceID, ids?.traceID, "a child of the active span")
            }
            let set = ActiveTrace(traceID: .random())
            ActiveTrace.withValue(set) { XCTAssertEqual(ActiveTrace.current, set, "one set by hand inside") }
        }
        XCTAssertNil(ActiveTrace.current)
        // An unsampled trace's spans are never sent: logs and metrics carry the trace, not a span.
        self.tracer(rate: 0).withSpan("unsampled") { span in
            XCTAssertEqual(ActiveTrace.current, ActiveTrace(traceID: try! XCTUnwrap(SentrySpanContext.current(in: span.context)).traceID))
        }
        var context = ServiceContext.topLevel
        tracer.extract(["sentry-trace": "0123456789abcdef0123456789abcdef-0123456789abcdef-1"], into: &context, using: HeaderExtractor())
        ServiceContext.withValue(context) {
            XCTAssertEqual(ActiveTrace.current, ActiveTrace(traceID: TraceID("0123456789abcdef0123456789abcdef")!))
        }
    }

    /// A continued trace whose caller sent no DSC gets one that agrees with the caller's decision: the rate
    /// the decision was taken at (1 or 0: the caller's), so that `sample_rand < sample_rate` ⇔ `sampled`
    /// and Sentry extrapolates nothing; the sampler, when set, sees that decision and decides instead.
    func testAContinuedTraceWithoutADSCGetsOneThatAgreesWithTheDecision() throws {
        for (flag, localRate, rate) in [("0", 0.3, "0.0"), ("1", 0.0, "1.0"), ("1", 0.3, "1.0")] {
            var context = InstrumentationContext.topLevel
            let tracer = tracer(rate: localRate)
            let trace = String(format: "%032x", Int.random(in: 1..<Int.max))
            tracer.extract(["sentry-trace": "\(trace)-9c1d2e3f4a5b6c7d-\(flag)"], into: &context, using: HeaderExtractor())
            var outgoing: [String: String] = [:]
            tracer.withSpan("job \(flag) \(localRate)", context: context) { tracer.inject($0.context, into: &outgoing, using: HeaderInjector()) }
            let dsc = TestBaggage.sentry(outgoing["baggage"] ?? "")
            let label = "-\(flag) at a local rate of \(localRate)"
            XCTAssertEqual(dsc["sampled"], flag == "1" ? "true" : "false", label)
            XCTAssertEqual(dsc["sample_rate"], rate, label)
            let rand = try XCTUnwrap(Double(dsc["sample_rand"] ?? ""), label)
            XCTAssertEqual(rand < Double(rate)!, flag == "1", label)
            var stored = try storedSpans()["job \(flag) \(localRate)"]?.trace as? [String: String]
            stored?["trace_id"] = nil
            var expected = dsc
            expected["trace_id"] = nil
            XCTAssertEqual(stored, flag == "1" ? expected : nil, label)
        }
        var context = InstrumentationContext.topLevel
        tracer().extract(["sentry-trace": "4f2b8e1c9a7d43e6b0c5d1e2f3a4b5c6-9c1d2e3f4a5b6c7d-0"], into: &context, using: HeaderExtractor())
        let seen = Locked<[Bool?]>([])
        var options = TelemetryBufferTracer.Options()
        options.tracesSampler = { context in seen.withLock { $0.append(context.parentSampled) }; return 1 }
        TelemetryBufferTracer(buffer: buffer, options: options).withSpan("overridden", context: context) { _ in }
        XCTAssertEqual(seen.withLock { $0 }, [false])
        XCTAssertNotNil(try storedSpans()["overridden"], "the sampler decides")
    }

    /// A trace continued from a `traceparent` (a proxy that passes W3C headers only, say) keeps the DSC its
    /// `baggage` carries for that trace, as one continued from `sentry-trace` does.
    func testATraceparentsTraceKeepsTheCallersDSC() throws {
        let tracer = tracer(rate: 0)
        var context = InstrumentationContext.topLevel
        tracer.extract(["traceparent": "00-4f2b8e1c9a7d43e6b0c5d1e2f3a4b5c6-9c1d2e3f4a5b6c7d-01",
                        "baggage": "sentry-trace_id=4f2b8e1c9a7d43e6b0c5d1e2f3a4b5c6,sentry-public_key=caller,sentry-sample_rate=0.5,sentry-sample_rand=0.2,other=1"],
                       into: &context, using: HeaderExtractor())
        var outgoing: [String: String] = [:]
        tracer.withSpan("POST /pay", context: context, ofKind: .server) { tracer.inject($0.context, into: &outgoing, using: HeaderInjector()) }
        let caller = ["trace_id": "4f2b8e1c9a7d43e6b0c5d1e2f3a4b5c6", "public_key": "caller", "sample_rate": "0.5", "sample_rand": "0.2"]
        XCTAssertEqual(try storedSpans()["POST /pay"]?.trace as? [String: String], caller, "the envelope carries the caller's DSC")
        XCTAssertEqual(TestBaggage.sentry(outgoing["baggage"] ?? ""), caller)
        XCTAssertTrue(outgoing["baggage"]?.hasSuffix(",other=1") == true)
    }

    /// An incoming DSC without a valid `sample_rand` (older SDKs send none) gets one, derived from the trace
    /// ID, so that every service of the trace that fills it in decides alike; within the range the caller's
    /// decision and rate allow (below the rate if sampled, at or above it if not).
    func testAMissingOrInvalidSampleRandIsFilledFromTheTrace() throws {
        let trace = "4f2b8e1c9a7d43e6b0c5d1e2f3a4b5c6"
        func outgoingDSC(flag: String, rand: String?) -> [String: String] {
            var context = InstrumentationContext.topLevel
            let baggage = "sentry-trace_id=\(trace),sentry-sample_rate=0.5" + (rand.map { ",sentry-sample_rand=\($0)" } ?? "")
            tracer().extract(["sentry-trace": "\(trace)-9c1d2e3f4a5b6c7d" + flag, "baggage": baggage], into: &context, using: HeaderExtractor())
            var outgoing: [String: String] = [:]
            tracer().withSpan("job", context: context) { tracer().inject($0.context, into: &outgoing, using: HeaderInjector()) }
            return TestBaggage.sentry(outgoing["baggage"] ?? "")
        }
        let deferred = outgoingDSC(flag: "", rand: nil)
        XCTAssertNotNil(Double(deferred["sample_rand"] ?? ""), "filled in")
        XCTAssertEqual(outgoingDSC(flag: "", rand: "1.5")["sample_rand"], deferred["sample_rand"], "the same for the same trace")
        XCTAssertEqual(outgoingDSC(flag: "", rand: "abc")["sample_rand"], deferred["sample_rand"])
        XCTAssertLessThan(Double(outgoingDSC(flag: "-1", rand: nil)["sample_rand"] ?? "") ?? 1, 0.5, "agrees with the caller's decision")
        XCTAssertGreaterThanOrEqual(Double(outgoingDSC(flag: "-0", rand: nil)["sample_rand"] ?? "") ?? 0, 0.5)
        XCTAssertEqual(outgoingDSC(flag: "-1", rand: "0.7")["sample_rand"], "0.7", "a valid one is kept as it came")
        XCTAssertEqual(try storedSpans()["job"]?.trace?["sample_rand"] as? String, "0.7")
    }

    /// `sample_rand < sample_rate` ⇔ `sampled` holds at rates whose product with 10⁶ rounds up (0.0079 ×
    /// 10⁶ = 7900.000000000001) and for derived values that a cut to 6 decimals lowered (249 / 10⁶ × 10⁶ =
    /// 248.99999999999997): trace IDs chosen to draw exactly those.
    func testTheDerivedSampleRandAgreesWithTheDecisionAtAwkwardRates() throws {
        var context = InstrumentationContext.topLevel
        let sampled = TraceID(high: 1, low: 7900)  // drawn from [0, boundary): 7900 if the boundary were 7901
        tracer().extract(["sentry-trace": "\(sampled)-9c1d2e3f4a5b6c7d-1", "baggage": "sentry-trace_id=\(sampled),sentry-sample_rate=0.0079"],
                         into: &context, using: HeaderExtractor())
        var outgoing: [String: String] = [:]
        tracer().withSpan("sampled", context: context) { tracer().inject($0.context, into: &outgoing, using: HeaderInjector()) }
        XCTAssertLessThan(Double(TestBaggage.sentry(outgoing["baggage"] ?? "")["sample_rand"] ?? "") ?? 1, 0.0079)

        var own = InstrumentationContext.topLevel
        let cut = TraceID(high: 1, low: 249)  // drawn from [0, 10⁶): 249
        tracer(rate: 0.000249).extract(["sentry-trace": "\(cut)-9c1d2e3f4a5b6c7d"], into: &own, using: HeaderExtractor())
        var ownOutgoing: [String: String] = [:]
        tracer(rate: 0.000249).withSpan("own", context: own) { tracer().inject($0.context, into: &ownOutgoing, using: HeaderInjector()) }
        let dsc = TestBaggage.sentry(ownOutgoing["baggage"] ?? "")
        XCTAssertEqual(dsc["sampled"], "false")
        XCTAssertEqual(dsc["sample_rand"], "0.000249", "the value decided on, not one below it")
    }

    /// Segments started from one extracted context share the trace's decision and DSC: the first one takes
    /// them (the head of the trace in this process), the next ones follow, as a downstream service would.
    func testSegmentsOfOneIncomingTraceShareTheFirstOnesDecisionAndDSC() throws {
        let calls = Locked(0)
        var options = TelemetryBufferTracer.Options()
        options.tracesSampler = { _ in calls.withLock { $0 += 1 }; return 1 }
        let tracer = TelemetryBufferTracer(buffer: buffer, options: options)
        var context = InstrumentationContext.topLevel
        tracer.extract(["sentry-trace": "4f2b8e1c9a7d43e6b0c5d1e2f3a4b5c6-9c1d2e3f4a5b6c7d"], into: &context, using: HeaderExtractor())
        var first: [String: String] = [:], second: [String: String] = [:]
        tracer.withSpan("first", context: context) { tracer.inject($0.context, into: &first, using: HeaderInjector()) }
        tracer.withSpan("second", context: context) { tracer.inject($0.context, into: &second, using: HeaderInjector()) }
        XCTAssertEqual(calls.withLock { $0 }, 1, "decided once")
        XCTAssertEqual(TestBaggage.sentry(second["baggage"] ?? ""), TestBaggage.sentry(first["baggage"] ?? ""))
        XCTAssertEqual(TestBaggage.sentry(second["baggage"] ?? "")["transaction"], "first")
        let spans = try storedSpans()
        XCTAssertEqual(spans["second"]?.trace?["transaction"] as? String, "first")
        XCTAssertEqual(spans["first"]?.span["is_segment"] as? Bool, true)
        XCTAssertEqual(spans["second"]?.span["is_segment"] as? Bool, true)
    }

    /// A hostile `baggage` goes on within W3C's limits (64 members, 8192 bytes), whole members only, and
    /// the envelopes carry no more of it; members without a value are not members.
    func testBaggageIsBoundedToW3CsLimits() throws {
        let tracer = tracer()
        let trace = "4f2b8e1c9a7d43e6b0c5d1e2f3a4b5c6"
        let members = ["sentry-trace_id=\(trace)", "sentry-sample_rand=0.25", "junk", "sentry-nokey"]
            + (0..<2000).map { "sentry-x\($0)=" + String(repeating: "v", count: 16) } + (0..<2000).map { "other\($0)=1" }
        var context = InstrumentationContext.topLevel
        tracer.extract(["sentry-trace": "\(trace)-9c1d2e3f4a5b6c7d-1", "baggage": members.joined(separator: ",")],
                       into: &context, using: HeaderExtractor())
        var outgoing: [String: String] = [:]
        tracer.withSpan("bounded", context: context) { tracer.inject($0.context, into: &outgoing, using: HeaderInjector()) }
        let baggage = try XCTUnwrap(outgoing["baggage"])
        let sent = baggage.split(separator: ",").map(String.init)
        XCTAssertLessThanOrEqual(baggage.utf8.count, 8192)
        XCTAssertLessThanOrEqual(sent.count, 64)
        XCTAssertTrue(sent.allSatisfy { $0.contains("=") }, "\(sent.filter { !$0.contains("=") })")
        XCTAssertEqual(TestBaggage.sentry(baggage)["sample_rand"], "0.25", "the first members are kept")
        let header = try XCTUnwrap(try storedSpans()["bounded"]?.trace)
        XCTAssertLessThanOrEqual(try JSONSerialization.data(withJSONObject: header).count, 8192)

        // A member too large to fit does not take the ones after it along.
        var large = InstrumentationContext.topLevel
        tracer.extract(["sentry-trace": "\(trace)-9c1d2e3f4a5b6c7d-1",
                        "baggage": "vendor=" + String(repeating: "v", count: 8190) + ",sentry-trace_id=\(trace),sentry-public_key=caller"],
                       into: &large, using: HeaderExtractor())
        XCTAssertEqual(SentrySpanContext.current(in: large)?.dynamicSamplingContext["public_key"], "caller")
    }

    /// Other vendors' members ahead of the `sentry-` ones do not crowd the caller's DSC out: the limits bound
    /// each part on its own. Before, 64 members of others left no DSC at all (the trace went on with this
    /// process's own), and 8,100 bytes of one left half of it (no `sample_rate`, which Sentry requires).
    func testOtherMembersAheadOfTheDSCDoNotCrowdItOut() throws {
        let tracer = tracer()
        let trace = "4f2b8e1c9a7d43e6b0c5d1e2f3a4b5c6"
        let dsc = "sentry-trace_id=\(trace),sentry-public_key=upstream,sentry-sample_rate=0.25,sentry-sample_rand=0.125,sentry-environment=prod"
        for others in [(0..<64).map { "vendor\($0)=v" }, ["vendor=" + String(repeating: "v", count: 8100)]] {
            var context = InstrumentationContext.topLevel
            tracer.extract(["sentry-trace": "\(trace)-9c1d2e3f4a5b6c7d-1", "baggage": (others + [dsc]).joined(separator: ",")],
                           into: &context, using: HeaderExtractor())
            XCTAssertEqual(SentrySpanContext.current(in: context)?.dynamicSamplingContext,
                           ["trace_id": trace, "public_key": "upstream", "sample_rate": "0.25", "sample_rand": "0.125", "environment": "prod"],
                           "after \(others.count) other members")
        }
    }

    /// An older OpenTelemetry key goes under the registry's; when both are set, only the registry's is sent.
    func testOlderAttributeKeysGoUnderTheRegistrysKeys() throws {
        let tracer = tracer()
        tracer.withSpan("renamed") { span in
            span.attributes["http.method"] = "GET"
            span.attributes["net.sock.family"] = "inet6"
        }
        tracer.withSpan("both") { span in
            span.attributes["http.method"] = "GET"
            span.attributes["http.request.method"] = "POST"
        }
        let spans = try storedSpans()
        let renamed = try XCTUnwrap(spans["renamed"]?.span)
        XCTAssertEqual(attribute(renamed, "http.request.method") as? String, "GET")
        XCTAssertEqual(attribute(renamed, "network.type") as? String, "ipv6")
        XCTAssertNil(attribute(renamed, "net.sock.family"))
        let both = try XCTUnwrap(spans["both"]?.span)
        XCTAssertEqual(attribute(both, "http.request.method") as? String, "POST")
        XCTAssertNil(attribute(both, "http.method"))
    }

    /// Of several older keys for one registry key, whatever order the attributes iterate in, the one that
    /// names the server's side goes (`net.host.*` on a server span, `net.peer.*` on a client or consumer
    /// span, whose peer is the server or the broker), else the
    /// first in alphabetical order; `net.sock.family` gives way to `net.transport`. Before, the last
    /// iterated won, and that order changes with each process's hash seed: one span sent `server.port`
    /// 8080 in one process and 54321 in the next. (Several groups at once: on the code before, all came out
    /// so by chance in about one process of a hundred.)
    func testOfSeveralOlderKeysForOneRegistryKeyTheServersSideThenTheFirstInAlphabeticalOrderGoes() throws {
        let tracer = tracer()
        for kind in [SpanKind.server, .client, .consumer] {
            tracer.withSpan("legacy \(kind)", ofKind: kind) { span in
                span.attributes["net.peer.port"] = 54321
                span.attributes["net.host.port"] = 8080
                span.attributes["messaging.url"] = "amqp://b"
                span.attributes["http.url"] = "https://a/x"
                span.attributes["net.peer.name"] = "peer.local"
                span.attributes["net.host.name"] = "host.local"
                span.attributes["http.server_name"] = "named.local"
                span.attributes["http.host"] = "header.local"
                span.attributes["net.protocol.version"] = "1.1"
                span.attributes["messaging.protocol_version"] = "0.9"
                span.attributes["http.flavor"] = "2"
                span.attributes["net.sock.family"] = "unix"
                span.attributes["net.transport"] = "pipe"
            }
        }
        let spans = try storedSpans()
        let server = try XCTUnwrap(spans["legacy server"]?.span)
        XCTAssertEqual(attribute(server, "server.port") as? Int, 8080)
        XCTAssertEqual(attribute(server, "server.address") as? String, "host.local")
        let peers = [try XCTUnwrap(spans["legacy client"]?.span), try XCTUnwrap(spans["legacy consumer"]?.span)]
        for span in peers {
            XCTAssertEqual(attribute(span, "server.port") as? Int, 54321, "the peer is the server, or the broker")
            XCTAssertEqual(attribute(span, "server.address") as? String, "peer.local")
        }
        for span in [server] + peers {
            XCTAssertEqual(attribute(span, "url.full") as? String, "https://a/x")
            XCTAssertEqual(attribute(span, "network.protocol.version") as? String, "2")
            XCTAssertEqual(attribute(span, "network.transport") as? String, "pipe")
        }
    }

    /// Header edge cases: an uppercase `trace_id` in the baggage is the trace's; a version-00 `traceparent`
    /// with a fifth field, flags that are not hex, uppercase hex, or a version `ff`/uppercase, is malformed
    /// (W3C), and so is an uppercase `sentry-trace`; a `tracestate` goes on only with its own trace.
    func testHeaderEdgeCases() throws {
        let tracer = tracer()
        var context = InstrumentationContext.topLevel
        tracer.extract(["sentry-trace": "4f2b8e1c9a7d43e6b0c5d1e2f3a4b5c6-9c1d2e3f4a5b6c7d-1",
                        "baggage": "sentry-trace_id=4F2B8E1C9A7D43E6B0C5D1E2F3A4B5C6, sentry-public_key = caller"],
                       into: &context, using: HeaderExtractor())
        XCTAssertEqual(SentrySpanContext.current(in: context)?.dynamicSamplingContext["public_key"], "caller")
        for header in ["00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-+1",
                       "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01", "FF-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x",
                       "0A-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x"] {
            var other = InstrumentationContext.topLevel
            tracer.extract(["traceparent": header], into: &other, using: HeaderExtractor())
            XCTAssertNil(SentrySpanContext.current(in: other), header)
        }
        var upper = InstrumentationContext.topLevel
        tracer.extract(["sentry-trace": "4F2B8E1C9A7D43E6B0C5D1E2F3A4B5C6-9C1D2E3F4A5B6C7D-1"], into: &upper, using: HeaderExtractor())
        XCTAssertNil(SentrySpanContext.current(in: upper), "uppercase sentry-trace")
        for (traceparent, kept) in [("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", false),
                                    ("00-4f2b8e1c9a7d43e6b0c5d1e2f3a4b5c6-b7ad6b7169203331-01", true)] {
            var both = InstrumentationContext.topLevel
            tracer.extract(["sentry-trace": "4f2b8e1c9a7d43e6b0c5d1e2f3a4b5c6-9c1d2e3f4a5b6c7d-1", "traceparent": traceparent,
                            "tracestate": "vendor=x"], into: &both, using: HeaderExtractor())
            XCTAssertEqual(SentrySpanContext.current(in: both)?.traceState, kept ? "vendor=x" : nil, traceparent)
        }
    }
}

/// The `sentry-` members of a baggage header, decoded.
enum TestBaggage {
    static func sentry(_ header: String) -> [String: String] {
        var members: [String: String] = [:]
        for member in header.split(separator: ",") where member.hasPrefix("sentry-") {
            let parts = member.dropFirst("sentry-".count).split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            members[String(parts[0])] = parts.count == 2 ? String(parts[1]).removingPercentEncoding : "(no value)"
        }
        return members
    }
}

/// A value shared with a closure the tracer calls.
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<Result>(_ body: (inout Value) -> Result) -> Result { lock.withLock { body(&value) } }
}
