import Foundation
import XCTest
@testable import TelemetryBuffer

/// A buffer created before the device's first unlock (its folder's files cannot be opened yet; here the
/// options stand in for the device, refusing after the start-up's claims): items wait in memory, and the
/// first forward after the unlock opens the folder, recovers what earlier processes left, then stores what
/// was held, in order, before anything later.
final class FirstUnlockTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory.remove() }

    /// Options whose folder cannot be opened while `locked` holds `true`.
    private func options(_ strategy: Options.Strategy, locked: Locked<Bool>, maxBatchBytes: Int? = nil,
                         diagnostics: Locked<[String]> = Locked([]), _ configure: (inout Options) -> Void = { _ in }) -> Options {
        testOptions(directory) {
            $0.strategy = strategy
            if let maxBatchBytes { $0.maxBatchBytes = maxBatchBytes }
            $0.protectedDataAvailable = { !locked.withLock { $0 } }
            $0.diagnosticHandler = { diagnostic in diagnostics.withLock { $0.append(diagnostic.message) } }
            configure(&$0)
        }
    }

    /// An earlier process's list, for recovery to publish first.
    private func plantEarlierList(dsn: String = testDSN) throws {
        let folder = try directory.makeBufferFolder(dsn: dsn)
        let list = RecordRegion(mapping: try MappedFile(path: folder + "/crash-safe-list-1", size: 4096 + 32),
                                kind: .crashSafeList)
        appendLogs(["earlier 0", "earlier 1"], to: list, nonce: 9)
    }

    func testItemsAddedBeforeTheUnlockAreStoredAfterItInOrder() throws {
        for (index, strategy) in Options.Strategy.allCases.enumerated() {
            try plantEarlierList()
            let locked = Locked(true), diagnostics = Locked<[String]>([])
            let buffer = try TelemetryBuffer(options: options(strategy, locked: locked, diagnostics: diagnostics))
            eventually { diagnostics.withLock { $0.contains { $0.contains("until the device is unlocked") } } }
            let held = (0..<10).map { "held \($0)" }
            for body in held { XCTAssertTrue(buffer.add(log: .test(body)), "\(strategy)") }
            XCTAssertTrue(buffer.add(span: .test("held span", trace: TraceID(high: 3, low: 4))), "\(strategy)")
            XCTAssertEqual(buffer.stats().bufferedItems, 11, "\(strategy)")
            XCTAssertEqual(buffer.recovery, RecoveryReport(), "\(strategy): nothing recovered yet, and no wait")
            // Still locked: a flush cannot store anything, and loses nothing.
            buffer.flush()
            XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), [], "\(strategy)")
            XCTAssertEqual(buffer.stats().bufferedItems, 11, "\(strategy)")

            locked.withLock { $0 = false }
            // The unlock's notification for one strategy, a plain flush for the next: either opens the folder.
            if index.isMultiple(of: 2) {
                buffer.protectedDataBecameAvailable()
                buffer.waitForBackgroundWork()
            }
            XCTAssertTrue(buffer.add(log: .test("after 0")), "\(strategy)")
            buffer.flush()
            XCTAssertTrue(buffer.add(log: .test("after 1")), "\(strategy)")
            buffer.close()
            XCTAssertEqual(buffer.recovery.items, 2, "\(strategy)")
            XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory),
                           ["earlier 0", "earlier 1"] + held + ["after 0", "after 1"], "\(strategy)")
            let spans = try walkEnvelopes(in: buffer.envelopesDirectory).flatMap(\.items).filter { $0.type == "span" }
            XCTAssertEqual(spans.flatMap(\.elements).compactMap { $0["name"] as? String }, ["held span"], "\(strategy)")
            XCTAssertEqual(buffer.stats().drops, [:], "\(strategy): nothing dropped")
            try FileManager.default.removeItem(at: buffer.directory)
        }
    }

    /// Once open, the folder is the strategy's as at any start: the crash handler holds FlushAll's regions
    /// and the DoubleRotatingBuffer's items are in its mapped lists.
    func testAfterTheUnlockTheStrategyKeepsItsFilesAndItsCrashHandler() throws {
        let locked = Locked(true)
        let buffer = try TelemetryBuffer(options: options(.doubleRotatingBuffer, locked: locked))
        defer { buffer.close() }
        XCTAssertTrue(buffer.add(log: .test("held")))
        let folder = buffer.directory.appendingPathComponent("telemetry-buffer").path
        XCTAssertFalse(try FileManager.default.contentsOfDirectory(atPath: folder).contains { $0.hasPrefix("crash-safe-list") })
        locked.withLock { $0 = false }
        buffer.protectedDataBecameAvailable()
        buffer.waitForBackgroundWork()
        XCTAssertTrue(try FileManager.default.contentsOfDirectory(atPath: folder).contains { $0.hasPrefix("crash-safe-list") })
        XCTAssertEqual(buffer.activeStrategy, .doubleRotatingBuffer)
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["held"])
    }

    /// What is held is one batch: later items are refused and counted, and everything accepted is stored.
    func testWhatIsHeldIsOneBatchAndEveryRefusalIsCounted() throws {
        let locked = Locked(true)
        let buffer = try TelemetryBuffer(options: options(.flushAll, locked: locked, maxBatchBytes: 8192))
        var accepted: [String] = []
        for index in 0..<200 where buffer.add(log: .test("held \(index)")) { accepted.append("held \(index)") }
        XCTAssertGreaterThan(accepted.count, 0)
        XCTAssertLessThan(accepted.count, 200)
        XCTAssertEqual(buffer.pendingDiscards?.quantity(.bufferOverflow, .logItem), 200 - accepted.count)
        locked.withLock { $0 = false }
        buffer.close()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), accepted)
        XCTAssertNil(buffer.stats().drops["internal_sdk_error/log_item"])
    }

    /// Threads adding while the folder opens: every item accepted is stored once, every refusal counted.
    func testItemsAddedWhileTheFolderOpensAreStoredOnce() throws {
        for strategy in Options.Strategy.allCases {
            let locked = Locked(true)
            let buffer = try TelemetryBuffer(options: options(strategy, locked: locked, maxBatchBytes: 64 << 10))
            let accepted = Locked<[String]>([])
            let started = DispatchSemaphore(value: 0)
            let unlocking = DispatchGroup()
            DispatchQueue.global().async(group: unlocking) {
                for _ in 0..<4 { started.wait() }
                locked.withLock { $0 = false }
                buffer.protectedDataBecameAvailable()
            }
            DispatchQueue.concurrentPerform(iterations: 4) { thread in
                started.signal()
                for index in 0..<500 where buffer.add(log: .test("t\(thread) \(index)")) {
                    accepted.withLock { $0.append("t\(thread) \(index)") }
                }
            }
            // The unlock may come after the last add; `close` before it would count what is held as lost.
            unlocking.wait()
            buffer.close()
            let stored = try logBodies(in: buffer.envelopesDirectory)
            XCTAssertEqual(stored.count, Set(stored).count, "\(strategy): no duplicates")
            for thread in 0..<4 {
                let own = stored.filter { $0.hasPrefix("t\(thread) ") }.map { Int($0.split(separator: " ")[1])! }
                XCTAssertEqual(own, own.sorted(), "\(strategy): thread \(thread)'s items in the order added")
            }
            XCTAssertEqual(Set(stored), Set(accepted.withLock { $0 }), "\(strategy)")
            XCTAssertEqual(buffer.stats().drops["buffer_overflow/log_item"] ?? 0, 2000 - stored.count, "\(strategy)")
            try FileManager.default.removeItem(at: buffer.directory)
        }
    }

    /// Closed (or released) while still locked: what is held goes with the process, counted; later items
    /// are refused; the folder is free for a buffer created after the unlock.
    func testClosingBeforeTheUnlockCountsWhatIsHeld() throws {
        for released in [false, true] {
            let locked = Locked(true)
            var buffer: TelemetryBuffer? = try TelemetryBuffer(options: options(.fileStreamCache, locked: locked))
            for index in 0..<3 { XCTAssertTrue(buffer!.add(log: .test("held \(index)"))) }
            let reports = try XCTUnwrap(buffer).discards
            if released {
                buffer = nil
                LiveBuffers.awaitReleases(within: 60)
            } else {
                buffer!.close()
                XCTAssertFalse(buffer!.add(log: .test("after close")))
                XCTAssertThrowsError(try buffer!.removeAllData()) {
                    XCTAssertEqual(($0 as? TelemetryBufferError)?.code, .closed, "\($0)")
                }
            }
            XCTAssertEqual(reports.peek()?.quantity(.internalSDKError, .logItem), 3, "released \(released)")
            XCTAssertEqual(reports.peek()?.quantity(.bufferOverflow, .logItem) ?? 0, released ? 0 : 1, "released \(released)")
            // Closed, then released: counted once.
            buffer = nil
            LiveBuffers.awaitReleases(within: 60)
            XCTAssertEqual(reports.peek()?.quantity(.internalSDKError, .logItem), 3, "released \(released)")
            locked.withLock { $0 = false }
            let after = try TelemetryBuffer(options: options(.fileStreamCache, locked: locked))
            after.close()
            XCTAssertEqual(try logBodies(in: after.envelopesDirectory), [], "released \(released)")
            try FileManager.default.removeItem(at: after.directory)
        }
    }

    /// `removeAllData` before the unlock drops what is held, says the folder is out of reach, and removes
    /// what the folder holds once it opens (what earlier processes left included).
    func testRemovingAllDataBeforeTheUnlockDropsWhatIsHeld() throws {
        try plantEarlierList()
        let locked = Locked(true)
        let buffer = try TelemetryBuffer(options: options(.doubleRotatingBuffer, locked: locked))
        XCTAssertTrue(buffer.add(log: .test("removed")))
        XCTAssertThrowsError(try buffer.removeAllData()) {
            let error = $0 as? TelemetryBufferError
            XCTAssertEqual(error?.code, .fileSystem, "\($0)")
            XCTAssertEqual(error?.errno, EPERM, "\($0)")
        }
        XCTAssertEqual(buffer.stats().bufferedItems, 0)
        locked.withLock { $0 = false }
        XCTAssertTrue(buffer.add(log: .test("kept")))
        buffer.close()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["kept"])
        XCTAssertEqual(buffer.stats().drops, [:], "a removal is not a drop")
    }

    /// A revocation while locked, then a grant: what the folder held when it was revoked (what earlier
    /// processes left) is removed once it opens, before any upload; what came after the grant is sent.
    func testARevocationBeforeTheUnlockRemovesWhatTheFolderHeldOnceItOpens() throws {
        let server = try TestServer(script: TestServer.sequence([]))
        defer { server.stop() }
        try plantEarlierList(dsn: server.dsn)
        let locked = Locked(true)
        let buffer = try TelemetryBuffer(options: uploadingOptions(directory, to: server) {
            $0.protectedDataAvailable = { !locked.withLock { $0 } }
        })
        XCTAssertTrue(buffer.add(log: .test("held, then revoked")))
        buffer.setDataCollection(.revoked)
        buffer.waitForBackgroundWork()
        XCTAssertFalse(buffer.add(log: .test("refused while revoked")))
        buffer.setDataCollection(.granted)
        XCTAssertTrue(buffer.add(log: .test("after the grant")))
        locked.withLock { $0 = false }
        buffer.protectedDataBecameAvailable()
        buffer.flush()
        eventually { server.requests.withLock { $0.count } >= 1 && buffer.stats().upload == .idle }
        buffer.close()
        let sent = try sentLogBodies(server)
        XCTAssertEqual(sent, ["after the grant"])
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), [])
    }

    /// A buffer uploading to `server`, created before the unlock and holding the log `held`, whose takeover is
    /// under way once this returns: the unlock came, and the first open of the folder after it waits, on the
    /// background queue, until the test signals `proceed`.
    private func bufferOpeningItsFolder(to server: TestServer, holding held: String) throws -> (TelemetryBuffer, proceed: DispatchSemaphore) {
        let locked = Locked(true), paused = Locked(false)
        let opening = DispatchSemaphore(value: 0), proceed = DispatchSemaphore(value: 0)
        let buffer = try TelemetryBuffer(options: uploadingOptions(directory, to: server) {
            $0.protectedDataAvailable = {
                guard !locked.withLock({ $0 }) else { return false }
                if !paused.withLock({ was in defer { was = true }; return was }) {
                    opening.signal()
                    _ = proceed.wait(timeout: .now() + 20)
                }
                return true
            }
        })
        XCTAssertTrue(buffer.add(log: .test(held)))
        locked.withLock { $0 = false }
        buffer.protectedDataBecameAvailable()
        XCTAssertEqual(opening.wait(timeout: .now() + 20), .success, "the takeover opens the folder")
        return (buffer, proceed)
    }

    /// The bodies of the logs `server` received, in order.
    private func sentLogBodies(_ server: TestServer) throws -> [String] {
        try server.requests.withLock { $0 }.flatMap { request in
            try WalkedEnvelope(request.body).items.filter { $0.type == "log" }.flatMap(\.elements).compactMap { $0["body"] as? String }
        }
    }

    /// A revocation and a grant that come while the takeover is already under way (the unlock notified, the
    /// folder being opened): what was held before the revocation is dropped by it, never uploaded (the
    /// takeover moved it in, and the grant let the uploader send it before the removal ran).
    func testARevocationAndAGrantDuringTheTakeoverUploadNothingHeldBefore() throws {
        for run in 0..<3 {
            directory.remove()
            directory = try TemporaryDirectory()
            let server = try TestServer(script: TestServer.sequence([]))
            defer { server.stop() }
            let (buffer, proceed) = try bufferOpeningItsFolder(to: server, holding: "held, then revoked")
            buffer.setDataCollection(.revoked)
            XCTAssertEqual(buffer.stats().bufferedItems, 0, "run \(run): dropped by the revocation, not by a removal queued behind the takeover")
            buffer.setDataCollection(.granted)
            proceed.signal()
            buffer.waitForBackgroundWork()
            XCTAssertTrue(buffer.add(log: .test("after the removal")))
            buffer.flush()
            eventually { server.requests.withLock { $0.count } >= 1 && buffer.stats().upload == .idle }
            buffer.close()
            let sent = try sentLogBodies(server)
            XCTAssertEqual(sent, ["after the removal"], "run \(run)")
        }
    }

    /// `removeAllData()` while the takeover is opening the folder drops what is held at once: the takeover
    /// would move it in after its own removal and publish it, and the uploader could send it before the
    /// removal the call waits for runs.
    func testRemovingAllDataDuringTheTakeoverDropsWhatIsHeldAtOnce() throws {
        let server = try TestServer(script: TestServer.sequence([]))
        defer { server.stop() }
        let (buffer, proceed) = try bufferOpeningItsFolder(to: server, holding: "held, then removed")
        let removed = DispatchSemaphore(value: 0)
        Thread {
            _ = try? buffer.removeAllData()  // waits for the background queue, which the takeover holds
            removed.signal()
        }.start()
        eventually { buffer.stats().bufferedItems == 0 }
        proceed.signal()
        XCTAssertEqual(removed.wait(timeout: .now() + 20), .success)
        XCTAssertTrue(buffer.add(log: .test("after the removal")))
        buffer.flush()
        eventually { server.requests.withLock { $0.count } >= 1 && buffer.stats().upload == .idle }
        buffer.close()
        let sent = try sentLogBodies(server)
        XCTAssertEqual(sent, ["after the removal"])
    }

    /// After a revocation and a grant while locked, what earlier processes left is removed when the folder
    /// opens, before a custom transport sees it; what came after the grant reaches it.
    func testACustomTransportGetsOnlyWhatCameAfterTheGrant() throws {
        final class Recording: Transport, @unchecked Sendable {
            let bodies = Locked<[String]>([])
            func send(_ envelope: Envelope) throws {
                let walked = try WalkedEnvelope(envelope.bytes)
                bodies.withLock { $0 += walked.items.flatMap(\.elements).compactMap { $0["body"] as? String } }
            }
        }
        try plantEarlierList()
        let transport = Recording()
        let locked = Locked(true)
        let buffer = try TelemetryBuffer(options: options(.doubleRotatingBuffer, locked: locked) { $0.transport = transport })
        buffer.setDataCollection(.revoked)
        buffer.waitForBackgroundWork()  // its removal, which finds the folder locked
        buffer.setDataCollection(.granted)
        XCTAssertTrue(buffer.add(log: .test("after the grant")))
        locked.withLock { $0 = false }
        buffer.flush()
        XCTAssertTrue(buffer.add(log: .test("later")))
        buffer.close()
        XCTAssertEqual(transport.bodies.withLock { $0 }, ["after the grant", "later"])
    }

    /// Consent pending while locked, granted after the unlock: nothing is sent before the grant, everything
    /// after it, once.
    func testUploadsWaitForTheConsentAfterTheUnlock() throws {
        let server = try TestServer(script: TestServer.sequence([]))
        defer { server.stop() }
        let locked = Locked(true)
        let buffer = try TelemetryBuffer(options: uploadingOptions(directory, to: server) {
            $0.dataCollection = .pending
            $0.protectedDataAvailable = { !locked.withLock { $0 } }
        })
        defer { buffer.close() }
        XCTAssertTrue(buffer.add(log: .test("held")))
        XCTAssertEqual(buffer.stats().upload, .disabled, "no uploader before the folder opens")
        locked.withLock { $0 = false }
        buffer.flush()
        buffer.waitForBackgroundWork()
        XCTAssertEqual(buffer.stats().upload, .held(.consent))
        XCTAssertEqual(server.requests.withLock { $0.count }, 0)
        buffer.setDataCollection(.granted)
        eventually { server.requests.withLock { $0.count } == 1 && buffer.stats().upload == .idle }
        let sent = try server.requests.withLock { $0 }.flatMap { request in
            try WalkedEnvelope(request.body).items.flatMap(\.elements).compactMap { $0["body"] as? String }
        }
        XCTAssertEqual(sent, ["held"])
    }

    /// A folder that cannot be opened for another reason fails `init` as before: only the device's
    /// protection is waited out.
    func testAnotherFailureStillThrowsFromInit() throws {
        let first = try TelemetryBuffer(options: testOptions(directory))
        XCTAssertThrowsError(try TelemetryBuffer(options: options(.flushAll, locked: Locked(false)))) {
            XCTAssertEqual(($0 as? TelemetryBufferError)?.code, .folderInUse, "\($0)")
        }
        first.close()
    }

    /// While a buffer waits for the unlock it keeps the folder's lock: a second buffer on the DSN fails at
    /// once, as with any open buffer, and is not waited for (a locked one, too).
    func testAWaitingBufferKeepsTheFolder() throws {
        let locked = Locked(true)
        let waiting = try TelemetryBuffer(options: options(.fileStreamCache, locked: locked))
        for second in [Locked(false), locked] {
            XCTAssertThrowsError(try TelemetryBuffer(options: options(.flushAll, locked: second))) {
                XCTAssertEqual(($0 as? TelemetryBufferError)?.code, .folderInUse, "\($0)")
            }
        }
        XCTAssertTrue(waiting.add(log: .test("held")))
        locked.withLock { $0 = false }
        waiting.close()
        XCTAssertEqual(try logBodies(in: waiting.envelopesDirectory), ["held"])
    }
}
