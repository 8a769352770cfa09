import Dispatch
import Foundation

/// The time the buffer's background work runs on: the wall clock (rate-limit deadlines, backoff states,
/// `sent_at`) and delayed work (the flush timer, upload pacing and retries). `SystemClock` in use; tests
/// inject one they move by hand instead of sleeping.
protocol Clock: Sendable {
    /// The current wall-clock time.
    func now() -> Date

    /// Runs `work` on `queue` once `delay` seconds have passed on this clock (soon, for 0 or less), or up to
    /// `early` seconds sooner, when the system can run it with other wake-ups; never later.
    func after(_ delay: TimeInterval, early: TimeInterval, on queue: DispatchQueue, _ work: @escaping @Sendable () -> Void)
}

extension Clock {
    /// Runs `work` on `queue` once `delay` seconds have passed on this clock, not sooner.
    func after(_ delay: TimeInterval, on queue: DispatchQueue, _ work: @escaping @Sendable () -> Void) {
        after(delay, early: 0, on: queue, work)
    }
}

/// The real clock: `Date()`, and a one-shot timer source whose leeway lies before its deadline (`asyncAfter`
/// may fire up to a tenth of its delay late, up to a minute: a 30 s flush at 33 s).
struct SystemClock: Clock {
    func now() -> Date { Date() }

    func after(_ delay: TimeInterval, early: TimeInterval, on queue: DispatchQueue, _ work: @escaping @Sendable () -> Void) {
        let timer = DispatchSource.makeTimerSource(queue: queue)
        let leeway = max(0, min(early, delay))
        timer.schedule(deadline: .now() + max(0, delay - leeway), leeway: .nanoseconds(Int(leeway * 1_000_000_000)))
        // The handler keeps the timer alive until it fires; cancelling releases both.
        timer.setEventHandler {
            timer.cancel()
            work()
        }
        timer.resume()
    }
}
