/// Two record regions: callers append to the active one while the background queue forwards the other.
///
/// `append` is the hot path: a short lock, a bounds check, a copy. When the active region cannot take an
/// item (bytes, or the queued-log cap) and the other one is free, the roles swap on the spot, so a full
/// region never makes the caller wait. When the other region is still being forwarded, the item is
/// dropped and reported as `buffer_overflow`. A dropped span also closes its trace for the rest of the
/// region: later spans of that trace are dropped too, so the trace is cut at the overflow instead of
/// being sent with holes. (The span-buffer spec drops a whole trace; spans already accepted are kept
/// here, because `add` acknowledged them.)
final class RotatingRegions: @unchecked Sendable {
    struct Limits {
        /// Logs that trigger a forward.
        var logs: Int
        /// Spans that trigger a forward.
        var spans: Int
        /// The most logs a region holds (the logs spec's hard cap of 1000 queued).
        var queuedLogs = 1000
    }

    private struct Tally {
        var logs = 0
        var spans = 0
        /// Traces closed by an overflow: their later spans are dropped (at most `maxDroppedTraces`).
        var droppedTraces: [TraceID] = []
    }

    private static let maxDroppedTraces = 16
    private let lock = Lock()
    private let regions: [RecordRegion]
    private let limits: Limits
    private var tallies = [Tally(), Tally()]
    private var active = 0
    /// The inactive region holds records that are not yet forwarded.
    private var pending = false
    private var closed = false
    private let nonce = UInt64.random(in: .min ... .max)
    private var sequence: UInt64 = 0

    init(_ first: RecordRegion, _ second: RecordRegion, limits: Limits) {
        regions = [first, second]
        self.limits = limits
    }

    func append(_ item: EncodedItem) -> AppendOutcome {
        lock.lock()
        defer { lock.unlock() }
        guard !closed else { return .rejected(.bufferOverflow) }
        if let trace = item.traceID, !tallies[active].droppedTraces.isEmpty,
           tallies[active].droppedTraces.contains(trace) {
            return .rejected(.bufferOverflow)
        }
        var rotated = false
        if !canTake(item, in: active) {
            guard !pending, !regions[active].isEmpty, canTake(item, in: active ^ 1) else {
                if let trace = item.traceID, tallies[active].droppedTraces.count < Self.maxDroppedTraces {
                    tallies[active].droppedTraces.append(trace)
                }
                return .rejected(.bufferOverflow)
            }
            active ^= 1
            pending = true
            rotated = true
        }
        let region = regions[active]
        let wasEmpty = region.isEmpty
        region.append(category: item.category, id: ItemID(nonce: nonce, sequence: sequence),
                      payload: item.payload, payloadCRC: item.payloadCRC)
        sequence &+= 1
        let limitReached: Bool
        switch item.category {
        case .log:
            tallies[active].logs += 1
            limitReached = tallies[active].logs == limits.logs
        case .span:
            tallies[active].spans += 1
            limitReached = tallies[active].spans == limits.spans
        }
        return .accepted(startTimer: wasEmpty, forwardNow: rotated || limitReached)
    }

    @inline(__always)
    private func canTake(_ item: EncodedItem, in index: Int) -> Bool {
        regions[index].fits(payloadCount: item.payload.count)
            && (item.category != .log || tallies[index].logs < limits.queuedLogs)
    }

    /// The region to forward next (the pending one, else the active one after a swap); `nil` when
    /// nothing is held. Background queue; pair with `endForwarding`.
    func beginForwarding() -> (index: Int, records: UnsafeRawBufferPointer)? {
        lock.withLock {
            if !pending {
                guard !regions[active].isEmpty else { return nil }
                active ^= 1
                pending = true
            }
            let index = active ^ 1
            return (index, regions[index].records)
        }
    }

    /// Empties the forwarded region and makes it available again.
    func endForwarding() {
        lock.withLock {
            let index = active ^ 1
            regions[index].reset()
            tallies[index] = Tally()
            pending = false
        }
    }

    /// Both regions, for the crash handler, which reads them lock-free up to their committed lengths.
    var all: [RecordRegion] { regions }

    /// The region callers append to now.
    var activeIndex: Int { lock.withLock { active } }

    /// Rejects every later append.
    func close() { lock.withLock { closed = true } }

    var isEmpty: Bool { lock.withLock { !pending && regions[active].isEmpty } }

    /// Items in both regions.
    var itemCount: Int { lock.withLock { tallies.reduce(0) { $0 + $1.logs + $1.spans } } }
}
