/// What one batch holds (a region of `RotatingRegions`, or FileStreamCache's `cache` file), and the rules
/// every strategy shares: the per-category limits that end a batch, the logs spec's cap of 1000 queued
/// logs, and the overflow rule for spans.
///
/// The overflow rule: a span dropped for lack of room cuts its trace for the rest of the batch, so later
/// spans of that trace are dropped too and the trace ends at the overflow instead of arriving with holes.
/// (The span-buffer spec drops a whole trace; spans already accepted are kept, because `add` acknowledged
/// them.) A batch remembers at most 16 cut traces.
struct BatchTally {
    private static let maxQueuedLogs = 1000
    private static let maxCutTraces = 16
    /// 32-bit, so that `RotatingRegions`' state, with two tallies, fits one cache line: a batch holds at
    /// most `maxBatchBytes` (1 MiB) of records, each over 25 bytes.
    private var logCount: Int32 = 0
    private var spanCount: Int32 = 0
    private var cutTraces: [TraceID] = []

    var logs: Int { Int(logCount) }
    var spans: Int { Int(spanCount) }
    var items: Int { logs + spans }

    /// Whether the item belongs to a trace an earlier overflow in this batch cut.
    @inline(__always)
    func isCut(_ item: EncodedItem) -> Bool {
        guard let trace = item.traceID, !cutTraces.isEmpty else { return false }
        return cutTraces.contains(trace)
    }

    /// Whether the batch may take another item of `category` (whether the bytes fit is the caller's to say).
    @inline(__always)
    func hasRoom(for category: ItemCategory) -> Bool { category != .log || logs < Self.maxQueuedLogs }

    /// Whether the batch holds as many logs or spans as a batch may (what `count` reported once).
    func reachedLimit(maxLogs: Int, maxSpans: Int) -> Bool { logs >= maxLogs || spans >= maxSpans }

    /// Notes that `item` was dropped for lack of room: a span cuts its trace.
    mutating func overflowed(_ item: EncodedItem) {
        if let trace = item.traceID, cutTraces.count < Self.maxCutTraces { cutTraces.append(trace) }
    }

    /// Counts an accepted item; returns whether it brought its category to its limit.
    @inline(__always)
    mutating func count(_ category: ItemCategory, maxLogs: Int, maxSpans: Int) -> Bool {
        switch category {
        case .log:
            logCount += 1
            return logs == maxLogs
        case .span:
            spanCount += 1
            return spans == maxSpans
        }
    }
}
