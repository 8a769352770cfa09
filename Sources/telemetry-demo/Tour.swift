import Foundation
import TelemetryBuffer

/// The default command: a short tour of the library in a temporary folder.
enum Tour {
    static func run() throws {
        let folder = FileManager.default.temporaryDirectory
            .appendingPathComponent("telemetry-demo-\(UInt32.random(in: .min ... .max))")
        var options = Options(dsn: demoDSN)
        options.cacheDirectory = folder
        options.environment = "demo"
        options.release = "telemetry-demo@\(TelemetryBuffer.version)"
        options.maxLogsPerBatch = 20
        let buffer = try TelemetryBuffer(options: options)
        print("TelemetryBuffer \(TelemetryBuffer.version), strategy \(options.strategy.rawValue)")
        print("folder: \(buffer.directory.path)")
        let bufferFiles = (try? FileManager.default.contentsOfDirectory(atPath: buffer.directory.appendingPathComponent("telemetry-buffer").path))?.sorted() ?? []
        print("telemetry-buffer/: \(bufferFiles.joined(separator: ", "))\n")

        let trace = TraceID.random()
        let checkout = SpanID.random()
        let start = Date()
        for index in 0..<45 {
            buffer.add(log: Log(level: index % 10 == 9 ? .warn : .info, body: "Processed order \(index) \"fast\"",
                                traceID: trace, spanID: checkout,
                                attributes: ["order.index": .integer(Int64(index)), "order.express": .boolean(index % 2 == 0)]))
        }
        print("added 45 logs (maxLogsPerBatch 20: two batches forwarded on their own)")
        let request = SpanID.random()
        buffer.add(span: Span(traceID: trace, spanID: request, parentSpanID: checkout, name: "GET /cart",
                              status: .error, isSegment: false, startTimestamp: start, endTimestamp: Date(),
                              attributes: ["sentry.op": "http.client", "http.response.status_code": 503]))
        buffer.add(span: Span(traceID: trace, spanID: checkout, name: "Checkout", isSegment: true,
                              startTimestamp: start, endTimestamp: Date(),
                              attributes: ["sentry.op": "ui.load", "sentry.span.source": "component"]))
        let other = TraceID.random()
        buffer.add(span: Span(traceID: other, spanID: SpanID.random(), name: "Sync", isSegment: true,
                              startTimestamp: start, endTimestamp: Date(), attributes: ["sentry.op": "app.sync"]))
        print("added 3 spans in 2 traces")
        buffer.flush()
        print("flush() returned: everything is on disk\n")

        let envelopes = try StoredEnvelope.list(in: buffer.envelopesDirectory)
        print("envelopes/ (\(envelopes.count) files, oldest first):")
        for envelope in envelopes { print("  " + envelope.summary) }
        buffer.close()
        print("\nclose() returned; adds are now rejected: add → \(buffer.add(log: Log(level: .info, body: "late", traceID: trace)))")
        print("inspect it with: swift run telemetry-demo inspect --dir \(folder.path)")
    }
}
