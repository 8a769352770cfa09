/// The kinds of telemetry a buffer carries (its signals), each described once: everything that differs
/// between them is said here (how a record names it, how its items travel in envelopes, how drops and
/// rate limits count them, the batch rules), and the rest of the library reads it from here rather than
/// switch over signals. The raw value is the category byte of the record framing (`TB_CATEGORY_*` in
/// BufferFormat.h; raw values must be literals, so `FormatAgreementTests` checks them).
enum ItemCategory: UInt8, Sendable, CaseIterable {
    case log = 1
    case span = 2
    case traceMetric = 3

    /// How the items of a signal share envelopes (the protocol's rule, §1.3).
    enum Grouping: Sendable {
        /// Items of any traces in one item per envelope, in order of arrival, without a `trace` header.
        case anyTraces
        /// One trace per envelope, which carries the trace's sampling context as its `trace` header.
        case oneTracePerEnvelope
    }

    /// The `type` of the envelope items that carry it.
    var envelopeItemType: String {
        switch self {
        case .log: "log"
        case .span: "span"
        case .traceMetric: "trace_metric"
        }
    }

    /// The `content_type` of those envelope items.
    var contentType: StaticString {
        switch self {
        case .log: "application/vnd.sentry.items.log+json"
        case .span: "application/vnd.sentry.items.span.v2+json"
        case .traceMetric: "application/vnd.sentry.items.trace-metric+json"
        }
    }

    /// How its items share envelopes.
    var grouping: Grouping {
        switch self {
        case .log, .traceMetric: .anyTraces
        case .span: .oneTracePerEnvelope
        }
    }

    /// The most items of it a batch holds, whatever its limit (the logs spec's 1000 queued logs); `nil`
    /// for none but the batch's bytes.
    var queueCap: Int? {
        switch self {
        case .log: 1000
        case .span, .traceMetric: nil
        }
    }

    /// The category of an envelope item's `type`, `nil` for items that are not telemetry (client reports).
    init?(envelopeItemType type: String) {
        guard let category = Self.allCases.first(where: { $0.envelopeItemType == type }) else { return nil }
        self = category
    }

    /// How client reports and rate limits count one item of it.
    var dataCategory: DataCategory {
        switch self {
        case .log: .logItem
        case .span: .span
        case .traceMetric: .traceMetric
        }
    }

    /// Whether an envelope of it ranks, when the stored envelopes must be evicted, by the highest log
    /// level its items carry (logs); else it ranks as `info`.
    var ranksByLevel: Bool {
        switch self {
        case .log: true
        case .span, .traceMetric: false
        }
    }

    /// The most items of it an envelope (and a batch) holds: the option that says so.
    func batchLimit(in options: TelemetryBuffer.Options) -> Int {
        switch self {
        case .log: options.maxLogsPerBatch
        case .span: options.maxSpansPerBatch
        case .traceMetric: options.maxMetricsPerBatch
        }
    }

    /// How client reports count a dropped item's bytes, for a signal billed by size (logs); `nil` else.
    var byteCategory: DataCategory? {
        switch self {
        case .log: .logByte
        case .traceMetric: .traceMetricByte
        case .span: nil
        }
    }
}

/// The most items of each signal one envelope (and one batch) may hold: the options' limits, keyed by
/// signal, so that they travel as one value. In line, by category byte (as `BatchTally`'s counts): read
/// under the regions' lock on every add, it costs no heap line of its own.
struct BatchLimits: Sendable {
    private var limits: (Int32, Int32, Int32, Int32) = (.max, .max, .max, .max)

    /// Every signal's limit from `limit` (at most `Int32.max`).
    init(_ limit: (ItemCategory) -> Int) {
        for category in ItemCategory.allCases {
            let value = Int32(clamping: limit(category))
            withUnsafeMutableBytes(of: &limits) { $0.storeBytes(of: value, toByteOffset: Int(category.rawValue) * 4, as: Int32.self) }
        }
    }

    subscript(_ category: ItemCategory) -> Int {
        @inline(__always) get {
            withUnsafeBytes(of: limits) { Int($0.load(fromByteOffset: Int(category.rawValue) * 4, as: Int32.self)) }
        }
    }
}

/// A 16-byte item ID: a random per-buffer nonce and a sequence number.
///
/// It lives in the record framing, never in the JSON, and is what start-up recovery dedupes on. The
/// nonce keeps IDs of different buffer lifetimes apart; the sequence makes IDs of one lifetime unique
/// without a random draw (and without a syscall) per item, and records their order of arrival.
struct ItemID: Hashable, Sendable {
    var nonce: UInt64
    var sequence: UInt64
}

/// The item IDs of one buffer lifetime, in order of arrival.
struct ItemIDSequence {
    private let nonce = UInt64.random(in: .min ... .max)
    private var sequence: UInt64 = 0

    @inline(__always)
    mutating func next() -> ItemID {
        defer { sequence &+= 1 }
        return ItemID(nonce: nonce, sequence: sequence)
    }
}
