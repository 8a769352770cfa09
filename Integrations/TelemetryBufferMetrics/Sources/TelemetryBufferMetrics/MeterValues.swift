import Foundation

/// The current values of a factory's meters, one per series (label and dimensions): swift-metrics makes a
/// handler per `Meter` it creates, and Sentry keeps one gauge per series, so every `Meter` of a series must
/// move the same value (one that incremented and another that decremented would send 1, then -1). A
/// series' value lives while a `Meter` of it does: destroying the last one forgets it.
final class MeterValues: @unchecked Sendable {
    // @unchecked: `series` is touched only under `lock`.
    /// Held only to compute a value, never while one is sent: a `beforeSendMetric` hook runs user code, which
    /// may move a meter or wait for a lock of the app's that a thread moving a meter holds.
    private let lock = NSLock()
    /// Each series' value, its `Meter`s, and its last value's timestamp in microseconds since 1970.
    private var series: [String: (value: Double, meters: Int, last: Int64)] = [:]

    /// A `Meter` of `series` was made.
    func retain(_ series: String) {
        lock.withLock { self.series[series, default: (0, 0, 0)].meters += 1 }
    }

    /// A `Meter` of `series` was destroyed: with the last one, its value goes.
    func release(_ series: String) {
        lock.withLock {
            guard var entry = self.series[series] else { return }
            entry.meters -= 1
            self.series[series] = entry.meters > 0 ? entry : nil
        }
    }

    /// Changes the value of `series` by `change`, and returns the new value with its timestamp: now, or a
    /// microsecond (what a trace metric's timestamp holds) after the series' last if that is not earlier,
    /// in whole microseconds, so that the encoding keeps them apart. A clock set back by more than a second
    /// is followed at once, rather than the series going on from a time that is now ahead of every other
    /// item's.
    /// The values of a series so carry their order in their timestamps, however the threads that send them
    /// race to the buffer. A change that would make the value NaN or infinite is returned (the buffer
    /// drops and counts it) but not kept; so is any change of a series no `Meter` holds any more (one moved
    /// after its `destroy()`).
    func move(_ series: String, now: () -> Date = Date.init, _ change: (Double) -> Double) -> (value: Double, timestamp: Date) {
        lock.withLock {
            let now = now()
            guard var entry = self.series[series] else { return (change(0), now) }
            let value = change(entry.value)
            if value.isFinite { entry.value = value }
            let micros = Int64((now.timeIntervalSince1970 * 1_000_000).rounded())
            entry.last = micros < entry.last - 1_000_000 ? micros : max(micros, entry.last + 1)
            self.series[series] = entry
            return (value, Date(timeIntervalSince1970: Double(entry.last) / 1_000_000))
        }
    }
}
