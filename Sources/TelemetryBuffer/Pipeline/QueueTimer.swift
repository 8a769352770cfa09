import CTelemetrySignals
import Dispatch
import Foundation

/// A one-shot timer that runs its work on a serial queue, costing one wake-up per firing.
///
/// On Apple platforms it is a libdispatch timer with leeway: the kernel delivers it to a thread that runs
/// the handler, and may fire it together with other work. On Linux a libdispatch timer wakes the manager
/// thread (epoll on a timerfd), which then wakes a pool thread for the handler: two wake-ups. There a thread
/// of the timer's own sleeps until the deadline, on the monotonic clock, and runs the work with
/// `queue.sync`, which libdispatch executes on the calling thread (after the queue's current work, if any).
/// The thread starts at the first setting; until it runs (and if it never does: `Thread` reports no failure
/// to start one), a libdispatch timer stands in. The IO caches' copy runs every sync period while the
/// items of a batch that waits longer arrive (lists in memory: every 100 ms): a wake-up saved at each run.
///
/// `set` arms it (replacing the deadline), `setUnlessArmed` only if it is not, `clear` disarms it; any thread
/// may call them, the work included (a repeating timer sets itself again). A deadline is taken once: the
/// work runs once per setting.
///
/// `@unchecked Sendable`: its state is under a lock, and a libdispatch timer may be set from any thread.
final class QueueTimer: @unchecked Sendable {
    /// The deadline, and on Linux whether the thread was started and runs, when it sleeps until (`nil` while
    /// it works or is about to look again) and whether it ends.
    private struct State {
        var deadline: DispatchTime?
        var started = false
        var running = false
        var sleepingUntil: DispatchTime?
        var ended = false

        /// Takes the deadline if it has come: the caller then runs the work.
        mutating func takeDue() -> Bool {
            guard let deadline, deadline <= .now() else { return false }
            self.deadline = nil
            return true
        }
    }

    private let state = Locked(State())
    private let queue: DispatchQueue
    private let work: @Sendable () -> Void
    #if canImport(Darwin)
    private let timer: DispatchSourceTimer
    #else
    private let wake = MonotonicSignal()
    /// The thread's name.
    private let name: String
    #endif

    /// A timer, named `name` (its thread's name on Linux), that runs `work` on `queue` at each deadline.
    init(name: String, queue: DispatchQueue, work: @escaping @Sendable () -> Void) {
        self.queue = queue
        self.work = work
        #if canImport(Darwin)
        timer = DispatchSource.makeTimerSource(queue: queue)
        timer.setEventHandler { [state] in if state.withLock({ $0.takeDue() }) { work() } }
        timer.resume()
        #else
        self.name = name
        #endif
    }

    #if !canImport(Darwin)
    /// Starts the thread: at the first setting, so that creating a buffer does not wait for it.
    private func startThread() {
        let (state, wake, queue, work) = (state, wake, queue, work)
        let thread = Thread {
            state.withLock { $0.running = true }
            while true {
                let step = state.withLock { state -> (due: Bool, until: DispatchTime)? in
                    guard !state.ended else { return nil }
                    if state.takeDue() { return (true, .now()) }
                    let until = state.deadline ?? .distantFuture
                    state.sleepingUntil = until
                    return (false, until)
                }
                guard let step else { return }
                if step.due {
                    queue.sync(execute: work)
                } else {
                    wake.wait(until: step.until)
                    state.withLock { $0.sleepingUntil = nil }
                }
            }
        }
        thread.name = name
        // Its work is a copy into a file and a sync: a small stack is plenty.
        thread.stackSize = 256 << 10
        thread.qualityOfService = .utility
        thread.start()
    }
    #endif

    /// Arms the timer for `deadline`, replacing the one set; on Apple platforms the system may fire it up to
    /// `leeway` seconds later, together with other work.
    func set(at deadline: DispatchTime, leeway: Double = 0) {
        arm(at: deadline, leeway: leeway, unlessArmed: false)
    }

    /// Arms the timer for `deadline` unless a deadline is set already.
    func setUnlessArmed(at deadline: DispatchTime, leeway: Double = 0) {
        arm(at: deadline, leeway: leeway, unlessArmed: true)
    }

    private func arm(at deadline: DispatchTime, leeway: Double, unlessArmed: Bool) {
        #if canImport(Darwin)
        state.withLock { state in
            guard !state.ended, !unlessArmed || state.deadline == nil else { return }
            state.deadline = deadline
            // Under the lock, so that the timer's last setting is the deadline's (a handler that finds it not
            // due does nothing).
            timer.schedule(deadline: deadline, leeway: .nanoseconds(Int(max(0, leeway) * 1e9)))
        }
        #else
        // Armed: whether the thread sleeps until later (and must look again), whether it runs, and whether
        // it is to be started.
        let armed = state.withLock { state -> (wakes: Bool, running: Bool, starts: Bool)? in
            guard !state.ended, !unlessArmed || state.deadline == nil else { return nil }
            state.deadline = deadline
            defer { state.started = true }
            guard let sleeping = state.sleepingUntil, deadline < sleeping else { return (false, state.running, !state.started) }
            state.sleepingUntil = nil
            return (true, state.running, !state.started)
        }
        guard let armed else { return }
        if armed.starts { startThread() }
        if armed.wakes { wake.signal() }
        if !armed.running {
            // The thread does not run (yet): libdispatch's timer stands in; whichever takes the deadline runs it.
            queue.asyncAfter(deadline: deadline) { [state, work] in if state.withLock({ $0.takeDue() }) { work() } }
        }
        #endif
    }

    /// Disarms the timer (work already running is not stopped).
    func clear() { state.withLock { $0.deadline = nil } }

    /// Disarms the timer for good; on Linux its thread ends once the work it runs returns. In the child of a
    /// `fork()` there is no thread to end.
    func end() {
        guard tb_in_forked_child() == 0 else { return }
        let first = state.withLock { state -> Bool in
            defer { (state.ended, state.deadline) = (true, nil) }
            return !state.ended
        }
        guard first else { return }
        #if canImport(Darwin)
        timer.cancel()
        #else
        wake.signal()
        #endif
    }

    deinit { end() }
}

#if !canImport(Darwin)
/// A wake-up whose timed wait runs on the monotonic clock: libdispatch's semaphores on Linux wait with
/// `sem_timedwait`, on the wall clock, so a clock stepped back during a wait would prolong it by as much.
/// `@unchecked Sendable`: `signalled` is touched only under the mutex.
private final class MonotonicSignal: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    /// Signalled and not waited for yet. Under `mutex`.
    private var signalled = false

    init() {
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    func signal() {
        pthread_mutex_lock(mutex)
        signalled = true
        pthread_cond_signal(condition)
        pthread_mutex_unlock(mutex)
    }

    /// Returns once signalled (taking the signal) or at `deadline`.
    func wait(until deadline: DispatchTime) {
        pthread_mutex_lock(mutex)
        defer {
            signalled = false
            pthread_mutex_unlock(mutex)
        }
        guard deadline != .distantFuture else {
            while !signalled { pthread_cond_wait(condition, mutex) }
            return
        }
        let remaining = deadline.uptimeNanoseconds - min(deadline.uptimeNanoseconds, DispatchTime.now().uptimeNanoseconds)
        var until = timespec()
        clock_gettime(CLOCK_MONOTONIC, &until)
        let nanoseconds = UInt64(until.tv_nsec) + remaining % 1_000_000_000
        until.tv_sec += Int(remaining / 1_000_000_000 + nanoseconds / 1_000_000_000)
        until.tv_nsec = Int(nanoseconds % 1_000_000_000)
        while !signalled, pthread_cond_timedwait(condition, mutex, &until) != ETIMEDOUT {}
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }
}
#endif
