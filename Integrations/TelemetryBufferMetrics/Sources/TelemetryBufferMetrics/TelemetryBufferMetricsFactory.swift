import CoreMetrics
import TelemetryBuffer
// `ActiveTrace`, which the factory's `trace` provider returns, is the context package's.
@_exported import TelemetryBufferContext

/// A swift-metrics backend that sends every recorded value to a `TelemetryBuffer` as a Sentry trace metric.
///
/// ```swift
/// let buffer = try TelemetryBuffer(options: Options(dsn: dsn))
/// MetricsSystem.bootstrap(TelemetryBufferMetricsFactory(buffer: buffer))
/// Counter(label: "orders.placed", dimensions: [("region", "eu")]).increment()
/// ```
///
/// | swift-metrics | trace metric |
/// |---|---|
/// | `Counter`, `FloatingPointCounter` | `counter` of the increment |
/// | `Meter`, `Gauge` (a non-aggregating `Recorder`) | `gauge` of the value set (or reached by `increment`/`decrement`) |
/// | `Recorder` (aggregating) | `distribution` sample |
/// | `Timer` | `distribution` sample in `nanosecond`, or in its preferred display unit, converted |
///
/// The label is the metric's name, the dimensions its string attributes (made once per handler, not per
/// value). Each value carries `ActiveTrace.current` (the active span of `TelemetryBufferTracer` inside
/// `withSpan`), else what `trace` returns, else `TraceID.process`. Each value is one `add(metric:)`:
/// Sentry aggregates, and the factory keeps nothing but each meter series' current value (label and
/// dimensions: every `Meter` of a series moves the same value, and its values carry their order in their
/// timestamps, each a microsecond or more after the one before (unless the clock was set back by more than
/// a second: then from the new time); no lock is held while a value is sent, so
/// a `beforeSendMetric` hook may move meters or wait for the app's locks, but values reached on two threads
/// within one millisecond may reach the buffer, and so take their `sentry.timestamp.sequence`, in the other
/// order (Sentry tells apart metrics of one millisecond by it); a series
/// is its label and its dimensions in any order, a repeated key's last value; the
/// value is forgotten when the last `Meter` of its series is destroyed). A counter's increment of 0 or less
/// is not sent, and a meter's increment or decrement of 0 or less is ignored (illegal, as in swift-metrics'
/// own meter); `reset()` sends nothing (a counter's values are increments). A value or amount that is NaN
/// or infinite is dropped and counted by the buffer as `invalid` (a meter keeps the value it had). A
/// timer's unit is its own: give every `Timer` of a name the same preferred display unit. A value recorded
/// while one is sent on the same thread (from `beforeSendMetric` or `trace`) is sent; one recorded while
/// that is sent is dropped and counted (`internal_sdk_error`; a meter still keeps the value it reached).
/// Recording never waits on disk I/O.
public struct TelemetryBufferMetricsFactory: MetricsFactory {
    /// The buffer the metrics go to.
    public let buffer: TelemetryBuffer
    /// The trace (and span) of a value when the task has no `ActiveTrace`, asked per value; `nil`, or a
    /// provider that returns `nil`, uses `TraceID.process`.
    public let trace: (@Sendable () -> ActiveTrace?)?
    /// The meters' current values, by series: shared by every copy of the factory.
    let meters = MeterValues()

    /// A factory whose handlers send to `buffer`.
    ///
    /// - Parameters:
    ///   - buffer: Where the metrics go.
    ///   - trace: The active trace where the task has no `ActiveTrace` (another tracing library's, say).
    public init(buffer: TelemetryBuffer, trace: (@Sendable () -> ActiveTrace?)? = nil) {
        self.buffer = buffer
        self.trace = trace
    }

    /// A handler sending each increment as a `counter`.
    public func makeCounter(label: String, dimensions: [(String, String)]) -> any CounterHandler {
        MetricHandler(.counter, label, dimensions, self)
    }

    /// A handler sending each increment as a `counter`.
    public func makeFloatingPointCounter(label: String, dimensions: [(String, String)]) -> any FloatingPointCounterHandler {
        MetricHandler(.counter, label, dimensions, self)
    }

    /// A handler sending each value the meter takes as a `gauge`.
    public func makeMeter(label: String, dimensions: [(String, String)]) -> any MeterHandler {
        let handler = MetricHandler(.gauge, label, dimensions, self)
        meters.retain(handler.series)
        return handler
    }

    /// A handler sending each value as a `distribution` sample (`aggregate`) or a `gauge`.
    public func makeRecorder(label: String, dimensions: [(String, String)], aggregate: Bool) -> any RecorderHandler {
        MetricHandler(aggregate ? .distribution : .gauge, label, dimensions, self)
    }

    /// A handler sending each duration as a `distribution` sample.
    public func makeTimer(label: String, dimensions: [(String, String)]) -> any TimerHandler {
        MetricHandler(.distribution, label, dimensions, self, unit: .nanoseconds)
    }

    /// Nothing to forget: handlers keep nothing.
    public func destroyCounter(_ handler: any CounterHandler) {}
    /// Nothing to forget: handlers keep nothing.
    public func destroyFloatingPointCounter(_ handler: any FloatingPointCounterHandler) {}
    /// Forgets the meter's series value with the last `Meter` of the series (in the factory that made it;
    /// a second `destroy()` of a meter does nothing).
    public func destroyMeter(_ handler: any MeterHandler) {
        (handler as? MetricHandler)?.destroyMeter()
    }
    /// Nothing to forget: handlers keep nothing.
    public func destroyRecorder(_ handler: any RecorderHandler) {}
    /// Nothing to forget: handlers keep nothing.
    public func destroyTimer(_ handler: any TimerHandler) {}
}
