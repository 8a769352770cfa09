import CoreMetrics
import Foundation
import TelemetryBuffer

/// The handler of every kind of swift-metrics metric: each value it is given becomes one trace metric of
/// its `kind`, with the name, attributes and (for timers) unit it was made with.
final class MetricHandler: CounterHandler, FloatingPointCounterHandler, MeterHandler, RecorderHandler, TimerHandler,
    @unchecked Sendable
{
    // @unchecked: `meterValue` and `unit` are touched only under `lock`; the rest never changes.
    private let kind: Metric.Kind
    private let name: String
    /// The dimensions as attributes, made once.
    private let attributes: Attributes
    private let factory: TelemetryBufferMetricsFactory
    private let lock = NSLock()
    /// A meter's current value, which `increment` and `decrement` move.
    private var meterValue = 0.0
    /// A timer's unit (its preferred display unit); `nil` for other metrics.
    private var unit: TimeUnit?

    init(_ kind: Metric.Kind, _ name: String, _ dimensions: [(String, String)], _ factory: TelemetryBufferMetricsFactory,
         unit: TimeUnit? = nil) {
        self.kind = kind
        self.name = name
        var attributes = Attributes()
        for (key, value) in dimensions { attributes[key] = .string(value) }
        self.attributes = attributes
        self.factory = factory
        self.unit = unit
    }

    private func send(_ value: Metric.Value, unit: String? = nil) {
        let trace = factory.trace?()
        factory.buffer.add(metric: Metric(name: name, kind: kind, value: value, unit: unit, attributes: attributes,
                                          traceID: trace?.traceID ?? .process, spanID: trace?.spanID))
    }

    // MARK: Counters

    func increment(by amount: Int64) { send(.integer(amount)) }

    func increment(by amount: Double) {
        // A meter's increment moves its value; a counter's is the value.
        guard kind == .gauge else { return send(.double(amount)) }
        send(.double(lock.withLock { meterValue += amount; return meterValue }))
    }

    /// Sends nothing: a counter's values are increments, which Sentry sums.
    func reset() {}

    // MARK: Meters

    func set(_ value: Int64) {
        lock.withLock { meterValue = Double(value) }
        send(.integer(value))
    }

    func set(_ value: Double) {
        lock.withLock { meterValue = value }
        send(.double(value))
    }

    func decrement(by amount: Double) {
        send(.double(lock.withLock { meterValue -= amount; return meterValue }))
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
