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

    /// A custom transport's `send` that reads `recovery` while the start hands it what an earlier buffer
    /// staged: recovery is done by then (it waited for the hand-over, and a `send` on the queue that waited
    /// for it would never return).
    func testATransportMayReadRecoveryWhileTakingRecoveredEnvelopes() throws {
        struct Refusing: Transport {
            func send(_ envelope: Envelope) throws { throw POSIXError(.EIO) }
        }
        let first = try TelemetryBuffer(options: testOptions(directory) { $0.transport = Refusing() })
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

/// An HTTP client whose requests never complete.
private struct SilentClient: HTTPClient {
    let started: DispatchSemaphore
    func send(_ request: HTTPRequest, completion: @escaping @Sendable (Result<HTTPResponse, any Error>) -> Void) {
        started.signal()
    }
}
