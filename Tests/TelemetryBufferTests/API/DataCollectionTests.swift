import Foundation
import XCTest
@testable import TelemetryBuffer

/// Consent (`DataCollection`) and `removeAllData()`: against a real HTTP server on 127.0.0.1, real files,
/// and a child process killed with SIGKILL.
final class DataCollectionTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory.remove() }

    private func uploading(_ server: TestServer, _ configure: (inout Options) -> Void = { _ in }) throws -> TelemetryBuffer {
        try TelemetryBuffer(options: uploadingOptions(directory, to: server, configure))
    }

    /// Every log body the server received, in order.
    /// The log bodies of the requests the server received, once each has been read whole (a request is
    /// counted from its head on: reading a body too soon was a flaky failure).
    private func sentBodies(_ server: TestServer) throws -> [String] {
        eventually { server.requests.withLock { $0.allSatisfy(\.isComplete) } }
        return try server.requests.withLock { $0 }.flatMap { request in
            try WalkedEnvelope(request.body).items.filter { $0.type == "log" }.flatMap(\.elements).compactMap { $0["body"] as? String }
        }
    }

    /// The regular files under `folder` (recursively) whose bytes contain `marker`.
    private func files(under folder: URL, containing marker: String) -> [String] {
        let needle = Data(marker.utf8)
        let enumerator = FileManager.default.enumerator(at: folder, includingPropertiesForKeys: [.isRegularFileKey])
        var found: [String] = []
        while let url = enumerator?.nextObject() as? URL {
            guard (try? url.resourceValues(forKeys: [.isRegularFileKey]))?.isRegularFile == true,
                  let data = try? Data(contentsOf: url), data.range(of: needle) != nil else { continue }
            found.append(url.path.replacingOccurrences(of: folder.path, with: ""))
        }
        return found
    }

    func testPendingStoresWithoutSendingAndGrantingSendsEverythingOnce() throws {
        // The second answer comes late, as on a loaded machine: its envelope is removed only once it arrives.
        let server = try TestServer(script: TestServer.sequence([.respond(200), .respond(200, after: 0.3)]))
        defer { server.stop() }
        let buffer = try uploading(server) { $0.dataCollection = .pending }
        XCTAssertEqual(buffer.dataCollection, .pending)
        for index in 0..<5 { XCTAssertTrue(buffer.add(log: .test("waiting \(index)"))) }
        buffer.flush()
        buffer.waitForBackgroundWork()  // the uploader has seen the stored envelope
        XCTAssertEqual(buffer.stats().upload, .held(.consent))
        XCTAssertEqual(server.requests.withLock { $0.count }, 0, "nothing is sent while pending")
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory).count, 5, "stored meanwhile")

        buffer.setDataCollection(.granted)
        eventually { server.requests.withLock { $0.count } == 1 && buffer.stats().upload == .idle }
        XCTAssertEqual(try sentBodies(server), (0..<5).map { "waiting \($0)" }, "everything stored, once")
        XCTAssertTrue(buffer.add(log: .test("later")))
        buffer.flush()
        // Idle once its answer is handled: a request counts from its head on, its envelope goes at the answer.
        eventually { server.requests.withLock { $0.count } == 2 && buffer.stats().upload == .idle }
        XCTAssertEqual(try sentBodies(server).last, "later")

        // Back to pending: stored again, not sent.
        buffer.setDataCollection(.pending)
        XCTAssertTrue(buffer.add(log: .test("held again")))
        buffer.flush()
        buffer.waitForBackgroundWork()
        XCTAssertEqual(server.requests.withLock { $0.count }, 2)
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["held again"])
        buffer.close()
    }

    func testRevokingRefusesItemsAndRemovesEverythingStoredWithEveryStrategy() throws {
        for strategy in Options.Strategy.allCases {
            let folder = try TemporaryDirectory()
            defer { folder.remove() }
            directory.remove()
            directory = folder
            let server = try TestServer(script: TestServer.sequence([]))
            defer { server.stop() }
            let buffer = try uploading(server) {
                $0.dataCollection = .pending
                $0.strategy = strategy
                $0.maxLogsPerBatch = 10
            }
            // Envelopes on disk (several forwards), and items still in the lists.
            for index in 0..<35 { buffer.add(log: .test("secret \(index)")) }
            buffer.add(span: .test("secret span", trace: TraceID(high: 3, low: 4)))
            buffer.waitForBackgroundWork()
            XCTAssertFalse(files(under: folder.url, containing: "secret ").isEmpty, "\(strategy): stored before")

            buffer.setDataCollection(.revoked)
            XCTAssertEqual(buffer.dataCollection, .revoked)
            XCTAssertFalse(buffer.add(log: .test("secret refused")), "\(strategy)")
            XCTAssertFalse(buffer.add(span: .test("secret refused", trace: TraceID(high: 3, low: 4))), "\(strategy)")
            buffer.waitForBackgroundWork()
            XCTAssertEqual(files(under: folder.url, containing: "secret "), [], "\(strategy): nothing left in any file")
            XCTAssertEqual(try walkEnvelopes(in: buffer.envelopesDirectory).count, 0, "\(strategy)")
            XCTAssertEqual(buffer.stats().drops, [:], "\(strategy): refusals are configuration, not drops")

            buffer.setDataCollection(.granted)
            XCTAssertTrue(buffer.add(log: .test("after")), "\(strategy)")
            buffer.flush()
            eventually { server.requests.withLock { $0.count } == 1 }
            buffer.waitForBackgroundWork()
            XCTAssertEqual(try sentBodies(server), ["after"], "\(strategy): nothing revoked is ever sent")
            buffer.close()
        }
    }

    func testRemoveAllDataAfterAKillLeavesNothingOfThatRunToSend() throws {
        let server = try TestServer(script: TestServer.sequence([]))
        defer { server.stop() }
        // A run killed mid-way, in its first forward: a list marked `publishing`, its envelopes staged. (A kill
        // at a moment chosen by time can find both lists just published: nothing for recovery then.)
        let killed = try Demo.run(["stress", "--dir", directory.url.path, "--dsn", server.dsn, "--count", "10000000",
                                   "--max-envelopes", "100000"], failpoint: .publishStaged)
        XCTAssertEqual(killed.status, -SIGKILL, killed.errors)
        XCTAssertTrue(killed.output.contains("ack "), "the child added items before the kill")

        let buffer = try uploading(server) { $0.dataCollection = .pending }
        XCTAssertGreaterThan(buffer.recovery.items, 0, "recovery found the killed run's items")
        XCTAssertFalse(files(under: directory.url, containing: #""item "#).isEmpty)
        try buffer.removeAllData()
        XCTAssertEqual(files(under: directory.url, containing: #""item "#), [], "durable when it returns")
        XCTAssertEqual(buffer.dataCollection, .pending, "the consent does not change")

        buffer.setDataCollection(.granted)
        XCTAssertTrue(buffer.add(log: .test("fresh")))
        buffer.flush()
        eventually { server.requests.withLock { $0.count } == 1 }
        buffer.waitForBackgroundWork()
        XCTAssertEqual(try sentBodies(server), ["fresh"])
        buffer.close()
    }

    func testRevokedAtStartRemovesWhatEarlierRunsStored() throws {
        let earlier = try TelemetryBuffer(options: testOptions(directory))
        for index in 0..<3 { earlier.add(log: .test("earlier \(index)")) }
        earlier.flush()
        earlier.add(log: .test("earlier, unflushed"))
        earlier.close()
        XCTAssertFalse(files(under: directory.url, containing: "earlier").isEmpty)

        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.dataCollection = .revoked })
        XCTAssertFalse(buffer.add(log: .test("refused")))
        buffer.waitForBackgroundWork()
        XCTAssertEqual(files(under: directory.url, containing: "earlier"), [])
        buffer.close()
    }

    /// A forward that fails during the removal (the IO cache cannot be retired) is an error, not a quiet
    /// success; the next removal finishes the job.
    func testAFailedForwardFailsTheRemovalAndTheNextOneFinishesIt() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory))
        XCTAssertEqual(buffer.recovery.items, 0)
        buffer.add(log: .test("secret"))
        buffer.doubleRotatingBuffer?.copyNow()  // a cache that holds the list's records is retired
        Failpoint.retireFails.failNext()
        XCTAssertThrowsError(try buffer.removeAllData())
        try buffer.removeAllData()
        XCTAssertEqual(files(under: directory.url, containing: "secret"), [])
        XCTAssertTrue(buffer.add(log: .test("later")))
        buffer.flush()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["later"])
        buffer.close()
    }

    /// A buffer created with `.revoked` and released at once still removes what earlier runs stored.
    func testRevokedAtStartRemovesEvenIfTheBufferIsReleasedAtOnce() throws {
        let earlier = try TelemetryBuffer(options: testOptions(directory))
        earlier.add(log: .test("earlier"))
        earlier.close()
        XCTAssertFalse(files(under: directory.url, containing: "earlier").isEmpty)
        _ = try TelemetryBuffer(options: testOptions(directory) { $0.dataCollection = .revoked })
        eventually { files(under: directory.url, containing: "earlier").isEmpty }
    }

    /// Revoked at start, with a custom transport: what recovery publishes of a killed run is deleted, never
    /// handed to the transport.
    func testARevokedBufferHandsNothingRecoveredToItsTransport() throws {
        let killed = try Demo.run(["stress", "--dir", directory.url.path, "--count", "10000000"], failpoint: .publishStaged)
        XCTAssertEqual(killed.status, -SIGKILL, killed.errors)
        let transport = Recording()
        let buffer = try TelemetryBuffer(options: testOptions(directory) {
            $0.dsn = demoDefaultDSN
            $0.transport = transport
            $0.dataCollection = .revoked
        })
        XCTAssertGreaterThan(buffer.recovery.items, 0)
        buffer.waitForBackgroundWork()
        XCTAssertEqual(transport.bodies.withLock { $0 }, [])
        // The killed run's own envelopes folder is its transport's, not this buffer's: only its files count.
        XCTAssertEqual(files(under: buffer.directory.appendingPathComponent("telemetry-buffer"), containing: #""item "#), [])
        buffer.close()
    }

    /// A `beforeSendLog` hook that revokes consent: the log it was given is not taken.
    func testALogWhoseHookRevokesIsNotTaken() throws {
        final class Box: @unchecked Sendable { weak var buffer: TelemetryBuffer? }
        let box = Box()
        let buffer = try TelemetryBuffer(options: testOptions(directory) {
            $0.beforeSendLog = { log in
                if log.body == "revoke" { box.buffer?.setDataCollection(.revoked) }
                return log
            }
        })
        box.buffer = buffer
        XCTAssertTrue(buffer.add(log: .test("before")))
        XCTAssertFalse(buffer.add(log: .test("revoke")))
        buffer.waitForBackgroundWork()
        buffer.setDataCollection(.granted)
        buffer.flush()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), [])
        XCTAssertEqual(files(under: directory.url, containing: "revoke"), [])
        buffer.close()
    }

    /// An envelope file the transport's list does not know (put there after it opened the folder) goes too.
    func testRemoveAllDataRemovesEnvelopesTheListLostTrackOf() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory))
        buffer.add(log: .test("listed"))
        buffer.flush()
        let stray = buffer.envelopesDirectory.appendingPathComponent("0000000000000001-000000-00000000.envelope")
        try Data(contentsOf: try XCTUnwrap(walkEnvelopeURLs(in: buffer.envelopesDirectory).first)).write(to: stray)
        try buffer.removeAllData()
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: buffer.envelopesDirectory.path), [])
        buffer.close()
    }

    /// Envelopes an earlier run stored with the default transport go too when the app has since switched to
    /// a custom one (nothing else ever reads that folder again); a link in their folder is not followed.
    func testRemoveAllDataWithACustomTransportRemovesWhatTheDefaultOneStored() throws {
        let earlier = try TelemetryBuffer(options: testOptions(directory))
        earlier.add(log: .test("stored by an earlier run"))
        earlier.flush()
        XCTAssertEqual(try walkEnvelopeURLs(in: earlier.envelopesDirectory).count, 1)
        earlier.close()
        let outside = directory.url.appendingPathComponent("outside.envelope")
        try Data("kept".utf8).write(to: outside)
        try FileManager.default.createSymbolicLink(
            at: earlier.envelopesDirectory.appendingPathComponent("0000000000000001-000000-00000000.envelope"),
            withDestinationURL: outside)

        let transport = Recording()
        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.transport = transport })
        try buffer.removeAllData()
        XCTAssertEqual(files(under: directory.url, containing: "stored by an earlier run"), [])
        XCTAssertEqual(try Data(contentsOf: outside), Data("kept".utf8))
        buffer.close()
        XCTAssertEqual(transport.bodies.withLock { $0 }, [])
    }

    /// With a custom transport, where `envelopes` is missing, a link to a folder elsewhere, or a FIFO:
    /// removal creates nothing, follows nothing, waits on nothing, and succeeds.
    func testRemoveAllDataWithACustomTransportFollowsNoLinkAndCreatesNothing() throws {
        let elsewhere = directory.url.appendingPathComponent("elsewhere")
        try FileManager.default.createDirectory(at: elsewhere, withIntermediateDirectories: false)
        let envelope = elsewhere.appendingPathComponent("0000000000000001-000000-00000000.envelope")
        try Data("kept".utf8).write(to: envelope)
        let kinds: [(String, (URL) throws -> Void)] = [
            ("missing", { _ in }),
            ("a link to a folder", { try FileManager.default.createSymbolicLink(at: $0, withDestinationURL: elsewhere) }),
            ("a FIFO", { XCTAssertEqual(mkfifo($0.path, 0o600), 0) }),
        ]
        for (kind, make) in kinds {
            let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.transport = Recording() })
            try? FileManager.default.removeItem(at: buffer.envelopesDirectory)
            try make(buffer.envelopesDirectory)
            let before = try? FileManager.default.attributesOfItem(atPath: buffer.envelopesDirectory.path)[.type] as? FileAttributeType
            XCTAssertNoThrow(try buffer.removeAllData(), kind)
            let after = try? FileManager.default.attributesOfItem(atPath: buffer.envelopesDirectory.path)[.type] as? FileAttributeType
            XCTAssertEqual(after, before, kind)
            XCTAssertEqual(try Data(contentsOf: envelope), Data("kept".utf8), kind)
            buffer.close()
        }
    }

    private func walkEnvelopeURLs(in folder: URL) throws -> [URL] {
        try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".envelope") }
            .map { folder.appendingPathComponent($0) }
    }

    func testRemoveAllDataLeavesWhatIsNotTheBuffersAlone() throws {
        let options = testOptions(directory)
        let envelopes = directory.envelopesFolder(options.dsn)
        let directoryEnvelope = envelopes.appendingPathComponent("0000000000000001-000000-00000000.envelope")
        try FileManager.default.createDirectory(at: directoryEnvelope, withIntermediateDirectories: true)
        let buffer = try TelemetryBuffer(options: options)
        buffer.add(log: .test("secret"))
        buffer.flush()
        buffer.add(log: .test("secret, held"))
        // Foreign things under names of the buffer's files: a link out of the folder, a directory, a FIFO.
        let outside = directory.url.appendingPathComponent("outside")
        try Data("secret outside".utf8).write(to: outside)
        let folder = buffer.directory.appendingPathComponent("telemetry-buffer")
        try FileManager.default.createSymbolicLink(at: folder.appendingPathComponent("awaiting-sync-7"), withDestinationURL: outside)
        try FileManager.default.createDirectory(at: folder.appendingPathComponent("recovered"), withIntermediateDirectories: false)
        XCTAssertEqual(mkfifo(folder.appendingPathComponent("flushing").path, 0o600), 0)

        try buffer.removeAllData()
        XCTAssertEqual(files(under: directory.url, containing: "secret"), ["/outside"], "only the file no link is followed to")
        for leftAlone in [folder.appendingPathComponent("awaiting-sync-7"), folder.appendingPathComponent("recovered"),
                          folder.appendingPathComponent("flushing"), directoryEnvelope] {
            XCTAssertNotNil(try? FileManager.default.attributesOfItem(atPath: leftAlone.path), leftAlone.lastPathComponent)
        }
        buffer.close()
    }

    /// A transport whose `send` (on the buffer's queue, mid-forward) removes everything: queued, not run
    /// inside the forward (which would delete that forward's copies under it), and never a deadlock.
    func testRemoveAllDataFromTheBuffersOwnQueueIsQueuedBehindTheForward() throws {
        final class Removing: Transport, @unchecked Sendable {
            weak var buffer: TelemetryBuffer?
            let bodies = Locked<[String]>([])
            func send(_ envelope: Envelope) throws {
                bodies.withLock { $0 += (try? WalkedEnvelope(envelope.bytes))?.elements.compactMap { $0["body"] as? String } ?? [] }
                try buffer?.removeAllData()
            }
        }
        let transport = Removing()
        let problems = Locked<[String]>([])
        let buffer = try TelemetryBuffer(options: testOptions(directory) {
            $0.transport = transport
            $0.diagnosticHandler = { diagnostic in
                if diagnostic.level != .info { problems.withLock { $0.append("\(diagnostic)") } }
            }
        })
        transport.buffer = buffer
        for round in 0..<3 {
            XCTAssertTrue(buffer.add(log: .test("round \(round)")))
            buffer.flush()
            buffer.waitForBackgroundWork()
        }
        XCTAssertEqual(transport.bodies.withLock { $0 }, ["round 0", "round 1", "round 2"])
        buffer.close()
        Diagnostics.drain()
        XCTAssertEqual(problems.withLock { $0 }, [])
    }

    func testRemoveAllDataKeepsItemsFromACustomTransportAndKeepsTakingItems() throws {
        let transport = Recording()
        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.transport = transport })
        buffer.add(log: .test("removed"))
        try buffer.removeAllData()
        XCTAssertEqual(transport.bodies.withLock { $0 }, [], "what the buffer held never reaches the transport")
        XCTAssertTrue(buffer.add(log: .test("kept")))
        buffer.flush()
        XCTAssertEqual(transport.bodies.withLock { $0 }, ["kept"])
        buffer.close()
        XCTAssertThrowsError(try buffer.removeAllData()) { error in
            XCTAssertEqual((error as? TelemetryBufferError)?.code, .closed, "\(error)")
        }
    }
}

/// A transport that keeps the log bodies it is sent.
private final class Recording: Transport, @unchecked Sendable {
    let bodies = Locked<[String]>([])
    func send(_ envelope: Envelope) throws {
        let walked = try WalkedEnvelope(envelope.bytes)
        bodies.withLock { $0 += walked.elements.compactMap { $0["body"] as? String } }
    }
}
