import Foundation
import TelemetryBuffer
import TelemetryBufferContext
import Tracing

/// A span of `TelemetryBufferTracer`: recorded while it runs, added to the buffer as a span v2 item when it
/// ends (once; only if its trace is sampled; not if it ends while sending an item that was itself made
/// while sending one: `SendingDepth`, dropped and counted as `internal_sdk_error`).
///
/// Its kind and attributes give `sentry.op`: the attribute `sentry.op` if set, else `db` for a span with
/// `db.system.name` (or the older `db.system`), else by kind (`server` → `http.server`, `client` → `http.client`, `producer` →
/// `queue.publish`, `consumer` → `queue.process`; none for `internal`). An error recorded or an error
/// status makes its status `error`; a recorded error adds `exception.type` and `exception.message`. Links
/// to spans of this tracer become span v2 links. Events have no place in span v2 and are not sent.
/// Attributes go under the keys of Sentry's conventions registry: older OpenTelemetry keys that it
/// replaced (`http.method`, `db.statement`, `net.peer.name`…) are renamed (see `AttributeNames`), unless
/// the registry's key is set too; of several older keys for one registry key, the server's side goes
/// (`net.host.*` on server spans, `net.peer.*` on others, whose peer is the server or broker), else the
/// first alphabetically.
public final class TelemetryBufferSpan: Tracing.Span, @unchecked Sendable {
    // @unchecked: `state` is touched only under `lock`; the rest never changes.
    private struct State {
        var operationName: String
        var attributes: SpanAttributes = [:]
        var failed = false
        var links: [TelemetryBuffer.Span.Link] = []
        var ended = false
    }

    /// The context of the span's children: its own trace, span and segment.
    public let context: InstrumentationContext
    private let kind: SpanKind
    private let span: SentrySpanContext
    private let parentSpanID: SpanID?
    private let isSegment: Bool
    private let start: UInt64
    private let buffer: TelemetryBuffer
    private let lock = NSLock()
    private var state: State

    init(operationName: String, kind: SpanKind, context: InstrumentationContext, span: SentrySpanContext,
         parentSpanID: SpanID?, isSegment: Bool, start: UInt64, buffer: TelemetryBuffer) {
        self.context = context
        self.kind = kind
        self.span = span
        self.parentSpanID = parentSpanID
        self.isSegment = isSegment
        self.start = start
        self.buffer = buffer
        state = State(operationName: operationName)
    }

    /// The span's name (a segment's is its segment's name, which its children send as it is when they end).
    public var operationName: String {
        get { lock.withLock { state.operationName } }
        set {
            lock.withLock { state.operationName = newValue }
            if isSegment { span.segment?.name.value = newValue }
        }
    }

    /// The span's attributes, sent with it.
    public var attributes: SpanAttributes {
        get { lock.withLock { state.attributes } }
        set { lock.withLock { state.attributes = newValue } }
    }

    /// Whether its trace is sampled and it has not ended.
    public var isRecording: Bool { span.sampled == true && !lock.withLock { state.ended } }

    /// An error status makes the span's status `error`.
    public func setStatus(_ status: SpanStatus) {
        if status.code == .error { lock.withLock { state.failed = true } }
    }

    /// Not sent: span v2 has no events.
    public func addEvent(_ event: SpanEvent) {}

    /// Makes the status `error` and adds the error's type and description as `exception.type` and
    /// `exception.message`, with `attributes`.
    public func recordError<Instant: TracerInstant>(_ error: any Error, attributes: SpanAttributes, at instant: @autoclosure () -> Instant) {
        lock.withLock {
            state.failed = true
            state.attributes["exception.type"] = String(reflecting: type(of: error))
            state.attributes["exception.message"] = String(describing: error)
            attributes.forEach { state.attributes[$0] = $1 }
        }
    }

    /// Links to a span of this tracer become span v2 links; others are not sent.
    public func addLink(_ link: SpanLink) {
        guard let target = SentrySpanContext.current(in: link.context) else { return }
        let attributes = Self.attributes(link.attributes)
        lock.withLock {
            state.links.append(.init(traceID: target.traceID, spanID: target.spanID, sampled: target.sampled, attributes: attributes))
        }
    }

    /// Ends the span: the first call adds it to the buffer, if its trace is sampled.
    public func end<Instant: TracerInstant>(at instant: @autoclosure () -> Instant) {
        let end = instant().nanosecondsSinceEpoch
        let ended: State? = lock.withLock {
            guard !state.ended else { return nil }
            state.ended = true
            return state
        }
        guard let ended, span.sampled == true else { return }
        var attributes = Self.attributes(ended.attributes, kind: kind)
        attributes["sentry.op"] = nil
        // Not a span ended while sending one that was ended while sending (`beforeSendSpan` tracing its own
        // work): that one is counted dropped.
        let sent = SendingDepth.enter {
            buffer.add(span: TelemetryBuffer.Span(
                traceID: span.traceID, spanID: span.spanID, parentSpanID: parentSpanID, name: ended.operationName,
                status: ended.failed ? .error : .ok, isSegment: isSegment, startTimestamp: Self.date(start),
                endTimestamp: Self.date(max(end, start)), attributes: attributes, links: ended.links, op: op(ended.attributes),
                source: isSegment ? Self.source(ended) : nil, segmentID: span.segmentID, segmentName: span.segmentName))
        }
        if !sent { buffer.countDroppedBeforeAdd(.span) }
    }

    /// How a segment's name was chosen: `route` when it is its `http.route` (as a server's middleware names
    /// it), else `custom`.
    private static func source(_ state: State) -> TelemetryBuffer.Span.Source {
        if case .string(let route)? = state.attributes["http.route"]?.toSpanAttribute(), route == state.operationName { return .route }
        return .custom
    }

    /// `sentry.op` from the attribute, `db.system` or the kind.
    private func op(_ attributes: SpanAttributes) -> String? {
        if case .string(let op)? = attributes["sentry.op"]?.toSpanAttribute() { return op }
        if attributes["db.system"] != nil || attributes["db.system.name"] != nil { return "db" }
        switch kind {
        case .server: return "http.server"
        case .client: return "http.client"
        case .producer: return "queue.publish"
        case .consumer: return "queue.process"
        default: return nil
        }
    }

    private static func date(_ nanoseconds: UInt64) -> Date {
        Date(timeIntervalSince1970: Double(nanoseconds / 1000) / 1_000_000)
    }

    /// swift-distributed-tracing's attributes as the buffer's, under the registry's keys and types
    /// (`AttributeNames`: `db.system` goes as `db.system.name`, unless that is set too; `net.sock.family`
    /// as `network.type` or `network.transport`, unless those are set or renamed to; a recorded header's
    /// single value as an array of one). Of several older keys for one registry key, whatever order the
    /// attributes iterate in, the one that names the server's side goes (`net.host.*` on a `server` span;
    /// `net.peer.*` on others: a client's peer is the server, a producer's or consumer's the broker), else
    /// the first in alphabetical order (`http.host` before `http.server_name`).
    static func attributes(_ attributes: SpanAttributes, kind: SpanKind = .internal) -> Attributes {
        var converted = Attributes()
        // The older key each registry key was taken from, and which of two goes.
        var renamedFrom: [String: String] = [:]
        let serverSide = kind == .server ? "net.host." : "net.peer."
        func precedes(_ key: String, _ other: String) -> Bool {
            let (first, second) = (key.hasPrefix(serverSide), other.hasPrefix(serverSide))
            return first != second ? first : key < other
        }
        attributes.forEach { key, attribute in
            var key = key
            // `net.sock.family` (`inet`, `inet6`, `unix`) is split by the registry into a network type and transport.
            if key == "net.sock.family", case .string(let family) = attribute {
                let (target, value) = switch family {
                case "inet": ("network.type", "ipv4")
                case "inet6": ("network.type", "ipv6")
                case "unix": ("network.transport", "unix")
                default: ("", "")
                }
                // Not over the key itself, nor over an older key's renamed to it (that one replaces this, if later).
                guard !target.isEmpty, attributes[target] == nil, renamedFrom[target] == nil else { return }
                converted[target] = .string(value)
                return
            }
            if let replacement = AttributeNames.replacements[key] {
                // An older key goes under the registry's, unless that is set too: then it is not sent.
                guard attributes[replacement] == nil, renamedFrom[replacement].map({ precedes(key, $0) }) ?? true else { return }
                renamedFrom[replacement] = key
                key = replacement
            }
            switch attribute {
            case .int32(let value): converted[key] = .integer(Int64(value))
            case .int64(let value): converted[key] = .integer(value)
            case .int32Array(let values): converted[key] = .integerArray(values.map(Int64.init))
            case .int64Array(let values): converted[key] = .integerArray(values)
            case .double(let value): converted[key] = .double(value)
            case .doubleArray(let values): converted[key] = .doubleArray(values)
            case .bool(let value): converted[key] = .boolean(value)
            case .boolArray(let values): converted[key] = .booleanArray(values)
            case .string(let value): converted[key] = AttributeNames.isHeaderList(key) ? .stringArray([value]) : .string(value)
            case .stringArray(let values): converted[key] = .stringArray(values)
            case .stringConvertible(let value): converted[key] = .string(value.description)
            case .stringConvertibleArray(let values): converted[key] = .stringArray(values.map(\.description))
            default: converted[key] = .string("\(attribute)")
            }
        }
        return converted
    }
}
