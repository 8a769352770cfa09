import Logging
import TelemetryBuffer
// `ActiveTrace`, which a user of the handler may set, is the context package's.
@_exported import TelemetryBufferContext

/// A swift-log `LogHandler` that sends each message to a `TelemetryBuffer` as a Sentry log.
///
/// ```swift
/// let buffer = try TelemetryBuffer(options: Options(dsn: dsn))
/// LoggingSystem.bootstrap { label in TelemetryBufferLogHandler(label: label, buffer: buffer) }
/// Logger(label: "checkout").info("Order placed", metadata: ["order.id": "7341"])
/// ```
///
/// Each message becomes one log: the level mapped (`notice` → `info` with severity number 10, `warning` →
/// `warn`, `critical` → `fatal`), the message as the body, the metadata as attributes (the handler's, then
/// the metadata provider's, then the call's, a later key replacing an earlier one whole; nested values
/// flattened with dotted keys), the call site as `code.*` attributes, the logger's label as `logger.name`,
/// and `sentry.origin` `auto.log.swift-log`. The trace is `ActiveTrace.current` (the active span of `TelemetryBufferTracer`
/// inside `withSpan`), else what `trace` returns, else `TraceID.process`. Logging costs what
/// `buffer.add(log:)` costs plus building the attributes; it never waits on disk I/O.
public struct TelemetryBufferLogHandler: LogHandler {
    /// The buffer the logs go to.
    public let buffer: TelemetryBuffer
    /// The logger's label, sent as `logger.name`.
    public let label: String
    /// Messages below this level are not sent. Default `.info`, as swift-log's own handlers.
    public var logLevel: Logger.Level = .info
    /// Metadata sent with every message of this handler.
    public var metadata: Logger.Metadata = [:] {
        didSet { metadataAttributes = MetadataAttributes.attributes(metadata) }
    }
    /// `metadata` as attributes, built when it changes rather than per message.
    private var metadataAttributes = Attributes()
    /// Metadata computed per message (for example from a task-local context).
    public var metadataProvider: Logger.MetadataProvider?
    /// The trace (and span) of a message when the task has no `ActiveTrace`; `nil` uses `TraceID.process`.
    public var trace: (@Sendable () -> ActiveTrace?)?

    /// A handler for the logger `label` that sends to `buffer`.
    ///
    /// - Parameters:
    ///   - label: The logger's label (swift-log passes it to the factory given to `LoggingSystem.bootstrap`).
    ///   - buffer: Where the logs go.
    ///   - metadataProvider: Metadata computed per message; defaults to the one bootstrapped, if any.
    ///   - trace: The active trace where the task has no `ActiveTrace` (another tracing library's, say).
    public init(label: String, buffer: TelemetryBuffer, metadataProvider: Logger.MetadataProvider? = LoggingSystem.metadataProvider,
                trace: (@Sendable () -> ActiveTrace?)? = nil) {
        self.label = label
        self.buffer = buffer
        self.metadataProvider = metadataProvider
        self.trace = trace
    }

    /// The handler's metadata value for `key`.
    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// Sends one message as a log (swift-log calls it only at or above `logLevel`). An error given with the
    /// message becomes `exception.type` and `exception.message`. An item of the integrations (log, metric or
    /// span) made while one is sent on the same thread (from `beforeSendLog`, the metadata provider or
    /// `trace`) is sent too; one made while sending that is dropped, as it would recur without end, and
    /// counted (`internal_sdk_error`).
    public func log(event: LogEvent) {
        if !SendingDepth.enter({ send(event) }) { buffer.countDroppedBeforeAdd(.log) }
    }

    private func send(_ event: LogEvent) {
        // The handler's, the provider's, then the call's, each flattened in turn: a later key replaces an
        // earlier one whole, nested values and all, as swift-log merges metadata.
        let provided = metadataProvider?.get() ?? [:], explicit = event.metadata ?? [:]
        var attributes: Attributes
        if provided.keys.contains(where: { metadata[$0] != nil }) || explicit.keys.contains(where: { metadata[$0] != nil }) {
            attributes = MetadataAttributes.attributes(metadata.filter { provided[$0.key] == nil && explicit[$0.key] == nil })
        } else {
            attributes = metadataAttributes  // built once, when the handler's metadata was set
        }
        MetadataAttributes.add(explicit.isEmpty ? provided : provided.filter { explicit[$0.key] == nil }, to: &attributes)
        MetadataAttributes.add(explicit, to: &attributes)
        if let error = event.error {
            attributes["exception.type"] = .string(String(reflecting: type(of: error)))
            attributes["exception.message"] = .string(String(describing: error))
        }
        attributes["code.file.path"] = .string(event.file)
        attributes["code.function.name"] = .string(event.function)
        attributes["code.line.number"] = .integer(Int64(clamping: event.line))
        attributes["code.namespace"] = .string(event.source)
        attributes["logger.name"] = .string(label)
        attributes["sentry.origin"] = "auto.log.swift-log"
        let active = ActiveTrace.current ?? trace?()
        buffer.add(log: Log(level: Self.level(event.level), body: event.message.description,
                            traceID: active?.traceID ?? .process, spanID: active?.spanID,
                            severityNumber: Self.severityNumber(event.level), attributes: attributes))
    }

    /// The severity number of a level that shares its Sentry level with another: `notice`, an `info` one
    /// above `info`'s (OpenTelemetry's INFO2), so the two stay apart; `nil` for the level's own.
    static func severityNumber(_ level: Logger.Level) -> Int? {
        level == .notice ? Log.Level.info.severityNumber + 1 : nil
    }

    /// swift-log's level as a Sentry log level.
    static func level(_ level: Logger.Level) -> Log.Level {
        switch level {
        case .trace: .trace
        case .debug: .debug
        case .info, .notice: .info
        case .warning: .warn
        case .error: .error
        case .critical: .fatal
        }
    }
}
