import Foundation
import XCTest
@testable import TelemetryBuffer

final class BatchingTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory.remove() }

    func testFlushWritesEverythingInOrderAndRespectsTheLogLimit() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.maxLogsPerBatch = 10 })
        for index in 0..<25 { XCTAssertTrue(buffer.add(log: .test("log \(index)"))) }
        buffer.flush()
        let envelopes = try walkEnvelopes(in: buffer.envelopesDirectory)
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), (0..<25).map { "log \($0)" })
        for envelope in envelopes {
            XCTAssertEqual(envelope.items.count, 1)
            let item = try XCTUnwrap(envelope.items.first)
            XCTAssertLessThanOrEqual(item.elements.count, 10)
            XCTAssertEqual(item.header["item_count"] as? Int, item.elements.count)
            XCTAssertEqual(item.header["content_type"] as? String, "application/vnd.sentry.items.log+json")
        }
    }

    func testReachingTheLogLimitForwardsWithoutAFlush() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.maxLogsPerBatch = 10 })
        for index in 0..<10 { buffer.add(log: .test("log \(index)")) }
        try eventually { try logBodies(in: buffer.envelopesDirectory).count == 10 }
        XCTAssertEqual(try walkEnvelopes(in: buffer.envelopesDirectory).count, 1)
    }

    func testReachingTheSpanLimitForwardsWithoutAFlush() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.maxSpansPerBatch = 5 })
        for index in 0..<5 { buffer.add(span: .test("span \(index)", trace: TraceID(high: 9, low: 9))) }
        try eventually { try walkEnvelopes(in: buffer.envelopesDirectory).flatMap(\.elements).count == 5 }
    }

    /// On a clock moved by hand: the first item arms the timer, nothing is written before
    /// `flushInterval`, everything at it, and no timer runs while the buffer is empty.
    func testTheTimerForwardsTheFirstItemsAndDoesNotRunWhileEmpty() throws {
        let clock = ManualClock()
        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.flushInterval = 5; $0.clock = clock })
        defer { buffer.close() }
        buffer.add(log: .test("first"))
        buffer.add(log: .test("second"))
        eventually { clock.pendingCount == 1 }
        XCTAssertEqual(clock.advance(by: 4.9), 0)
        buffer.waitForBackgroundWork()
        XCTAssertEqual(try walkEnvelopes(in: buffer.envelopesDirectory).count, 0, "not before the interval")
        XCTAssertEqual(clock.advance(by: 0.1), 1)
        buffer.waitForBackgroundWork()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["first", "second"])
        // Empty now: no timer is armed, however long the clock runs.
        XCTAssertEqual(clock.pendingCount, 0)
        XCTAssertEqual(clock.advance(by: 3600), 0)
        buffer.add(log: .test("third"))
        eventually { clock.pendingCount == 1 }
        clock.advance(by: 5)
        buffer.waitForBackgroundWork()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["first", "second", "third"])
    }

    /// A forward that fails as the app goes to the background (FileStreamCache cannot create its next
    /// `cache`) leaves the batch its timer, which forwards it once it can: stopped, nothing forwarded the
    /// batch until another limit, flush or background.
    func testAForwardThatFailsInTheBackgroundKeepsTheBatchsTimer() throws {
        let clock = ManualClock()
        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.strategy = .fileStreamCache; $0.flushInterval = 5; $0.clock = clock })
        defer { buffer.close() }
        buffer.add(log: .test("kept"))
        eventually { clock.pendingCount == 1 }
        Failpoint.streamCacheFails.failNext()
        buffer.didEnterBackground()
        buffer.waitForBackgroundWork()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), [], "the forward failed")
        clock.advance(by: 5)
        buffer.waitForBackgroundWork()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["kept"], "the batch's timer forwarded it")
    }

    func testTheByteLimitRotatesAndBoundsEveryEnvelope() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.maxBatchBytes = 4096 })
        let body = String(repeating: "x", count: 500)
        var accepted: [String] = []
        for index in 0..<40 {
            // A burst faster than fsync may overflow 4 KiB regions; then wait for the writer.
            if !buffer.add(log: .test("\(index) \(body)")) {
                buffer.flush()
                XCTAssertTrue(buffer.add(log: .test("\(index) \(body)")))
            }
            accepted.append("\(index) \(body)")
        }
        buffer.flush()
        let envelopes = try walkEnvelopes(in: buffer.envelopesDirectory)
        XCTAssertGreaterThan(envelopes.count, 5)
        for envelope in envelopes {
            XCTAssertLessThanOrEqual(envelope.items.first { $0.type == "log" }?.payload.count ?? 0, 4096)
        }
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), accepted)
    }

    func testAnItemLargerThanTheBatchIsRejectedAndCounted() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.maxBatchBytes = 4096 })
        XCTAssertFalse(buffer.add(log: .test(String(repeating: "y", count: 5000))))
        XCTAssertTrue(buffer.add(log: .test("small")))
        let pending = try XCTUnwrap(buffer.pendingDiscards)
        XCTAssertEqual(pending.quantity(.invalid, .logItem), 1)
        XCTAssertGreaterThan(pending.quantity(.invalid, .logByte), 5000)
        XCTAssertEqual(buffer.stats().drops["invalid/log_item"], 1)
    }

    func testCloseForwardsThenRejectsAndCountsEveryRejection() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory))
        buffer.add(log: .test("kept"))
        buffer.add(span: .test("kept span", trace: TraceID(high: 3, low: 3)))
        buffer.close()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["kept"])
        XCTAssertFalse(buffer.add(log: .test("late 1")))
        XCTAssertFalse(buffer.add(log: .test("late 2")))
        XCTAssertFalse(buffer.add(span: .test("late span", trace: TraceID(high: 3, low: 3))))
        let pending = try XCTUnwrap(buffer.pendingDiscards)
        XCTAssertEqual(pending.quantity(.bufferOverflow, .logItem), 2)
        XCTAssertEqual(pending.quantity(.bufferOverflow, .span), 1)
        buffer.close()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["kept"])
    }

    func testDidEnterBackgroundForwardsWithoutBlocking() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory))
        buffer.add(log: .test("before background"))
        buffer.didEnterBackground()
        try eventually { try logBodies(in: buffer.envelopesDirectory) == ["before background"] }
    }

    /// A wake-up for a batch that reached a limit (here: the log limit), run after a `flush()` that has
    /// forwarded that batch, forwards nothing: not part of what came next on its own, which would split a
    /// trace's spans over two envelopes. Every strategy.
    func testAWakeUpForABatchAFlushForwardedForwardsNothing() throws {
        for strategy in Options.Strategy.allCases {
            let folder = try TemporaryDirectory()
            defer { folder.remove() }
            let buffer = try TelemetryBuffer(options: testOptions(folder) {
                $0.strategy = strategy
                $0.maxLogsPerBatch = 10
                $0.maxCachedEnvelopes = 1000
            })
            for round in 0..<100 {
                for index in 0..<10 { buffer.add(log: .test("log \(round) \(index)")) }
                buffer.flush()
                let trace = TraceID(high: UInt64(round) + 1, low: 7)
                for index in 0..<2 { buffer.add(span: .test("span \(round) \(index)", trace: trace)) }
                buffer.flush()
            }
            let spans = try walkEnvelopes(in: buffer.envelopesDirectory).filter { $0.items.first?.type == "span" }
            XCTAssertEqual(spans.map { $0.items[0].elements.count }.filter { $0 != 2 }, [], "\(strategy): every round's spans in one envelope")
            XCTAssertEqual(spans.count, 100, "\(strategy)")
            buffer.close()
        }
    }

    /// Two batches due when the background queue wakes: one swapped out full (of bytes), and the one
    /// after it at its log limit; their wake-ups merge while a forward holds the queue (in the transport).
    /// Both are forwarded then, not the second only when the timer fires (here it never does).
    func testTwoBatchesDueAtOneWakeUpAreBothForwarded() throws {
        for strategy in Options.Strategy.allCases {
            let folder = try TemporaryDirectory()
            defer { folder.remove() }
            let (buffer, transport) = try bufferWithHeldTransport(strategy, in: folder) {
                $0.maxLogsPerBatch = 5
                $0.maxBatchBytes = 16384
                $0.clock = ManualClock()
            }
            let small = (0..<10).map { "log \($0)" }
            // 4,000 bytes and a record's own (well under 1,400 bytes): three fit in a batch, four do not.
            let large = (0..<4).map { "large \($0) " + String(repeating: "x", count: 4000) }
            // At the limit: forwarded, and the transport holds the queue.
            for body in small[0..<5] { XCTAssertTrue(buffer.add(log: .test(body))) }
            transport.waitUntilHeld()
            // Three large logs fill the next batch's bytes; the fourth starts the one after, which the
            // small ones then bring to its log limit.
            for body in large + small[5...] { XCTAssertTrue(buffer.add(log: .test(body)), "\(strategy)") }
            transport.open()
            let expected = Array(small[0..<5] + large + small[5...])
            try eventually { try logBodies(in: transport.inner.directory).count == expected.count }
            XCTAssertEqual(try logBodies(in: transport.inner.directory).map { $0.prefix(8) }, expected.map { $0.prefix(8) }, "\(strategy)")
            buffer.close()
        }
    }

    /// A buffer with `strategy` whose transport holds its first envelope (and so the background queue)
    /// until the test opens it.
    private func bufferWithHeldTransport(
        _ strategy: Options.Strategy, in folder: TemporaryDirectory, _ configure: (inout Options) -> Void
    ) throws -> (TelemetryBuffer, GatedTransport) {
        let transport = try GatedTransport(directory: folder.url.appendingPathComponent("out"))
        let buffer = try TelemetryBuffer(options: testOptions(folder) {
            $0.strategy = strategy
            $0.transport = transport
            configure(&$0)
        })
        return (buffer, transport)
    }

    func testSpansAreBucketedOneTracePerEnvelope() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.maxSpansPerBatch = 5 })
        let traces = (1...3).map { TraceID(high: UInt64($0), low: 42) }
        // Interleaved: 7 spans of trace 1, 3 of trace 2, 2 of trace 3; trace 1 needs two envelopes.
        var expected: [TraceID: Int] = [:]
        for index in 0..<12 {
            let trace = index < 9 && index % 3 != 2 ? traces[0] : (index % 2 == 0 ? traces[1] : traces[2])
            expected[trace, default: 0] += 1
            buffer.add(span: .test("span \(index)", trace: trace))
            buffer.add(log: .test("log \(index)", trace: trace))
        }
        buffer.flush()
        var seen: [TraceID: Int] = [:]
        for envelope in try walkEnvelopes(in: buffer.envelopesDirectory) where envelope.items.first?.type == "span" {
            XCTAssertEqual(envelope.items.count, 1, "one span item, no logs mixed in")
            let context = try XCTUnwrap(envelope.header["trace"] as? [String: String])
            let trace = try XCTUnwrap(TraceID(try XCTUnwrap(context["trace_id"])))
            let spans = envelope.items[0].elements
            XCTAssertLessThanOrEqual(spans.count, 5)
            XCTAssertTrue(spans.allSatisfy { $0["trace_id"] as? String == trace.description })
            seen[trace, default: 0] += spans.count
        }
        XCTAssertEqual(seen, expected)
    }

    /// Fills the active region while the other one is stuck in the transport: the caller is never
    /// blocked, the overflow is dropped and counted, a trace that lost a span takes no more spans in
    /// that batch, and every span that was accepted is still delivered.
    func testOverflowDropsAndCountsButKeepsEveryAcceptedItem() throws {
        // FlushAll hands envelopes to the transport on the background queue: holding it holds every forward.
        let (buffer, transport) = try bufferWithHeldTransport(.flushAll, in: directory) { $0.maxBatchBytes = 4096 }
        // The items' sizes, and so the bytes the logs leave for the spans below, must not hang on the
        // machine or the clock: the attributes saying where the test runs are fixed (the items' own win),
        // and each log has a millisecond of its own, so every `sentry.timestamp.sequence` is 0.
        var here = Attributes(), hereForSpans = Attributes()
        for attribute in DeviceContext.logAttributes { here[attribute.key] = "x" }
        for attribute in DeviceContext.spanAttributes { hereForSpans[attribute.key] = "x" }
        // 280: the logs then leave B room for a small span, not for a padded one (260 to 300 do; 240 and
        // 320 leave too little).
        let padding = String(repeating: "p", count: 280)
        var millisecond = 0.0
        func log(_ body: String) -> Log {
            millisecond += 0.001
            return Log(level: .info, body: body, traceID: TraceID(high: 1, low: 2),
                       timestamp: Date(timeIntervalSince1970: 1_767_261_600 + millisecond), attributes: here)
        }
        func span(_ name: String, trace: TraceID) -> Span {
            var span = Span.test(name, trace: trace)
            span.attributes = hereForSpans
            return span
        }
        var accepted = (0..<3).map { "a\($0) \(padding)" }
        for body in accepted { XCTAssertTrue(buffer.add(log: log(body))) }
        // Region A goes to the transport and is held there; region B takes the adds.
        buffer.didEnterBackground()
        transport.waitUntilHeld()

        let doomed = TraceID(high: 0xD, low: 0xD), kept = TraceID(high: 0xC, low: 0xC)
        XCTAssertTrue(buffer.add(span: span("doomed 0", trace: doomed)))
        XCTAssertTrue(buffer.add(span: span("kept 0", trace: kept)))
        var index = 0
        while buffer.add(log: log("b\(index) \(padding)")) {
            accepted.append("b\(index) \(padding)")
            index += 1
        }
        XCTAssertGreaterThan(index, 3)
        XCTAssertFalse(buffer.add(log: log("c\(index) \(padding)")), "B stays full while A is held")
        XCTAssertFalse(buffer.add(span: span("doomed 1 \(padding)", trace: doomed)), "too big for what is left")
        XCTAssertFalse(buffer.add(span: span("d", trace: doomed)), "a cut trace takes no more spans")
        XCTAssertTrue(buffer.add(span: span("k", trace: kept)), "other traces still fit")

        transport.open()
        buffer.close()
        let envelopes = try walkEnvelopes(in: transport.inner.directory)
        XCTAssertEqual(try logBodies(in: transport.inner.directory), accepted, "every accepted log, once, in order")
        let spanNames = envelopes.flatMap { $0.items.filter { $0.type == "span" }.flatMap(\.elements) }
            .compactMap { $0["name"] as? String }
        XCTAssertEqual(spanNames, ["doomed 0", "kept 0", "k"], "accepted spans are delivered")
        let discards = buffer.stats().drops
        XCTAssertEqual(discards["buffer_overflow/log_item"], 2)
        XCTAssertGreaterThan(discards["buffer_overflow/log_byte"] ?? 0, 2 * 300)
        XCTAssertEqual(discards["buffer_overflow/span"], 2, "the two rejected spans")
    }

    /// Every strategy, its background queue held in the transport: adds fill what is left, then are
    /// refused at once (the caller never waits), each refusal counted; everything accepted arrives.
    func testWhenBothHalvesAreFullNewItemsAreDroppedAndCounted() throws {
        for strategy in Options.Strategy.allCases {
            let folder = try TemporaryDirectory()
            defer { folder.remove() }
            let (buffer, transport) = try bufferWithHeldTransport(strategy, in: folder) { $0.maxBatchBytes = 4096 }
            XCTAssertTrue(buffer.add(log: .test("first")))
            buffer.didEnterBackground()
            transport.waitUntilHeld()
            var accepted = ["first"]
            var refused = 0
            for index in 0..<100 {
                let body = "fill \(index) " + String(repeating: "f", count: 300)
                if buffer.add(log: .test(body)) { accepted.append(body) } else { refused += 1 }
            }
            XCTAssertGreaterThan(refused, 0, strategy.rawValue)
            XCTAssertGreaterThan(accepted.count, 5, strategy.rawValue)
            XCTAssertEqual(buffer.pendingDiscards?.quantity(.bufferOverflow, .logItem), refused, strategy.rawValue)
            transport.open()
            buffer.close()
            XCTAssertEqual(try logBodies(in: transport.inner.directory), accepted, strategy.rawValue)
        }
    }

    func testConcurrentAddsFlushesAndCloseLoseNothingAndDuplicateNothing() throws {
        for strategy in Options.Strategy.allCases {
            let folder = try TemporaryDirectory()
            defer { folder.remove() }
            try concurrentAdds(TelemetryBuffer(options: testOptions(folder) {
                $0.strategy = strategy
                $0.maxLogsPerBatch = 50
                $0.maxCachedEnvelopes = 10_000
                $0.ioSyncInterval = 0.001  // the IO cache copies the list while threads append to it
            }))
        }
    }

    private func concurrentAdds(_ buffer: TelemetryBuffer) throws {
        let threads = 4, perThread = 2000
        let accepted = Locked(Set<String>())
        DispatchQueue.concurrentPerform(iterations: threads + 1) { thread in
            if thread == threads {
                for _ in 0..<20 { buffer.flush(); usleep(1000) }
                return
            }
            for index in 0..<perThread {
                let body = "t\(thread) i\(index)"
                if buffer.add(log: .test(body)) { _ = accepted.withLock { $0.insert(body) } }
            }
        }
        buffer.close()
        let bodies = try logBodies(in: buffer.envelopesDirectory)
        XCTAssertEqual(bodies.count, Set(bodies).count, "no duplicates")
        XCTAssertEqual(Set(bodies), accepted.withLock { $0 })
        let drops = buffer.stats().drops["buffer_overflow/log_item"] ?? 0
        XCTAssertEqual(bodies.count + drops, threads * perThread, "every item delivered or counted")
        // Per thread, the order of arrival is kept.
        for thread in 0..<threads {
            let own = bodies.filter { $0.hasPrefix("t\(thread) ") }.map { Int($0.split(separator: "i")[1])! }
            XCTAssertEqual(own, own.sorted())
        }
    }

    func testReleasingABufferWithoutCloseForwardsWhatItHeld() throws {
        var buffer: TelemetryBuffer? = try TelemetryBuffer(options: testOptions(directory))
        let folder = buffer!.envelopesDirectory
        buffer!.add(log: .test("orphan"))
        buffer = nil
        try eventually { try logBodies(in: folder) == ["orphan"] }
    }

    func testFlushWithTimeoutAndFromManyThreads() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory))
        buffer.add(log: .test("x"))
        XCTAssertTrue(buffer.flush(timeout: 30))
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["x"])
        DispatchQueue.concurrentPerform(iterations: 8) { _ in buffer.flush() }
        XCTAssertEqual(try walkEnvelopes(in: buffer.envelopesDirectory).count, 1, "empty flushes write nothing")
    }
}
