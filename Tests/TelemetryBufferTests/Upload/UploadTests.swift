import Foundation
import XCTest
@testable import TelemetryBuffer

/// The uploader against a real HTTP server on 127.0.0.1 started by each test; every timing in milliseconds.
final class UploadTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var servers: [TestServer] = []

    override func setUpWithError() throws { directory = try TemporaryDirectory() }

    override func tearDown() {
        for server in servers { XCTAssertEqual(server.violations.withLock { $0 }, [], "every request is well-formed") }
        directory.remove()
    }

    /// A server on 127.0.0.1 that checks every complete request's path, auth, content type and framing.
    private func server(_ script: @escaping @Sendable (TestServer.Request, Int) -> TestServer.Answer = TestServer.sequence([]))
        throws -> TestServer {
        let server = try TestServer(script: script)
        server.check = { request in
            guard request.method == "POST", request.path == "/api/42/envelope/" else { return "\(request.method) \(request.path)" }
            guard request.headers["x-sentry-auth"]?.hasPrefix("Sentry sentry_version=7, sentry_client=") == true,
                  request.headers["x-sentry-auth"]?.hasSuffix(", sentry_key=publickey") == true else { return "auth" }
            guard request.headers["content-type"] == "application/x-sentry-envelope" else { return "content type" }
            do {
                let envelope = try WalkedEnvelope(request.body)
                return envelope.header["sent_at"] is String ? nil : "no sent_at"
            } catch {
                return "framing: \(error)"
            }
        }
        servers.append(server)
        return server
    }

    private func buffer(_ server: TestServer, _ configure: (inout Options) -> Void = { _ in }) throws -> TelemetryBuffer {
        try TelemetryBuffer(options: uploadingOptions(directory, to: server) {
            $0.uploadOptions.backoffBase = 0.005
            $0.uploadOptions.coolOff = 0.05
            $0.uploadOptions.requestTimeout = 30  // a loaded machine's stall must not count as a failure
            configure(&$0)
        })
    }

    private func stored(_ buffer: TelemetryBuffer) -> Int { buffer.stats().stored.values.reduce(0) { $0 + $1.envelopes } }

    /// The bodies the server accepted (status 2xx in its script), walked strictly.
    private func bodies(_ server: TestServer, _ indices: [Int]? = nil) throws -> [WalkedEnvelope] {
        let requests = server.requests.withLock { $0 }
        return try (indices ?? Array(requests.indices)).map { try WalkedEnvelope(requests[$0].body) }
    }

    func testEnvelopesAreSentOldestFirstWithAuthAndDeleted() throws {
        let server = try server()
        defer { server.stop() }
        let buffer = try buffer(server)
        let trace = TraceID(high: 5, low: 5)
        for index in 0..<3 { buffer.add(log: .test("log \(index)")) }
        buffer.add(span: .test("span", trace: trace))
        buffer.flush()
        eventually { stored(buffer) == 0 && server.requests.withLock { $0.count } == 2 }
        let requests = server.requests.withLock { $0 }
        for request in requests {
            XCTAssertEqual(request.method, "POST")
            XCTAssertEqual(request.path, "/api/42/envelope/")
            XCTAssertEqual(request.headers["x-sentry-auth"],
                           "Sentry sentry_version=7, sentry_client=sentry.swift.telemetry-buffer/\(TelemetryBuffer.version), sentry_key=publickey")
            XCTAssertEqual(request.headers["content-type"], "application/x-sentry-envelope")
            XCTAssertEqual(request.headers["user-agent"], "sentry.swift.telemetry-buffer/\(TelemetryBuffer.version)")
            let envelope = try WalkedEnvelope(request.body)
            XCTAssertNotNil(envelope.header["sent_at"] as? String)
            XCTAssertEqual(String(decoding: request.body, as: UTF8.self).components(separatedBy: "sent_at").count, 2)
        }
        let sent = try bodies(server)
        XCTAssertEqual(sent.map { $0.items.map(\.type) }, [["log"], ["span"]], "oldest first, no empty client report")
        XCTAssertEqual(sent[0].elements.compactMap { $0["body"] as? String }, ["log 0", "log 1", "log 2"])
        eventually { buffer.stats().upload == .idle }
        buffer.close()
    }

    /// Bodies of at least `Gzip.threshold` bytes go gzip-compressed (the server decompresses each with the
    /// system's `gzip` and walks it), smaller ones as they are; the stats count both.
    func testLargeBodiesAreSentGzippedAndSmallOnesAsTheyAre() throws {
        let server = try server()
        defer { server.stop() }
        let buffer = try buffer(server) { $0.maxLogsPerBatch = 100 }
        buffer.add(log: Log(level: .info, body: "s", traceID: TraceID(high: 1, low: 1)))
        buffer.flush()
        for index in 0..<100 {
            buffer.add(log: .test("Checkout \"express\" finished for order \(7000 + index) after 3 retries",
                                  attributes: ["http.route": "/checkout", "http.status_code": 200, "cache.hit": true]))
        }
        buffer.flush()
        eventually { server.requests.withLock { $0.count } == 2 && stored(buffer) == 0 }
        let requests = server.requests.withLock { $0 }
        XCTAssertLessThan(requests[0].body.count, Gzip.threshold)
        XCTAssertNil(requests[0].headers["content-encoding"], "a small body goes as it is")
        XCTAssertEqual(requests[0].wireBytes, requests[0].body.count)
        XCTAssertEqual(requests[1].headers["content-encoding"], "gzip")
        XCTAssertEqual(try WalkedEnvelope(requests[1].body).elements.count, 100, "decompressed and walked")
        XCTAssertLessThan(requests[1].wireBytes * 4, requests[1].body.count, "typical logs compress well")
        let stats = buffer.stats()
        XCTAssertEqual(stats.bytesSent, requests.reduce(0) { $0 + $1.wireBytes })
        XCTAssertEqual(stats.bytesSavedByGzip, requests[1].body.count - requests[1].wireBytes)
        buffer.close()
    }

    /// Without zlib (the failpoint stands in for a system that has none) the demo still uploads, uncompressed.
    func testWithoutZlibBodiesGoUncompressed() throws {
        let server = try server()
        defer { server.stop() }
        let stress = try Demo.run(["stress", "--dir", directory.url.path, "--dsn", server.dsn, "--count", "30"])
        XCTAssertEqual(stress.status, 0, stress.errors)
        let upload = try Demo.run(["upload", "--dir", directory.url.path, "--dsn", server.dsn, "--timeout", "20"],
                                  failing: .zlibMissing)
        XCTAssertEqual(upload.status, 0, upload.output + upload.errors)
        XCTAssertFalse(upload.errors.contains("libdispatch"), "the uploader's timers: \(upload.errors)")
        let requests = server.requests.withLock { $0 }
        XCTAssertEqual(requests.count, 1)
        XCTAssertGreaterThan(requests[0].body.count, Gzip.threshold)
        XCTAssertNil(requests[0].headers["content-encoding"])
        XCTAssertEqual(try WalkedEnvelope(requests[0].body).elements.count, 30)
        XCTAssertTrue(upload.output.contains("gzip saved 0"), upload.output)
    }

    func testTheBackoffScheduleDoublesWithJitterThenCoolsOff() {
        var options = UploadOptions()
        XCTAssertEqual(options.backoffBase, 3)
        XCTAssertEqual(options.maxAttempts, 5)
        XCTAssertEqual(options.coolOff, 1800)
        for (failure, delay) in [(1, 3.0), (2, 6.0), (3, 12.0), (4, 24.0)] {
            XCTAssertEqual(options.wait(afterFailure: failure, jitter: 0).seconds, delay)
            XCTAssertEqual(options.wait(afterFailure: failure, jitter: 0.5).seconds, delay * 1.5)
            XCTAssertFalse(options.wait(afterFailure: failure, jitter: 0.99).coolOff)
        }
        XCTAssertEqual(options.wait(afterFailure: 5, jitter: 0.7).seconds, 1800)
        XCTAssertTrue(options.wait(afterFailure: 5, jitter: 0.7).coolOff)
        options.backoffBase = 0.01
        XCTAssertEqual(options.wait(afterFailure: 3, jitter: 0).seconds, 0.04, accuracy: 1e-12)
    }

    /// Settings at the edges never make the uploader spin or sleep for years: a cool-off shorter than the
    /// first backoff rests that backoff (with one attempt and no cool-off, a failing server got 2,131
    /// requests in 3 s), and no backoff waits longer than the cool-off (with 40 attempts, the 31st waited
    /// 3 s × 2^30, a century).
    func testNoBackoffIsShorterThanTheFirstNorLongerThanTheCoolOff() {
        var options = UploadOptions()
        options.maxAttempts = 1
        options.coolOff = 0
        XCTAssertEqual(options.wait(afterFailure: 1, jitter: 0).seconds, 3)
        XCTAssertTrue(options.wait(afterFailure: 1, jitter: 0).coolOff)
        options.maxAttempts = 40
        options.coolOff = 1800
        for failure in 1..<40 {
            XCTAssertLessThanOrEqual(options.wait(afterFailure: failure, jitter: 0).seconds, 1800, "failure \(failure)")
        }
        XCTAssertEqual(options.wait(afterFailure: 12, jitter: 0.5).seconds, 2700, "the jitter on top, as on every backoff")
    }

    func testRetryableFailuresAreRetriedThroughACoolOffUntilAccepted() throws {
        // 503, 500, 408, a connection reset mid-body, 502 (the fifth failure: cool-off), then accepted.
        let server = try server(TestServer.sequence([.respond(503), .respond(500), .respond(408), .resetMidBody, .respond(502)]))
        defer { server.stop() }
        let buffer = try buffer(server)
        buffer.add(log: .test("persistent"))
        buffer.flush()
        eventually { stored(buffer) == 0 }
        XCTAssertEqual(server.requests.withLock { $0.count }, 6)
        let last = try bodies(server, [5])[0]
        XCTAssertEqual(last.elements.compactMap { $0["body"] as? String }, ["persistent"])
        XCTAssertNil(buffer.stats().drops["network_error/log_item"], "nothing dropped while retrying")
        buffer.close()
    }

    /// A server down for everything (a proxy answering 503 through an outage) is no reason to drop
    /// anything: the envelopes wait through backoffs and cool-offs until the server takes them.
    func testAnOutageAnsweredWith5xxDropsNothing() throws {
        let server = try server { _, index in index < 12 ? .respond(503) : .respond(200) }
        defer { server.stop() }
        let buffer = try buffer(server) { $0.maxLogsPerBatch = 1 }
        buffer.add(log: .test("first"))
        buffer.flush()
        buffer.add(log: .test("second"))
        buffer.flush()
        eventually { stored(buffer) == 0 && buffer.stats().upload == .idle }
        let delivered = try bodies(server, Array(12..<server.requests.withLock { $0.count })).flatMap(\.elements).compactMap { $0["body"] as? String }
        XCTAssertEqual(delivered, ["first", "second"])
        XCTAssertNil(buffer.stats().drops["send_error/log_item"], "nothing dropped through the outage")
        buffer.close()
    }

    /// An envelope the server keeps failing (a 503 for it, whatever comes after) holds the queue only until
    /// it is older than `maxEnvelopeAge`: the uploader then removes it (`cache_overflow`, as a start does) and
    /// sends the next one, which is not that old.
    func testAnEnvelopeFailingPastMaxEnvelopeAgeIsRemovedAndTheQueueGoesOn() throws {
        let server = try server { request, _ in String(decoding: request.body, as: UTF8.self).contains("poison") ? .respond(503) : .respond(200) }
        defer { server.stop() }
        let clock = ManualClock()
        let buffer = try buffer(server) { $0.clock = clock; $0.maxEnvelopeAge = 3600 }
        /// Whether `count` requests were answered (the wake-ups due now handed over meanwhile).
        func answered(_ count: Int) -> Bool {
            clock.advance(by: 0)
            return server.requests.withLock { $0.count } == count && buffer.stats().upload != .sending
        }
        buffer.add(log: .test("poison"))
        buffer.flush()
        eventually { answered(1) }
        clock.advance(by: 1800)
        eventually { answered(2) }
        buffer.add(log: .test("later"))
        buffer.flush()
        clock.advance(by: 1801)
        eventually { answered(3) && stored(buffer) == 0 }
        let bodies = server.requests.withLock { $0 }.map { String(decoding: $0.body, as: UTF8.self) }
        XCTAssertEqual(bodies.map { $0.contains("poison") }, [true, true, false], "the poison twice, then the next envelope")
        XCTAssertEqual(buffer.stats().drops["cache_overflow/log_item"], 1)
        buffer.close()
    }

    func testRejectedEnvelopesAreDeletedCountedAndReportedWithTheNextOne() throws {
        let server = try server(TestServer.sequence([.respond(400), .respond(413), .respond(400)]))
        defer { server.stop() }
        let errors = Locked<[String]>([])
        let buffer = try buffer(server) {
            $0.maxLogsPerBatch = 1
            $0.diagnosticHandler = { diagnostic in
                if diagnostic.level == .error { errors.withLock { $0.append(diagnostic.message) } }
            }
        }
        for index in 0..<2 {
            buffer.add(log: .test("log \(index)"))
            buffer.flush()
        }
        buffer.add(metric: .counter("rejected", value: 2))
        buffer.add(metric: .counter("rejected too"))
        buffer.flush()
        buffer.add(log: .test("log 2"))
        buffer.flush()
        eventually { stored(buffer) == 0 && server.requests.withLock { $0.count } == 4 }
        let accepted = try bodies(server, [3])[0]
        XCTAssertEqual(accepted.elements.compactMap { $0["body"] as? String }, ["log 2"])
        XCTAssertEqual(accepted.discards["send_error/log_item"], 2, "the client report rides with the next envelope")
        XCTAssertEqual(accepted.discards["send_error/trace_metric"], 2, "metrics, by item, not by value")
        XCTAssertGreaterThan(accepted.discards["send_error/trace_metric_byte"] ?? 0, 100)
        XCTAssertNil(buffer.pendingDiscards, "reset once Sentry accepted it")
        XCTAssertEqual(buffer.stats().drops["send_error/log_item"], 2)
        XCTAssertEqual(buffer.stats().drops["send_error/trace_metric"], 2)
        buffer.close()
        XCTAssertEqual(errors.withLock { $0 }.filter { $0.contains("upload:") }.count, 1, "a 413 is an error: the envelope was too large")
    }

    /// The drop counts saved in `buffer`'s folder (`nil` if there is no such file).
    private func savedDrops(_ buffer: TelemetryBuffer) throws -> [String: Int]? {
        let file = buffer.directory.appendingPathComponent("telemetry-buffer/client-report")
        guard let data = FileManager.default.contents(atPath: file.path) else { return nil }
        let item = try WalkedEnvelope(Array("{}\n{\"type\":\"client_report\",\"length\":\(data.count)}\n".utf8) + Array(data) + [0x0A])
        return item.discards
    }

    func testDropsNotSentBeforeCloseGoOutWithTheNextBuffersFirstUploadOnce() throws {
        let server = try server()
        defer { server.stop() }
        // Offline (no uploads), one envelope kept: each flush after the first evicts one.
        let offline = try buffer(server) { $0.upload = false; $0.maxCachedEnvelopes = 1; $0.maxLogsPerBatch = 1 }
        for index in 0..<3 {
            offline.add(log: .test("log \(index)"))
            offline.flush()
        }
        XCTAssertEqual(offline.stats().drops["cache_overflow/log_item"], 2)
        offline.close()
        XCTAssertEqual(try savedDrops(offline)?["cache_overflow/log_item"], 2, "saved at close")

        // A start that sends nothing keeps them (once, not added to themselves).
        let stillOffline = try buffer(server) { $0.upload = false; $0.maxCachedEnvelopes = 1 }
        stillOffline.flush()
        XCTAssertNil(stillOffline.stats().drops["cache_overflow/log_item"], "not this buffer's drops")
        stillOffline.close()
        XCTAssertEqual(try savedDrops(offline)?["cache_overflow/log_item"], 2)

        let online = try buffer(server)
        eventually { stored(online) == 0 && server.requests.withLock { $0.count } == 1 && online.stats().upload == .idle }
        let sent = try bodies(server, [0])[0]
        XCTAssertEqual(sent.elements.compactMap { $0["body"] as? String }, ["log 2"])
        XCTAssertEqual(sent.discards["cache_overflow/log_item"], 2, "the earlier buffer's drops ride with the first request")
        XCTAssertNil(try savedDrops(online), "removed before they were sent")
        online.close()
        XCTAssertNil(try savedDrops(online), "nothing left to save")

        let next = try buffer(server)
        next.add(log: .test("later"))
        next.flush()
        eventually { server.requests.withLock { $0.count } == 2 && next.stats().upload == .idle }
        XCTAssertNil(try bodies(server, [1])[0].discards["cache_overflow/log_item"], "sent once")
        next.close()
    }

    func testDropsOfAProcessKilledAfterItsForwardsReachTheNextProcessesUpload() throws {
        let server = try server()
        defer { server.stop() }
        // A real process, offline, keeping one envelope, SIGKILLed 2 s after its last add: its forwards
        // (and their evictions) are done, and saved after them (the demo's sync interval is 10 ms).
        let child = try Demo.run(["crash", "--kind", "kill", "--dir", directory.url.path, "--dsn", server.dsn, "--after", "350",
                                  "--linger-us", "2000000", "--max-envelopes", "1"], backtrace: false)
        XCTAssertEqual(child.status, -SIGKILL, child.errors)
        let acknowledged = child.lines.filter { $0.hasPrefix("ack ") }.count
        let buffer = try buffer(server)
        eventually { stored(buffer) == 0 && buffer.stats().upload == .idle && server.requests.withLock { $0.count } > 0 }
        let sent = try bodies(server)
        let evicted = sent.reduce(0) { $0 + ($1.discards["cache_overflow/log_item"] ?? 0) }
        let delivered = sent.flatMap(\.elements).count
        XCTAssertGreaterThan(evicted, 0, "saved by a forward before the kill")
        XCTAssertLessThanOrEqual(delivered + evicted, acknowledged, "none counted twice")
        XCTAssertEqual(Set(sent.flatMap(\.elements).compactMap { $0["body"] as? String }).count, delivered, "none delivered twice")
        buffer.close()
    }

    /// Real signals at random moments across a child's forwards (evicting and saving as they go): whatever
    /// the moment, no eviction is counted twice, by the first process after it or by the one after that.
    func testDropsSavedBeforeACrashAtARandomMomentAreNeverSentTwice() throws {
        var generator = SystemRandomNumberGenerator()
        for (run, kind) in ["segv", "abort", "kill"].enumerated() {
            let folder = try TemporaryDirectory()
            directory.remove()  // setUp's, or the last run's: one folder per run
            directory = folder
            let server = try server()
            defer { server.stop() }
            let after = Int.random(in: 150...600, using: &generator), linger = Int.random(in: 0...20_000, using: &generator)
            let label = "run \(run): \(kind) after \(after) items, \(linger) µs later"
            let child = try Demo.run(["crash", "--kind", kind, "--dir", folder.url.path, "--dsn", server.dsn, "--after", String(after),
                                      "--linger-us", String(linger), "--max-envelopes", "1"], backtrace: false)
            // Dead by its signal (under ThreadSanitizer, which CI runs these tests with too, its own handler takes
            // a fault and exits with 66 instead).
            XCTAssertTrue(child.status < 0 || child.status == 66, "\(label): status \(child.status): \(child.errors.suffix(500))")
            let acknowledged = child.lines.filter { $0.hasPrefix("ack ") }.count
            for start in 0..<2 {
                let buffer = try buffer(server)
                buffer.add(log: .test("start \(start)"))
                buffer.flush()
                eventually { stored(buffer) == 0 && buffer.stats().upload == .idle }
                buffer.close()
            }
            let sent = try bodies(server)
            let evicted = sent.reduce(0) { $0 + ($1.discards["cache_overflow/log_item"] ?? 0) }
            let delivered = sent.flatMap(\.elements).compactMap { $0["body"] as? String }.filter { $0.hasPrefix("item ") }
            XCTAssertEqual(Set(delivered).count, delivered.count, "\(label): none delivered twice")
            XCTAssertLessThanOrEqual(delivered.count + evicted, acknowledged, "\(label): none counted twice")
        }
    }

    func testDropsOfAProcessThatExitsHoldingItsBufferReachTheNextProcessesUpload() throws {
        let server = try server()
        defer { server.stop() }
        // A real process, offline, keeping one envelope: it exits without `close()` (the exit hook forwards).
        let child = try Demo.run(["stress", "--dir", directory.url.path, "--dsn", server.dsn, "--count", "350",
                                  "--max-envelopes", "1", "--exit-holding"])
        XCTAssertEqual(child.status, 0, child.errors)
        let acknowledged = child.lines.filter { $0.hasPrefix("ack ") }.count
        let buffer = try buffer(server)
        eventually { stored(buffer) == 0 && buffer.stats().upload == .idle && server.requests.withLock { $0.count } > 0 }
        let sent = try bodies(server)
        let evicted = sent.reduce(0) { $0 + ($1.discards["cache_overflow/log_item"] ?? 0) }
        XCTAssertGreaterThan(evicted, 0)
        XCTAssertEqual(sent.flatMap(\.elements).count + evicted, acknowledged, "each acknowledged log delivered or counted as evicted")
        buffer.close()
    }

    func testDropsAreSavedAfterAForwardOncePerSyncIntervalAndWhenTheAppGoesToTheBackground() throws {
        let server = try server()
        defer { server.stop() }
        let clock = ManualClock()
        // Batches forwarded only by the flushes: an add at a batch limit would wake a forward of its own, which
        // could come after the clock moved and save before the flush's eviction.
        let buffer = try buffer(server) { $0.upload = false; $0.maxCachedEnvelopes = 1; $0.clock = clock; $0.ioSyncInterval = 5 }
        for index in 0..<4 {
            buffer.add(log: .test("log \(index)"))
            buffer.flush()
        }
        XCTAssertEqual(try savedDrops(buffer)?["cache_overflow/log_item"], 1, "saved by the first forward that dropped, not by every one")
        clock.advance(by: 5)
        buffer.add(log: .test("log 4"))
        buffer.flush()
        XCTAssertEqual(try savedDrops(buffer)?["cache_overflow/log_item"], 4, "and again once the interval passed")
        buffer.add(log: .test("log 5"))
        buffer.flush()
        XCTAssertEqual(try savedDrops(buffer)?["cache_overflow/log_item"], 4)
        buffer.didEnterBackground()
        try eventually { try savedDrops(buffer)?["cache_overflow/log_item"] == 5 }
        let file = buffer.directory.appendingPathComponent("telemetry-buffer/client-report").path
        let written = try FileManager.default.attributesOfItem(atPath: file)[.systemFileNumber] as? Int
        buffer.didEnterBackground()
        buffer.flush()  // after the second background's forward, on the same queue
        XCTAssertEqual(try FileManager.default.attributesOfItem(atPath: file)[.systemFileNumber] as? Int, written,
                       "the same counts are not written again")
        buffer.close()
    }

    /// While requests go out, a forward does not save the counts: the next request takes them, and would
    /// only remove the file again, with a sync.
    func testAForwardWhileRequestsGoOutSavesNothing() throws {
        let server = try server()
        defer { server.stop() }
        let buffer = try buffer(server)
        XCTAssertFalse(buffer.add(log: .test(String(repeating: "x", count: 1 << 20))), "too large: dropped")
        buffer.add(log: .test("kept"))
        buffer.flush()
        XCTAssertNil(try savedDrops(buffer))
        eventually { server.requests.withLock { $0.count } == 1 && buffer.stats().upload == .idle }
        XCTAssertEqual(try bodies(server, [0])[0].discards["invalid/log_item"], 1)
        buffer.close()
        XCTAssertNil(try savedDrops(buffer), "nothing left to save")
    }

    /// Counts a failed request carried are pending again, and saved at once (no sync) when the uploader
    /// then waits: a process killed before its next request or forward would lose them otherwise. The next
    /// request removes the file again. After a rejection the next envelope goes at once and carries them:
    /// nothing is saved (a save would cost a drive flush per envelope while a backlog is rejected).
    func testDropsARequestCarriedAreSavedWhenItFails() throws {
        // A retry (503), a rate limit (429, every category for 60 s) and a rejection (400, the envelope deleted).
        for status in [503, 429, 400] {
            directory.remove()
            directory = try TemporaryDirectory()
            let server = try server(TestServer.sequence([.respond(status, headers: ["Retry-After": "60"])]))
            defer { server.stop() }
            let clock = ManualClock()
            let buffer = try buffer(server) { $0.clock = clock }
            XCTAssertFalse(buffer.add(log: .test(String(repeating: "x", count: 1 << 20))), "too large: dropped")
            buffer.add(log: .test("first"))
            buffer.flush()
            eventually {
                clock.advance(by: 0)  // the wake-up of the envelope stored
                return server.requests.withLock { $0.count } == 1 && buffer.stats().upload != .sending
            }
            XCTAssertEqual(try savedDrops(buffer)?["invalid/log_item"], status == 400 ? nil : 1,
                           "\(status): saved when the request that carried them failed, unless the next goes at once")
            clock.advance(by: 61)
            buffer.add(log: .test("second"))
            buffer.flush()
            eventually {
                clock.advance(by: 0.001)
                return stored(buffer) == 0 && buffer.stats().upload == .idle
            }
            let later = try bodies(server).dropFirst()
            XCTAssertEqual(later.reduce(0) { $0 + ($1.discards["invalid/log_item"] ?? 0) }, 1, "\(status): sent again, once")
            XCTAssertNil(try savedDrops(buffer), "\(status): removed before the next request carried them")
            buffer.close()
        }
    }

    func testSavedDropsThatAreNotOursOrDamagedAreNotSent() throws {
        let server = try server()
        defer { server.stop() }
        let first = try buffer(server) { $0.upload = false }
        first.close()
        let file = first.directory.appendingPathComponent("telemetry-buffer/client-report").path
        func report(_ events: String) -> Data { Data(#"{"timestamp":1,"discarded_events":[\#(events)]}"#.utf8) }
        let valid = report(#"{"reason":"cache_overflow","category":"log_item","quantity":5}"#)

        // A link to a report, a FIFO: left alone; a file too large: not read. Nothing counted.
        let target = directory.url.appendingPathComponent("elsewhere").path
        XCTAssertTrue(FileManager.default.createFile(atPath: target, contents: valid))
        XCTAssertEqual(symlink(target, file), 0)
        var foreign = try buffer(server)
        foreign.add(log: .test("one"))
        foreign.flush()
        eventually { server.requests.withLock { $0.count } == 1 && foreign.stats().upload == .idle }
        XCTAssertNil(try bodies(server, [0])[0].discards["cache_overflow/log_item"])
        foreign.close()
        XCTAssertNotNil(try? FileManager.default.destinationOfSymbolicLink(atPath: file), "the link stays")
        XCTAssertEqual(FileManager.default.contents(atPath: target), valid, "its target too")
        XCTAssertEqual(unlink(file), 0)
        XCTAssertEqual(mkfifo(file, 0o600), 0)
        foreign = try buffer(server)
        foreign.close()
        XCTAssertEqual(unlink(file), 0)
        XCTAssertTrue(FileManager.default.createFile(atPath: file, contents: Data(repeating: 0x20, count: 1 << 20) + valid))
        foreign = try buffer(server)
        foreign.add(log: .test("two"))
        foreign.flush()
        eventually { server.requests.withLock { $0.count } == 2 && foreign.stats().upload == .idle }
        XCTAssertNil(try bodies(server, [1])[0].discards["cache_overflow/log_item"])
        XCTAssertFalse(FileManager.default.fileExists(atPath: file), "a file of ours too large to read goes as damaged")
        foreign.close()

        // Crafted entries: only whole positive counts of known reasons and categories are taken, saturating.
        XCTAssertTrue(FileManager.default.createFile(atPath: file, contents: report("""
            {"reason":"cache_overflow","category":"log_item","quantity":3},
            {"reason":"cache_overflow","category":"log_item","quantity":-5},
            {"reason":"cache_overflow","category":"log_item","quantity":2.5},
            {"reason":"cache_overflow","category":"log_item","quantity":"7"},
            {"reason":"cache_overflow","category":"log_item","quantity":1e300},
            {"reason":"cache_overflow","category":"log_item"},
            {"reason":"lost_in_space","category":"log_item","quantity":11},
            {"reason":"cache_overflow","category":"sessions","quantity":13},
            {"reason":"cache_overflow","category":"log_item","quantity":4},
            {"reason":"send_error","category":"span","quantity":9223372036854775807},
            {"reason":"send_error","category":"span","quantity":9223372036854775807},
            17
            """)))
        let crafted = try buffer(server)
        crafted.add(log: .test("three"))
        crafted.flush()
        eventually { server.requests.withLock { $0.count } == 3 && crafted.stats().upload == .idle }
        let discards = try bodies(server, [2])[0].discards
        XCTAssertEqual(discards["cache_overflow/log_item"], 7)
        XCTAssertEqual(discards["send_error/span"], Int.max)
        XCTAssertEqual(discards.count, 2, "\(discards)")
        crafted.close()

        // Not JSON at all: nothing.
        XCTAssertTrue(FileManager.default.createFile(atPath: file, contents: Data("{\"discarded_events\":[".utf8)))
        let damaged = try buffer(server)
        damaged.add(log: .test("four"))
        damaged.flush()
        eventually { server.requests.withLock { $0.count } == 4 && damaged.stats().upload == .idle }
        XCTAssertEqual(try bodies(server, [3])[0].discards, [:])
        XCTAssertFalse(FileManager.default.fileExists(atPath: file), "removed with the first request")
        damaged.close()
    }

    func testAnInvalidKeyShutsTheBufferDownAndClearsItsFiles() throws {
        for status in [401, 403] {
            let folder = try TemporaryDirectory()
            directory.remove()  // setUp's, or the last status's: one folder per status
            directory = folder
            defer { folder.remove() }
            let server = try server(TestServer.sequence([], then: .respond(status)))
            defer { server.stop() }
            let buffer = try buffer(server) { $0.maxLogsPerBatch = 1 }
            // A link under a buffer file's name is not the buffer's: it stays, and so does its target.
            let bufferFolder = buffer.directory.appendingPathComponent("telemetry-buffer").path
            let target = folder.url.appendingPathComponent("target").path
            XCTAssertTrue(FileManager.default.createFile(atPath: target, contents: Data("theirs".utf8)))
            XCTAssertEqual(symlink(target, bufferFolder + "/client-report"), 0)
            buffer.add(log: .test("first"))
            buffer.add(metric: .gauge("stored", value: 1))
            buffer.flush()
            eventually { buffer.stats().upload == .stopped(.invalidKey(status: status)) }
            func bufferFiles() -> [String] {
                ((try? FileManager.default.contentsOfDirectory(atPath: bufferFolder)) ?? []).filter { $0 != "lock" }
            }
            eventually { stored(buffer) == 0 && bufferFiles() == ["client-report"] }
            XCTAssertEqual(try FileManager.default.destinationOfSymbolicLink(atPath: bufferFolder + "/client-report"), target)
            XCTAssertFalse(buffer.add(log: .test("later")), "adds are refused")
            XCTAssertFalse(buffer.add(metric: .gauge("later", value: 1)), "adds are refused")
            XCTAssertEqual(server.requests.withLock { $0.count }, 1, "no more requests")
            XCTAssertEqual(buffer.stats().drops["send_error/log_item"], 2, "the stored one and the refused one")
            XCTAssertEqual(buffer.stats().drops["send_error/trace_metric"], 2, "the stored one and the refused one")
            buffer.close()
        }
    }

    func testADisabledProjectStopsUploadsAndAddsButKeepsWhatIsStored() throws {
        let server = try server(TestServer.sequence([], then: .respond(404)))
        defer { server.stop() }
        let buffer = try buffer(server) { $0.maxLogsPerBatch = 1 }
        buffer.add(log: .test("kept"))
        buffer.flush()
        eventually { buffer.stats().upload == .stopped(.projectDisabled) }
        XCTAssertFalse(buffer.add(log: .test("refused")))
        XCTAssertFalse(buffer.add(metric: .counter("refused")))
        XCTAssertEqual(buffer.stats().drops["send_error/trace_metric"], 1)
        XCTAssertEqual(stored(buffer), 1)
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["kept"])
        buffer.close()
    }

    func testRateLimitedCategoriesWaitAndTheirNewItemsAreDropped() throws {
        let server = try server { request, _ in
            String(decoding: request.body, as: UTF8.self).contains("\"type\":\"log\"")
                // The longest limit wins: 1e20 s, past any deadline (it crashed the uploader once).
                ? .respond(429, headers: ["X-Sentry-Rate-Limits": "60:log_item:key, 1e20:log_item:organization, 2700:unknown_category:organization"])
                : .respond(200)
        }
        defer { server.stop() }
        let buffer = try buffer(server) { $0.maxLogsPerBatch = 1 }
        buffer.add(log: .test("limited"))
        buffer.add(log: .test("waits"))
        buffer.flush()
        eventually { if case .rateLimited = buffer.stats().upload { return true } else { return false } }
        buffer.add(span: .test("span", trace: TraceID(high: 1, low: 1)))
        buffer.flush()
        eventually { buffer.stats().stored["span"] == nil }
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["waits"],
                       "the answered envelope is gone (Relay counted it); the next log envelope waits in the folder")
        XCTAssertFalse(buffer.add(log: .test("dropped while limited")))
        XCTAssertTrue(buffer.add(span: .test("spans still go", trace: TraceID(high: 2, low: 2))))
        XCTAssertTrue(buffer.add(metric: .counter("metrics still go")))
        XCTAssertEqual(buffer.stats().drops["ratelimit_backoff/log_item"], 1)
        XCTAssertEqual(Set(buffer.stats().drops.keys), ["ratelimit_backoff/log_item", "ratelimit_backoff/log_byte"],
                       "only the refused add: the answered envelope is not ours to count")
        let logRequests = server.requests.withLock { $0.filter { String(decoding: $0.body, as: UTF8.self).contains("\"type\":\"log\"") } }
        XCTAssertEqual(logRequests.count, 1, "not retried while limited")
        buffer.close()
    }

    /// A limit on `trace_metric`: the metrics envelope waits, later metrics are refused and counted as
    /// `ratelimit_backoff`, logs still go.
    func testARateLimitOnMetricsHoldsMetricsOnly() throws {
        let server = try server { request, _ in
            String(decoding: request.body, as: UTF8.self).contains("\"type\":\"trace_metric\"")
                ? .respond(429, headers: ["X-Sentry-Rate-Limits": "60:trace_metric:key"])
                : .respond(200)
        }
        defer { server.stop() }
        let buffer = try buffer(server) { $0.maxMetricsPerBatch = 1 }
        defer { buffer.close() }
        buffer.add(metric: .counter("limited"))
        buffer.add(metric: .counter("waits"))
        buffer.flush()
        eventually { if case .rateLimited = buffer.stats().upload { return true } else { return false } }
        XCTAssertEqual(buffer.stats().stored["trace_metric"]?.envelopes, 1, "the next metrics envelope waits in the folder")
        XCTAssertFalse(buffer.add(metric: .counter("dropped while limited")))
        XCTAssertEqual(buffer.stats().drops["ratelimit_backoff/trace_metric"], 1)
        XCTAssertGreaterThan(buffer.stats().drops["ratelimit_backoff/trace_metric_byte"] ?? 0, 0)
        XCTAssertTrue(buffer.add(log: .test("logs still go")))
        buffer.flush()
        eventually { buffer.stats().stored["log"] == nil }
    }

    /// On a clock moved by hand: an envelope stored during the pacing after a sent one waits for it, so that
    /// Low Power Mode's spacing holds while new envelopes are stored.
    func testANewEnvelopeWaitsOutThePacing() throws {
        let server = try server()
        defer { server.stop() }
        let clock = ManualClock()
        let buffer = try buffer(server) {
            $0.clock = clock
            $0.uploadOptions.pacing = 10
        }
        defer { buffer.close() }
        buffer.add(log: .test("first"))
        buffer.flush()
        eventually {
            clock.advance(by: 0)
            return server.requests.withLock { $0.count } == 1 && buffer.stats().upload == .idle && stored(buffer) == 0
        }
        buffer.add(log: .test("second"))
        buffer.flush()
        buffer.waitForBackgroundWork()
        clock.advance(by: 9.9)
        buffer.waitForBackgroundWork()
        // Had a wake-up come due, the uploader would be sending by now (its queue ran it).
        XCTAssertEqual(buffer.stats().upload, .idle, "the pacing holds")
        XCTAssertEqual(stored(buffer), 1)
        clock.advance(by: 0.1)
        eventually { server.requests.withLock { $0.count } == 2 }
    }

    /// A buffer on a clock moved by hand that has sent a log envelope to `server` (of `logs`, one per
    /// envelope: by default a second waits behind it): returned once `ready` (by default, once the uploader
    /// waits for a rate limit). Its wake-ups (at start, when the envelopes were stored, `pacing` after the
    /// answer) run as they come, the clock moving a millisecond at a time.
    private func answeredBuffer(
        _ server: TestServer, logs: [String] = ["limited", "waits"], _ configure: (inout Options) -> Void = { _ in },
        ready: (TelemetryBuffer) -> Bool = { if case .rateLimited = $0.stats().upload { true } else { false } }
    ) throws -> (TelemetryBuffer, ManualClock) {
        let clock = ManualClock()
        let buffer = try buffer(server) {
            $0.clock = clock
            $0.maxLogsPerBatch = 1
            configure(&$0)
        }
        for log in logs { buffer.add(log: .test(log)) }
        buffer.flush()
        eventually {
            clock.advance(by: 0.001)
            return ready(buffer)
        }
        return (buffer, clock)
    }

    /// On a clock moved by hand: under a limit on logs no deadline can hold (1e20 s), each span envelope
    /// sent leaves the uploader waiting for the log envelope again; those waits end within an hour
    /// instead of never (each kept a timer, and the uploader, for good: one more per envelope sent).
    func testWaitsForALimitWithoutEndDoNotPileUp() throws {
        let server = try server { request, _ in
            String(decoding: request.body, as: UTF8.self).contains("\"type\":\"log\"")
                ? .respond(429, headers: ["X-Sentry-Rate-Limits": "1e20:log_item:organization"]) : .respond(200)
        }
        defer { server.stop() }
        let (buffer, clock) = try answeredBuffer(server)
        defer { buffer.close() }
        for index in 0..<10 {
            buffer.add(span: .test("span \(index)", trace: TraceID(high: 1, low: UInt64(index) + 1)))
            buffer.flush()
            eventually {
                clock.advance(by: 0.001)
                guard case .rateLimited = buffer.stats().upload else { return false }
                return server.requests.withLock { $0.count } == index + 2
            }
        }
        clock.advance(by: 3600)
        buffer.waitForBackgroundWork()
        XCTAssertLessThanOrEqual(clock.pendingCount, 2, "the waits end within the hour")
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["waits"], "the next log envelope still waits")
    }

    /// On a clock moved by hand: a cool-off of two hours is waited out in full. Only rate-limit waits look
    /// again after an hour (a limit may never end); a cool-off or backoff past the hour was once cut short.
    func testACoolOffLongerThanAnHourIsWaitedOutInFull() throws {
        let server = try server(TestServer.sequence([.respond(503)]))
        defer { server.stop() }
        let (buffer, clock) = try answeredBuffer(server, logs: ["failed"], {
            $0.uploadOptions.maxAttempts = 1
            $0.uploadOptions.coolOff = 7200
        }, ready: { if case .coolingOff = $0.stats().upload { true } else { false } })
        defer { buffer.close() }
        guard case .coolingOff(let until) = buffer.stats().upload else { return XCTFail() }
        let wait = until.timeIntervalSince(clock.now())
        XCTAssertTrue(wait > 7199 && wait <= 7200, "\(wait)")
        clock.advance(by: 3601)
        buffer.waitForBackgroundWork()
        XCTAssertEqual(server.requests.withLock { $0.count }, 1, "nothing sent after an hour of the two")
        guard case .coolingOff = buffer.stats().upload else { return XCTFail("\(buffer.stats().upload)") }
        clock.advance(by: wait - 3601)
        eventually { server.requests.withLock { $0.count } == 2 }
        eventually { stored(buffer) == 0 }
    }

    /// On a clock moved by hand: a 429 with `Retry-After: 60` holds every category for exactly 60 s.
    func testRetryAfterIsWaitedOutExactlyOnTheClock() throws {
        let server = try server(TestServer.sequence([.respond(429, headers: ["Retry-After": "60"])]))
        defer { server.stop() }
        let (buffer, clock) = try answeredBuffer(server)
        defer { buffer.close() }
        guard case .rateLimited(let until) = buffer.stats().upload else { return XCTFail() }
        let wait = until.timeIntervalSince(clock.now())
        XCTAssertTrue(wait > 59 && wait <= 60, "\(wait)")
        XCTAssertFalse(buffer.add(log: .test("dropped while limited")))
        XCTAssertFalse(buffer.add(metric: .counter("dropped while limited")), "every category, metrics too")
        XCTAssertEqual(buffer.stats().drops["ratelimit_backoff/trace_metric"], 1)
        clock.advance(by: wait - 0.1)
        buffer.waitForBackgroundWork()
        eventually { clock.pendingCount == 1 }
        XCTAssertEqual(server.requests.withLock { $0.count }, 1, "nothing sent before 60 s")
        clock.advance(by: 0.1)
        eventually { server.requests.withLock { $0.count } == 2 }
        eventually { stored(buffer) == 0 }
        XCTAssertEqual(try bodies(server, [1]).flatMap(\.elements).compactMap { $0["body"] as? String }, ["waits"],
                       "the answered envelope is not sent again")
        XCTAssertTrue(buffer.add(log: .test("accepted again")))
        XCTAssertTrue(buffer.add(metric: .counter("accepted again")))
    }

    /// A 429 whose `X-Sentry-Rate-Limits` limits none of the envelope's categories (here another
    /// category; `log_byte`, a 0 s limit or garbage did the same): its categories wait as after a bare 429
    /// (60 s) while others go on, instead of the next envelope of them going at the queue's pace of 0.1 s
    /// (which, while the answered one was kept, sent it ten times a second for as long as the server
    /// answered so).
    func testA429ThatLimitsNoneOfTheEnvelopesCategoriesStillHoldsThem() throws {
        for header in ["60:transaction:key", "60:log_byte:organization", "0::organization", "garbage"] {
            let server = try server(TestServer.sequence([.respond(429, headers: ["X-Sentry-Rate-Limits": header])]))
            defer { server.stop() }
            // Not waiting for a rate limit: before the fix there was none.
            let (buffer, clock) = try answeredBuffer(server, ready: { buffer in
                server.requests.withLock { $0.count } >= 1 && buffer.stats().upload != .sending
            })
            // Thirty times the pacing, a pacing at a time: nothing goes again.
            for _ in 0..<30 {
                clock.advance(by: 0.1)
                buffer.waitForBackgroundWork()
            }
            XCTAssertEqual(server.requests.withLock { $0.count }, 1, "\(header): not resent at the queue's pace")
            guard case .rateLimited(let until) = buffer.stats().upload else { XCTFail("\(header): \(buffer.stats().upload)"); continue }
            XCTAssertFalse(buffer.add(log: .test("held")), header)
            XCTAssertTrue(buffer.add(span: .test("not held", trace: TraceID(high: 5, low: 5))), "\(header): only the envelope's categories wait")
            XCTAssertTrue(buffer.add(metric: .counter("not held")), "\(header): only the envelope's categories wait")
            clock.advance(by: until.timeIntervalSince(clock.now()))
            // The span's flush timer came due too, and its envelope's wake-up replaces the limit's: the
            // clock goes on a millisecond at a time for it.
            eventually {
                clock.advance(by: 0.001)
                return stored(buffer) == 0
            }
            let logRequests = server.requests.withLock { $0.filter { String(decoding: $0.body, as: UTF8.self).contains("\"type\":\"log\"") } }
            XCTAssertEqual(try logRequests.map { try WalkedEnvelope($0.body).elements.compactMap { $0["body"] as? String } },
                           [["limited"], ["waits"]], "\(header): the answered envelope is not sent again")
            buffer.close()
        }
    }

    /// An answer that comes after `close()` (which waits 2 s for it) still removes an envelope it settles:
    /// a delivered one, and one answered 429, which is never sent again.
    func testALateAnswerAfterCloseRemovesAnEnvelopeItSettles() throws {
        for status in [200, 429] {
            let server = try server(TestServer.sequence([.respond(status, after: 3)]))
            defer { server.stop() }
            let buffer = try buffer(server)
            buffer.add(log: .test("answered late"))
            buffer.flush()
            eventually { server.requests.withLock { $0.count } == 1 }
            buffer.close()
            let folder = buffer.envelopesDirectory.path
            eventually { (try? FileManager.default.contentsOfDirectory(atPath: folder).filter { $0.hasSuffix(".envelope") })?.isEmpty == true }
        }
    }

    /// A 429 is final, as every answer is (the protocol): its envelope is deleted uncounted (Relay counted
    /// its items as rate-limited; sent again, they would be billed twice), and the next waits out the
    /// `Retry-After`. Before, the answered envelope was kept and sent again once the limit ended.
    func testA429DeletesItsEnvelopeAndTheNextWaitsOutRetryAfter() throws {
        let server = try server(TestServer.sequence([.respond(429, headers: ["Retry-After": "0.05"])]))
        defer { server.stop() }
        let buffer = try buffer(server) { $0.maxLogsPerBatch = 1 }
        buffer.add(log: .test("answered 429"))
        buffer.add(log: .test("after the limit"))
        buffer.flush()
        eventually { stored(buffer) == 0 && buffer.stats().upload == .idle }
        XCTAssertEqual(try bodies(server).map { $0.elements.compactMap { $0["body"] as? String } }, [["answered 429"], ["after the limit"]])
        XCTAssertEqual(buffer.stats().drops, [:], "not counted: Relay did")
        buffer.close()
    }

    func testRateLimitHeaders() {
        let now = Date(timeIntervalSince1970: 1_000)
        let (logs, spans, metrics) = (RateLimits.Category(.log), RateLimits.Category(.span), RateLimits.Category(.traceMetric))
        let cases: [(String, [RateLimits.Category: Double])] = [
            ("60:log_item:key", [logs: 60]),
            ("60:log_item;span:key, 120::organization", [logs: 60, spans: 60, .all: 120]),
            ("  2.5 : span : key : reason : ns1;ns2 ", [spans: 2.5]),
            ("60:transaction:key, 2700:default;error;security:organization", [:]),
            ("10:log_item:key,30:log_item:org", [logs: 30]),
            ("60::organization", [.all: 60]),
            ("30:trace_metric;trace_metric_byte:key", [metrics: 30]),
            ("garbage, :log_item:key, -5:span:key", [:]),
            ("60:;:organization, 30: ; :key", [:]),  // a list naming no category is not an empty one
            // A number too large for a Double is the longest limit, not none (`1e20` already lasts for good).
            ("1e400:span:key, 60:span:key", [spans: .infinity]),
            ("nan:span:key, inf:log_item:key", [logs: .infinity]),
        ]
        for (header, expected) in cases { XCTAssertEqual(RateLimits.parse(header), expected, header) }
        XCTAssertEqual(RateLimits.seconds(retryAfter: "120", now: now), 120)
        XCTAssertEqual(RateLimits.seconds(retryAfter: "1.5", now: now), 1.5)
        XCTAssertEqual(RateLimits.seconds(retryAfter: "Thu, 01 Jan 1970 00:17:40 GMT", now: now), 60)
        XCTAssertNil(RateLimits.seconds(retryAfter: "soon", now: now))
        XCTAssertEqual(RateLimits.seconds(retryAfter: "1e400", now: now), .infinity)
        XCTAssertNil(RateLimits.seconds(retryAfter: "nan", now: now))

        let limits = RateLimits()
        limits.update(status: 429, rateLimits: nil, retryAfter: nil, now: now)
        XCTAssertEqual(limits.limitedUntil(spans, now: now), now.addingTimeInterval(60), "a bare 429: 60 s, all categories")
        let empty = RateLimits()
        empty.update(status: 429, rateLimits: " ", retryAfter: "120", now: now)
        XCTAssertEqual(empty.limitedUntil(logs, now: now), now.addingTimeInterval(120), "an empty header is none: Retry-After on all")
        limits.update(status: 200, rateLimits: "600:log_item:key", retryAfter: nil, now: now)
        XCTAssertEqual(limits.limitedUntil(logs, now: now), now.addingTimeInterval(600), "limits apply on 200 too")
        XCTAssertFalse(limits.allows(logs, now: { now.addingTimeInterval(100) }))
        XCTAssertTrue(limits.allows(spans, now: { now.addingTimeInterval(100) }))
        XCTAssertTrue(limits.allows(logs, now: { now.addingTimeInterval(601) }))

        // Valid numbers past any deadline (they trapped converting to microseconds) limit for good.
        limits.update(status: 200, rateLimits: "1e20:span:key", retryAfter: nil, now: now)
        XCTAssertFalse(limits.allows(spans, now: { .distantFuture }))
        XCTAssertTrue(limits.allows(logs, now: { .distantFuture }))
        limits.update(status: 429, rateLimits: nil, retryAfter: "1e300", now: now)
        XCTAssertFalse(limits.allows(logs, now: { .distantFuture }))
        XCTAssertGreaterThan(limits.limitedUntil(logs, now: now) ?? now, .distantFuture)
    }

    /// A server that answers after the timeout: the request ends at `requestTimeout`, as a network error,
    /// and the envelope goes again.
    func testASlowServerTimesOutAndTheEnvelopeIsRetried() throws {
        let server = try server(TestServer.sequence([.respond(200, after: 3)]))
        defer { server.stop() }
        let buffer = try buffer(server) { $0.uploadOptions.requestTimeout = 0.5 }
        buffer.add(log: .test("slow"))
        buffer.flush()
        eventually { stored(buffer) == 0 }
        // The first answer comes after the timeout, so the envelope was sent again (more than once on a
        // machine slow enough for a normal request to time out too, as under ThreadSanitizer).
        XCTAssertGreaterThanOrEqual(server.requests.withLock { $0.count }, 2, "timed out, then sent again")
        buffer.close()
    }

    /// A request timeout under a second is one: FoundationNetworking counts its timeouts in whole seconds,
    /// and timed out at once every request given 0.9 s (the envelope went again: sent twice), so the
    /// default client gives it the timeout rounded up and cancels the request itself at the exact time.
    func testATimeoutUnderASecondLetsAPromptAnswerThrough() throws {
        let server = try server(TestServer.sequence([.respond(200, after: 0.1)]))
        defer { server.stop() }
        let buffer = try buffer(server) { $0.uploadOptions.requestTimeout = 0.9 }
        buffer.add(log: .test("answered within a tenth"))
        buffer.flush()
        eventually { stored(buffer) == 0 && buffer.stats().upload == .idle }
        XCTAssertEqual(server.requests.withLock { $0.count }, 1, "delivered at the first request")
        buffer.close()
    }

    /// A request timeout as long as an option allows (finite) is one of a day for the default client:
    /// FoundationNetworking counts it in milliseconds in a 64-bit integer, and trapped from about 9.2e15 s,
    /// at every request, so at every start with an envelope stored.
    func testAVeryLongRequestTimeoutIsADay() throws {
        let server = try server(TestServer.sequence([.respond(200)]))
        defer { server.stop() }
        let buffer = try buffer(server) { $0.uploadOptions.requestTimeout = .greatestFiniteMagnitude }
        buffer.add(log: .test("sent with no timeout to speak of"))
        buffer.flush()
        eventually { stored(buffer) == 0 && buffer.stats().upload == .idle }
        XCTAssertEqual(server.requests.withLock { $0.count }, 1, "delivered at the first request")
        buffer.close()
    }

    /// A server that answers 200 at once and then drips a body that does not end: its status is its answer,
    /// and the envelope is delivered, once, without waiting for the body. Before, the request ran into
    /// `requestTimeout`, a network error, and the envelope went again (delivered twice); and a body that
    /// came fast filled memory until then (a helper saw 1.6 GB within 5 s).
    func testAnAnswersStatusIsItsAnswerWhateverItsBodyDoes() throws {
        let server = try server(TestServer.sequence([.drip(interval: 0.1, seconds: 120)]))
        defer { server.stop() }
        let buffer = try buffer(server) { $0.uploadOptions.requestTimeout = 0.5 }
        buffer.add(log: .test("answered at once"))
        buffer.flush()
        eventually { stored(buffer) == 0 && buffer.stats().upload == .idle }
        XCTAssertEqual(server.requests.withLock { $0.count }, 1, "delivered once")
        buffer.close()
    }

    /// A redirect to another server (a captive portal's 302): the envelope is not taken as delivered by
    /// the portal's answer to the GET that the redirect made of the POST (it was deleted so, and lost); it
    /// goes again, and arrives.
    func testARedirectIsNoDeliveryAndTheEnvelopeGoesAgain() throws {
        let portal = try TestServer()
        defer { portal.stop() }
        let server = try server { _, index in
            index == 0 ? .respond(302, headers: ["Location": "http://127.0.0.1:\(portal.port)/portal"]) : .respond(200)
        }
        defer { server.stop() }
        let buffer = try buffer(server)
        buffer.add(log: .test("kept through the redirect"))
        buffer.flush()
        eventually { stored(buffer) == 0 }
        guard server.requests.withLock({ $0.count }) == 2 else { return XCTFail("taken as delivered: sent once") }
        XCTAssertEqual(try bodies(server, [1]).flatMap(\.elements).compactMap { $0["body"] as? String }, ["kept through the redirect"])
        buffer.close()
    }

    /// A 307 or 308 (an http → https move, say) is no delivery either, and sends no envelope to the other
    /// address: Apple's URLSession would send the POST there again, body and all (the auth header too), so
    /// the default client refuses the redirect there; FoundationNetworking drops the body. The envelope
    /// goes again to the DSN's endpoint, and is delivered once.
    func testAMethodKeepingRedirectSendsNoEnvelopeElsewhere() throws {
        for status in [307, 308] {
            let target = try TestServer()
            defer { target.stop() }
            let moved = try server { _, index in
                index == 0 ? .respond(status, headers: ["Location": "http://127.0.0.1:\(target.port)/api/42/envelope/"]) : .respond(200)
            }
            defer { moved.stop() }
            let buffer = try buffer(moved)
            buffer.add(log: .test("moved \(status)"))
            buffer.flush()
            eventually { stored(buffer) == 0 && buffer.stats().upload == .idle }
            buffer.close()
            XCTAssertEqual(try bodies(moved, [1]).flatMap(\.elements).compactMap { $0["body"] as? String }, ["moved \(status)"])
            let elsewhere = target.requests.withLock { $0 }.filter { (try? WalkedEnvelope($0.body)) != nil }
            XCTAssertEqual(elsewhere.count, 0, "\(status): an envelope went to the redirect's address")
        }
    }

    /// A redirect back to the envelope endpoint (by its full URL, or spelled another way: without the
    /// trailing slash, as a slash-normalising proxy does, or with a query), of every kind: followed,
    /// FoundationNetworking sends it without the envelope (a GET for a 302, an empty POST for a 307 or
    /// 308), so the default client refuses it on Linux too, and the 3xx is the answer: the envelope goes
    /// again. Before, the empty request's 200 deleted the envelope as delivered: lost, nothing counted
    /// (a URL comparison missed the full URL, whose answer comes from the same address).
    func testARedirectBackToTheEndpointIsNoDelivery() throws {
        for (status, location) in [(308, "/api/42/envelope"), (308, "/api/42/envelope/?moved=1"), (302, nil), (307, nil), (308, nil)] {
            let endpoint = Locked("")
            let server = try server { _, index in
                index == 0 ? .respond(status, headers: ["Location": location ?? endpoint.withLock { $0 }]) : .respond(200)
            }
            defer { server.stop() }
            endpoint.withLock { $0 = "http://127.0.0.1:\(server.port)/api/42/envelope/" }
            let buffer = try buffer(server)
            buffer.add(log: .test("moved"))
            buffer.flush()
            eventually { stored(buffer) == 0 && buffer.stats().upload == .idle }
            buffer.close()
            let delivered = server.requests.withLock { $0 }.compactMap { try? WalkedEnvelope($0.body) }
            XCTAssertEqual(delivered.flatMap { $0.items.flatMap(\.elements) }.compactMap { $0["body"] as? String }, ["moved", "moved"],
                           "\(status) to \(location ?? "the endpoint"): sent again after the redirect")
            XCTAssertEqual(server.requests.withLock { $0.count }, 2, "\(status) to \(location ?? "the endpoint"): not followed")
        }
    }

    /// What counts as the same endpoint when the default client compares a response's URL with its
    /// request's: a system may canonicalise scheme and host case, and fill in the default port.
    func testARedirectIsToldFromACanonicalisedURL() throws {
        func same(_ first: String, _ second: String) throws -> Bool {
            Redirected.sameEndpoint(try XCTUnwrap(URL(string: first)), try XCTUnwrap(URL(string: second)))
        }
        XCTAssertTrue(try same("https://Sentry.Example.com/api/1/envelope/", "HTTPS://sentry.example.com:443/api/1/envelope/"))
        XCTAssertTrue(try same("http://[::1]:9000/api/1/envelope/", "http://[::1]:9000/api/1/envelope/"))
        XCTAssertFalse(try same("http://sentry.example.com/api/1/envelope/", "https://sentry.example.com/api/1/envelope/"))
        XCTAssertFalse(try same("https://sentry.example.com/api/1/envelope/", "https://portal.example.net/login"))
        XCTAssertFalse(try same("https://sentry.example.com/api/1/envelope/", "https://sentry.example.com:8443/api/1/envelope/"))
        XCTAssertFalse(try same("https://sentry.example.com/api/1/envelope/", "https://sentry.example.com/api/1/envelope"))
        XCTAssertFalse(try same("https://sentry.example.com/api/1/envelope/", "https://sentry.example.com/api/1/envelope/?a=1"))
    }

    func testAServerThatIsDownThenUpLosesNothing() throws {
        let server = try server()
        server.stop()
        let buffer = try buffer(server)
        for index in 0..<5 { buffer.add(log: .test("log \(index)")) }
        buffer.flush()
        eventually { if case .backingOff = buffer.stats().upload { return true } else { return false } }
        try server.restart()
        defer { server.stop() }
        eventually { stored(buffer) == 0 }
        XCTAssertEqual(try bodies(server).flatMap(\.elements).compactMap { $0["body"] as? String }, (0..<5).map { "log \($0)" })
        buffer.close()
    }

    /// A corrupt envelope is deleted and its items counted as `internal_sdk_error` under the signal its item
    /// headers still name (a torn metrics envelope counted as `log_item` once), with the payload bytes that
    /// follow a header (at most its `length`) where a signal is billed by size; a file that names no
    /// signal holds no telemetry we know of, and counts nothing. A crafted file counts no more than one
    /// envelope of ours could hold.
    func testACorruptEnvelopeFileIsDeletedAndCountedNotRetried() throws {
        let cases: [(header: String, counted: [String: Int])] = [
            ("{\"type\":\"log\",\"length\":99}", ["log_item": 1, "log_byte": 2]),
            ("{\"type\":\"span\",\"item_count\":2,\"length\":99}", ["span": 2]),
            ("{\"type\":\"trace_metric\",\"item_count\":3,\"length\":99}", ["trace_metric": 3, "trace_metric_byte": 2]),
            ("{\"type\":\"unknown\"}", [:]),
            // Crafted: only the first header counts, at most 1000 items, at most the bytes that follow it.
            (String(repeating: "{\"type\":\"span\",\"item_count\":100000}\n", count: 100), ["span": 1000]),
            (String(repeating: "{\"type\":\"log\",\"length\":99999999}\n", count: 3), ["log_item": 1, "log_byte": 2 * 33 + 3]),
        ]
        for (header, counted) in cases {
            let folder = try TemporaryDirectory()
            directory.remove()
            directory = folder
            defer { folder.remove() }
            let server = try server()
            defer { server.stop() }
            // Left by an earlier process: the transport finds it when the buffer opens.
            let envelopes = directory.envelopesFolder(server.dsn)
            try FileManager.default.createDirectory(at: envelopes, withIntermediateDirectories: true)
            try Data("not an envelope\n\(header)\n{}".utf8)
                .write(to: envelopes.appendingPathComponent(FileTransport.name(now: Date(), counter: 0)))
            let buffer = try buffer(server)
            buffer.add(log: .test("after the corrupt one"))
            buffer.flush()
            eventually { stored(buffer) == 0 }
            XCTAssertEqual(server.requests.withLock { $0.count }, 1, "only the valid envelope was sent")
            let drops = buffer.stats().drops.filter { $0.key.hasPrefix("internal_sdk_error/") }
            XCTAssertEqual(drops, Dictionary(uniqueKeysWithValues: counted.map { ("internal_sdk_error/\($0.key)", $0.value) }), header)
            buffer.close()
        }
    }

    func testStatsDescribeTheQueue() throws {
        let server = try server(TestServer.sequence([], then: .respond(503)))
        defer { server.stop() }
        let buffer = try buffer(server) { $0.uploadOptions.backoffBase = 60 }
        buffer.add(log: .test("stored"))
        buffer.add(span: .test("stored", trace: TraceID(high: 1, low: 2)))
        buffer.add(metric: .counter("stored"))
        buffer.add(metric: .counter("stored too"))
        buffer.flush()
        buffer.add(log: .test("buffered"))
        buffer.add(log: .test(String(repeating: "z", count: 2 << 20)))
        buffer.add(metric: .gauge("invalid", value: .nan))
        eventually { if case .backingOff = buffer.stats().upload { return true } else { return false } }
        let stats = buffer.stats()
        XCTAssertEqual(stats.stored["log"]?.envelopes, 1)
        XCTAssertEqual(stats.stored["log"]?.items, 1)
        XCTAssertEqual(stats.stored["span"]?.items, 1)
        XCTAssertGreaterThan(stats.stored["span"]?.bytes ?? 0, 100)
        XCTAssertEqual(stats.stored["trace_metric"]?.items, 2)
        XCTAssertNotNil(stats.oldestEnvelopeAge)
        XCTAssertEqual(stats.bufferedItems, 1)
        XCTAssertEqual(stats.drops["invalid/log_item"], 1)
        XCTAssertEqual(stats.drops["invalid/trace_metric"], 1)
        buffer.close()
        XCTAssertEqual(buffer.stats().upload, .disabled, "closed")
    }

    /// The envelope under upload is not evicted, nor counted toward the bounds: its items reach the
    /// server, so counting them as `cache_overflow` as well would report a loss that did not happen.
    func testTheEnvelopeUnderUploadIsNotEvicted() throws {
        let gate = DispatchSemaphore(value: 0)
        let server = try server(TestServer.sequence([.respondWhenOpened(gate)]))
        defer { server.stop() }
        let buffer = try TelemetryBuffer(options: uploadingOptions(directory, to: server) { $0.maxCachedEnvelopes = 1 })
        defer { buffer.close() }
        for body in ["a", "b", "c"] {
            buffer.add(log: .test(body))
            buffer.flush()
            // `a` is under upload (the server holds its answer) while `b` and `c` arrive: `b` goes.
            if body == "a" { eventually { server.requests.withLock { $0.count } == 1 } }
        }
        eventually { buffer.stats().drops["cache_overflow/log_item"] == 1 }
        gate.signal()
        eventually { buffer.stats().stored.isEmpty && server.requests.withLock { $0.count } == 2 }
        let walked = try server.requests.withLock { $0 }.map { try WalkedEnvelope($0.body) }
        XCTAssertEqual(walked.flatMap(\.elements).compactMap { $0["body"] as? String }, ["a", "c"])
        XCTAssertEqual(walked.reduce(0) { $0 + ($1.discards["cache_overflow/log_item"] ?? 0) }, 1, "b, once")
        XCTAssertEqual(server.violations.withLock { $0 }, [])
    }

    /// An envelope sent (and so deleted) before its publication's sync round is not synced: nothing of it
    /// is left to keep, and its sync would write it to the disk, and flush the drive, for nothing. The
    /// round still runs, and syncs an envelope still stored when it does.
    func testAnEnvelopeSentBeforeItsSyncRoundIsNotSynced() throws {
        let gate = DispatchSemaphore(value: 0)
        let server = try server(TestServer.sequence([.respond(200), .respondWhenOpened(gate)]))
        defer { server.stop() }
        let buffer = try buffer(server) { $0.ioSyncInterval = 10 }
        defer { buffer.close() }
        let list = try XCTUnwrap(buffer.doubleRotatingBuffer, "a DoubleRotatingBuffer")
        // Gone from the folder, not only from the transport's count (which drops it just before the unlink).
        let sent = { (try? FileManager.default.contentsOfDirectory(atPath: buffer.envelopesDirectory.path))?.isEmpty == true }
        // A failed round removes `boot` (and keeps its copies).
        let boot = buffer.envelopesDirectory.deletingLastPathComponent().appendingPathComponent("telemetry-buffer/boot").path
        // The publication's round waits for the end of the interval; its envelope is sent before it.
        buffer.add(log: .test("sent"))
        buffer.flush()
        eventually { server.requests.withLock { $0.count } == 1 && sent() }
        list.awaitDurable()
        XCTAssertEqual(list.publicationSyncs, 1, "the round ran")
        XCTAssertTrue(FileManager.default.fileExists(atPath: boot), "and succeeded")
        XCTAssertEqual(list.syncedEnvelopeFiles, 0, "and did not sync the envelope sent before it")

        // The server holds the second envelope's answer: it is still stored when its round runs.
        buffer.add(log: .test("held"))
        buffer.flush()
        eventually { server.requests.withLock { $0.count } == 2 }
        XCTAssertFalse(sent())
        list.awaitDurable()
        XCTAssertEqual(list.publicationSyncs, 2)
        XCTAssertEqual(list.syncedEnvelopeFiles, 1, "the envelope still stored was synced")
        gate.signal()
        eventually { stored(buffer) == 0 }
        let bodies = try bodies(server).flatMap(\.elements).compactMap { $0["body"] as? String }
        XCTAssertEqual(bodies, ["sent", "held"])
    }

    /// A sent envelope's file is closed at the next publication, not held open until its round: its pages
    /// (dirty, never synced) then go at once, rather than staying in memory for the interval and reaching the
    /// disk if anything syncs the file system meanwhile.
    func testASentEnvelopeIsNotHeldOpenUntilItsRound() throws {
        #if os(Linux)
        // The server holds its answer to the second envelope: it stays stored, its file named.
        let gate = DispatchSemaphore(value: 0)
        let server = try server(TestServer.sequence([.respond(200), .respondWhenOpened(gate)]))
        defer { server.stop() }
        let buffer = try buffer(server) { $0.ioSyncInterval = 10 }
        defer { buffer.close() }
        /// Descriptors of this process open on deleted files of the envelope folder.
        let heldDeleted = {
            ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []).filter { fd in
                let target = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + fd)) ?? ""
                return target.hasPrefix(buffer.envelopesDirectory.path) && target.hasSuffix(" (deleted)")
            }.count
        }
        buffer.add(log: .test("sent"))
        buffer.flush()
        eventually { server.requests.withLock { $0.count } == 1 && stored(buffer) == 0 }
        eventually { heldDeleted() == 1 }  // sent and deleted; its round is 10 s away
        buffer.add(log: .test("next"))
        buffer.flush()
        XCTAssertEqual(heldDeleted(), 0, "the next publication closed it")
        gate.signal()
        #else
        throw XCTSkip("reads /proc/self/fd")
        #endif
    }

    /// The uploading process dies (SIGKILL) while the server holds its request; a new process sends the
    /// envelope again: at most one extra send, nothing lost.
    func testAnUploadKilledMidRequestIsResentAtMostOnce() throws {
        let server = try server(TestServer.sequence([.hang(seconds: 3)]))
        defer { server.stop() }
        let dsn = server.dsn
        let stress = try Demo.run(["stress", "--dir", directory.url.path, "--dsn", dsn, "--count", "30"])
        XCTAssertEqual(stress.status, 0, stress.errors)
        let process = Process()
        process.executableURL = Demo.executable
        process.arguments = ["upload", "--dir", directory.url.path, "--dsn", dsn]
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        // Once the server has the whole request (it is recorded from its head on, and a gzip body is
        // decompressed before it is complete): a kill before that left an empty first body to compare.
        eventually { server.requests.withLock { $0.count == 1 && $0[0].isComplete } }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        let again = try Demo.run(["upload", "--dir", directory.url.path, "--dsn", dsn, "--timeout", "20"])
        XCTAssertEqual(again.status, 0, again.output + again.errors)
        XCTAssertTrue(again.output.contains("→ 200"), again.output)
        let volume = again.output.split(separator: "\n").first { $0.contains("bytes sent; gzip saved") }
            .map { $0.split(separator: " ").compactMap { Int($0) } }
        XCTAssertEqual(volume?.count, 2, again.output)
        XCTAssertGreaterThan(volume?.last ?? 0, 0, "the demo's upload compresses: \(again.output)")
        let requests = server.requests.withLock { $0 }
        XCTAssertEqual(requests.count, 2, "the held request, and one resend")
        XCTAssertEqual(requests[0].body.split(separator: 0x0A).dropFirst(), requests[1].body.split(separator: 0x0A).dropFirst(),
                       "the same envelope (only sent_at differs)")
        XCTAssertEqual(try WalkedEnvelope(requests[1].body).elements.count, 30)
    }
}
