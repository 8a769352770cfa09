import Foundation

/// Lays out envelopes around stored item payloads, which go in verbatim (see `EnvelopeParts`).
///
/// Logs go into `log` items of at most `maxLogs` logs; spans into one envelope per trace with at most
/// `maxSpans` spans and the trace's sampling context as the `trace` header. The uploader appends a
/// `client_report` item when it sends. Every `length` is the payload's byte count; every line ends in one LF.
struct EnvelopeEncoder: Sendable {
    /// The values of the dynamic sampling context that do not depend on the trace.
    struct SamplingContext: Sendable {
        var publicKey: String
        var sampleRate: Double
        var release: String?
        var environment: String?
        var organizationID: String?
    }

    /// The header line of log envelopes: `{"dsn":…,"sdk":{…}}` LF.
    let logHeader: [UInt8]
    /// The header line of span envelopes around the trace ID's 32 hex digits:
    /// `{"dsn":…,"sdk":{…},"trace":{"trace_id":"` … `","public_key":…}}` LF.
    let spanHeaderPrefix: [UInt8]
    let spanHeaderSuffix: [UInt8]

    init(dsn: DSN, sdkName: String, sdkVersion: String, sampling: SamplingContext) {
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
        logHeader = common + Array("}\n".utf8)
        spanHeaderPrefix = common + Array(",\"trace\":{\"trace_id\":\"".utf8)
        // The sampling context (strings only): the app's rate; every buffered span was sampled.
        spanHeaderSuffix = bytes { writer in
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

    /// One envelope of logs (`payloads.count` ≤ 100 by the caller's batching).
    func logs(_ payloads: [UnsafeRawBufferPointer]) -> EnvelopeParts {
        parts(payloads) { writer, length in
            writer.raw(logHeader)
            itemHeader("{\"type\":\"log\",\"item_count\":", contentType: "application/vnd.sentry.items.log+json",
                       count: payloads.count, length: length, into: &writer)
        }
    }

    /// One envelope of spans of one trace.
    func spans(_ payloads: [UnsafeRawBufferPointer], trace: TraceID) -> EnvelopeParts {
        parts(payloads) { writer, length in
            writer.raw(spanHeaderPrefix)
            writer.traceID(trace)
            writer.raw(spanHeaderSuffix)
            itemHeader("{\"type\":\"span\",\"item_count\":", contentType: "application/vnd.sentry.items.span.v2+json",
                       count: payloads.count, length: length, into: &writer)
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

    private func itemHeader(_ start: StaticString, contentType: StaticString, count: Int, length: Int,
                            into writer: inout JSONWriter) {
        writer.raw(start)
        writer.integer(Int64(count))
        writer.raw(",\"content_type\":\"")
        writer.raw(contentType)
        writer.raw("\",\"length\":")
        writer.integer(Int64(length))
        writer.raw("}\n")
    }

    /// `{"type":"client_report","length":n}` LF payload LF.
    static func clientReportItem(_ report: ClientReport, into writer: inout JSONWriter) {
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
        writer.raw("{\"type\":\"client_report\",\"length\":")
        writer.integer(Int64(buffer.count))
        writer.raw("}\n")
        writer.raw(buffer.bytes)
        writer.byte(0x0A)
    }
}
