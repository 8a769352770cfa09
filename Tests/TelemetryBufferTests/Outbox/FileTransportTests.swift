import Foundation
import XCTest
@testable import TelemetryBuffer

final class FileTransportTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var folder: URL { directory.url.appendingPathComponent("envelopes") }

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory.remove() }

    private let encoder = EnvelopeEncoder(
        dsn: try! DSN(testDSN), sdkName: "test", sdkVersion: "1",
        sampling: .init(publicKey: "k", sampleRate: 1, release: nil, environment: nil, organizationID: nil))

    /// A log envelope whose one log's body is `body`.
    private func envelope(_ body: String, level: Log.Level = .info) -> Envelope {
        let buffer = ByteBuffer(capacity: 256)
        var writer = JSONWriter(appendingTo: buffer)
        ItemEncoder(logDefaults: [:], spanDefaults: [:]).encode(
            Log(level: level, body: body, traceID: TraceID(high: 1, low: 2), timestamp: Date(timeIntervalSince1970: 1_767_261_600),
                attributes: ["level": "fatal"]), into: &writer)
        writer.finish()
        return encoder.envelope([buffer.bytes], of: .log).envelope
    }

    /// A log envelope of a log per level, bodied `<body> <index>`.
    private func envelope(_ body: String, levels: [Log.Level]) -> Envelope {
        let buffers = levels.enumerated().map { index, level in
            let buffer = ByteBuffer(capacity: 256)
            var writer = JSONWriter(appendingTo: buffer)
            ItemEncoder(logDefaults: [:], spanDefaults: [:]).encode(
                Log(level: level, body: "\(body) \(index)", traceID: TraceID(high: 1, low: 2),
                    timestamp: Date(timeIntervalSince1970: 1_767_261_600)), into: &writer)
            writer.finish()
            return buffer
        }
        return encoder.envelope(buffers.map(\.bytes), of: .log).envelope
    }

    /// A metrics envelope of `count` counters.
    private func metrics(_ count: Int) -> Envelope {
        let payload = Array(#"{"timestamp":1767261600.0,"trace_id":"00000000000000010000000000000002","name":"m","type":"counter","value":1}"#.utf8)
        return payload.withUnsafeBytes { encoder.envelope(Array(repeating: $0, count: count), of: .traceMetric).envelope }
    }

    private func bodies() throws -> [String] { try logBodies(in: folder) }

    func testNamesSortByAgeAndFilesAreExactlyTheEnvelope() throws {
        let transport = try FileTransport(directory: folder)
        for index in 0..<20 { try transport.send(envelope("e\(index)")) }
        XCTAssertEqual(try bodies(), (0..<20).map { "e\($0)" })
        XCTAssertEqual(transport.storedEnvelopes().map(\.lastPathComponent),
                       try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted())
        let first = try Data(contentsOf: transport.storedEnvelopes()[0])
        XCTAssertEqual(Array(first), envelope("e0").bytes)
    }

    func testEvictsTheOldestBeyondTheLimitAndCountsItsItems() throws {
        let reports = ClientReportRecorder()
        let transport = try FileTransport(directory: folder, maxEnvelopes: 3, maxAge: 3600, reports: reports,
                                          diagnostics: Diagnostics(handler: nil))
        try transport.send(metrics(3))
        for index in 0..<5 { try transport.send(envelope("e\(index)")) }
        XCTAssertEqual(try bodies(), ["e2", "e3", "e4"])
        let report = try XCTUnwrap(reports.take())
        XCTAssertEqual(report.quantity(.cacheOverflow, .logItem), 2)
        let payloadBytes = try WalkedEnvelope(envelope("e0").bytes).items[0].payload.count
        XCTAssertEqual(report.quantity(.cacheOverflow, .logByte), 2 * payloadBytes)
        XCTAssertEqual(report.quantity(.cacheOverflow, .traceMetric), 3, "a metrics envelope counts its items")
        XCTAssertEqual(report.quantity(.cacheOverflow, .traceMetricByte), try WalkedEnvelope(metrics(3).bytes).items[0].payload.count)
    }

    /// Beyond the byte quota the least important envelope goes: the lowest highest level, the oldest of
    /// those (an attribute named `level` does not count); what stays is uploaded oldest first.
    func testTheByteQuotaEvictsTheLowestLevelsFirstOldestFirst() throws {
        let size = envelope("d0", level: .debug).bytes.count
        let reports = ClientReportRecorder()
        let transport = try FileTransport(directory: folder, maxEnvelopes: 100, maxBytes: 3 * size + size / 2,
                                          maxAge: 3600, reports: reports, diagnostics: Diagnostics(handler: nil))
        try transport.send(envelope("d0", level: .debug))
        try transport.send(envelope("e0", level: .error))
        try transport.send(envelope("i0", level: .info))
        XCTAssertEqual(try bodies(), ["d0", "e0", "i0"], "within the quota")
        try transport.send(envelope("d1", level: .debug))
        XCTAssertEqual(try bodies(), ["e0", "i0", "d1"])
        try transport.send(envelope("i1", level: .info))
        XCTAssertEqual(try bodies(), ["e0", "i0", "i1"], "the new debug envelope was the least important")
        try transport.send(envelope("f0", level: .fatal))
        XCTAssertEqual(try bodies(), ["e0", "i1", "f0"], "the oldest info")
        XCTAssertEqual(transport.storedEnvelopes().map(\.lastPathComponent),
                       try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted())
        XCTAssertEqual(reports.take()?.quantity(.cacheOverflow, .logItem), 3)
    }

    /// `Options.maxCacheBytes` reaches the buffer's transport, and its evictions are counted.
    func testABufferKeepsItsByteQuota() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory) {
            $0.maxBatchBytes = 4096
            $0.maxCacheBytes = 8192
            $0.maxLogsPerBatch = 1
        })
        let padding = String(repeating: "x", count: 3000)
        for (body, level) in [("debug 0", Log.Level.debug), ("error", .error), ("debug 1", .debug)] {
            XCTAssertTrue(buffer.add(log: Log(level: level, body: body + padding, traceID: TraceID(high: 1, low: 2))))
            buffer.flush()
        }
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory).map { String($0.prefix(7)) }, ["error" + padding.prefix(2), "debug 1"])
        XCTAssertEqual(buffer.stats().drops["cache_overflow/log_item"], 1)
        buffer.close()
    }

    /// An envelope larger than the whole byte quota is kept while it is the only one: evicting it would
    /// only lose it. The next one stored evicts it.
    func testTheLastEnvelopeStaysWhateverItsSize() throws {
        let transport = try FileTransport(directory: folder, maxEnvelopes: 10, maxBytes: 10)
        try transport.send(envelope("alone"))
        XCTAssertEqual(try bodies(), ["alone"])
        try transport.send(envelope("next"))
        XCTAssertEqual(try bodies(), ["next"])
    }

    /// An envelope ranks by the highest level of any of its logs, wherever it is among them; a body that
    /// spells a level field (escaped in the JSON) or an attribute named `level` does not count.
    func testAnEnvelopeRanksByItsHighestLevelAnywhereInIt() throws {
        let transport = try FileTransport(directory: folder, maxEnvelopes: 1)
        try transport.send(envelope("error", levels: [.debug, .trace, .error, .info, .trace]))
        try transport.send(envelope(#"quoted "level":"fatal" "#, level: .warn))
        XCTAssertEqual(try bodies(), (0..<5).map { "error \($0)" },
                       "warn (with a fatal spelled in its body and its attribute) ranks below error")
        try transport.send(envelope("fatal", levels: Array(repeating: .trace, count: 60) + [.fatal]))
        XCTAssertEqual(try bodies().count, 61, "the fatal at the end of 61 logs outranks the error")
        XCTAssertEqual(try bodies().last, "fatal 60")
        try transport.send(envelope("info", levels: [.info, .warn, .info]))
        XCTAssertEqual(try bodies().last, "fatal 60", "warn ranks below fatal")
    }

    /// An envelope another party deleted after an eviction ranked it (a closed buffer's upload that ended
    /// late, a second transport on the folder) was not dropped here: its eviction counts nothing.
    func testAnEnvelopeDeletedAfterItsRankingIsNotCountedWhenEvicted() throws {
        let reports = ClientReportRecorder()
        let transport = try FileTransport(directory: folder, maxEnvelopes: 2, maxAge: 7 * 24 * 3600, reports: reports,
                                          diagnostics: Diagnostics(handler: nil))
        for (body, level) in [("a", Log.Level.info), ("b", .info), ("c", .error)] { try transport.send(envelope(body, level: level)) }
        XCTAssertEqual(try bodies(), ["b", "c"], "the oldest info went first, and every stored envelope was ranked")
        XCTAssertEqual(reports.take()?.quantity(.cacheOverflow, .logItem), 1)
        let b = try XCTUnwrap(try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted().first)
        try FileManager.default.removeItem(at: folder.appendingPathComponent(b))
        try transport.send(envelope("d", level: .error))
        XCTAssertEqual(try bodies(), ["c", "d"])
        XCTAssertEqual(reports.take()?.quantity(.cacheOverflow, .logItem) ?? 0, 0, "b's log was not dropped by this transport")
    }

    /// The count limit evicts by the same order; a span or a metrics envelope counts as `info`.
    func testTheCountLimitEvictsByLevelAndSpansAndMetricsCountAsInfo() throws {
        let payload = Array(#"{"trace_id":"00000000000000010000000000000002","span_id":"0000000000000003","name":"s"}"#.utf8)
        let span = payload.withUnsafeBytes { encoder.envelope([$0], of: .span, trace: TraceID(high: 1, low: 2)).envelope }
        for (kind, envelope) in [("span", span), ("trace_metric", metrics(1))] {
            try? FileManager.default.removeItem(at: folder)
            let transport = try FileTransport(directory: folder, maxEnvelopes: 1)
            try transport.send(envelope)
            try transport.send(self.envelope("debug", level: .debug))
            XCTAssertEqual(try walkEnvelopes(in: folder).map { $0.items[0].type }, [kind], "debug goes before \(kind)")
            try transport.send(self.envelope("warn", level: .warn))
            XCTAssertEqual(try bodies(), ["warn"])
        }
    }

    /// Expired: older than `maxAge`, or dated further ahead than that (written while the clock was that far
    /// wrong, or it went back since): an age that never comes would keep one the server keeps failing for good.
    func testOpeningRemovesExpiredEnvelopesAndInterruptedWrites() throws {
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let old = Date().addingTimeInterval(-8 * 24 * 3600)
        try Data(envelope("old by name").bytes).write(to: folder.appendingPathComponent(FileTransport.name(now: old, counter: 0)))
        let ahead = Date().addingTimeInterval(30 * 24 * 3600)
        try Data(envelope("far ahead").bytes).write(to: folder.appendingPathComponent(FileTransport.name(now: ahead, counter: 0)))
        let foreign = folder.appendingPathComponent("foreign.envelope")
        try Data(envelope("old by mtime").bytes).write(to: foreign)
        try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: foreign.path)
        try Data(envelope("fresh").bytes).write(to: folder.appendingPathComponent(FileTransport.name(now: Date(), counter: 0)))
        try Data("partial".utf8).write(to: folder.appendingPathComponent(".123-000000-abc.envelope.tmp"))

        let reports = ClientReportRecorder()
        let transport = try FileTransport(directory: folder, maxEnvelopes: 30, maxAge: 7 * 24 * 3600, reports: reports,
                                          diagnostics: Diagnostics(handler: nil))
        XCTAssertEqual(try bodies(), ["fresh"])
        XCTAssertEqual(transport.storedEnvelopes().count, 1)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: folder.path).count, 1, "the .tmp is gone")
        XCTAssertEqual(reports.take()?.quantity(.cacheOverflow, .logItem), 3)
    }

    /// A clock not set yet (a device without a real-time clock, at boot, before the network gave it the
    /// time: 1970 here) ages nothing, where every envelope looked 56 years ahead and was removed; and an
    /// envelope dated by such a clock is not taken for 56 years old once the clock is right.
    func testAClockNotSetYetExpiresNothing() throws {
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let unset = Date(timeIntervalSince1970: 86_400)
        try Data(envelope("dated by an unset clock").bytes).write(to: folder.appendingPathComponent(FileTransport.name(now: unset, counter: 0)))
        try Data(envelope("dated today").bytes).write(to: folder.appendingPathComponent(FileTransport.name(now: Date(), counter: 0)))
        let clocks: [any Clock] = [ManualClock(now: unset), SystemClock()]
        for clock in clocks {
            let reports = ClientReportRecorder()
            let transport = try FileTransport(directory: folder, maxEnvelopes: 30, maxAge: 7 * 24 * 3600, clock: clock, reports: reports,
                                              diagnostics: Diagnostics(handler: nil))
            XCTAssertEqual(try bodies(), ["dated by an unset clock", "dated today"], "\(clock)")
            for url in transport.storedEnvelopes() { XCTAssertFalse(transport.removeIfExpired(url), "\(clock)") }
            XCTAssertNil(reports.take(), "\(clock)")
        }
    }

    func testOpeningEnforcesTheLimitOnWhatIsAlreadyThere() throws {
        let first = try FileTransport(directory: folder, maxEnvelopes: 10)
        for index in 0..<6 { try first.send(envelope("e\(index)")) }
        _ = try FileTransport(directory: folder, maxEnvelopes: 4)
        XCTAssertEqual(try bodies(), ["e2", "e3", "e4", "e5"])
    }

    /// A reader listing and reading the folder while envelopes are written never sees a partial one.
    func testAConcurrentReaderNeverSeesAPartialEnvelope() throws {
        let transport = try FileTransport(directory: folder, maxEnvelopes: 1000)
        let large = String(repeating: "0123456789", count: 20_000)
        let done = Locked(false)
        let seen = Locked(0)
        let failures = Locked([String]())
        let folder = folder
        let reader = Thread {
            while !done.withLock({ $0 }) {
                let names = (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
                for name in names where name.hasSuffix(".envelope") {
                    guard let data = FileManager.default.contents(atPath: folder.appendingPathComponent(name).path) else { continue }
                    do {
                        let walked = try WalkedEnvelope(Array(data))
                        if walked.elements.first?["body"] as? String != large { throw WalkError("wrong body") }
                        seen.withLock { $0 += 1 }
                    } catch {
                        failures.withLock { $0.append("\(name): \(error)") }
                    }
                }
            }
        }
        reader.start()
        for _ in 0..<100 { try transport.send(envelope(large)) }
        // A reader that got no time while they were written (a loaded machine) reads them now.
        eventually { seen.withLock { $0 } > 0 }
        done.withLock { $0 = true }
        while !reader.isFinished { usleep(1000) }
        XCTAssertEqual(failures.withLock { $0 }, [])
        XCTAssertGreaterThan(seen.withLock { $0 }, 0, "the reader did read envelopes")
    }

    func testAFailedWriteThrowsAndLeavesNothingBehind() throws {
        let transport = try FileTransport(directory: folder)
        try FileManager.default.removeItem(at: folder)
        XCTAssertThrowsError(try transport.send(envelope("lost"))) { error in
            guard let error = error as? TelemetryBufferError, error.code == .fileSystem else { return XCTFail("\(error)") }
            XCTAssertEqual(error.operation, "open")
            XCTAssertEqual(error.errno, ENOENT)
            XCTAssertTrue(error.description.hasPrefix("open '"), error.description)
        }
    }

    func testStagingStrategiesKeepWhatTheyCouldNotMoveAndMoveItLater() throws {
        for strategy in Options.Strategy.allCases {
            let folder = try TemporaryDirectory()
            defer { folder.remove() }
            let buffer = try TelemetryBuffer(options: testOptions(folder) { $0.strategy = strategy })
            try FileManager.default.removeItem(at: buffer.envelopesDirectory)
            buffer.add(log: .test("kept"))
            buffer.flush()
            XCTAssertNil(buffer.pendingDiscards, strategy.rawValue)
            let staged = try FileManager.default.contentsOfDirectory(atPath: buffer.directory.appendingPathComponent("telemetry-buffer").path)
            XCTAssertTrue(staged.contains("envelope-0"), "\(strategy): \(staged)")
            try FileManager.default.createDirectory(at: buffer.envelopesDirectory, withIntermediateDirectories: true)
            buffer.add(log: .test("later"))
            buffer.close()
            XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["kept", "later"], strategy.rawValue)
        }
    }
}
