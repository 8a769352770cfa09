import CoreMetrics
import Foundation
import TelemetryBuffer
import TelemetryBufferContext

/// The handler of every kind of swift-metrics metric: each value it is given becomes one trace metric of
/// its `kind`, with the name, attributes and (for timers) unit it was made with.
final class MetricHandler: CounterHandler, FloatingPointCounterHandler, MeterHandler, RecorderHandler, TimerHandler,
    @unchecked Sendable
{
    // @unchecked: `unit` and `destroyed` are touched only under `lock`; the rest never changes.
    private let kind: Metric.Kind
    private let name: String
    /// The dimensions as attributes, made once.
    private let attributes: Attributes
    /// The label and dimensions as Sentry sees them (in any order, a repeated key's last value): a meter's
    /// series in `MeterValues`.
    let series: String
    private let factory: TelemetryBufferMetricsFactory
    private let lock = NSLock()
    /// A timer's unit (its preferred display unit); `nil` for other metrics.
    private var unit: TimeUnit?
    /// Whether a meter's `destroy()` released its series (swift-metrics does not stop a second call).
    private var destroyed = false

    init(_ kind: Metric.Kind, _ name: String, _ dimensions: [(String, String)], _ factory: TelemetryBufferMetricsFactory,
         unit: TimeUnit? = nil) {
        self.kind = kind
        self.name = name
        var attributes = Attributes()
        for (key, value) in dimensions { attributes[key] = .string(value) }
        self.attributes = attributes
        let sorted = Dictionary(dimensions, uniquingKeysWith: { $1 }).sorted { $0.key < $1.key }
        series = ([name] + sorted.flatMap { [$0.key, $0.value] }).joined(separator: "\u{0}")
        self.factory = factory
        self.unit = unit
    }

    /// Sends a value, unless it was made while sending one that was made while sending (`SendingDepth`):
    /// then counts it dropped.
    private func send(_ value: Metric.Value, unit: String? = nil, timestamp: Date = Date()) {
        let sent = SendingDepth.enter {
            let trace = ActiveTrace.current ?? factory.trace?()
            factory.buffer.add(metric: Metric(name: name, kind: kind, value: value, unit: unit, attributes: attributes,
                                              traceID: trace?.traceID ?? .process, spanID: trace?.spanID, timestamp: timestamp))
        }
        if !sent { factory.buffer.countDroppedBeforeAdd(.metric) }
    }

    /// Moves the meter's series and sends the value it reached, with the timestamp that orders it.
    private func move(_ change: (Double) -> Double) {
        let reached = factory.meters.move(series, change)
        send(.double(reached.value), timestamp: reached.timestamp)
    }

    // MARK: Counters

    /// Sends the increment; one of 0 or less is not sent (a counter only goes up, as swift-metrics' own
    /// floating-point counter has it, and Sentry sums the increments).
    func increment(by amount: Int64) {
        if amount > 0 { send(.integer(amount)) }
    }

    func increment(by amount: Double) {
        // A meter's increment moves its value; a counter's is the value (NaN or infinite: dropped, counted).
        guard kind == .gauge else {
            if amount > 0 || !amount.isFinite { send(.double(amount)) }
            return
        }
        step(amount) { $0 + amount }
    }

    /// Sends nothing: a counter's values are increments, which Sentry sums.
    func reset() {}

    // MARK: Meters

    func set(_ value: Int64) { move { _ in Double(value) } }

    func set(_ value: Double) { move { _ in value } }

    func decrement(by amount: Double) { step(amount) { $0 - amount } }

    /// A meter's `destroy()`: releases its series in the factory that made it, once.
    func destroyMeter() {
        guard lock.withLock({ defer { destroyed = true }; return !destroyed }) else { return }
        factory.meters.release(series)
    }

    /// Moves a meter by `amount`: one that is negative or zero is illegal and ignored, as swift-metrics' own
    /// meter has it; a NaN or infinite one is sent as it is, for the buffer to drop and count.
    private func step(_ amount: Double, _ change: (Double) -> Double) {
        guard amount.isFinite else { return send(.double(amount)) }
        if amount > 0 { move(change) }
    }

    // MARK: Recorders

    func record(_ value: Int64) { send(.integer(value)) }

    func record(_ value: Double) { send(.double(value)) }

    // MARK: Timers

    func recordNanoseconds(_ duration: Int64) {
        let unit = lock.withLock { self.unit } ?? .nanoseconds
        guard unit.scaleFromNanoseconds > 1, let name = Self.name(of: unit) else { return send(.integer(duration), unit: "nanosecond") }
        send(.double(Double(duration) / Double(unit.scaleFromNanoseconds)), unit: name)
    }

    func preferDisplayUnit(_ unit: TimeUnit) {
        lock.withLock { self.unit = unit }
    }

    /// Sentry's name of a time unit longer than a nanosecond (`microsecond` … `day`); `nil` for one it
    /// has none for, whose durations go in nanoseconds.
    private static func name(of unit: TimeUnit) -> String? {
        switch unit {
        case .microseconds: "microsecond"
        case .milliseconds: "millisecond"
        case .seconds: "second"
        case .minutes: "minute"
        case .hours: "hour"
        case .days: "day"
        default: nil
        }
    }
}
