import Dispatch
import Foundation

/// Decides when a strategy forwards, on the buffer's serial background queue: `flushInterval` after the
/// first item of a batch (on the buffer's `Clock`), at once when a limit is reached, and never while the
/// buffer is empty.
///
/// `@unchecked Sendable`: its timers are libdispatch sources (not `Sendable`), and all its state is touched
/// only on `queue` (checked with `dispatchPrecondition`).
final class FlushScheduler: @unchecked Sendable {
    private let queue: DispatchQueue
    private let interval: TimeInterval
    private let clock: any Clock
    private let strategy: any BufferStrategy
    /// Runs after every forward the scheduler runs (not the final one of `close()` or a release), on `queue`.
    private let afterForward: @Sendable () -> Void
    /// Armed from `init` to `close()`, firing (doing nothing) once a year: libdispatch sets up its event
    /// loop (epoll, eventfd, and on Linux a timerfd) when a timer is first armed and keeps it while one is.
    /// Set up lazily at the first forward, it trapped the process when no descriptor was left. It has a
    /// handler and a schedule before it resumes: else libdispatch logs a deprecated use (through syslog,
    /// on the creating thread).
    private let eventLoopKeeper: DispatchSourceTimer
    /// Wakes the queue: bits are OR-ed into the source, and one event handler run sees them all.
    private let wake: DispatchSourceUserDataOr
    /// How `add` reaches `wake`: at most one syscall on the adding thread (see `Doorbell`).
    private let doorbell: Doorbell
    private static let startTimer: UInt = 1, forwardNow: UInt = 2
    /// Whether a timer is armed, and which: one armed earlier and stopped since does nothing when it fires.
    /// (Left to fire rather than cancelled: a cancellation is work delivered to the queue, and cancelling
    /// the timer of each batch forwarded at its limit took more wake-ups than the timers' firing, which
    /// their leeway lets the system fold into other wake-ups: 14.3–14.6 against 13.5–13.9 a second at 200
    /// logs a second, `LoadDriver battery`, Linux.)
    private var armed: Int?
    private var timers = 0
    /// Set by `close()`: a wake-up queued before it no longer forwards into a released folder.
    private var closed = false

    init(queue: DispatchQueue, interval: Double, clock: any Clock, strategy: any BufferStrategy,
         afterForward: @escaping @Sendable () -> Void = {}) {
        self.queue = queue
        self.interval = interval
        self.clock = clock
        self.strategy = strategy
        self.afterForward = afterForward
        eventLoopKeeper = DispatchSource.makeTimerSource(queue: queue)
        eventLoopKeeper.setEventHandler {}
        eventLoopKeeper.schedule(deadline: .now() + .seconds(365 * 86_400), repeating: .seconds(365 * 86_400))
        eventLoopKeeper.resume()
        let wake = DispatchSource.makeUserDataOrSource(queue: queue)
        // `or` may be called from any thread (libdispatch's contract); the type is not marked Sendable.
        nonisolated(unsafe) let source = wake
        doorbell = Doorbell(name: "io.telemetrybuffer.doorbell") { source.or(data: $0) }
        self.wake = wake
        wake.setEventHandler { [weak self] in self?.woken() }
        wake.resume()
    }

    /// Called from `add` for the first item of a batch, the first since the strategy's background copy went
    /// idle, or at a limit: an atomic OR, and a semaphore signal if no wake-up was pending. No allocation.
    func notify(startTimer: Bool, forwardNow: Bool) {
        doorbell.ring((startTimer ? Self.startTimer : 0) | (forwardNow ? Self.forwardNow : 0))
    }

    /// Passes on at once whatever `add` rang and the doorbell's thread has not passed on yet, so that work
    /// queued after this call runs after the wake-up's.
    func deliverRung() { doorbell.deliverPending() }

    private func woken() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !closed else { return }
        let reasons = wake.data
        if reasons & Self.startTimer != 0 { strategy.batchStarted() }
        if reasons & Self.forwardNow != 0 {
            strategy.forward(everything: false)
            settle()
        } else if reasons & Self.startTimer != 0, armed == nil, !strategy.isEmpty {
            arm()
        }
    }

    /// Forwards everything now. Must run on `queue`.
    func forwardEverything() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !closed else { return }
        strategy.forward(everything: true)
        settle()
    }

    /// Stops the timer until the next item arrives. Must run on `queue`.
    func stop() {
        dispatchPrecondition(condition: .onQueue(queue))
        armed = nil
    }

    /// Forwards nothing more, whatever is queued, woken or fires later. Must run on `queue`.
    func close() {
        dispatchPrecondition(condition: .onQueue(queue))
        closed = true
        cancel()
    }

    func cancel() {
        doorbell.end()
        eventLoopKeeper.cancel()
        wake.cancel()
    }

    /// After a forward: keep (or start) the timer only while items wait.
    private func settle() {
        afterForward()
        if strategy.isEmpty {
            stop()
        } else if armed == nil {
            arm()
        }
    }

    /// How early a forward due `interval` after a batch's first item may come: within the last tenth of the
    /// interval (at most 1 s early, never late), so that the system may wake for it together with other work.
    static func earliness(_ interval: Double) -> Double { min(interval / 10, 1) }

    private func arm() {
        timers &+= 1
        let timer = timers
        armed = timer
        clock.after(interval, early: Self.earliness(interval), on: queue) { [weak self] in
            guard let self, self.armed == timer else { return }
            self.armed = nil
            self.forwardEverything()
        }
    }
}
