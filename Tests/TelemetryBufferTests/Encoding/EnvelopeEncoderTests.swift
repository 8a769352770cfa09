import Foundation
import XCTest
@testable import TelemetryBuffer

/// Envelopes built through a real buffer and read back from disk, compared byte for byte with the
/// protocol digest's examples.
final class EnvelopeEncoderTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private let trace = TraceID("4f2b8e1c9a7d43e6b0c5d1e2f3a4b5c6")!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory.remove() }

    private func exampleBuffer() throws -> TelemetryBuffer {
        try TelemetryBuffer(options: testOptions(directory) {
            $0.sdkName = "sentry.cocoa.example"
            $0.sdkVersion = "1.2.0"
        })
    }

    /// The stored form is the wire form without `sent_at` (added at upload).
    private func storedHeader(_ wire: String) -> String {
        wire.replacingOccurrences(of: #","sent_at":"2026-01-01T10:00:05.000Z""#, with: "")
    }

    func testLogEnvelopeMatchesTheSpecExampleByteForByte() throws {
        let buffer = try exampleBuffer()
        buffer.add(log: Log(
            level: .info, body: "Upload finished in 412 ms", traceID: trace, spanID: SpanID("9c1d2e3f4a5b6c7d"),
            timestamp: Date(timeIntervalSince1970: 1_767_261_600.125),
            attributes: [
                "sentry.sdk.name": "sentry.cocoa.example", "sentry.sdk.version": "1.2.0",
                "sentry.environment": "production", "sentry.message.template": "Upload finished in %d ms",
                "sentry.message.parameter.0": 412, "upload.ratio": 0.75, "upload.cached": false,
            ]))
        buffer.add(log: Log(
            level: .warn, body: "Disk cache near limit", traceID: trace,
            timestamp: Date(timeIntervalSince1970: 1_767_261_601.5), attributes: ["cache.files": 29]))
        buffer.flush()

        let files = try walkEnvelopes(in: buffer.envelopesDirectory)
        XCTAssertEqual(files.count, 1)
        // The spec's example leaves out what this buffer adds to every log: where it runs (`DeviceContext`,
        // after the other defaults) and `sentry.timestamp.sequence` (both logs are alone in their
        // millisecond: 0). Both go after the defaults the log does not replace, before its own attributes.
        let added = Self.fragments(DeviceContext.logAttributes) + #""sentry.timestamp.sequence":{"value":0,"type":"integer"},"#
        let payload = SpecExamples.logPayload
            .replacingOccurrences(of: #""body":"Upload finished in 412 ms","attributes":{"#,
                                  with: #""body":"Upload finished in 412 ms","attributes":{"# + added)
            .replacingOccurrences(of: #""cache.files""#, with: added + #""cache.files""#)
        XCTAssertEqual(payload.utf8.count, 937 + 2 * added.utf8.count)
        let itemHeader = SpecExamples.logItemHeader.replacingOccurrences(of: #""length":937"#, with: #""length":\#(payload.utf8.count)"#)
        let expected = [storedHeader(SpecExamples.logHeaderWire), itemHeader, payload].joined(separator: "\n") + "\n"
        XCTAssertEqual(String(decoding: files[0].bytes, as: UTF8.self), expected)
        XCTAssertNil(files[0].header["trace"], "log envelopes carry no sampling context")
        // On the wire: the same bytes with `sent_at` added to the header once, as in the spec's wire form.
        let sentAt = try XCTUnwrap(ISO8601DateFormatter().date(from: "2026-01-01T10:00:05Z"))
        let wire = Uploader.body(files[0].bytes, sentAt: sentAt, report: nil)
        XCTAssertEqual(String(decoding: wire, as: UTF8.self),
                       [SpecExamples.logHeaderWire, itemHeader, payload].joined(separator: "\n") + "\n")
        XCTAssertEqual(wire.count, 1208 + 2 * added.utf8.count + 1, "the spec's size, with what was added (and a 4-digit length)")
    }

    /// `"key":{"value":"…","type":"string"},` for each of `attributes` (strings without escapes).
    private static func fragments(_ attributes: Attributes) -> String {
        attributes.map { attribute -> String in
            guard case .string(let value) = attribute.value else { preconditionFailure("\(attribute.key) is not a string") }
            return #""\#(attribute.key)":{"value":"\#(value)","type":"string"},"#
        }.joined()
    }

    func testSpanEnvelopeMatchesTheSpecExample() throws {
        let buffer = try exampleBuffer()
        let segment = SpanID("9c1d2e3f4a5b6c7d")!
        buffer.add(span: Span(
            traceID: trace, spanID: segment, name: "Checkout", isSegment: true,
            startTimestamp: Date(timeIntervalSince1970: 1_767_261_599.80123),
            endTimestamp: Date(timeIntervalSince1970: 1_767_261_600.402561),
            attributes: [
                "sentry.op": "ui.load", "sentry.segment.id": "9c1d2e3f4a5b6c7d", "sentry.segment.name": "Checkout",
                "sentry.segment.name.source": "component", "sentry.sdk.name": "sentry.cocoa.example",
                "sentry.sdk.version": "1.2.0", "sentry.release": "app@1.2.0", "sentry.environment": "production",
                "os.name": "iOS",
            ]))
        buffer.add(span: Span(
            traceID: trace, spanID: SpanID("0a1b2c3d4e5f6a7b")!, parentSpanID: segment, name: "GET /cart",
            status: .error, isSegment: false,
            startTimestamp: Date(timeIntervalSince1970: 1_767_261_599.9),
            endTimestamp: Date(timeIntervalSince1970: 1_767_261_600.35),
            attributes: [
                "sentry.op": "http.client", "sentry.segment.id": "9c1d2e3f4a5b6c7d", "sentry.segment.name": "Checkout",
                "sentry.sdk.name": "sentry.cocoa.example", "sentry.sdk.version": "1.2.0",
                "http.response.status_code": 503,
            ]))
        buffer.flush()

        let files = try walkEnvelopes(in: buffer.envelopesDirectory)
        XCTAssertEqual(files.count, 1)
        let lines = String(decoding: files[0].bytes, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
        XCTAssertEqual(lines.count, 4)
        // The segment span names its OS itself; the child gets this buffer's (`DeviceContext`) first.
        let payload = SpecExamples.spanPayload.replacingOccurrences(
            of: #""attributes":{"sentry.op":{"value":"http.client""#,
            with: #""attributes":{"# + Self.fragments(DeviceContext.spanAttributes) + #""sentry.op":{"value":"http.client""#)
        XCTAssertEqual(String(lines[1]), SpecExamples.spanItemHeader.replacingOccurrences(
            of: #""length":1333"#, with: #""length":\#(payload.utf8.count)"#))
        XCTAssertEqual(String(lines[2]), payload)
        XCTAssertEqual(lines[3], "")
        // The sampling context: the example's values this buffer knows, and a `sample_rand` of the trace's own.
        var context = try XCTUnwrap(files[0].header["trace"] as? [String: String])
        XCTAssertNotNil(context.removeValue(forKey: "sample_rand"))
        XCTAssertEqual(context, ["trace_id": trace.description, "public_key": "a1b2c3d4e5f60718293a4b5c6d7e8f90",
                                 "sample_rate": "1.0", "sampled": "true", "org_id": "7"])
    }

    func testTheClientReportRidesAsTheSpecExampleItem() throws {
        let report = ClientReport(timestamp: Date(timeIntervalSince1970: 1_767_261_605), entries: [
            .init(reason: .bufferOverflow, category: .logItem, quantity: 3),
            .init(reason: .bufferOverflow, category: .logByte, quantity: 1290),
        ])
        let stored = Array("{\"dsn\":\"x\"}\n{\"type\":\"log\",\"length\":2}\n{}\n".utf8)
        let wire = String(decoding: Uploader.body(stored, sentAt: Date(timeIntervalSince1970: 0), report: report), as: UTF8.self)
        let expected = [#"{"dsn":"x","sent_at":"1970-01-01T00:00:00.000Z"}"#, #"{"type":"log","length":2}"#, "{}",
                        SpecExamples.clientReportItemHeader, SpecExamples.clientReportPayload]
        XCTAssertEqual(wire, expected.joined(separator: "\n") + "\n")
    }

    /// `sent_at` goes into any header a stored envelope may have: an empty one (`{}`, valid) too, which took
    /// a comma before it (`{,"sent_at":…}`, which the server refuses).
    func testSentAtGoesIntoAnEmptyHeader() throws {
        for header in ["{}", "{ }"] {
            let wire = Uploader.body(Array("\(header)\n{\"type\":\"log\",\"length\":2}\n{}\n".utf8), sentAt: Date(timeIntervalSince1970: 0), report: nil)
            let firstLine = try XCTUnwrap(wire.split(separator: 0x0A).first)
            let parsed = try JSONSerialization.jsonObject(with: Data(firstLine)) as? [String: String]
            XCTAssertEqual(parsed, ["sent_at": "1970-01-01T00:00:00.000Z"], header)
        }
    }

    func testDSCCarriesReleaseEnvironmentAndRate() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory) {
            $0.release = "app@2"
            $0.environment = "qa"
            $0.tracesSampleRate = 0.25
        })
        buffer.add(span: .test("s", trace: trace))
        buffer.flush()
        let envelope = try XCTUnwrap(walkEnvelopes(in: buffer.envelopesDirectory).first)
        let context = try XCTUnwrap(envelope.header["trace"] as? [String: String])
        XCTAssertEqual(context["release"], "app@2")
        XCTAssertEqual(context["environment"], "qa")
        XCTAssertEqual(context["sample_rate"], "0.25")
        let attributes = try XCTUnwrap(envelope.elements.first?["attributes"] as? [String: [String: Any]])
        XCTAssertEqual(attributes["sentry.release"]?["value"] as? String, "app@2")
        XCTAssertEqual(attributes["sentry.environment"]?["value"] as? String, "qa")
        XCTAssertEqual(attributes["sentry.sdk.version"]?["value"] as? String, TelemetryBuffer.version)
    }

    /// An empty release or environment is none: omitted from items and the sampling context (the protocol
    /// omits empty common attributes), where it went as `""` on every item.
    func testAnEmptyReleaseOrEnvironmentIsOmitted() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory) {
            $0.release = ""
            $0.environment = ""
        })
        defer { buffer.close() }
        buffer.add(span: .test("s", trace: trace))
        buffer.add(log: .test("l"))
        buffer.flush()
        let envelopes = try walkEnvelopes(in: buffer.envelopesDirectory)
        XCTAssertEqual(envelopes.count, 2)
        for envelope in envelopes {
            let context = envelope.header["trace"] as? [String: String] ?? [:]
            XCTAssertNil(context["release"])
            XCTAssertNil(context["environment"])
            let attributes = try XCTUnwrap(envelope.elements.first?["attributes"] as? [String: [String: Any]])
            XCTAssertNil(attributes["sentry.release"])
            XCTAssertNil(attributes["sentry.environment"])
        }
    }

    /// The buffer's own sampling context holds a `sample_rand` (spans added without a tracer's context, or
    /// recovered after a restart): 6 decimals, below the rate (every buffered span was sampled, and
    /// `sample_rand < sample_rate` ⇔ sampled), from the trace ID, so that another process, and another
    /// envelope of the trace, derive the same; other traces' differ.
    func testTheBuffersOwnSamplingContextHasASampleRandBelowTheRate() throws {
        for rate in [0.25, 0.0079, 1] {
            directory.remove()
            func sampleRands() throws -> [String: String] {
                let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.tracesSampleRate = rate })
                defer { buffer.close() }
                for low: UInt64 in [0, 7, 0x9E37_79B9_7F4A_7C15, .max] { buffer.add(span: .test("\(low)", trace: TraceID(high: 1, low: low))) }
                buffer.flush()
                var found: [String: String] = [:]
                for envelope in try walkEnvelopes(in: buffer.envelopesDirectory) {
                    let context = try XCTUnwrap(envelope.header["trace"] as? [String: String])
                    XCTAssertEqual(context["sampled"], "true")
                    found[envelope.elements.first?["name"] as? String ?? ""] = context["sample_rand"]
                }
                try FileManager.default.removeItem(at: buffer.envelopesDirectory)
                return found
            }
            let first = try sampleRands(), second = try sampleRands()
            XCTAssertEqual(first.count, 4, "\(rate)")
            XCTAssertEqual(first, second, "derived from the trace, in every buffer alike")
            XCTAssertEqual(Set(first.values).count, 4, "\(first)")
            for (name, text) in first {
                XCTAssertNotNil(text.wholeMatch(of: /0\.[0-9]{6}/), text)
                let value = try XCTUnwrap(Double(text))
                XCTAssertTrue(value >= 0 && value < rate, "\(name) at \(rate): \(text)")
            }
        }
    }

    /// A context of more than 16 KiB encoded (a release of megabytes) is not kept, nor the one it would
    /// replace: the trace's spans carry the buffer's own, and go. Before, its envelope was larger than any
    /// the uploader sends, which deleted it, counting nothing.
    func testAContextLargerThanBaggageCouldCarryIsNotKept() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.tracesSampleRate = 0.25 })
        defer { buffer.close() }
        let kept = TraceID(high: 3, low: 1), refused = TraceID(high: 3, low: 2)
        buffer.setSamplingContext(["release": String(repeating: "r", count: 12 << 10)], forTrace: kept)
        buffer.setSamplingContext(["release": "small"], forTrace: refused)
        buffer.setSamplingContext(["release": String(repeating: "r", count: 2 << 20)], forTrace: refused)
        for (name, trace) in [("kept", kept), ("refused", refused)] { buffer.add(span: .test(name, trace: trace)) }
        buffer.flush()
        var contexts: [String: [String: String]] = [:]
        for envelope in try walkEnvelopes(in: buffer.envelopesDirectory) {
            XCTAssertLessThan(envelope.bytes.count, 64 << 10)
            contexts[envelope.elements.first?["name"] as? String ?? ""] = envelope.header["trace"] as? [String: String]
        }
        XCTAssertEqual(contexts["kept"]?["release"]?.count, 12 << 10)
        XCTAssertNil(contexts["refused"]?["release"], "the buffer's own, which has no release here")
        XCTAssertEqual(contexts["refused"]?["sample_rate"], "0.25")
    }

    /// The contexts kept are bounded by their bytes too (a caller's `baggage` may hold 8 KiB): the oldest
    /// go first.
    func testSamplingContextsKeptAreBoundedByTheirBytes() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.tracesSampleRate = 0.25 })
        defer { buffer.close() }
        let large = String(repeating: "x", count: 8 << 10)
        let count = TraceSamplingContexts.maxBytes / large.utf8.count + 8
        XCTAssertLessThan(count, TraceSamplingContexts.capacity, "more than the bytes allow, fewer than the count does")
        for index in 0..<count { buffer.setSamplingContext(["transaction": large], forTrace: TraceID(high: 10, low: UInt64(index))) }
        for (name, index) in [("oldest", 0), ("newest", count - 1)] { buffer.add(span: .test(name, trace: TraceID(high: 10, low: UInt64(index)))) }
        buffer.flush()
        var contexts: [String: [String: String]] = [:]
        for envelope in try walkEnvelopes(in: buffer.envelopesDirectory) {
            contexts[envelope.elements.first?["name"] as? String ?? ""] = envelope.header["trace"] as? [String: String]
        }
        XCTAssertEqual(contexts["oldest"]?["sample_rate"], "0.25", "forgotten: the buffer's own")
        XCTAssertEqual(contexts["newest"]?["transaction"], large)
    }

    /// A trace whose head's sampling context was set carries it (the `trace_id` always the trace's, the
    /// DSN's `public_key` if it has none, which Sentry requires; keys as in `baggage`, `sentry-` prefixed, are
    /// taken without the prefix); another trace carries the buffer's own; the oldest of more than `capacity`
    /// set is forgotten.
    func testATraceCarriesTheSamplingContextItsHeadFroze() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.tracesSampleRate = 0.25 })
        defer { buffer.close() }
        let continued = TraceID(high: 7, low: 7), own = TraceID(high: 8, low: 8)
        buffer.setSamplingContext(["trace_id": "not this", "public_key": "caller", "sample_rate": "0.5", "sample_rand": "0.123456",
                                   "sampled": "true", "transaction": "GET \"/cart\""], forTrace: continued)
        for index in 0..<TraceSamplingContexts.capacity { buffer.setSamplingContext(["sentry-n": "\(index)"], forTrace: TraceID(high: 9, low: UInt64(index))) }
        buffer.add(span: .test("continued", trace: continued))
        buffer.add(span: .test("own", trace: own))
        buffer.add(span: .test("latest", trace: TraceID(high: 9, low: UInt64(TraceSamplingContexts.capacity - 1))))
        buffer.flush()
        var contexts: [String: [String: String]] = [:]
        for envelope in try walkEnvelopes(in: buffer.envelopesDirectory) {
            contexts[envelope.elements.first?["name"] as? String ?? ""] = envelope.header["trace"] as? [String: String]
        }
        XCTAssertEqual(contexts["own"]?["sample_rate"], "0.25", "the buffer's own")
        XCTAssertEqual(contexts["own"]?["trace_id"], own.description)
        XCTAssertEqual(contexts["latest"], ["trace_id": TraceID(high: 9, low: UInt64(TraceSamplingContexts.capacity - 1)).description,
                                            "public_key": "a1b2c3d4e5f60718293a4b5c6d7e8f90", "n": "\(TraceSamplingContexts.capacity - 1)"])
        // The continued trace's was the oldest of capacity + 1 set: forgotten, so the buffer's own.
        XCTAssertEqual(contexts["continued"]?["sample_rate"], "0.25")
        buffer.setSamplingContext(["public_key": "caller", "transaction": "GET \"/cart\""], forTrace: continued)
        buffer.add(span: .test("again", trace: continued))
        buffer.flush()
        let again = try walkEnvelopes(in: buffer.envelopesDirectory).first { $0.elements.first?["name"] as? String == "again" }
        XCTAssertEqual(again?.header["trace"] as? [String: String],
                       ["trace_id": continued.description, "public_key": "caller", "transaction": "GET \"/cart\""])
        // A key given both ways: the unprefixed one, whatever the dictionary's order; an empty key: the DSN's.
        let both = TraceID(high: 11, low: 11)
        buffer.setSamplingContext(["sentry-sample_rate": "0.1", "sample_rate": "0.5", "sample_rand": "0.2", "sentry-sample_rand": "0.05",
                                   "public_key": ""], forTrace: both)
        buffer.add(span: .test("both", trace: both))
        buffer.flush()
        let header = try walkEnvelopes(in: buffer.envelopesDirectory).first { $0.elements.first?["name"] as? String == "both" }?.header
        XCTAssertEqual(header?["trace"] as? [String: String], ["trace_id": both.description, "public_key": "a1b2c3d4e5f60718293a4b5c6d7e8f90",
                                                               "sample_rate": "0.5", "sample_rand": "0.2"])
    }
}
