import Foundation

/// The current values of a factory's meters, one per series (label and dimensions): swift-metrics makes a
/// handler per `Meter` it creates, and Sentry keeps one gauge per series, so every `Meter` of a series must
/// move the same value (one that incremented and another that decremented would send 1, then -1).
final class MeterValues: @unchecked Sendable {
    // @unchecked: `values` is touched only under `lock`.
    private let lock = NSLock()
    private var values: [String: Double] = [:]

    /// Changes the value of `series` by `change` and hands the new value to `send`, both under the lock, so
    /// that the values arrive in the order they were reached. A change that would make the value NaN or
    /// infinite is handed on (the buffer drops and counts it) but not kept.
    func move(_ series: String, _ change: (Double) -> Double, send: (Double) -> Void) {
        lock.withLock {
            let value = change(values[series] ?? 0)
            if value.isFinite { values[series] = value }
            send(value)
        }
    }
}
