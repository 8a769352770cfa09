import Foundation
import XCTest
@testable import TelemetryBuffer

/// The uploader and the network: `resumeUploads()`, a network that comes back, and `UploadPolicy`, with a
/// real HTTP server on 127.0.0.1 and the network path injected (Linux reports none).
final class NetworkTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory.remove() }

    /// A network path the test sets, reported as the system's monitor would.
    final class InjectedNetwork: NetworkMonitor, @unchecked Sendable {
        private let update = Locked<(@Sendable (NetworkPath) -> Void)?>(nil)
        private let initial: NetworkPath

        init(_ initial: NetworkPath) { self.initial = initial }

        func start(_ update: @escaping @Sendable (NetworkPath) -> Void) {
            self.update.withLock { $0 = update }
            update(initial)
        }

        func cancel() { update.withLock { $0 = nil } }

        func report(_ path: NetworkPath) { update.withLock { $0 }?(path) }
    }

    private func buffer(_ server: TestServer, _ configure: (inout Options) -> Void = { _ in }) throws -> TelemetryBuffer {
        try TelemetryBuffer(options: uploadingOptions(directory, to: server) {
            $0.uploadOptions.backoffBase = 600  // never waited out here: only a resume ends it
            configure(&$0)
        })
    }

    private func requests(_ server: TestServer) -> Int { server.requests.withLock { $0.count } }

    /// A buffer on `server` (which fails the first request) whose one log waits out a backoff.
    private func backingOff(_ server: TestServer, _ configure: (inout Options) -> Void = { _ in }) throws -> TelemetryBuffer {
        let buffer = try buffer(server, configure)
        buffer.add(log: .test("retried"))
        buffer.flush()
        eventually { if case .backingOff = buffer.stats().upload { true } else { false } }
        return buffer
    }

    func testResumeEndsABackoffAndSendsNow() throws {
        let server = try TestServer(script: TestServer.sequence([.respond(503)]))
        defer { server.stop() }
        let buffer = try backingOff(server)
        XCTAssertEqual(requests(server), 1)
        buffer.resumeUploads()
        eventually { requests(server) == 2 && buffer.stats().upload == .idle }
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), [], "sent and deleted")
        buffer.close()
    }

    func testResumeEndsACoolOff() throws {
        let server = try TestServer(script: TestServer.sequence([.respond(500)]))
        defer { server.stop() }
        let buffer = try buffer(server) {
            $0.uploadOptions.maxAttempts = 1
            $0.uploadOptions.coolOff = 600
        }
        buffer.add(log: .test("after the cool-off"))
        buffer.flush()
        eventually { if case .coolingOff = buffer.stats().upload { true } else { false } }
        buffer.resumeUploads()
        eventually { requests(server) == 2 && buffer.stats().upload == .idle }
        buffer.close()
    }

    func testResumeNeverCutsARateLimitShort() throws {
        let server = try TestServer(script: TestServer.sequence([.respond(429, headers: ["Retry-After": "600"])]))
        defer { server.stop() }
        let buffer = try buffer(server) { $0.maxLogsPerBatch = 1 }
        buffer.add(log: .test("limited"))
        buffer.add(log: .test("waits for the limit"))
        buffer.flush()
        eventually { if case .rateLimited = buffer.stats().upload { true } else { false } }
        buffer.resumeUploads()
        buffer.waitForBackgroundWork()
        XCTAssertEqual(requests(server), 1)
        guard case .rateLimited = buffer.stats().upload else { return XCTFail("\(buffer.stats().upload)") }
        XCTAssertFalse(buffer.add(metric: .counter("still limited")), "the limit holds every category")
        buffer.close()
    }

    func testANetworkThatComesBackEndsTheBackoff() throws {
        let server = try TestServer(script: TestServer.sequence([.respond(503)]))
        defer { server.stop() }
        let network = InjectedNetwork(NetworkPath(isSatisfied: true, isMetered: false))
        let buffer = try backingOff(server) { $0.networkMonitor = network }
        // A change of a working network (here it turns metered) is no return: the backoff goes on.
        network.report(NetworkPath(isSatisfied: true, isMetered: true))
        buffer.waitForBackgroundWork()
        guard case .backingOff = buffer.stats().upload else { return XCTFail("\(buffer.stats().upload)") }
        network.report(NetworkPath(isSatisfied: false, isMetered: false))
        buffer.waitForBackgroundWork()
        XCTAssertEqual(requests(server), 1, "no route: still waiting")
        network.report(NetworkPath(isSatisfied: true, isMetered: false))
        eventually { requests(server) == 2 && buffer.stats().upload == .idle }
        buffer.close()
    }

    func testUnmeteredOnlyWaitsWhileTheNetworkIsMetered() throws {
        let server = try TestServer(script: TestServer.sequence([]))
        defer { server.stop() }
        let network = InjectedNetwork(NetworkPath(isSatisfied: true, isMetered: true))
        let buffer = try buffer(server) {
            $0.networkMonitor = network
            $0.uploadPolicy = .unmeteredOnly
        }
        buffer.add(log: .test("on wifi"))
        buffer.flush()
        buffer.waitForBackgroundWork()
        XCTAssertEqual(buffer.stats().upload, .held(.meteredNetwork))
        XCTAssertEqual(requests(server), 0, "nothing on a metered network")
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["on wifi"], "waiting on disk, not dropped")
        network.report(NetworkPath(isSatisfied: true, isMetered: false))
        eventually { requests(server) == 1 && buffer.stats().upload == .idle }
        network.report(NetworkPath(isSatisfied: true, isMetered: true))
        buffer.add(log: .test("on cellular"))
        buffer.flush()
        buffer.waitForBackgroundWork()
        XCTAssertEqual(requests(server), 1)
        XCTAssertEqual(buffer.stats().drops, [:])
        buffer.close()
    }

    func testAlwaysSendsOnAMeteredNetwork() throws {
        let server = try TestServer(script: TestServer.sequence([]))
        defer { server.stop() }
        let buffer = try buffer(server) { $0.networkMonitor = InjectedNetwork(NetworkPath(isSatisfied: true, isMetered: true)) }
        buffer.add(log: .test("anywhere"))
        buffer.flush()
        eventually { requests(server) == 1 }
        buffer.close()
    }

    /// A hold and its release leave a backoff as it was: toggling consent does not retry a failing server
    /// at once.
    func testAHoldAndItsReleaseDoNotCutABackoffShort() throws {
        let server = try TestServer(script: TestServer.sequence([.respond(503)]))
        defer { server.stop() }
        let buffer = try backingOff(server)
        buffer.setDataCollection(.pending)
        buffer.setDataCollection(.granted)
        buffer.waitForBackgroundWork()
        XCTAssertEqual(requests(server), 1)
        guard case .backingOff = buffer.stats().upload else { return XCTFail("\(buffer.stats().upload)") }
        buffer.close()
    }
}
