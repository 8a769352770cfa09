/// Two record regions: callers append to the active one while the background queue forwards the other.
///
/// `append` is the hot path: a short lock, a bounds check, a copy. When the active region cannot take an
/// item (bytes, or the queued-log cap) and the other one is free, the roles swap on the spot, so a full
/// region never makes the caller wait. When the other region is still being forwarded, the item is
/// dropped and reported as `buffer_overflow` (see `BatchTally` for what that does to a span's trace).
final class RotatingRegions: @unchecked Sendable {
    private let lock = Lock()
    private let regions: [RecordRegion]
    private let maxLogs: Int
    private let maxSpans: Int
    private var tallies = [BatchTally(), BatchTally()]
    private var active = 0
    /// The inactive region holds records that are not yet forwarded.
    private var pending = false
    private var closed = false
    private var ids = ItemIDSequence()

    /// Logs or spans that reach `maxLogs` or `maxSpans` in a region ask for a forward.
    init(_ first: RecordRegion, _ second: RecordRegion, maxLogs: Int, maxSpans: Int) {
        regions = [first, second]
        self.maxLogs = maxLogs
        self.maxSpans = maxSpans
    }

    func append(_ item: EncodedItem) -> AppendOutcome {
        lock.lock()
        defer { lock.unlock() }
        guard !closed, !tallies[active].isCut(item) else { return .rejected(.bufferOverflow) }
        var rotated = false
        if !canTake(item, in: active) {
            guard !pending, !regions[active].isEmpty, canTake(item, in: active ^ 1) else {
                tallies[active].overflowed(item)
                return .rejected(.bufferOverflow)
            }
            active ^= 1
            pending = true
            rotated = true
        }
        let region = regions[active]
        let wasEmpty = region.isEmpty
        region.append(category: item.category, id: ids.next(), payload: item.payload, payloadCRC: item.payloadCRC)
        let limitReached = tallies[active].count(item.category, maxLogs: maxLogs, maxSpans: maxSpans)
        return .accepted(startTimer: wasEmpty, forwardNow: rotated || limitReached)
    }

    @inline(__always)
    private func canTake(_ item: EncodedItem, in index: Int) -> Bool {
        regions[index].fits(payloadCount: item.payload.count) && tallies[index].hasRoom(for: item.category)
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
            tallies[index] = BatchTally()
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
    var itemCount: Int { lock.withLock { tallies.reduce(0) { $0 + $1.items } } }
}
