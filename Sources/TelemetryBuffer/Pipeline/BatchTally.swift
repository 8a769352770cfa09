/// What one batch holds (a region of `RotatingRegions`, or FileStreamCache's `cache` file), and the rules
/// every strategy shares: the per-signal limits that end a batch, a signal's cap (the logs spec's 1000
/// queued logs), both from `BatchLimits`, and the overflow rule for spans.
///
/// The overflow rule: a span dropped for lack of room cuts its trace for the rest of the batch, so later
/// spans of that trace are dropped too and the trace ends at the overflow instead of arriving with holes.
/// (The span-buffer spec drops a whole trace; spans already accepted are kept, because `add` acknowledged
/// them.) A batch remembers at most 16 cut traces.
struct BatchTally {
    private static let maxCutTraces = 16
    /// Items of each signal, by its category byte (1 in slot 0): 16-bit and in line, so that
    /// `RotatingRegions`' state, with two tallies, fits one cache line (a batch holds at most
    /// `maxBatchBytes`, 1 MiB, of records, each over 25 bytes: fewer than 2^16).
    private var counts: (UInt16, UInt16, UInt16, UInt16) = (0, 0, 0, 0)
    private var cutTraces: [TraceID] = []

    /// The largest category byte the counts have room for (1 to 4; checked by `FormatAgreementTests`).
    static let maxSignals = 4

    /// Items of `category` the batch holds.
    @inline(__always)
    func count(of category: ItemCategory) -> Int {
        withUnsafeBytes(of: counts) { Int($0.load(fromByteOffset: (Int(category.rawValue) - 1) * 2, as: UInt16.self)) }
    }

    var items: Int { Int(counts.0) + Int(counts.1) + Int(counts.2) + Int(counts.3) }

    /// Whether the item belongs to a trace an earlier overflow in this batch cut.
    @inline(__always)
    func isCut(_ item: EncodedItem) -> Bool {
        guard let trace = item.traceID, !cutTraces.isEmpty else { return false }
        return cutTraces.contains(trace)
    }

    /// Whether the batch may take another item of `category` (its signal's cap; whether the bytes fit is
    /// the caller's to say).
    @inline(__always)
    func hasRoom(for category: ItemCategory, limits: BatchLimits) -> Bool { count(of: category) < limits.cap(category) }

    /// Whether the batch holds as many items of a signal as a batch may (what `count` reported once).
    func reachedLimit(_ limits: BatchLimits) -> Bool {
        (1...UInt8(Self.maxSignals)).contains { byte in
            let category = ItemCategory(byte: byte)
            return count(of: category) >= limits[category]
        }
    }

    /// Notes that `item` was dropped for lack of room: a span cuts its trace.
    mutating func overflowed(_ item: EncodedItem) {
        if let trace = item.traceID, cutTraces.count < Self.maxCutTraces { cutTraces.append(trace) }
    }

    /// Counts an accepted item; returns whether it brought its signal to its limit.
    @inline(__always)
    mutating func count(_ category: ItemCategory, limits: BatchLimits) -> Bool {
        let count = withUnsafeMutableBytes(of: &counts) { counts in
            let offset = (Int(category.rawValue) - 1) * 2
            let count = counts.load(fromByteOffset: offset, as: UInt16.self) &+ 1
            counts.storeBytes(of: count, toByteOffset: offset, as: UInt16.self)
            return Int(count)
        }
        return count == limits[category]
    }
}
