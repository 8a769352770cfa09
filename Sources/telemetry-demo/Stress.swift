import Foundation
import TelemetryBuffer

/// `stress`: adds N logs `item <seq>` (with --spans one span per item, with --metrics one counter `item` with
/// the attribute `seq`), printing `ack <seq>` once
/// every `add` of that seq has returned with its item held, or `drop <seq> log|span|log span` naming
/// what was dropped; then closes the buffer
/// (with --no-close it just returns from main: the graceful-exit hook must forward the items; with
/// --exit-holding it calls `exit(0)` while it still holds the buffer, as an app does that never closes it;
/// after `close()`, it prints `lost-counted=<n>` if the buffer counted items as lost).
/// With --pace-us N it waits N µs after each item (with a short --io-sync-ms, the IO caches keep up with the
/// lists then, as in an app). With
/// --exhaust-descriptors, no file descriptor is left once the buffer exists. With --remove-at N, it calls
/// `removeAllData()` before adding item N and prints `removed` once that returned. With --threads T, T
/// threads add at once, thread t the items t, t+T, t+2T… (each prints its own lines, in its order; no
/// removal then).
enum Stress {
    static func run(_ arguments: Arguments) throws {
        let directory = URL(fileURLWithPath: try arguments.required("dir"))
        let count = try arguments.integer("count", default: 1000)
        let withSpans = arguments.flag("spans"), withMetrics = arguments.flag("metrics")
        let removeAt = try arguments.integer("remove-at", default: -1)
        let pace = useconds_t(try arguments.integer("pace-us", default: 0))
        let buffer = try TelemetryBuffer(options: options(arguments, directory: directory))
        if arguments.flag("exhaust-descriptors") { exhaustDescriptors() }
        let threads = try arguments.integer("threads", default: 1)
        guard threads > 1 else {
            try add(stride(from: 0, to: count, by: 1), to: buffer, spans: withSpans, metrics: withMetrics, removeAt: removeAt, pace: pace)
            if arguments.flag("exit-holding") { withExtendedLifetime(buffer) { exit(0) } }
            if !arguments.flag("no-close") { close(buffer) }
            return
        }
        let done = DispatchGroup()
        for thread in 0..<threads {
            done.enter()
            Thread {
                try? add(stride(from: thread, to: count, by: threads), to: buffer, spans: withSpans, metrics: withMetrics, removeAt: -1,
                         pace: pace)
                done.leave()
            }.start()
        }
        done.wait()
        if !arguments.flag("no-close") { close(buffer) }
    }

    /// Closes the buffer, then prints `lost-counted=<n>` if it counted n acknowledged items as lost
    /// (`internal_sdk_error`: held in memory, and no file could take them).
    private static func close(_ buffer: TelemetryBuffer) {
        buffer.close()
        let lost = buffer.stats().drops.filter { $0.key.hasPrefix("internal_sdk_error/") && !$0.key.hasSuffix("_byte") }
            .reduce(0) { $0 + $1.value }
        if lost > 0 { FileHandle.standardOutput.write(Data("lost-counted=\(lost)\n".utf8)) }
    }

    /// Adds the items `seqs`, one log each (with `withSpans` a span, with `withMetrics` a counter `item`
    /// with the attribute `seq`), printing a line per seq.
    private static func add(
        _ seqs: StrideTo<Int>, to buffer: TelemetryBuffer, spans withSpans: Bool, metrics withMetrics: Bool, removeAt: Int,
        pace: useconds_t
    ) throws {
        var trace = TraceID.random()
        var segment = SpanID.random()
        for (index, seq) in seqs.enumerated() {
            if seq == removeAt {
                try buffer.removeAllData()
                FileHandle.standardOutput.write(Data("removed\n".utf8))
            }
            var dropped: [String] = []
            if !buffer.add(log: Log(level: .info, body: "item \(seq)", traceID: trace,
                                    attributes: ["seq": .integer(Int64(seq))])) {
                dropped.append("log")
            }
            if withSpans {
                // A new trace every 100 items, so envelopes hold several traces' spans.
                let isSegment = index % 100 == 0
                if isSegment { trace = TraceID.random(); segment = SpanID.random() }
                let now = Date()
                let span = Span(traceID: trace, spanID: isSegment ? segment : SpanID.random(),
                                parentSpanID: isSegment ? nil : segment, name: "item \(seq)",
                                isSegment: isSegment, startTimestamp: now.addingTimeInterval(-0.01),
                                endTimestamp: now, attributes: ["seq": .integer(Int64(seq))])
                if !buffer.add(span: span) { dropped.append("span") }
            }
            if withMetrics, !buffer.add(metric: .counter("item", attributes: ["seq": .integer(Int64(seq))])) {
                dropped.append("metric")
            }
            // Unbuffered, so a parent killing this process has seen every ack that was printed.
            let line = dropped.isEmpty ? "ack \(seq)\n" : "drop \(seq) \(dropped.joined(separator: " "))\n"
            FileHandle.standardOutput.write(Data(line.utf8))
            if pace > 0 { usleep(pace) }
        }
    }

    /// Lowers the soft `RLIMIT_NOFILE` to 256 and opens `/dev/null` until no descriptor is left, for the
    /// rest of the process: every file the buffer opens from now on fails with `EMFILE`.
    private static func exhaustDescriptors() {
        var limit = rlimit()
        getrlimit(resourceLimit, &limit)
        limit.rlim_cur = min(limit.rlim_cur, 256)
        setrlimit(resourceLimit, &limit)
        while open("/dev/null", O_RDONLY) >= 0 {}
    }

    #if os(Linux)
    private static let resourceLimit = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
    #else
    private static let resourceLimit = RLIMIT_NOFILE
    #endif
}
