import Foundation
import TelemetryBuffer

/// The default command: a short tour of the library in a temporary folder.
enum Tour {
    static func run() throws {
        let folder = FileManager.default.temporaryDirectory
            .appendingPathComponent("telemetry-demo-\(UInt32.random(in: .min ... .max))")
        var options = Options(dsn: demoDSN)
        options.cacheDirectory = folder
        options.upload = false  // the demo DSN is not a real project
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
        // The second of those forwards runs on the background queue while the spans below are added, and
        // could take the first span with it, apart from its trace; flushing first keeps the trace together.
        buffer.flush()
        print("flush() returned: the last 5 logs are on disk too")
        let request = SpanID.random()
        buffer.add(span: Span(traceID: trace, spanID: request, parentSpanID: checkout, name: "GET /cart",
                              status: .error, isSegment: false, startTimestamp: start, endTimestamp: Date(),
                              attributes: ["sentry.op": "http.client", "http.response.status_code": 503]))
        buffer.add(span: Span(traceID: trace, spanID: checkout, name: "Checkout", isSegment: true,
                              startTimestamp: start, endTimestamp: Date(), op: "ui.load", source: .component))
        let other = TraceID.random()
        buffer.add(span: Span(traceID: other, spanID: SpanID.random(), name: "Sync", isSegment: true,
                              startTimestamp: start, endTimestamp: Date(), attributes: ["sentry.op": "app.sync"]))
        print("added 3 spans in 2 traces")
        buffer.add(metric: .counter("orders.processed", value: 45, traceID: trace))
        buffer.add(metric: .gauge("cart.items", value: 3, traceID: trace))
        buffer.add(metric: .distribution("checkout.duration", value: 412.75, unit: "millisecond", traceID: trace))
        print("added 3 metrics (a counter, a gauge, a distribution)")
        buffer.flush()
        print("flush() returned: everything is on disk\n")

        let envelopes = try StoredEnvelope.list(in: buffer.envelopesDirectory)
        print("envelopes/ (\(envelopes.count) files, oldest first):")
        for envelope in envelopes { print("  " + envelope.summary) }
        buffer.close()
        print("\nclose() returned; adds are now rejected: add → \(buffer.add(log: Log(level: .info, body: "late", traceID: trace)))")
        try crashAndRecover(in: folder.appendingPathComponent("crash"))
        print("\ninspect it with: swift run telemetry-demo inspect --dir \(folder.path)")
    }

    /// Runs this program as a child that adds items and crashes, then recovers them here, printing what
    /// was where at each moment.
    static func crashAndRecover(in folder: URL) throws {
        print("\nCrash and recovery (DoubleRotatingBuffer): a child process adds 20 logs and 20 spans, then dereferences nil.\n")
        let start = Date()
        func elapsed() -> String { String(format: "%6.0f ms", Date().timeIntervalSince(start) * 1000) }
        var rows: [[String]] = []
        let started = elapsed()

        let child = Process()
        child.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
        child.arguments = ["crash", "--kind", "segv", "--dir", folder.path, "--after", "20", "--spans"]
        let output = Pipe(), errors = Pipe()
        child.standardOutput = output
        child.standardError = errors
        try child.run()
        let acks = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            .split(separator: "\n").filter { $0.hasPrefix("ack ") }.count
        let backtrace = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        child.waitUntilExit()
        let bufferFolder = try FileManager.default.contentsOfDirectory(atPath: folder.path)
            .filter { $0.count == 40 }.map { folder.appendingPathComponent($0).appendingPathComponent("telemetry-buffer") }.first
        rows.append([started, "child starts; add × \(acks * 2) return (ack 0…\(acks - 1))", "\(acks * 2) items",
                     "crash-safe-list-1 (mapped)", "yes: in the page cache"])
        let signal = child.terminationReason == .uncaughtSignal ? "signal \(child.terminationStatus)" : "exit \(child.terminationStatus)"
        let crashedLines = backtrace.split(separator: "\n").count
        rows.append([elapsed(), "child: null dereference → handler → chained → died (\(signal))", "gone",
                     files(in: bufferFolder), "yes"])
        rows.append(["", "  (the Swift runtime's backtrace still printed: \(crashedLines) lines)", "", "", ""])

        var options = Options(dsn: demoDSN)
        options.cacheDirectory = folder
        options.upload = false  // the demo DSN is not a real project
        let buffer = try TelemetryBuffer(options: options)
        let found = buffer.recovery
        rows.append([elapsed(), "this process opens the buffer: start-up recovery", "",
                     "\(found.items) items, \(found.duplicates) duplicate copies skipped", "yes"])
        buffer.close()
        let envelopes = try StoredEnvelope.list(in: buffer.envelopesDirectory)
        let logs = envelopes.reduce(0) { $0 + $1.count(of: "log") }, spans = envelopes.reduce(0) { $0 + $1.count(of: "span") }
        rows.append([elapsed(), "envelopes/ after recovery", "", "\(envelopes.count) envelopes: \(logs) logs, \(spans) spans",
                     logs == acks && spans == acks ? "all \(acks * 2) delivered once" : "MISMATCH"])
        printTable(["time", "event", "memory", "disk", "safe?"], rows)
    }

    private static func files(in folder: URL?) -> String {
        guard let folder, let names = try? FileManager.default.contentsOfDirectory(atPath: folder.path) else { return "?" }
        return names.filter { $0.hasPrefix("crash-safe-list") || $0.hasPrefix("detected-termination") }.sorted()
            .joined(separator: ", ")
    }

    private static func printTable(_ header: [String], _ rows: [[String]]) {
        let widths = header.indices.map { column in ([header] + rows).map { $0[column].count }.max() ?? 0 }
        func line(_ cells: [String]) -> String {
            zip(cells, widths).map { $0.padding(toLength: $1, withPad: " ", startingAt: 0) }.joined(separator: " │ ")
        }
        print(line(header))
        print(widths.map { String(repeating: "─", count: $0) }.joined(separator: "─┼─"))
        rows.forEach { print(line($0)) }
    }
}
