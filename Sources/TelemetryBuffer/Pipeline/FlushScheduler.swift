import Dispatch

/// Decides when a strategy forwards, on the buffer's serial background queue: `flushInterval` after the
/// first item of a batch, at once when a limit is reached, and never while the buffer is empty.
///
/// All its state is touched only on `queue` (checked with `dispatchPrecondition`).
final class FlushScheduler: @unchecked Sendable {
    private let queue: DispatchQueue
    private let interval: DispatchTimeInterval
    private let strategy: any BufferStrategy
    private let timer: DispatchSourceTimer
    /// Wakes the queue from `add` without allocating: bits are OR-ed into the source, and one event
    /// handler run sees them all.
    private let wake: DispatchSourceUserDataOr
    private static let startTimer: UInt = 1, forwardNow: UInt = 2
    private var armed = false
    /// Set by `close()`: a wake-up queued before it no longer forwards into a released folder.
    private var closed = false

    init(queue: DispatchQueue, interval: Double, strategy: any BufferStrategy) {
        self.queue = queue
        self.interval = .microseconds(Int((interval * 1_000_000).rounded()))
        self.strategy = strategy
        timer = DispatchSource.makeTimerSource(queue: queue)
        wake = DispatchSource.makeUserDataOrSource(queue: queue)
        timer.setEventHandler { [weak self] in self?.timerFired() }
        timer.resume()
        // Armed now, and never disarmed: libdispatch sets up its event loop (epoll, eventfd, and on Linux
        // a timerfd) when a timer is first armed, and keeps it while one is. Set up lazily at the first
        // forward, it trapped the process when no descriptor was left by then.
        timer.schedule(deadline: .now() + Self.idle)
        wake.setEventHandler { [weak self] in self?.woken() }
        wake.resume()
    }

    /// Called from `add` for the first item of a batch or at a limit: an atomic OR, no allocation.
    func notify(startTimer: Bool, forwardNow: Bool) {
        wake.or(data: (startTimer ? Self.startTimer : 0) | (forwardNow ? Self.forwardNow : 0))
    }

    private func woken() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !closed else { return }
        let reasons = wake.data
        if reasons & Self.forwardNow != 0 {
            strategy.forward(everything: false)
            settle()
        } else if reasons & Self.startTimer != 0, !armed, !strategy.isEmpty {
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
        armed = false
        timer.schedule(deadline: .now() + Self.idle)
    }

    /// The deadline of a stopped timer: far, but never "never" (see `init`).
    private static let idle = DispatchTimeInterval.seconds(365 * 86_400)

    /// Forwards nothing more, whatever is queued or woken later. Must run on `queue`.
    func close() {
        dispatchPrecondition(condition: .onQueue(queue))
        closed = true
        cancel()
    }

    func cancel() {
        timer.cancel()
        wake.cancel()
    }

    private func timerFired() {
        dispatchPrecondition(condition: .onQueue(queue))
        armed = false
        forwardEverything()
    }

    /// After a forward: keep (or start) the timer only while items wait.
    private func settle() {
        if strategy.isEmpty {
            stop()
        } else if !armed {
            arm()
        }
    }

    private func arm() {
        armed = true
        timer.schedule(deadline: .now() + interval)
    }
}
