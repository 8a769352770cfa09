import Dispatch
import Foundation

/// The time the buffer's background work runs on: the wall clock (rate-limit deadlines, backoff states,
/// `sent_at`) and delayed work (the flush timer, upload pacing and retries). `SystemClock` in use; tests
/// inject one they move by hand instead of sleeping.
protocol Clock: Sendable {
    /// The current wall-clock time.
    func now() -> Date

    /// Runs `work` on `queue` once `delay` seconds have passed on this clock (soon, for 0 or less).
    func after(_ delay: TimeInterval, on queue: DispatchQueue, _ work: @escaping @Sendable () -> Void)
}

/// The real clock: `Date()` and `DispatchQueue.asyncAfter`.
struct SystemClock: Clock {
    func now() -> Date { Date() }

    func after(_ delay: TimeInterval, on queue: DispatchQueue, _ work: @escaping @Sendable () -> Void) {
        queue.asyncAfter(deadline: .now() + max(0, delay), execute: work)
    }
}
