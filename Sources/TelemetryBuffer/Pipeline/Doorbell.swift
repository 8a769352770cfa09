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
final class Doorbell: @unchecked Sendable {
    /// What the parked thread shares with the bell: the pending reasons, the semaphore, and whether to end.
    private final class Line: @unchecked Sendable {
        let pending = UnsafeMutablePointer<UInt>.allocate(capacity: 1)
        let signal = DispatchSemaphore(value: 0)
        let ended = UnsafeMutablePointer<UInt>.allocate(capacity: 1)

        init() {
            pending.initialize(to: 0)
            ended.initialize(to: 0)
        }

        deinit {
            pending.deallocate()
            ended.deallocate()
        }
    }

    private let line = Line()

    /// Starts the thread; `deliver` runs on it with the reasons rung since its last run (never 0).
    init(name: String, deliver: @escaping @Sendable (UInt) -> Void) {
        let thread = Thread { [line] in
            while true {
                line.signal.wait()
                if tb_doorbell_take(line.ended) != 0 { return }
                let reasons = tb_doorbell_take(line.pending)
                if reasons != 0 { deliver(reasons) }
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
        if tb_doorbell_add(line.pending, reasons) == 0 { line.signal.signal() }
    }

    /// Ends the thread (after a delivery under way); later rings deliver nothing.
    func end() {
        if tb_doorbell_add(line.ended, 1) == 0 { line.signal.signal() }
    }

    deinit { end() }
}
