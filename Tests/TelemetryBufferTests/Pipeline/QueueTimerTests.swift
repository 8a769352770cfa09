import Dispatch
import Foundation
@testable import TelemetryBuffer
import XCTest

/// The IO cache's timer: it runs its work once per setting, on the work's queue, at the deadline; a nearer
/// deadline set while it sleeps is not held back by the later one; a cleared or ended timer does not fire.
/// (What it saves, a wake-up per firing on Linux, the battery benchmark measures.)
final class QueueTimerTests: XCTestCase {
    private let key = DispatchSpecificKey<Bool>()
    private let queue = DispatchQueue(label: "queue-timer-test")
    /// Whether each run was on `queue`.
    private let runs = Locked<[Bool]>([])
    private let ran = DispatchSemaphore(value: 0)

    override func setUp() {
        queue.setSpecific(key: key, value: true)
    }

    /// A timer whose work records its run and, while `again` says so, sets the timer once more.
    private func makeTimer(again: @escaping @Sendable (Int) -> Bool = { _ in false }) -> QueueTimer {
        let timer = Locked<QueueTimer?>(nil)
        let made = QueueTimer(name: "queue-timer-test", queue: queue) { [runs, ran, key] in
            let count = runs.withLock { runs in
                runs.append(DispatchQueue.getSpecific(key: key) == true)
                return runs.count
            }
            if again(count) { timer.withLock { $0 }?.set(at: .now() + .milliseconds(2)) }
            ran.signal()
        }
        timer.withLock { $0 = made }
        return made
    }

    private func waitForRun(_ message: String) {
        XCTAssertEqual(ran.wait(timeout: .now() + 10), .success, message)
    }

    func testItRunsOnceOnItsQueue() {
        let timer = makeTimer()
        defer { timer.end() }
        timer.set(at: .now() + .milliseconds(5))
        waitForRun("it fired")
        XCTAssertEqual(ran.wait(timeout: .now() + .milliseconds(100)), .timedOut, "it fired again")
        XCTAssertEqual(runs.withLock { $0 }, [true], "once, on its queue")
    }

    /// The thread sleeps until the deadline; a nearer one set meanwhile wakes it.
    func testANearerDeadlineSetWhileItSleepsIsKept() {
        let timer = makeTimer()
        defer { timer.end() }
        timer.set(at: .now() + .seconds(3600))
        usleep(10_000)  // asleep until then
        timer.set(at: .now() + .milliseconds(5))
        waitForRun("it fired at the nearer deadline")
    }

    /// Its work may set it again: a repeating timer.
    func testItsWorkCanSetItAgain() {
        let timer = makeTimer { $0 < 3 }
        defer { timer.end() }
        timer.set(at: .now() + .milliseconds(2))
        for run in 1...3 { waitForRun("run \(run)") }
        XCTAssertEqual(runs.withLock { $0.count }, 3)
    }

    /// `setUnlessArmed` keeps a deadline already set (the batch's first item while the copy runs).
    func testSetUnlessArmedKeepsTheDeadlineSet() {
        let timer = makeTimer()
        defer { timer.end() }
        timer.set(at: .now() + .seconds(3600))
        timer.setUnlessArmed(at: .now() + .milliseconds(5))
        XCTAssertEqual(ran.wait(timeout: .now() + .milliseconds(200)), .timedOut, "the later deadline was replaced")
        timer.clear()
        timer.setUnlessArmed(at: .now() + .milliseconds(5))
        waitForRun("armed once the timer was not")
    }

    // The deadlines leave 300 ms for the next call (a loaded machine may not run this thread for a while),
    // and the wait goes 300 ms past them.

    func testAClearedTimerDoesNotFire() {
        let timer = makeTimer()
        defer { timer.end() }
        let deadline = DispatchTime.now() + .milliseconds(300)
        timer.set(at: deadline)
        timer.clear()
        XCTAssertEqual(ran.wait(timeout: deadline + .milliseconds(300)), .timedOut, "it fired once cleared")
    }

    func testAnEndedTimerDoesNotFire() {
        let timer = makeTimer()
        timer.set(at: .now() + .milliseconds(300))
        timer.end()
        let deadline = DispatchTime.now() + .milliseconds(300)
        timer.set(at: deadline)
        XCTAssertEqual(ran.wait(timeout: deadline + .milliseconds(300)), .timedOut, "it fired once ended")
    }
}
