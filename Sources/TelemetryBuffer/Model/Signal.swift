extension TelemetryBuffer {
    /// A kind of telemetry a buffer holds, for an integration that counts an item it dropped before `add`
    /// (``TelemetryBuffer/countDroppedBeforeAdd(_:)``).
    public enum Signal: Sendable, CaseIterable {
        /// A log, as ``TelemetryBuffer/add(log:)`` takes it.
        case log
        /// A span, as ``TelemetryBuffer/add(span:)`` takes it.
        case span
        /// A trace metric, as ``TelemetryBuffer/add(metric:)`` takes it.
        case metric

        /// The category its records carry, which describes it.
        var category: ItemCategory {
            switch self {
            case .log: .log
            case .span: .span
            case .metric: .traceMetric
            }
        }
    }
}
