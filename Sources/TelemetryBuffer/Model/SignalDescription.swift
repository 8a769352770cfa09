import CTelemetrySignals

/// Everything that differs between a buffer's signals (logs, spans, trace metrics), said once per signal:
/// how its records name it, how its items travel in envelopes, how drops and rate limits count them, the
/// batch rules. The rest of the library reads it from here and never switches over signals, so a signal
/// is its description: a test adds a fourth without touching another file.
struct SignalDescription: Sendable {
    /// How the items of a signal share envelopes (the protocol's rule, §1.3).
    enum Grouping: Sendable {
        /// Items of any traces in one item per envelope, in order of arrival, without a `trace` header.
        case anyTraces
        /// One trace per envelope, which carries the trace's sampling context as its `trace` header. Its
        /// items' JSON begins with their trace ID (see `ItemEncoder.traceID(ofSpan:)`).
        case oneTracePerEnvelope
    }

    /// The category byte of its records: from 1 to `BatchTally.maxSignals`.
    let category: ItemCategory
    /// The `type` of the envelope items that carry it.
    let envelopeItemType: String
    /// The `content_type` of those envelope items.
    let contentType: StaticString
    /// How its items share envelopes.
    let grouping: Grouping
    /// The most items of it a batch holds, whatever its limit (the logs spec's 1000 queued logs); `nil`
    /// for none but the batch's bytes.
    let queueCap: Int?
    /// How client reports and rate limits count one item of it.
    let dataCategory: DataCategory
    /// How client reports count a dropped item's bytes, for a signal billed by size; `nil` else.
    let byteCategory: DataCategory?
    /// Whether an envelope of it ranks, when the stored envelopes must be evicted, by the highest log
    /// level its items carry; else it ranks as `info`.
    let ranksByLevel: Bool
    /// The most items of it an envelope (and a batch) holds: the option that says so.
    let batchLimit: @Sendable (TelemetryBuffer.Options) -> Int

    static let log = SignalDescription(
        category: .log, envelopeItemType: "log", contentType: "application/vnd.sentry.items.log+json",
        grouping: .anyTraces, queueCap: 1000, dataCategory: .logItem, byteCategory: .logByte, ranksByLevel: true,
        batchLimit: { $0.maxLogsPerBatch })

    static let span = SignalDescription(
        category: .span, envelopeItemType: "span", contentType: "application/vnd.sentry.items.span.v2+json",
        grouping: .oneTracePerEnvelope, queueCap: nil, dataCategory: .span, byteCategory: nil, ranksByLevel: false,
        batchLimit: { $0.maxSpansPerBatch })

    static let traceMetric = SignalDescription(
        category: .traceMetric, envelopeItemType: "trace_metric",
        contentType: "application/vnd.sentry.items.trace-metric+json", grouping: .anyTraces, queueCap: nil,
        dataCategory: .traceMetric, byteCategory: .traceMetricByte, ranksByLevel: false,
        batchLimit: { $0.maxMetricsPerBatch })

    /// The signals this build knows, by category byte. Read under a lock: never on `add`'s path, which
    /// carries only the byte (the limits it needs are the buffer's `BatchLimits`), nor per record.
    private static let known = Locked<[SignalDescription]>([.log, .span, .traceMetric])

    /// Their category bytes, a bit each, for the record framing's check of every record without the lock.
    /// (`nonisolated(unsafe)`: only ever touched with atomic loads and stores.)
    nonisolated(unsafe) private static let knownBytes: UnsafeMutablePointer<UInt64> = {
        let bits = UnsafeMutablePointer<UInt64>.allocate(capacity: 1)
        bits.initialize(to: [ItemCategory.log, .span, .traceMetric].reduce(0) { $0 | 1 << $1.rawValue })
        return bits
    }()

    /// Whether records of category byte `byte` are of a signal this build knows.
    static func isKnown(_ byte: UInt8) -> Bool { byte < 64 && tb_load_acquire_u64(knownBytes) & 1 << byte != 0 }

    /// Every known signal, in order of category byte.
    static var all: [SignalDescription] { known.withLock { $0 } }

    /// The signal whose records carry `byte`; `nil` for one this build does not know.
    static func described(_ byte: UInt8) -> SignalDescription? {
        known.withLock { known in known.first { $0.category.rawValue == byte } }
    }

    /// The signal of an envelope item's `type`; `nil` for items that are not telemetry (client reports).
    static func described(envelopeItemType type: String) -> SignalDescription? {
        known.withLock { known in known.first { $0.envelopeItemType == type } }
    }

    /// Adds a signal to those this build knows, for buffers created from now on: how a test shows that a
    /// signal is only its description. Its category byte and item type must be new, its byte within
    /// `BatchTally.maxSignals`. Its data categories should be its own: a rate limit names a data category,
    /// and reaches only the first signal counted by it.
    static func register(_ signal: SignalDescription) {
        known.withLock { known in
            precondition((1...UInt8(BatchTally.maxSignals)).contains(signal.category.rawValue), "no room for category byte \(signal.category.rawValue)")
            precondition(!known.contains { $0.category == signal.category || $0.envelopeItemType == signal.envelopeItemType }, "\(signal.envelopeItemType) is known")
            known.append(signal)
            known.sort { $0.category.rawValue < $1.category.rawValue }
            tb_store_release_u64(knownBytes, tb_load_acquire_u64(knownBytes) | 1 << signal.category.rawValue)
        }
    }
}
