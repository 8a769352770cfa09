import struct Foundation.Date

/// Encodes logs, spans and trace metrics to the JSON objects that go, byte for byte, into envelope payloads.
///
/// It runs on the calling thread inside `add`, once per item. The buffer's default attributes (for each
/// signal) are pre-encoded at start-up, and again whenever the app sets attributes for every item
/// (see `DefaultSet`), so adding them is a copy; each log also gets
/// `sentry.timestamp.sequence` (see `TimestampSequence`). An item's own attribute with the same key wins.
/// A span's object always starts with `{"trace_id":"<32 hex>"`, which lets readers group stored spans
/// by trace without parsing JSON (see `traceID(ofSpan:)`).
struct ItemEncoder: Sendable {
    fileprivate struct DefaultAttribute: Sendable {
        let key: String
        /// `"key":{"value":…,"type":…}`
        let fragment: [UInt8]
    }

    /// The default attributes of one kind of item, pre-encoded.
    fileprivate struct Defaults: Sendable {
        let attributes: [DefaultAttribute]
        /// Every fragment, comma-separated: what items without a key of their own among the defaults
        /// (nearly all) get, in one copy.
        let joined: [UInt8]
        /// Bit `n` is set when a default or a reserved key is `n` bytes long (`n` mod 64): an item key of
        /// another length cannot be one, which saves comparing strings.
        let keyLengths: UInt64
        /// The default keys: an item key among them replaces a default.
        let keys: [String]
        /// The keys the encoder writes itself (the sequence's, a span field's): an item key among them
        /// replaces what the encoder would write, which leaves the defaults as they are.
        let reserved: [String]
        /// Whether a default has a key the encoder may write from an item's fields (a span's `op`…): the
        /// field then wins, so the defaults are written one by one.
        let shadowsFields: Bool

        init(_ defaults: Attributes, reserving reserved: [String]) {
            attributes = defaults.map { attribute in
                let buffer = ByteBuffer(capacity: 128)
                var writer = JSONWriter(appendingTo: buffer)
                writer.attribute(key: attribute.key, value: attribute.value)
                writer.finish()
                return DefaultAttribute(key: attribute.key, fragment: buffer.toArray())
            }
            joined = Array(attributes.map(\.fragment).joined(separator: [0x2C]))
            keys = attributes.map(\.key)
            self.reserved = reserved
            keyLengths = (keys + reserved).reduce(0) { $0 | 1 << UInt64($1.utf8.count & 63) }
            shadowsFields = attributes.contains { reserved.contains($0.key) }
        }
    }

    /// The default attributes of logs and of spans, pre-encoded together: the buffer's own, or those with
    /// what the app set for every item (`TelemetryBuffer.setAttribute`, `setUser`), built whole when that
    /// changes and swapped in, so `add` never encodes them.
    final class DefaultSet: Sendable {
        fileprivate let logs: Defaults
        fileprivate let spans: Defaults
        fileprivate let metrics: Defaults

        fileprivate init(logs: Attributes, spans: Attributes, metrics: Attributes) {
            self.logs = Defaults(logs, reserving: [ItemEncoder.sequenceKey])
            self.spans = Defaults(spans, reserving: ItemEncoder.spanKeys)
            self.metrics = Defaults(metrics, reserving: [ItemEncoder.sequenceKey])
        }
    }

    private let logBase: Attributes
    private let spanBase: Attributes
    private let metricBase: Attributes
    /// The buffer's own defaults, kept in line (reading them through a class reference could cost the
    /// hot path a reference count).
    private let logDefaults: Defaults
    private let spanDefaults: Defaults
    private let metricDefaults: Defaults
    private let sequence = TimestampSequence()
    private let metricSequence = ContinuousSequence()
    private static let sequenceKey = "sentry.timestamp.sequence"
    /// The common span attributes written from a span's own fields (see `Span.init`).
    private static let spanKeys = ["sentry.op", "sentry.segment.id", "sentry.segment.name", "sentry.segment.name.source",
                                   "thread.id", "thread.name"]
    private static let spanPrefix = Array("{\"trace_id\":\"".utf8)

    /// `logDefaults` are added to every log, `spanDefaults` to every span and `metricDefaults` to every
    /// trace metric, unless the item has an attribute with the same key.
    init(logDefaults: Attributes, spanDefaults: Attributes, metricDefaults: Attributes = [:]) {
        logBase = logDefaults
        spanBase = spanDefaults
        metricBase = metricDefaults
        self.logDefaults = Defaults(logDefaults, reserving: [Self.sequenceKey])
        self.spanDefaults = Defaults(spanDefaults, reserving: Self.spanKeys)
        self.metricDefaults = Defaults(metricDefaults, reserving: [Self.sequenceKey])
    }

    /// The buffer's own defaults with `extra` added to both kinds of item (replacing a default of the
    /// same key in its place), except `sentry.timestamp.sequence`, which the encoder numbers itself.
    func defaults(adding extra: Attributes) -> DefaultSet {
        var logs = logBase, spans = spanBase, metrics = metricBase
        for attribute in extra where attribute.key != Self.sequenceKey {
            logs[attribute.key] = attribute.value
            spans[attribute.key] = attribute.value
            metrics[attribute.key] = attribute.value
        }
        return DefaultSet(logs: logs, spans: spans, metrics: metrics)
    }

    /// What a log's and a metric's JSON begin with: `{"timestamp":…,"trace_id":"…`, then `","span_id":"…`
    /// if there is one; the last string is left open for the caller's next field.
    @inline(__always)
    private static func opening(_ timestamp: Date, _ trace: TraceID, _ span: SpanID?, into writer: inout JSONWriter) {
        writer.raw("{\"timestamp\":")
        writer.timestamp(timestamp)
        writer.raw(",\"trace_id\":\"")
        writer.traceID(trace)
        if let span {
            writer.raw("\",\"span_id\":\"")
            writer.hex(span.value)
        }
    }

    /// Writes `log`'s JSON with the default attributes of `set` (the buffer's own if `nil`).
    /// `numbered: false` (for measuring a log that is dropped) writes sequence 0 and takes no number
    /// from the sequence, so the next log sent keeps its place.
    func encode(_ log: Log, into writer: inout JSONWriter, numbered: Bool = true, defaults set: DefaultSet? = nil) {
        Self.opening(log.timestamp, log.traceID, log.spanID, into: &writer)
        writer.raw("\",\"level\":\"")
        writer.level(log.level)
        writer.raw("\",\"severity_number\":")
        writer.integer(Int64(log.severityNumber))
        writer.raw(",\"body\":")
        writer.string(log.body)
        writer.raw(",\"attributes\":")
        let number = numbered ? sequence.next(for: log.timestamp) : 0
        if let set {
            attributes(log.attributes, defaults: set.logs, sequence: number, into: &writer)
        } else {
            attributes(log.attributes, defaults: logDefaults, sequence: number, into: &writer)
        }
        writer.byte(0x7D)
    }

    /// Writes `metric`'s JSON with the default attributes of `set` (the buffer's own if `nil`). Its value
    /// must be finite. `numbered: false` (for measuring a metric that is dropped) writes sequence 0 and
    /// takes no number.
    func encode(_ metric: Metric, into writer: inout JSONWriter, numbered: Bool = true, defaults set: DefaultSet? = nil) {
        Self.opening(metric.timestamp, metric.traceID, metric.spanID, into: &writer)
        writer.raw("\",\"name\":")
        writer.string(metric.name)
        // Branches: each literal's length is then a constant.
        switch metric.kind {
        case .counter: writer.raw(",\"type\":\"counter\",\"value\":")
        case .gauge: writer.raw(",\"type\":\"gauge\",\"value\":")
        case .distribution: writer.raw(",\"type\":\"distribution\",\"value\":")
        }
        switch metric.value {
        case .integer(let value): writer.integer(value)
        case .double(let value): writer.double(value)
        }
        if let unit = metric.unit {
            writer.raw(",\"unit\":")
            writer.string(unit)
        }
        writer.raw(",\"attributes\":")
        let number = numbered ? metricSequence.next() : 0
        // Branches, as for logs: `??` would copy the defaults (and count references to their arrays).
        if let set {
            attributes(metric.attributes, defaults: set.metrics, sequence: number, into: &writer)
        } else {
            attributes(metric.attributes, defaults: metricDefaults, sequence: number, into: &writer)
        }
        writer.byte(0x7D)
    }

    /// Writes `span`'s JSON with the default attributes of `set` (the buffer's own if `nil`).
    func encode(_ span: Span, into writer: inout JSONWriter, defaults set: DefaultSet? = nil) {
        writer.raw("{\"trace_id\":\"")
        writer.traceID(span.traceID)
        if let parent = span.parentSpanID {
            writer.raw("\",\"parent_span_id\":\"")
            writer.hex(parent.value)
        }
        writer.raw("\",\"span_id\":\"")
        writer.hex(span.spanID.value)
        writer.raw("\",\"name\":")
        writer.string(span.name)
        // Branches rather than `?:`: each literal's length is then a constant, so no `memmove` call.
        if span.status == .ok { writer.raw(",\"status\":\"ok\"") } else { writer.raw(",\"status\":\"error\"") }
        if span.isSegment { writer.raw(",\"is_segment\":true") } else { writer.raw(",\"is_segment\":false") }
        writer.raw(",\"start_timestamp\":")
        writer.timestamp(span.startTimestamp)
        writer.raw(",\"end_timestamp\":")
        // Not before the start (the wall clock set back while it ran): Sentry takes that for an invalid span.
        writer.timestamp(max(span.endTimestamp, span.startTimestamp))
        writer.raw(",\"attributes\":")
        if let set {
            attributes(span.attributes, defaults: set.spans, sequence: nil, common: span, into: &writer)
        } else {
            attributes(span.attributes, defaults: spanDefaults, sequence: nil, common: span, into: &writer)
        }
        if !span.links.isEmpty {
            writer.raw(",\"links\":[")
            for (index, link) in span.links.enumerated() {
                if index > 0 { writer.byte(0x2C) }
                writer.raw("{\"trace_id\":\"")
                writer.traceID(link.traceID)
                writer.raw("\",\"span_id\":\"")
                writer.hex(link.spanID.value)
                writer.byte(0x22)
                if let sampled = link.sampled {
                    writer.raw(sampled ? ",\"sampled\":true" : ",\"sampled\":false")
                }
                if !link.attributes.isEmpty {
                    writer.raw(",\"attributes\":{")
                    writer.attributeList(link.attributes)
                    writer.byte(0x7D)
                }
                writer.byte(0x7D)
            }
            writer.byte(0x5D)
        }
        writer.byte(0x7D)
    }

    /// Default attributes first, then a log's sequence number or a span's common attributes (from its
    /// fields), then the item's own attributes, in their order. A default whose key the item or a span
    /// field gives is left out.
    private func attributes(_ attributes: Attributes, defaults: Defaults, sequence: Int64?, common span: Span? = nil,
                            into writer: inout JSONWriter) {
        writer.byte(0x7B)
        var empty = true
        let collision = Self.collision(of: attributes, with: defaults)
        if defaults.shadowsFields || collision.replacesDefault {
            for attribute in defaults.attributes
            where !attributes.contains(attribute.key) && !(span.map { Self.writes(attribute.key, from: $0) } ?? false) {
                if !empty { writer.byte(0x2C) }
                empty = false
                writer.raw(attribute.fragment)
            }
        } else if !defaults.joined.isEmpty {
            writer.raw(defaults.joined)
            empty = false
        }
        if let sequence, !collision.replacesReserved || !attributes.contains(Self.sequenceKey) {
            if !empty { writer.byte(0x2C) }
            empty = false
            writer.raw("\"sentry.timestamp.sequence\":{\"value\":")
            writer.integer(sequence)
            writer.raw(",\"type\":\"integer\"}")
        }
        if let span { commonAttributes(of: span, skipping: collision.replacesReserved ? attributes : nil, empty: &empty, into: &writer) }
        if !empty, !attributes.isEmpty { writer.byte(0x2C) }
        writer.attributeList(attributes)
        writer.byte(0x7D)
    }

    /// A value of a span field that becomes a common attribute.
    private enum FieldValue {
        case string(String), spanID(SpanID), integer(UInt64)
    }

    /// The protocol's common span attributes that `span`'s fields give (see `Span.init`), in order, with
    /// each key's JSON opening (`"key":{"value":`); empty strings are left out. The one place that says
    /// which are sent: `writes` and `commonAttributes` both ask it.
    @inline(__always)
    private static func forEachField(of span: Span, _ body: (_ key: String, _ opening: StaticString, _ value: FieldValue) -> Void) {
        if let op = span.op, !op.isEmpty { body("sentry.op", #""sentry.op":{"value":"#, .string(op)) }
        if let id = span.isSegment ? span.spanID : span.segmentID {
            body("sentry.segment.id", #""sentry.segment.id":{"value":"#, .spanID(id))
        }
        if let name = span.isSegment ? span.name : span.segmentName, !name.isEmpty {
            body("sentry.segment.name", #""sentry.segment.name":{"value":"#, .string(name))
        }
        if span.isSegment {
            body("sentry.segment.name.source", #""sentry.segment.name.source":{"value":"#, .string((span.source ?? .custom).rawValue))
        }
        if let thread = span.threadID { body("thread.id", #""thread.id":{"value":"#, .integer(thread)) }
        if let name = span.threadName, !name.isEmpty { body("thread.name", #""thread.name":{"value":"#, .string(name)) }
    }

    /// Whether `commonAttributes` writes `key` from `span`'s fields (the span's own attributes aside).
    private static func writes(_ key: String, from span: Span) -> Bool {
        var writes = false
        forEachField(of: span) { field, _, _ in writes = writes || field == key }
        return writes
    }

    /// Writes the common span attributes `span`'s fields give, each unless `own` (the span's attributes,
    /// when one of them may have such a key) has it.
    private func commonAttributes(of span: Span, skipping own: Attributes?, empty: inout Bool, into writer: inout JSONWriter) {
        Self.forEachField(of: span) { key, opening, value in
            if let own, own.contains(key) { return }
            if !empty { writer.byte(0x2C) }
            empty = false
            writer.raw(opening)
            switch value {
            case .string(let text):
                writer.string(text)
                writer.raw(#","type":"string"}"#)
            case .spanID(let id):
                writer.byte(0x22)
                writer.hex(id.value)
                writer.raw(#"","type":"string"}"#)
            case .integer(let number):
                // Beyond Int64 as a string, as the protocol sends such integers.
                if let exact = Int64(exactly: number) {
                    writer.integer(exact)
                    writer.raw(#","type":"integer"}"#)
                } else {
                    writer.string(String(number))
                    writer.raw(#","type":"string"}"#)
                }
            }
        }
    }

    /// Whether one of the item's keys is a default key (then the defaults are written one by one rather
    /// than in one copy), and whether one is a reserved key (then the encoder checks what it writes itself
    /// against the item's keys). Lengths first: most keys differ from every such key in length, and
    /// comparing them costs no string comparison. Kept apart because a span's own `sentry.op` attribute is
    /// common, and writing the defaults one by one copies each, with reference counts that every adding
    /// thread then moves between the cores.
    @inline(__always)
    private static func collision(of attributes: Attributes, with defaults: Defaults) -> (replacesDefault: Bool, replacesReserved: Bool) {
        guard defaults.keyLengths != 0 else { return (false, false) }
        return attributes.withElements { elements in
            var found = (replacesDefault: false, replacesReserved: false)
            for element in elements {
                let length = element.key.utf8.count
                guard defaults.keyLengths & 1 << UInt64(length & 63) != 0 else { continue }
                found.replacesDefault = found.replacesDefault || defaults.keys.contains { $0.utf8.count == length && $0 == element.key }
                found.replacesReserved = found.replacesReserved || defaults.reserved.contains { $0.utf8.count == length && $0 == element.key }
            }
            return found
        }
    }

    /// How many leading bytes of a span payload name its trace: `{"trace_id":"<32 hex>"`.
    static let spanTracePrefixLength = spanPrefix.count + 33

    /// The trace of a span payload written by this encoder, or `nil` if the bytes do not start as it writes.
    static func traceID(ofSpan payload: UnsafeRawBufferPointer) -> TraceID? {
        let start = spanPrefix.count
        guard payload.count >= spanTracePrefixLength,
              payload.prefix(start).elementsEqual(spanPrefix),
              payload[start + 32] == 0x22,
              let high = HexDigits.parse(payload[start..<start + 16]),
              let low = HexDigits.parse(payload[start + 16..<start + 32])
        else { return nil }
        return TraceID(high: high, low: low)
    }
}

extension JSONWriter {
    mutating func traceID(_ id: TraceID) {
        hex(id.high)
        hex(id.low)
    }

    mutating func level(_ level: Log.Level) {
        switch level {
        case .trace: raw("trace")
        case .debug: raw("debug")
        case .info: raw("info")
        case .warn: raw("warn")
        case .error: raw("error")
        case .fatal: raw("fatal")
        }
    }

    /// Writes `"k":{…},…` for each attribute.
    mutating func attributeList(_ attributes: Attributes) {
        attributes.withElements { elements in
            for index in elements.indices {
                if index > 0 { byte(0x2C) }
                attribute(key: elements[index].key, value: elements[index].value)
            }
        }
    }

    /// Writes `"key":{"value":…,"type":"…"}`, applying the non-finite double rule of `AttributeValue`.
    /// Inlined into the attribute loop, its only caller on the hot path (a call per attribute is measurable).
    @inline(__always)
    mutating func attribute(key: borrowing String, value: borrowing AttributeValue) {
        string(key)
        raw(":{\"value\":")
        switch value {
        case .string(let text):
            string(text)
            raw(",\"type\":\"string\"}")
        case .integer(let number):
            integer(number)
            raw(",\"type\":\"integer\"}")
        case .double(let number) where number.isFinite:
            double(number)
            raw(",\"type\":\"double\"}")
        case .double(let number):
            nonFinite(number)
            raw(",\"type\":\"string\"}")
        case .boolean(let flag):
            if flag { raw("true,\"type\":\"boolean\"}") } else { raw("false,\"type\":\"boolean\"}") }
        case .stringArray(let texts):
            array(texts) { $0.string($1) }
        case .integerArray(let numbers):
            array(numbers) { $0.integer($1) }
        case .doubleArray(let numbers) where numbers.allSatisfy(\.isFinite):
            array(numbers) { $0.double($1) }
        case .doubleArray(let numbers):
            array(numbers) { writer, number in
                if number.isFinite { writer.string(number.description) } else { writer.nonFinite(number) }
            }
        case .booleanArray(let flags):
            array(flags) { $0.raw($1 ? "true" : "false") }
        }
    }

    private mutating func array<T>(_ elements: [T], _ element: (inout JSONWriter, T) -> Void) {
        byte(0x5B)
        for (index, value) in elements.enumerated() {
            if index > 0 { byte(0x2C) }
            element(&self, value)
        }
        raw("],\"type\":\"array\"}")
    }

    /// `"NaN"`, `"Infinity"` or `"-Infinity"`.
    private mutating func nonFinite(_ number: Double) {
        if number.isNaN {
            raw("\"NaN\"")
        } else {
            raw(number < 0 ? "\"-Infinity\"" : "\"Infinity\"")
        }
    }
}
