import CTelemetrySignals

/// Two record regions: callers append to the active one while the background queue forwards the other.
///
/// `append` is the hot path: a short lock, a bounds check, a copy. When the active region cannot take an
/// item (bytes, or the queued-log cap) and the other one is free, the roles swap on the spot, so a full
/// region never makes the caller wait. When the other region is still being forwarded, the item is
/// dropped and reported as `buffer_overflow` (see `BatchTally` for what that does to a span's trace).
///
/// Regions the crash handler writes out (FlushAll's, in memory) are `claimable`: each append marks itself
/// under way and checks the handler's claim first (`tb_appending_begin`), so no item is acknowledged after
/// the handler read its region; once claimed, appends are refused (until `tb_crash_settle` finds that the
/// process survived the signal).
final class RotatingRegions: @unchecked Sendable {
    private struct State {
        /// In line, not an array: an array's buffer would be one more cache line for every add to fetch.
        var tallies = (BatchTally(), BatchTally())
        var active = 0
        /// The inactive region holds records that are not yet forwarded.
        var pending = false
        var closed = false
        var ids = ItemIDSequence()

        /// A region's tally, in place: reading it out would copy it, and retain and release its list of cut
        /// traces, on every add.
        @inline(__always)
        mutating func tally<Result>(_ index: Int, _ body: (inout BatchTally) -> Result) -> Result {
            index == 0 ? body(&tallies.0) : body(&tallies.1)
        }
    }

    private let state = Locked(State())
    /// The regions: kept alive here, reached on the hot path through `unmanaged` (see `withRegion`).
    private let first: RecordRegion
    private let second: RecordRegion
    private let unmanaged: (Unmanaged<RecordRegion>, Unmanaged<RecordRegion>)
    private let maxLogs: Int
    private let maxSpans: Int
    /// For claimable regions: the appending thread while an append is under way, read by the crash handler.
    let appending: UnsafeMutablePointer<UInt>?

    /// Logs or spans that reach `maxLogs` or `maxSpans` in a region ask for a forward.
    init(_ first: RecordRegion, _ second: RecordRegion, maxLogs: Int, maxSpans: Int, claimable: Bool = false) {
        self.first = first
        self.second = second
        unmanaged = (.passUnretained(first), .passUnretained(second))
        self.maxLogs = maxLogs
        self.maxSpans = maxSpans
        appending = claimable ? .allocate(capacity: 1) : nil
        appending?.initialize(to: 0)
    }

    deinit { appending?.deallocate() }

    func append(_ item: EncodedItem) -> AppendOutcome {
        state.withLock { state in
            let active = state.active
            guard !state.closed, !state.tally(active, { $0.isCut(item) }) else { return .rejected(.bufferOverflow) }
            var rotated = false
            if !canTake(item, in: active, &state) {
                let other = active ^ 1
                guard !state.pending, !withRegion(active, \.isEmpty), canTake(item, in: other, &state) else {
                    state.tally(active) { $0.overflowed(item) }
                    return .rejected(.bufferOverflow)
                }
                state.active = other
                state.pending = true
                rotated = true
            }
            if let appending {
                tb_appending_begin(appending)
                // Claimed: the process is crashing, or survived a signal (then the claim goes here, once).
                guard !withRegion(state.active, \.isClaimed) || (tb_crash_settle() == 0 && !withRegion(state.active, \.isClaimed))
                else {
                    tb_appending_end(appending)
                    return .rejected(.internalSDKError)
                }
            }
            let id = state.ids.next()
            let wasEmpty = withRegion(state.active) { target in
                let wasEmpty = target.isEmpty
                target.append(category: item.category, id: id, payload: item.payload, payloadCRC: item.payloadCRC)
                return wasEmpty
            }
            if let appending { tb_appending_end(appending) }
            let limitReached = state.tally(state.active) { $0.count(item.category, maxLogs: maxLogs, maxSpans: maxSpans) }
            return .accepted(startTimer: wasEmpty, forwardNow: rotated || limitReached)
        }
    }

    /// Region 0 or 1, borrowed: `self` keeps both alive, so the hot path need not retain and release one
    /// on every add (as reading it from an array, or returning it, does).
    @inline(__always)
    private func withRegion<Result>(_ index: Int, _ body: (RecordRegion) -> Result) -> Result {
        (index == 0 ? unmanaged.0 : unmanaged.1)._withUnsafeGuaranteedRef(body)
    }

    @inline(__always)
    private func canTake(_ item: EncodedItem, in index: Int, _ state: inout State) -> Bool {
        withRegion(index) { $0.fits(payloadCount: item.payload.count) } && state.tally(index) { $0.hasRoom(for: item.category) }
    }

    /// The region to forward next (the pending one, else the active one after a swap); `nil` when
    /// nothing is held or, with `dueOnly`, when no region is pending and the active one has not reached a
    /// limit (a wake-up for a limit that a flush has forwarded since). Background queue; pair with
    /// `endForwarding`.
    func beginForwarding(dueOnly: Bool = false) -> (index: Int, records: UnsafeRawBufferPointer)? {
        state.withLock { state in
            if !state.pending {
                guard !withRegion(state.active, \.isEmpty) else { return nil }
                if dueOnly, !state.tally(state.active, { $0.reachedLimit(maxLogs: maxLogs, maxSpans: maxSpans) }) { return nil }
                state.active ^= 1
                state.pending = true
            }
            let index = state.active ^ 1
            return (index, withRegion(index, \.records))
        }
    }

    /// Empties the forwarded region and makes it available again.
    ///
    /// - Throws: `CrashInProgress` if the crash handler claimed the region; it stays pending.
    func endForwarding() throws {
        try state.withLock { state in
            let index = state.active ^ 1
            try region(index).reset()
            state.tally(index) { $0 = BatchTally() }
            state.pending = false
        }
    }

    /// Calls `body` with every record the regions still hold (for counting what `close()` could not store).
    func forEachHeldRecord(_ body: (RecordFraming.Record) -> Void) {
        state.withLock { _ in
            for region in [first, second] { RecordFraming.forEachRecord(in: region.records, body) }
        }
    }

    /// Zeroes both regions past their records, 64 KiB per hold of the lock. Background queue (no reset
    /// meanwhile).
    func zeroUnused() {
        for region in [first, second] {
            var cursor = 0
            while let next = state.withLock({ _ in region.zeroUnused(from: cursor, limit: 64 << 10) }) { cursor = next }
        }
    }

    /// Gives both regions' unused heap pages back (see `RecordRegion.releaseUnusedPages`).
    func releaseUnusedPages() {
        state.withLock { _ in
            for region in [first, second] { region.releaseUnusedPages() }
        }
    }

    /// Region 0 or 1.
    func region(_ index: Int) -> RecordRegion { index == 0 ? first : second }

    /// Both regions, for the crash handler, which reads them lock-free up to their committed lengths.
    var all: [RecordRegion] { [first, second] }

    /// The region callers append to now.
    var activeIndex: Int { state.withLock { $0.active } }

    /// Rejects every later append.
    func close() { state.withLock { $0.closed = true } }

    var isEmpty: Bool { state.withLock { !$0.pending && withRegion($0.active, \.isEmpty) } }

    /// Items in both regions.
    var itemCount: Int { state.withLock { $0.tallies.0.items + $0.tallies.1.items } }
}
