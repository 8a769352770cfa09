import Dispatch
import XCTest
@testable import TelemetryBuffer

/// The doorbell `add` wakes the background queue through: every reason rung arrives, rings made while a
/// delivery is pending are merged into it, and rings from many threads lose nothing.
final class DoorbellTests: XCTestCase {
    /// What the doorbell's thread delivered, and a semaphore signalled per delivery.
    private final class Deliveries: @unchecked Sendable {
        let received = Locked<[UInt]>([])
        let arrived = DispatchSemaphore(value: 0)
        var union: UInt { received.withLock { $0.reduce(0, |) } }
    }

    func testEveryReasonRungArrivesAndPendingRingsMerge() {
        let deliveries = Deliveries()
        // The first delivery blocks until released, so the rings made meanwhile must wait and merge.
        let release = DispatchSemaphore(value: 0)
        let doorbell = Doorbell(name: "test.doorbell") { reasons in
            let first = deliveries.received.withLock { $0.append(reasons); return $0.count == 1 }
            deliveries.arrived.signal()
            if first { release.wait() }
        }
        doorbell.ring(1)
        XCTAssertEqual(deliveries.arrived.wait(timeout: .now() + 10), .success, "the first ring was not delivered")
        for reasons: UInt in [2, 4, 2, 8] { doorbell.ring(reasons) }
        release.signal()
        XCTAssertEqual(deliveries.arrived.wait(timeout: .now() + 10), .success, "the later rings were not delivered")
        XCTAssertEqual(deliveries.received.withLock { $0 }, [1, 14], "the rings made during a delivery arrive as one")
        doorbell.end()
    }

    func testRingsFromManyThreadsAllArrive() {
        let deliveries = Deliveries()
        let doorbell = Doorbell(name: "test.doorbell") { reasons in
            deliveries.received.withLock { $0.append(reasons) }
            deliveries.arrived.signal()
        }
        DispatchQueue.concurrentPerform(iterations: 8) { thread in
            for _ in 0..<1000 { doorbell.ring(1 << UInt(thread)) }
        }
        // Every delivery signals once; waiting ends with the last reason, or fails after 10 s without one.
        while deliveries.union != 0xFF, deliveries.arrived.wait(timeout: .now() + 10) == .success {}
        XCTAssertEqual(deliveries.union, 0xFF, "delivered \(String(deliveries.union, radix: 2)) of 11111111")
        XCTAssertFalse(deliveries.received.withLock { $0.contains(0) }, "a delivery without reasons")
        doorbell.end()
    }
}
