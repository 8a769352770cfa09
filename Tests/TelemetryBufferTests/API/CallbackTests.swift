import Foundation
import XCTest
@testable import TelemetryBuffer

/// The app's own code called back by the buffer may call the buffer again.
final class CallbackTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory.remove() }

    /// A diagnostic reported on the uploader's queue (a refused connection) whose handler calls `flush()`,
    /// `stats()` and `close()`: the handler ran on that queue before, and `close()` waited on it from
    /// itself (a trap in libdispatch).
    func testADiagnosticHandlerMayFlushReadStatsAndClose() throws {
        let buffer = Locked<TelemetryBuffer?>(nil)
        let called = Locked(false)
        let done = DispatchSemaphore(value: 0)
        let options = testOptions(directory) {
            $0.dsn = "http://k@127.0.0.1:1/1"  // nothing listens on port 1: every request fails at once
            $0.upload = true
            $0.diagnosticHandler = { diagnostic in
                guard diagnostic.message.hasPrefix("upload:"), !called.withLock({ $0 }) else { return }
                called.withLock { $0 = true }
                guard let buffer = buffer.withLock({ $0 }) else { return }
                buffer.flush()
                _ = buffer.stats()
                buffer.close()
                done.signal()
            }
        }
        let created = try TelemetryBuffer(options: options)
        buffer.withLock { $0 = created }
        created.add(log: .test("one"))
        created.flush()
        XCTAssertEqual(done.wait(timeout: .now() + 60), .success, "the handler's calls never returned")
        XCTAssertFalse(created.add(log: .test("after close")), "closed from the handler")
        buffer.withLock { $0 = nil }
    }

    /// `close()` does not wait for a request under way: an HTTP client that never calls back leaves the
    /// envelope on disk, and close returns.
    func testCloseDoesNotWaitForARequestThatNeverEnds() throws {
        let started = DispatchSemaphore(value: 0)
        let options = testOptions(directory) {
            $0.dsn = "http://k@127.0.0.1:1/1"
            $0.upload = true
            $0.httpClient = SilentClient(started: started)
        }
        let buffer = try TelemetryBuffer(options: options)
        buffer.add(log: .test("kept"))
        buffer.flush()
        XCTAssertEqual(started.wait(timeout: .now() + 30), .success, "the request started")
        let closed = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            buffer.close()
            closed.signal()
        }
        XCTAssertEqual(closed.wait(timeout: .now() + 20), .success, "close() waited for a request that never ends")
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["kept"], "not acknowledged: still on disk")
    }

    /// An HTTP client that never answers its first request and answers every later one twice: the first
    /// counts as failed once `requestTimeout` and a grace have passed (it held the uploader for good), the
    /// envelope goes again, and the second answers count once (two would leave the request group twice, a
    /// crash).
    func testAClientThatNeverAnswersOrAnswersTwiceNeitherHoldsNorBreaksTheUploader() throws {
        let client = UnreliableClient()
        let buffer = try TelemetryBuffer(options: testOptions(directory) {
            $0.dsn = "http://k@127.0.0.1:1/1"
            $0.upload = true
            $0.httpClient = client
            $0.uploadOptions.requestTimeout = 0.2
            $0.uploadOptions.backoffBase = 0.01
        })
        buffer.add(log: .test("delivered"))
        buffer.flush()
        try eventually { try logBodies(in: buffer.envelopesDirectory).isEmpty }
        XCTAssertEqual(client.requests.withLock { $0 }, 2, "sent again once the first went unanswered")
        buffer.add(log: .test("after"))
        buffer.flush()
        try eventually { try logBodies(in: buffer.envelopesDirectory).isEmpty }
        XCTAssertEqual(client.requests.withLock { $0 }, 3)
        buffer.close()
    }

    /// A 3xx answer (what Apple's default client returns for a redirect it refuses: a DSN behind a permanent
    /// one never delivers) is a warning, not a line of information among the uploads'.
    func testARedirectAnswerIsAWarning() throws {
        struct Moved: HTTPClient {
            func send(_ request: HTTPRequest, completion: @escaping @Sendable (Result<HTTPResponse, any Error>) -> Void) {
                completion(.success(HTTPResponse(status: 308, headers: ["Location": "https://elsewhere.example/"])))
            }
        }
        let warnings = Locked<[String]>([])
        let buffer = try TelemetryBuffer(options: testOptions(directory) {
            $0.dsn = "http://k@127.0.0.1:1/1"
            $0.upload = true
            $0.httpClient = Moved()
            $0.diagnosticHandler = { diagnostic in
                if diagnostic.level == .warning { warnings.withLock { $0.append(diagnostic.message) } }
            }
        })
        buffer.add(log: .test("moved"))
        buffer.flush()
        eventually { if case .backingOff = buffer.stats().upload { true } else { false } }
        buffer.close()
        XCTAssertTrue(warnings.withLock { $0 }.contains { $0.contains("308") }, "\(warnings.withLock { $0 })")
    }

    /// A transport that keeps throwing: what it refused stays staged, offered again first, but no more than
    /// `maxCachedEnvelopes` (or `maxCacheBytes`) of it: beyond, the least important go (here, all of one
    /// level, the oldest), counted as `cache_overflow`.
    /// A file under a staged name that the buffer leaves alone (larger than any it stages) is neither
    /// deleted nor counted, nor does it count toward the bounds. A later buffer whose transport takes
    /// envelopes gets the newest, in order. Before, every refused envelope stayed: the folder grew with
    /// every forward.
    func testATransportThatKeepsThrowingLeavesNoMoreStagedThanTheCacheBounds() throws {
        var options = testOptions(directory) { $0.maxCachedEnvelopes = 3; $0.maxLogsPerBatch = 1 }
        options.transport = RefusingTransport()
        let first = try TelemetryBuffer(options: options)
        for index in 0..<8 {
            XCTAssertTrue(first.add(log: .test("log \(index)")))
            first.flush()
        }
        let folder = first.directory.appendingPathComponent(BufferFolder.name).path
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: folder).filter { $0.hasPrefix("envelope-") }.count, 3)
        XCTAssertEqual(first.stats().drops["cache_overflow/log_item"], 5)
        let foreign = folder + "/envelope-4000000000"
        XCTAssertTrue(FileManager.default.createFile(atPath: foreign, contents: nil))
        XCTAssertEqual(truncate(foreign, 12 << 20), 0)
        XCTAssertTrue(first.add(log: .test("log 8")))
        first.flush()
        XCTAssertEqual(first.stats().drops["cache_overflow/log_item"], 6, "one more beyond the bound, no more")
        XCTAssertTrue(FileManager.default.fileExists(atPath: foreign), "left alone")
        first.close()
        try FileManager.default.removeItem(atPath: foreign)

        let taking = try GatedTransport(directory: directory.url.appendingPathComponent("taken"))
        taking.open()
        options.transport = taking
        let second = try TelemetryBuffer(options: options)
        second.flush()
        XCTAssertEqual(try logBodies(in: taking.inner.directory), ["log 6", "log 7", "log 8"])
        second.close()
    }

    /// Beyond the bounds, a refused envelope goes by the order the default transport evicts in: the lowest
    /// highest log level first, the oldest of those. Before, the oldest went, a `fatal` log before newer
    /// `trace` ones.
    func testARefusedEnvelopeIsEvictedByLevelAsTheDefaultTransportDoes() throws {
        var options = testOptions(directory) { $0.maxCachedEnvelopes = 2; $0.maxLogsPerBatch = 1 }
        options.transport = RefusingTransport()
        let first = try TelemetryBuffer(options: options)
        for (body, level) in [("fatal", Log.Level.fatal), ("trace 1", .trace), ("trace 2", .trace)] {
            XCTAssertTrue(first.add(log: Log(level: level, body: body, traceID: TraceID(high: 1, low: 2))))
            first.flush()
        }
        XCTAssertEqual(first.stats().drops["cache_overflow/log_item"], 1)
        first.close()

        let taking = try GatedTransport(directory: directory.url.appendingPathComponent("taken"))
        taking.open()
        options.transport = taking
        let second = try TelemetryBuffer(options: options)
        second.flush()
        XCTAssertEqual(try logBodies(in: taking.inner.directory), ["fatal", "trace 2"])
        second.close()
    }

    /// A custom transport's `send` that reads `recovery` while the start hands it what an earlier buffer
    /// staged: recovery is done by then (it waited for the hand-over, and a `send` on the queue that waited
    /// for it would never return).
    func testATransportMayReadRecoveryWhileTakingRecoveredEnvelopes() throws {
        let first = try TelemetryBuffer(options: testOptions(directory) { $0.transport = RefusingTransport() })
        first.add(log: .test("staged, never taken"))
        first.close()

        final class Reading: Transport, @unchecked Sendable {
            let buffer = Locked<TelemetryBuffer?>(nil)
            let known = DispatchSemaphore(value: 0)
            let readable = Locked<[Bool]>([])
            func send(_ envelope: Envelope) throws {
                // The start's hand-over runs before `init` returns the buffer this reads.
                if buffer.withLock({ $0 }) == nil { _ = known.wait(timeout: .now() + 5) }
                let done = DispatchSemaphore(value: 0)
                DispatchQueue.global().async { [buffer] in
                    _ = buffer.withLock { $0 }?.recovery
                    done.signal()
                }
                readable.withLock { $0.append(done.wait(timeout: .now() + 5) == .success) }
            }
        }
        let transport = Reading()
        let second = try TelemetryBuffer(options: testOptions(directory) { $0.transport = transport })
        transport.buffer.withLock { $0 = second }
        transport.known.signal()
        second.flush()
        XCTAssertEqual(transport.readable.withLock { $0 }, [true], "one recovered envelope; recovery readable while it was taken")
        second.close()
    }
}

/// A transport that refuses every envelope: what it is offered stays staged.
private struct RefusingTransport: Transport {
    func send(_ envelope: Envelope) throws { throw POSIXError(.EIO) }
}

/// An HTTP client that never answers its first request, and answers each later one with 200 twice.
private final class UnreliableClient: HTTPClient, @unchecked Sendable {
    let requests = Locked(0)
    func send(_ request: HTTPRequest, completion: @escaping @Sendable (Result<HTTPResponse, any Error>) -> Void) {
        guard requests.withLock({ count in count += 1; return count }) > 1 else { return }
        completion(.success(HTTPResponse(status: 200, headers: [:])))
        completion(.success(HTTPResponse(status: 200, headers: [:])))
    }
}

/// An HTTP client whose requests never complete.
private struct SilentClient: HTTPClient {
    let started: DispatchSemaphore
    func send(_ request: HTTPRequest, completion: @escaping @Sendable (Result<HTTPResponse, any Error>) -> Void) {
        started.signal()
    }
}

/// `beforeSendLog` and `beforeSendSpan`: they change or drop items before encoding, drops count as
/// `before_send`, and a hook that adds to the buffer itself neither deadlocks nor loses anything.
final class BeforeSendTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory.remove() }

    func testHooksChangeAndDropItemsAndDropsAreCounted() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory) {
            $0.beforeSendLog = { log in
                guard !log.body.hasPrefix("secret") else { return nil }
                var changed = log
                changed.body = log.body.uppercased()
                changed.attributes["scrubbed"] = true
                return changed
            }
            $0.beforeSendSpan = { span in span.name == "drop me" ? nil : span }
            $0.beforeSendMetric = { metric in
                guard metric.name != "drop.me" else { return nil }
                var changed = metric
                changed.attributes["scrubbed"] = true
                return changed
            }
        })
        defer { buffer.close() }
        XCTAssertTrue(buffer.add(log: .test("kept")))
        XCTAssertFalse(buffer.add(log: .test("secret token")))
        XCTAssertTrue(buffer.add(span: .test("kept span", trace: TraceID(high: 1, low: 2))))
        XCTAssertFalse(buffer.add(span: .test("drop me", trace: TraceID(high: 1, low: 2))))
        XCTAssertTrue(buffer.add(metric: .counter("kept.metric")))
        XCTAssertFalse(buffer.add(metric: .counter("drop.me")))
        buffer.flush()
        let elements = try walkEnvelopes(in: buffer.envelopesDirectory).flatMap(\.elements)
        let log = try XCTUnwrap(elements.first { $0["body"] != nil })
        XCTAssertEqual(log["body"] as? String, "KEPT")
        XCTAssertEqual((log["attributes"] as? [String: [String: Any]])?["scrubbed"]?["value"] as? Bool, true)
        XCTAssertEqual(elements.filter { $0["span_id"] != nil }.compactMap { $0["name"] as? String }, ["kept span"])
        let metric = try XCTUnwrap(elements.first { $0["name"] as? String == "kept.metric" })
        XCTAssertEqual((metric["attributes"] as? [String: [String: Any]])?["scrubbed"]?["value"] as? Bool, true)
        XCTAssertFalse(elements.contains { $0["name"] as? String == "drop.me" })
        let discards = try XCTUnwrap(buffer.pendingDiscards)
        XCTAssertEqual(discards.quantity(.beforeSend, .logItem), 1)
        XCTAssertGreaterThan(discards.quantity(.beforeSend, .logByte), "secret token".utf8.count)
        XCTAssertEqual(discards.quantity(.beforeSend, .span), 1)
        XCTAssertEqual(discards.quantity(.beforeSend, .traceMetric), 1)
        XCTAssertGreaterThan(discards.quantity(.beforeSend, .traceMetricByte), "drop.me".utf8.count)
    }

    /// An integration's drops before `add` are counted as `internal_sdk_error`, items only (never encoded,
    /// they have no bytes); none while consent is revoked.
    func testDropsBeforeAddAreCountedAsInternalErrors() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory))
        defer { buffer.close() }
        for signal in TelemetryBuffer.Signal.allCases { buffer.countDroppedBeforeAdd(signal) }
        buffer.countDroppedBeforeAdd(.log)
        let discards = try XCTUnwrap(buffer.pendingDiscards)
        XCTAssertEqual(discards.entries.map { "\($0.reason.rawValue)/\($0.category.rawValue)=\($0.quantity)" }.sorted(),
                       ["internal_sdk_error/log_item=2", "internal_sdk_error/span=1", "internal_sdk_error/trace_metric=1"])
        buffer.setDataCollection(.revoked)
        buffer.countDroppedBeforeAdd(.span)
        XCTAssertEqual(buffer.stats().drops["internal_sdk_error/span"], 1)
    }

    func testAHookThatAddsToTheBufferNeitherDeadlocksNorLoses() throws {
        final class Box: @unchecked Sendable { var buffer: TelemetryBuffer? }
        let box = Box()
        let buffer = try TelemetryBuffer(options: testOptions(directory) {
            $0.beforeSendLog = { log in
                // An add of its own, from inside the hook (it passes through the hook again).
                if log.body == "outer" { XCTAssertTrue(box.buffer?.add(log: .test("from the hook")) ?? false) }
                return log
            }
            $0.beforeSendSpan = { span in
                if span.name == "outer span" { box.buffer?.flush() }
                return span
            }
            $0.beforeSendMetric = { metric in
                if metric.name == "outer" { XCTAssertTrue(box.buffer?.add(log: .test("from the metric hook")) ?? false) }
                return metric
            }
        })
        box.buffer = buffer
        defer { buffer.close() }
        XCTAssertTrue(buffer.add(log: .test("outer")))
        XCTAssertTrue(buffer.add(span: .test("outer span", trace: TraceID(high: 1, low: 2))))
        XCTAssertTrue(buffer.add(metric: .counter("outer")))
        buffer.flush()
        XCTAssertEqual(Set(try logBodies(in: buffer.envelopesDirectory)), ["from the hook", "outer", "from the metric hook"])
        box.buffer = nil
    }

    /// A custom transport's `send` that logs (through the buffer) while a hook flushes or closes on such a
    /// log: the hook runs on the background queue, inside the forward that calls `send`, and its `flush()`
    /// or `close()` cannot run a forward there (one inside it sent the envelope under way again); each
    /// envelope goes once, and every log reaches the transport.
    func testAFlushOrCloseFromAHookOfALogTheTransportAddsSendsNothingTwice() throws {
        for closes in [false, true] {
            directory.remove()
            directory = try TemporaryDirectory()
            final class Logging: Transport, @unchecked Sendable {
                let buffer = Locked<TelemetryBuffer?>(nil)
                let sent = Locked<[String]>([])
                func send(_ envelope: Envelope) throws {
                    let bodies = try WalkedEnvelope(envelope.bytes).elements.compactMap { $0["body"] as? String }
                    let count = sent.withLock { $0.append(contentsOf: bodies); return $0.count }
                    if count < 6 { buffer.withLock { $0 }?.add(log: .test("sent \(count)")) }
                }
            }
            let transport = Logging()
            let buffer = try TelemetryBuffer(options: testOptions(directory) {
                $0.transport = transport
                $0.maxLogsPerBatch = 1
                $0.beforeSendLog = { [transport] log in
                    if log.body.hasPrefix("sent") {
                        if closes { transport.buffer.withLock { $0 }?.close() } else { transport.buffer.withLock { $0 }?.flush() }
                    }
                    return log
                }
            })
            transport.buffer.withLock { $0 = buffer }
            buffer.add(log: .test("first"))
            buffer.flush()
            // Each hook's flush is queued after the forward under way: the chain ends on its own.
            if !closes { eventually { transport.sent.withLock { $0.count } >= 6 } }
            buffer.close()
            transport.buffer.withLock { $0 = nil }
            let sent = transport.sent.withLock { $0 }
            XCTAssertEqual(sent.count, Set(sent).count, "closes: \(closes): none twice: \(sent)")
            XCTAssertTrue(sent.contains("first") && sent.contains("sent 1"), "closes: \(closes): \(sent)")
            if !closes { XCTAssertEqual(Set(sent), Set(["first"] + (1...5).map { "sent \($0)" }), "every log reached the transport") }
        }
    }

    /// A log the hook drops takes no `sentry.timestamp.sequence` number: the next one sent keeps its place.
    func testADroppedLogTakesNoSequenceNumber() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory) {
            $0.beforeSendLog = { $0.body == "dropped" ? nil : $0 }
        })
        defer { buffer.close() }
        let frozen = Date(timeIntervalSince1970: 1_767_261_600.125)
        for body in ["first", "dropped", "second"] {
            buffer.add(log: Log(level: .info, body: body, traceID: TraceID(high: 1, low: 2), timestamp: frozen))
        }
        buffer.flush()
        let logs = try walkEnvelopes(in: buffer.envelopesDirectory).flatMap(\.elements)
        let sequences = logs.map { (($0["attributes"] as? [String: [String: Any]])?["sentry.timestamp.sequence"]?["value"] as? Int) }
        XCTAssertEqual(sequences, [0, 1])
    }

    func testLogsBelowTheMinimumLevelNeverReachTheHook() throws {
        final class Seen: @unchecked Sendable { let bodies = Locked<[String]>([]) }
        let seen = Seen()
        let buffer = try TelemetryBuffer(options: testOptions(directory) {
            $0.minimumLogLevel = .info
            $0.beforeSendLog = { log in seen.bodies.withLock { $0.append(log.body) }; return log }
        })
        defer { buffer.close() }
        buffer.add(log: Log(level: .debug, body: "debug", traceID: TraceID(high: 1, low: 2)))
        buffer.add(log: Log(level: .info, body: "info", traceID: TraceID(high: 1, low: 2)))
        XCTAssertEqual(seen.bodies.withLock { $0 }, ["info"])
    }
}
