import Foundation

/// Lays out envelopes around stored item payloads, which go in verbatim (see `EnvelopeParts`).
///
/// Each envelope holds one item of one signal (its `type` and `content_type` from the signal's
/// description); an envelope of one trace's items carries the trace's sampling context as its `trace`
/// header: the one its head froze, if the app set it (`traceContexts`), else the buffer's own, with a
/// `sample_rand` derived from the trace ID below the app's rate (every buffered span was sampled). The
/// uploader appends a `client_report` item when it sends. Every `length` is the payload's byte count;
/// every line ends in one LF.
struct EnvelopeEncoder: Sendable {
    /// The values of the dynamic sampling context that do not depend on the trace.
    struct SamplingContext: Sendable {
        var publicKey: String
        var sampleRate: Double
        var release: String?
        var environment: String?
        var organizationID: String?
    }

    /// The header line of envelopes without a trace: `{"dsn":…,"sdk":{…}}` LF.
    let plainHeader: [UInt8]
    /// The header line of envelopes of one trace, around the trace ID's 32 hex digits and, in the buffer's
    /// own sampling context, the 6 decimals of its `sample_rand`:
    /// `{"dsn":…,"sdk":{…},"trace":{"trace_id":"` … `","sample_rand":"0.` … `","public_key":…}}` LF.
    let tracedHeaderPrefix: [UInt8]
    let tracedHeaderSuffix: [UInt8]
    /// The app's trace sample rate, which the buffer's own `sample_rand`s are below.
    let sampleRate: Double
    /// The contexts traces' heads froze, which replace the buffer's own in their envelopes' headers.
    let traceContexts: TraceSamplingContexts

    init(dsn: DSN, sdkName: String, sdkVersion: String, sampling: SamplingContext) {
        traceContexts = TraceSamplingContexts(publicKey: sampling.publicKey)
        sampleRate = sampling.sampleRate
        func bytes(_ write: (inout JSONWriter) -> Void) -> [UInt8] {
            let buffer = ByteBuffer(capacity: 256)
            var writer = JSONWriter(appendingTo: buffer)
            write(&writer)
            writer.finish()
            return buffer.toArray()
        }
        let common = bytes { writer in
            writer.raw("{\"dsn\":")
            writer.string(dsn.string)
            writer.raw(",\"sdk\":{\"name\":")
            writer.string(sdkName)
            writer.raw(",\"version\":")
            writer.string(sdkVersion)
            writer.byte(0x7D)
        }
        plainHeader = common + Array("}\n".utf8)
        tracedHeaderPrefix = common + Array(",\"trace\":{\"trace_id\":\"".utf8)
        // The sampling context (strings only): the app's rate; every buffered span was sampled.
        tracedHeaderSuffix = bytes { writer in
            writer.raw("\",\"public_key\":")
            writer.string(sampling.publicKey)
            writer.raw(",\"sample_rate\":")
            writer.string(sampling.sampleRate.description)
            writer.raw(",\"sampled\":\"true\"")
            if let release = sampling.release {
                writer.raw(",\"release\":")
                writer.string(release)
            }
            if let environment = sampling.environment {
                writer.raw(",\"environment\":")
                writer.string(environment)
            }
            if let organization = sampling.organizationID {
                writer.raw(",\"org_id\":")
                writer.string(organization)
            }
            writer.raw("}}\n")
        }
    }

    /// One envelope of `category`'s items (at most its limit, by the caller's batching), of the one
    /// `trace` they belong to if given (then with the trace's sampling context as the `trace` header).
    func envelope(_ payloads: [UnsafeRawBufferPointer], of category: ItemCategory, trace: TraceID? = nil) -> EnvelopeParts {
        let signal = category.signal
        return parts(payloads) { writer, length in
            if let trace {
                writer.raw(tracedHeaderPrefix)
                writer.traceID(trace)
                if let frozen = traceContexts.headerSuffix(for: trace) {
                    writer.raw(frozen)
                } else {
                    writer.raw("\",\"sample_rand\":\"0.")
                    writer.zeroPadded(UInt64(trace.derivedSampleRandMillionths(sampled: true, rate: sampleRate)), digits: 6)
                    writer.raw(tracedHeaderSuffix)
                }
            } else {
                writer.raw(plainHeader)
            }
            writer.raw("{\"type\":")
            writer.string(signal.envelopeItemType)
            writer.raw(",\"item_count\":")
            writer.integer(Int64(payloads.count))
            writer.raw(",\"content_type\":\"")
            writer.raw(signal.contentType)
            writer.raw("\",\"length\":")
            writer.integer(Int64(length))
            writer.raw("}\n")
        }
    }

    /// The envelope's one item is a container, `{"items":[p1,p2,…]}`: its length is the payloads, a comma
    /// between each two, and 12 bytes of brackets.
    private func parts(_ payloads: [UnsafeRawBufferPointer], head: (inout JSONWriter, Int) -> Void) -> EnvelopeParts {
        let length = payloads.reduce(12 + max(0, payloads.count - 1)) { $0 + $1.count }
        let buffer = ByteBuffer(capacity: 512)
        var writer = JSONWriter(appendingTo: buffer)
        head(&writer, length)
        writer.raw("{\"items\":[")
        writer.finish()
        return EnvelopeParts(head: buffer.toArray(), payloads: payloads)
    }

    /// `{"type":"client_report","length":n}` LF payload LF.
    static func clientReportItem(_ report: ClientReport, into writer: inout JSONWriter) {
        let payload = clientReportPayload(report)
        writer.raw("{\"type\":\"client_report\",\"length\":")
        writer.integer(Int64(payload.count))
        writer.raw("}\n")
        writer.raw(payload)
        writer.byte(0x0A)
    }

    /// A client report item's payload: `{"timestamp":…,"discarded_events":[{"reason":…,"category":…,"quantity":…}]}`.
    static func clientReportPayload(_ report: ClientReport) -> [UInt8] {
        let buffer = ByteBuffer(capacity: 256)
        var payload = JSONWriter(appendingTo: buffer)
        payload.raw("{\"timestamp\":")
        payload.integer(Int64(report.timestamp.timeIntervalSince1970.rounded(.down)))
        payload.raw(",\"discarded_events\":[")
        for (index, entry) in report.entries.enumerated() {
            if index > 0 { payload.byte(0x2C) }
            payload.raw("{\"reason\":")
            payload.string(entry.reason.rawValue)
            payload.raw(",\"category\":")
            payload.string(entry.category.rawValue)
            payload.raw(",\"quantity\":")
            payload.integer(Int64(entry.quantity))
            payload.byte(0x7D)
        }
        payload.raw("]}")
        payload.finish()
        return buffer.toArray()
    }
}
