import Dispatch
import XCTest
@testable import TelemetryBuffer

/// The doorbell `add` wakes the background queue through: every reason rung arrives, rings made while a
/// delivery is pending are merged into it, rings from many threads lose nothing, and `deliverPending`
/// returns only after every earlier ring was delivered.
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
            if first { _ = release.wait(timeout: .now() + 10) }
        }
        eventually { doorbell.threadRuns }
        doorbell.ring(1)
        XCTAssertEqual(deliveries.arrived.wait(timeout: .now() + 10), .success, "the first ring was not delivered")
        for reasons: UInt in [2, 4, 2, 8] { doorbell.ring(reasons) }
        release.signal()
        XCTAssertEqual(deliveries.arrived.wait(timeout: .now() + 10), .success, "the later rings were not delivered")
        XCTAssertEqual(deliveries.received.withLock { $0 }, [1, 14], "the rings made during a delivery arrive as one")
        doorbell.end()
    }

    /// `deliverPending` (what `waitForBackgroundWork` relies on) returns only once every reason rung before
    /// it was delivered, whichever thread took it: the doorbell's thread may be between taking and
    /// delivering at that moment.
    func testDeliverPendingReturnsAfterEveryEarlierRingWasDelivered() {
        let deliveries = Deliveries()
        let doorbell = Doorbell(name: "test.doorbell") { reasons in
            deliveries.received.withLock { $0.append(reasons) }
        }
        for round in 1...2000 {
            doorbell.ring(1)
            doorbell.deliverPending()
            let delivered = deliveries.received.withLock { $0.count }
            guard delivered == round else {
                return XCTFail("after ring \(round) and deliverPending, \(delivered) deliveries")
            }
        }
        doorbell.end()
    }

    /// A thread that never starts (`Thread` cannot say that it failed) loses no wake-up: rings deliver on
    /// the ringing thread.
    func testWithoutItsThreadRingsDeliverOnTheRingingThread() {
        let deliveries = Deliveries()
        let doorbell = Doorbell(name: "test.doorbell", startsThread: false) { reasons in
            deliveries.received.withLock { $0.append(reasons) }
        }
        doorbell.ring(1)
        doorbell.ring(2)
        XCTAssertEqual(deliveries.received.withLock { $0 }, [1, 2])
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
