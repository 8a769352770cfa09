import Foundation

/// The current values of a factory's meters, one per series (label and dimensions): swift-metrics makes a
/// handler per `Meter` it creates, and Sentry keeps one gauge per series, so every `Meter` of a series must
/// move the same value (one that incremented and another that decremented would send 1, then -1). A
/// series' value lives while a `Meter` of it does: destroying the last one forgets it.
final class MeterValues: @unchecked Sendable {
    // @unchecked: `series` is touched only under `lock`.
    /// Recursive: a `beforeSendMetric` hook may move a meter of the factory while a value is sent under it.
    private let lock = NSRecursiveLock()
    private var series: [String: (value: Double, meters: Int)] = [:]

    /// A `Meter` of `series` was made.
    func retain(_ series: String) {
        lock.withLock { self.series[series, default: (0, 0)].meters += 1 }
    }

    /// A `Meter` of `series` was destroyed: with the last one, its value goes.
    func release(_ series: String) {
        lock.withLock {
            guard let entry = self.series[series] else { return }
            self.series[series] = entry.meters > 1 ? (entry.value, entry.meters - 1) : nil
        }
    }

    /// Changes the value of `series` by `change` and hands the new value to `send`, both under the lock, so
    /// that the values arrive in the order they were reached. A change that would make the value NaN or
    /// infinite is handed on (the buffer drops and counts it) but not kept; so is any change of a series no
    /// `Meter` holds any more (one moved after its `destroy()`).
    func move(_ series: String, _ change: (Double) -> Double, send: (Double) -> Void) {
        lock.withLock {
            let value = change(self.series[series]?.value ?? 0)
            if value.isFinite, self.series[series] != nil { self.series[series]?.value = value }
            send(value)
        }
    }
}
