import Foundation
@testable import TelemetryBuffer

/// A clock that moves only when a test says so: delayed work waits until `advance(by:)` passes its
/// deadline, then runs on its queue, in deadline order. Instead of sleeping.
final class ManualClock: Clock, @unchecked Sendable {
    private struct Pending {
        var due: Date
        var queue: DispatchQueue
        var work: @Sendable () -> Void
    }

    private let state: Locked<(now: Date, pending: [Pending])>

    init(now: Date = Date(timeIntervalSince1970: 1_767_261_600)) { state = Locked((now, [])) }

    func now() -> Date { state.withLock { $0.now } }

    /// Due at `delay`, whatever `early` allows: tests see the deadline itself.
    func after(_ delay: TimeInterval, early: TimeInterval, on queue: DispatchQueue, _ work: @escaping @Sendable () -> Void) {
        state.withLock { $0.pending.append(Pending(due: $0.now.addingTimeInterval(max(0, delay)), queue: queue, work: work)) }
    }

    /// How much delayed work waits.
    var pendingCount: Int { state.withLock { $0.pending.count } }

    /// Moves time on by `seconds` and hands what came due to its queues; returns how many.
    @discardableResult
    func advance(by seconds: TimeInterval) -> Int {
        let due: [Pending] = state.withLock { state in
            state.now = state.now.addingTimeInterval(seconds)
            let now = state.now
            let due = state.pending.filter { $0.due <= now }.sorted { $0.due < $1.due }
            state.pending.removeAll { $0.due <= now }
            return due
        }
        for pending in due { pending.queue.async(execute: pending.work) }
        return due.count
    }
}
