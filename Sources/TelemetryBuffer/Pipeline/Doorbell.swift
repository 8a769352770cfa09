import CTelemetrySignals
import Dispatch
import Foundation

/// How `add` wakes the background queue at the cost of at most one syscall, and none while a wake-up is
/// already pending.
///
/// Waking a dispatch queue from the adding thread costs more than a syscall: when the queue is idle,
/// libdispatch pushes it onto a root queue and wakes a pool thread, or creates one (on Linux, pool threads
/// exit after 5 s idle, which is as long as the default flush interval). That put 5–50 µs into the add
/// that started a batch or reached a limit. Here `ring` ORs its reasons into a word; only the ring that
/// finds the word empty signals a semaphore (one futex wake, or none if the thread is awake). A thread of
/// the buffer's own, parked on that semaphore, takes the reasons and hands them to the queue, paying
/// libdispatch's cost off the caller's thread.
final class Doorbell: Sendable {
    /// What the parked thread shares with the bell: the pending reasons, the semaphore, whether it runs
    /// and whether to end, and the delivery, under a lock so that `deliverPending` cannot return while the thread is between
    /// taking reasons and passing them on (`ring` never takes the lock).
    /// `@unchecked Sendable`: its words are raw memory that C reads and writes only atomically.
    private final class Line: @unchecked Sendable {
        let pending = UnsafeMutablePointer<UInt>.allocate(capacity: 1)
        let signal = DispatchSemaphore(value: 0)
        let ended = UnsafeMutablePointer<UInt>.allocate(capacity: 1)
        /// Set by the thread before it first waits.
        let running = UnsafeMutablePointer<UInt>.allocate(capacity: 1)
        let delivering = Lock()
        let deliver: @Sendable (UInt) -> Void

        init(deliver: @escaping @Sendable (UInt) -> Void) {
            self.deliver = deliver
            pending.initialize(to: 0)
            ended.initialize(to: 0)
            running.initialize(to: 0)
        }

        /// Takes the pending reasons and delivers them, if any.
        func deliverPending() {
            delivering.withLock {
                let reasons = tb_doorbell_take(pending)
                if reasons != 0 { deliver(reasons) }
            }
        }

        deinit {
            pending.deallocate()
            ended.deallocate()
            running.deallocate()
        }
    }

    private let line: Line

    /// Starts the thread; `deliver` runs on it (or in `deliverPending`) with the reasons rung since its
    /// last run (never 0). Until the thread runs (and if it never does: `Thread` reports no failure to
    /// start one), `ring` delivers on the ringing thread, as a direct wake-up would.
    ///
    /// - Parameter startsThread: `false` only in tests, for a thread that never starts.
    init(name: String, startsThread: Bool = true, deliver: @escaping @Sendable (UInt) -> Void) {
        let line = Line(deliver: deliver)
        self.line = line
        guard startsThread else { return }
        let thread = Thread {
            tb_doorbell_add(line.running, 1)
            while true {
                line.signal.wait()
                #if os(Linux)
                // Linux may run a woken thread at once on the waker's core, ahead of the thread that rang,
                // which then waits for the whole delivery (taking the lock, poking libdispatch) before `add`
                // returns: 7.0–7.6 µs for a batch's first add, against 5.9–6.5 with this yield (waking a
                // parked thread alone: 4.7–5.5; RESULTS run P). A ring can wait for its delivery. Not on
                // Apple platforms, where `sched_yield` depresses the thread's priority for up to a quantum
                // (about 10 ms), unmeasured here.
                sched_yield()
                #endif
                if tb_doorbell_take(line.ended) != 0 { return }
                line.deliverPending()
            }
        }
        thread.name = name
        // It only takes reasons and calls into libdispatch: a small stack is plenty.
        thread.stackSize = 256 << 10
        thread.start()
    }

    /// Adds `reasons` (bits) for the next delivery: an atomic OR, and a semaphore signal only if nothing
    /// was pending. No allocation.
    @inline(__always)
    func ring(_ reasons: UInt) {
        guard threadRuns else { return line.deliver(reasons) }
        if tb_doorbell_add(line.pending, reasons) == 0 { line.signal.signal() }
    }

    /// Whether the doorbell's thread runs (before it does, rings deliver on the ringing thread).
    var threadRuns: Bool { tb_doorbell_is_set(line.running) }

    /// Delivers on the calling thread what was rung and not delivered yet; returns after any delivery
    /// under way on the doorbell's thread.
    func deliverPending() { line.deliverPending() }

    /// Ends the thread (after a delivery under way); later rings deliver nothing. In the child of a
    /// `fork()` there is no thread to end, and the semaphore is the parent's.
    func end() {
        guard tb_in_forked_child() == 0 else { return }
        if tb_doorbell_add(line.ended, 1) == 0 { line.signal.signal() }
    }

    deinit { end() }
}
