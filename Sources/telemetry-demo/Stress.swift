import Foundation
import TelemetryBuffer

/// `stress`: adds N logs `item <seq>` (and with --spans one span per item), printing `ack <seq>` once
/// every `add` of that seq has returned with its item held, or `drop <seq> log|span|log span` naming
/// what was dropped; then closes the buffer
/// (with --no-close it just returns from main: the graceful-exit hook must forward the items). With
/// --exhaust-descriptors, no file descriptor is left once the buffer exists. With --remove-at N, it calls
/// `removeAllData()` before adding item N and prints `removed` once that returned.
enum Stress {
    static func run(_ arguments: Arguments) throws {
        let directory = URL(fileURLWithPath: try arguments.required("dir"))
        let count = try arguments.integer("count", default: 1000)
        let withSpans = arguments.flag("spans")
        let removeAt = try arguments.integer("remove-at", default: -1)
        let buffer = try TelemetryBuffer(options: options(arguments, directory: directory))
        if arguments.flag("exhaust-descriptors") { exhaustDescriptors() }
        var trace = TraceID.random()
        var segment = SpanID.random()
        for seq in 0..<count {
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
                if seq % 100 == 0 { trace = TraceID.random(); segment = SpanID.random() }
                let now = Date()
                let isSegment = seq % 100 == 0
                let span = Span(traceID: trace, spanID: isSegment ? segment : SpanID.random(),
                                parentSpanID: isSegment ? nil : segment, name: "item \(seq)",
                                isSegment: isSegment, startTimestamp: now.addingTimeInterval(-0.01),
                                endTimestamp: now, attributes: ["seq": .integer(Int64(seq))])
                if !buffer.add(span: span) { dropped.append("span") }
            }
            // Unbuffered, so a parent killing this process has seen every ack that was printed.
            let line = dropped.isEmpty ? "ack \(seq)\n" : "drop \(seq) \(dropped.joined(separator: " "))\n"
            FileHandle.standardOutput.write(Data(line.utf8))
        }
        if !arguments.flag("no-close") { buffer.close() }
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
