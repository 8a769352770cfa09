/// The dynamic sampling contexts that traces' heads froze, for the `trace` header of the envelopes of
/// their spans (a trace continued from an incoming request carries its caller's): the header's fields after
/// `trace_id`, encoded once, for the latest `capacity` traces set (about 300 bytes each), or fewer if they
/// take more than `maxBytes` (a caller's `baggage` may hold 8 KiB). A trace without one carries the buffer's
/// own. The lookup happens when a batch is forwarded, so a service that starts more than `capacity` sampled
/// traces in a flush interval (1024 in 5 s: 200 a second) sends the oldest with the buffer's own.
///
/// In memory only: spans recovered after a restart carry the buffer's own context.
final class TraceSamplingContexts: Sendable {
    private struct State {
        var encoded: [TraceID: [UInt8]] = [:]
        /// Traces in order of their last setting, for evicting the oldest.
        var order: [TraceID] = []
        /// The bytes of `encoded`.
        var bytes = 0

        /// Removes `trace`'s context, if one is set.
        mutating func forget(_ trace: TraceID) {
            guard let removed = encoded.removeValue(forKey: trace) else { return }
            bytes -= removed.count
            order.removeAll { $0 == trace }
        }
    }

    static let capacity = 1024
    static let maxBytes = 1 << 20
    /// The most one context may take, encoded: twice what a caller's `baggage` may hold. A larger one
    /// (a release of megabytes) made its trace's envelopes larger than any the uploader sends, deleted
    /// and counted as nothing.
    static let maxContextBytes = 16 << 10
    private let state = Locked(State())
    /// The DSN's public key, for a context without one (Sentry requires it).
    private let publicKey: String

    init(publicKey: String) { self.publicKey = publicKey }

    /// Sets `trace`'s context: string fields (a `trace_id` among them is left out: the trace says it), keys
    /// with `baggage`'s `sentry-` prefix taken without it (unless the context also has the key without it),
    /// the DSN's `public_key` if it has none or an empty one. Returns `false`, keeping nothing (the trace
    /// then carries the buffer's own), for one that takes more than `maxContextBytes` encoded.
    @discardableResult
    func set(_ context: [String: String], for trace: TraceID) -> Bool {
        var fields = [String: String](minimumCapacity: context.count + 1)
        for (key, value) in context {
            guard key.hasPrefix("sentry-") else {
                fields[key] = value
                continue
            }
            let bare = String(key.dropFirst("sentry-".count))
            if context[bare] == nil { fields[bare] = value }
        }
        if fields["public_key"]?.isEmpty ?? true { fields["public_key"] = publicKey }
        let buffer = ByteBuffer(capacity: 256)
        var writer = JSONWriter(appendingTo: buffer)
        writer.byte(UInt8(ascii: "\""))
        for (key, value) in fields.sorted(by: { $0.key < $1.key }) where key != "trace_id" {
            writer.byte(UInt8(ascii: ","))
            writer.string(key)
            writer.byte(UInt8(ascii: ":"))
            writer.string(value)
        }
        writer.raw("}}\n")
        writer.finish()
        let encoded = buffer.toArray()
        return state.withLock { state in
            // The one set before goes, also for one too large: the trace's head gave this one.
            state.forget(trace)
            guard encoded.count <= Self.maxContextBytes else { return false }
            state.encoded[trace] = encoded
            state.order.append(trace)
            state.bytes += encoded.count
            // The latest stays, whatever its size.
            while state.order.count > Self.capacity || (state.bytes > Self.maxBytes && state.order.count > 1) {
                let oldest = state.order.removeFirst()
                state.bytes -= state.encoded.removeValue(forKey: oldest)?.count ?? 0
            }
            return true
        }
    }

    /// The header's end for `trace`: from `"` after the trace ID to the line's end; `nil` if none was set.
    func headerSuffix(for trace: TraceID) -> [UInt8]? {
        state.withLock { $0.encoded[trace] }
    }
}
