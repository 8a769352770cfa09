/// Two record regions: callers append to the active one while the background queue forwards the other.
///
/// `append` is the hot path: a short lock, a bounds check, a copy. When the active region cannot take an
/// item (bytes, or the queued-log cap) and the other one is free, the roles swap on the spot, so a full
/// region never makes the caller wait. When the other region is still being forwarded, the item is
/// dropped and reported as `buffer_overflow` (see `BatchTally` for what that does to a span's trace).
final class RotatingRegions: @unchecked Sendable {
    private struct State {
        var tallies = [BatchTally(), BatchTally()]
        var active = 0
        /// The inactive region holds records that are not yet forwarded.
        var pending = false
        var closed = false
        var ids = ItemIDSequence()
    }

    private let state = Locked(State())
    private let regions: [RecordRegion]
    private let maxLogs: Int
    private let maxSpans: Int

    /// Logs or spans that reach `maxLogs` or `maxSpans` in a region ask for a forward.
    init(_ first: RecordRegion, _ second: RecordRegion, maxLogs: Int, maxSpans: Int) {
        regions = [first, second]
        self.maxLogs = maxLogs
        self.maxSpans = maxSpans
    }

    func append(_ item: EncodedItem) -> AppendOutcome {
        state.withLock { state in
            guard !state.closed, !state.tallies[state.active].isCut(item) else { return .rejected(.bufferOverflow) }
            var rotated = false
            if !canTake(item, in: state.active, state) {
                let other = state.active ^ 1
                guard !state.pending, !regions[state.active].isEmpty, canTake(item, in: other, state) else {
                    state.tallies[state.active].overflowed(item)
                    return .rejected(.bufferOverflow)
                }
                state.active = other
                state.pending = true
                rotated = true
            }
            let region = regions[state.active]
            let wasEmpty = region.isEmpty
            region.append(category: item.category, id: state.ids.next(), payload: item.payload, payloadCRC: item.payloadCRC)
            let limitReached = state.tallies[state.active].count(item.category, maxLogs: maxLogs, maxSpans: maxSpans)
            return .accepted(startTimer: wasEmpty, forwardNow: rotated || limitReached)
        }
    }

    @inline(__always)
    private func canTake(_ item: EncodedItem, in index: Int, _ state: borrowing State) -> Bool {
        regions[index].fits(payloadCount: item.payload.count) && state.tallies[index].hasRoom(for: item.category)
    }

    /// The region to forward next (the pending one, else the active one after a swap); `nil` when
    /// nothing is held. Background queue; pair with `endForwarding`.
    func beginForwarding() -> (index: Int, records: UnsafeRawBufferPointer)? {
        state.withLock { state in
            if !state.pending {
                guard !regions[state.active].isEmpty else { return nil }
                state.active ^= 1
                state.pending = true
            }
            let index = state.active ^ 1
            return (index, regions[index].records)
        }
    }

    /// Empties the forwarded region and makes it available again.
    func endForwarding() {
        state.withLock { state in
            let index = state.active ^ 1
            regions[index].reset()
            state.tallies[index] = BatchTally()
            state.pending = false
        }
    }

    /// Both regions, for the crash handler, which reads them lock-free up to their committed lengths.
    var all: [RecordRegion] { regions }

    /// The region callers append to now.
    var activeIndex: Int { state.withLock { $0.active } }

    /// Rejects every later append.
    func close() { state.withLock { $0.closed = true } }

    var isEmpty: Bool { state.withLock { !$0.pending && regions[$0.active].isEmpty } }

    /// Items in both regions.
    var itemCount: Int { state.withLock { $0.tallies.reduce(0) { $0 + $1.items } } }
}
