import CTelemetrySignals

/// Two record regions: callers append to the active one while the background queue forwards the other.
///
/// `append` is the hot path: a short lock, a bounds check, a copy. When the active region cannot take an
/// item (bytes, or the queued-log cap) and the other one is free, the roles swap on the spot, so a full
/// region never makes the caller wait. When the other region is still being forwarded, the item is
/// dropped and reported as `buffer_overflow` (see `BatchTally` for what that does to a span's trace).
///
/// Where it can (`copiesOutsideTheLock`), an append only reserves its record's place under the lock, then
/// writes the record and commits it (`RecordRegion.commit`) after releasing it: threads adding at once
/// copy side by side, and the lock moves only its state between them. `append` returns once the record
/// is committed, so what it acknowledges survives a crash as before. A forward waits for the commits of
/// its region (`beginForwarding`). In regions with lanes, each thread reserves in the lane its number
/// picks (`tb_thread_lane`), or in lane 0 when its own is full: two threads adding at once then neither
/// wait for each other's commits nor write into the same cache lines. The item's sequence, taken under
/// the lock with its place, keeps the order of arrival across lanes (see `RecordLanes`). Elsewhere the
/// record is copied and committed under the lock:
///
/// * Regions the crash handler writes out (FlushAll's, in memory) are `claimable`: each append marks
///   itself under way and checks the handler's claim first (`tb_appending_begin`), so no item is
///   acknowledged after the handler read its region; once claimed, appends are refused (until a
///   forward settles the handler, on the background queue, if the process survived the signal).
/// * On Apple platforms, where waiting for the lock lends the waiter's priority to the holder
///   (`os_unfair_lock`), and waiting for another thread's commit would not.
///
/// `@unchecked Sendable`: the regions are raw memory, whose places are handed out under `state`'s lock
/// (as above), and `appending` is read and written only atomically.
final class RotatingRegions: @unchecked Sendable {
    private struct State {
        /// In line, not an array: an array's buffer would be one more cache line for every add to fetch.
        var tallies = (BatchTally(), BatchTally())
        /// The lengths of the regions' lanes (region 0's two, then region 1's) with every reserved record:
        /// ahead of the committed lengths while records are being written outside the lock, equal to them
        /// otherwise. 32-bit (a region holds at most 1 MiB), as `activeRegion` is 8-bit and the nonce
        /// stays outside: the state fits a cache line.
        private var lengths = SIMD4<UInt32>()
        private var activeRegion: UInt8 = 0
        /// The inactive region holds records that are not yet forwarded.
        var pending = false
        /// The strategy's background copy of the active region caught up and stopped (`idleCopy`): the
        /// next append asks for it to start again.
        var copyIdle = false
        var closed = false
        /// The next item's sequence (see `ItemID`).
        var sequence: UInt64 = 0

        /// A region's tally, in place: reading it out would copy it, and retain and release its list of cut
        /// traces, on every add.
        @inline(__always)
        mutating func tally<Result>(_ index: Int, _ body: (inout BatchTally) -> Result) -> Result {
            index == 0 ? body(&tallies.0) : body(&tallies.1)
        }

        /// The region callers append to.
        var active: Int {
            get { Int(activeRegion) }
            set { activeRegion = UInt8(truncatingIfNeeded: newValue) }
        }

        /// Bytes of records in region `index`, every lane.
        @inline(__always)
        func length(_ index: Int) -> Int { length(index, lane: 0) + length(index, lane: 1) }

        @inline(__always)
        func length(_ index: Int, lane: Int) -> Int { Int(lengths[index << 1 | lane]) }

        @inline(__always)
        mutating func setLength(_ index: Int, lane: Int, _ length: Int) { lengths[index << 1 | lane] = UInt32(truncatingIfNeeded: length) }
    }

    private let state = Locked(State())
    /// The regions: kept alive here, reached on the hot path through `unmanaged` (see `withRegion`).
    private let first: RecordRegion
    private let second: RecordRegion
    private let unmanaged: (Unmanaged<RecordRegion>, Unmanaged<RecordRegion>)
    private let limits: BatchLimits
    /// The lanes of each region: 1 or 2.
    private let lanes: Int
    /// Bytes of records lane 1 of a region can hold (lane 0 holds whatever the region does).
    private let laneOneCapacity: Int
    /// The nonce of every item ID (see `ItemID`), outside the state to keep it within a cache line.
    private let nonce = UInt64.random(in: .min ... .max)
    /// For claimable regions: the appending thread while an append is under way, read by the crash handler.
    let appending: UnsafeMutablePointer<UInt>?
    /// Whether appends write and commit their records after releasing the lock (see above).
    private let copiesOutsideTheLock: Bool

    /// Items of a signal that reach its limit in a region ask for a forward.
    init(_ first: RecordRegion, _ second: RecordRegion, limits: BatchLimits, claimable: Bool = false) {
        precondition(first.laneCount == second.laneCount && (1...2).contains(first.laneCount))
        lanes = first.laneCount
        laneOneCapacity = lanes > 1 ? first.capacity(lane: 1) : 0
        self.first = first
        self.second = second
        unmanaged = (.passUnretained(first), .passUnretained(second))
        self.limits = limits
        appending = claimable ? .allocate(capacity: 1) : nil
        appending?.initialize(to: 0)
        #if canImport(Darwin)
        copiesOutsideTheLock = false
        #else
        copiesOutsideTheLock = !claimable
        #endif
    }

    deinit { appending?.deallocate() }

    func append(_ item: EncodedItem) -> AppendOutcome {
        guard copiesOutsideTheLock else { return state.withLock { copy(item, &$0) } }
        // Outside the lock: a thread-local read, and a call.
        let lane = lanes == 1 ? 0 : Int(tb_thread_lane() & 1)
        var place = Place(region: 0, lane: 0, offset: 0, sequence: 0)
        let outcome = state.withLock { state in
            let (rotated, refusal) = admit(item, &state)
            if let refusal { return AppendOutcome.rejected(refusal) }
            return reserve(item, lane: lane, rotated: rotated, &state, &place)
        }
        guard case .accepted = outcome else { return outcome }
        store(item, at: place)
        return outcome
    }

    /// Makes the active region one that can take `item`, rotating when it is full and the other one is
    /// free; or says why the item is refused (counting a span's cut trace). Under the lock.
    @inline(__always)
    private func admit(_ item: EncodedItem, _ state: inout State) -> (rotated: Bool, refusal: DiscardReason?) {
        let active = state.active
        guard !state.closed, !state.tally(active, { $0.isCut(item) }) else { return (false, .bufferOverflow) }
        guard !canTake(item, in: active, &state) else { return (false, nil) }
        let other = active ^ 1
        guard !state.pending, state.length(active) != 0, canTake(item, in: other, &state) else {
            state.tally(active) { $0.overflowed(item) }
            return (false, .bufferOverflow)
        }
        state.active = other
        state.pending = true
        return (true, nil)
    }

    /// Where a record goes: the region, the lane and offset into its records, and the record's sequence.
    private typealias Place = (region: Int, lane: Int, offset: Int, sequence: UInt64)

    /// Reserves the admitted `item`'s place in the active region (its sequence, its bytes, its count): in
    /// `lane` if it fits there, else in lane 0, which fits whatever the region does. Under the lock.
    @inline(__always)
    private func reserve(_ item: EncodedItem, lane wanted: Int, rotated: Bool, _ state: inout State, _ place: inout Place) -> AppendOutcome {
        let active = state.active, empty = state.length(active) == 0
        var lane = wanted, offset = state.length(active, lane: wanted)
        if lane != 0, offset + RecordFraming.recordHeaderSize + item.payload.count > laneOneCapacity {
            (lane, offset) = (0, state.length(active, lane: 0))
        }
        place = (active, lane, offset, state.sequence)
        state.sequence &+= 1
        state.setLength(active, lane: lane, offset + RecordFraming.recordHeaderSize + item.payload.count)
        let limitReached = state.tally(active) { $0.count(item.category, limits: limits) }
        let wake = empty || state.copyIdle
        state.copyIdle = false
        return .accepted(startTimer: wake, forwardNow: rotated || limitReached)
    }

    /// Writes `item`'s record at its reserved place and commits it.
    @inline(__always)
    private func store(_ item: EncodedItem, at place: Place) {
        withRegion(place.region) { target in
            target.write(category: item.category, id: ItemID(nonce: nonce, sequence: place.sequence), payload: item.payload,
                         payloadCRC: item.payloadCRC, lane: place.lane, at: place.offset)
            target.commit(lane: place.lane, from: place.offset, to: place.offset + RecordFraming.recordHeaderSize + item.payload.count)
        }
    }

    /// Admits, reserves, writes and commits `item`, all under the lock.
    @inline(__always)
    private func copy(_ item: EncodedItem, _ state: inout State) -> AppendOutcome {
        let (rotated, refusal) = admit(item, &state)
        if let refusal { return .rejected(refusal) }
        if let appending {
            tb_appending_begin(appending)
            // Claimed: the process is crashing, or survived a signal (then a forward settles the claim).
            guard !withRegion(state.active, \.isClaimed) else {
                tb_appending_end(appending)
                return .refusedWhileClaimed
            }
        }
        var place = Place(region: 0, lane: 0, offset: 0, sequence: 0)
        let outcome = reserve(item, lane: 0, rotated: rotated, &state, &place)
        store(item, at: place)
        if let appending { tb_appending_end(appending) }
        return outcome
    }

    /// Region 0 or 1, borrowed: `self` keeps both alive, so the hot path need not retain and release one
    /// on every add (as reading it from an array, or returning it, does).
    @inline(__always)
    private func withRegion<Result>(_ index: Int, _ body: (RecordRegion) -> Result) -> Result {
        (index == 0 ? unmanaged.0 : unmanaged.1)._withUnsafeGuaranteedRef(body)
    }

    @inline(__always)
    private func canTake(_ item: EncodedItem, in index: Int, _ state: inout State) -> Bool {
        let length = state.length(index)
        return withRegion(index) { $0.fits(payloadCount: item.payload.count, after: length) }
            && state.tally(index) { $0.hasRoom(for: item.category, limits: limits) }
    }

    /// The region to forward next (the pending one, else the active one after a swap), once every
    /// record reserved in it is committed; `nil` when nothing is held or, with `dueOnly`, when no region
    /// is pending and the active one has not reached a limit (a wake-up for a limit that a flush has
    /// forwarded since). Background queue; pair with `endForwarding`.
    func beginForwarding(dueOnly: Bool = false) -> (index: Int, records: RecordLanes)? {
        let due: (index: Int, lengths: (Int, Int))? = state.withLock { state in
            if !state.pending {
                guard state.length(state.active) != 0 else { return nil }
                if dueOnly, !state.tally(state.active, { $0.reachedLimit(limits) }) { return nil }
                state.active ^= 1
                state.pending = true
            }
            let index = state.active ^ 1
            return (index, (state.length(index, lane: 0), state.length(index, lane: 1)))
        }
        guard let due else { return nil }
        return withRegion(due.index) { region in
            waitForCommits(region, upTo: due.lengths)
            return (due.index, region.records)
        }
    }

    /// Empties the forwarded region and makes it available again.
    ///
    /// - Throws: `CrashInProgress` if the crash handler claimed the region; it stays pending.
    func endForwarding() throws {
        try state.withLock { state in
            let index = state.active ^ 1
            // The reset cuts the records off first, even when it then finds the region claimed.
            defer {
                for lane in 0..<lanes { state.setLength(index, lane: lane, withRegion(index) { $0.committedRecordBytes(lane: lane) }) }
            }
            try region(index).reset()
            state.tally(index) { $0 = BatchTally() }
            state.pending = false
        }
    }

    /// Calls `body` with every record the regions still hold (for counting what `close()` could not store),
    /// but those of a region `skippingRegion` names by its index.
    func forEachHeldRecord(skippingRegion: (Int) -> Bool, _ body: (RecordFraming.Record) -> Void) {
        state.withLock { state in
            for index in 0...1 where !skippingRegion(index) {
                withRegion(index) { region in
                    waitForCommits(region, upTo: (state.length(index, lane: 0), state.length(index, lane: 1)))
                    region.records.forEachRecord(body)
                }
            }
        }
    }

    /// Zeroes both regions past their records, 64 KiB per hold of the lock. Background queue (no reset
    /// meanwhile).
    func zeroUnused() {
        for index in 0...1 {
            for lane in 0..<lanes {
                var cursor = 0
                while let next = state.withLock({ state in
                    withRegion(index) { $0.zeroUnused(lane: lane, from: cursor, after: state.length(index, lane: lane), limit: 64 << 10) }
                }) { cursor = next }
            }
        }
    }

    /// Gives both regions' unused heap pages back (see `RecordRegion.releaseUnusedPages`).
    func releaseUnusedPages() {
        state.withLock { state in
            for index in 0...1 {
                for lane in 0..<lanes { withRegion(index) { $0.releaseUnusedPages(lane: lane, after: state.length(index, lane: lane)) } }
            }
        }
    }

    /// Region 0 or 1.
    func region(_ index: Int) -> RecordRegion { index == 0 ? first : second }

    /// Both regions, for the crash handler, which reads them lock-free up to their committed lengths.
    var all: [RecordRegion] { [first, second] }

    /// The region callers append to now.
    var activeIndex: Int { state.withLock { $0.active } }

    /// Marks the background copy of region `index` idle if it holds every byte reserved there (`copied`)
    /// and the region is still the active one: the next append then returns `startTimer`, so the copy
    /// starts again for new records only, instead of polling. Under the lock, so no append falls between
    /// the check and the mark; returns whether it marked.
    func idleCopy(of index: Int, copied: Int) -> Bool {
        state.withLock { state in
            guard state.active == index, state.length(index) == copied else { return false }
            state.copyIdle = true
            return true
        }
    }

    /// The region callers append to now, and whether the other one waits to be forwarded (it is then the
    /// older of the two), read together.
    var activeAndPending: (active: Int, otherPending: Bool) { state.withLock { ($0.active, $0.pending) } }

    /// Rejects every later append, and returns once the appends under way have committed their records.
    /// Background queue (no forward meanwhile).
    func close() {
        let lengths = state.withLock { state in
            state.closed = true
            return [0, 1].map { (state.length($0, lane: 0), state.length($0, lane: 1)) }
        }
        for index in 0...1 { withRegion(index) { waitForCommits($0, upTo: lengths[index]) } }
    }

    /// Waits until every record reserved in `region`, up to `lengths` in its lanes, is committed.
    private func waitForCommits(_ region: RecordRegion, upTo lengths: (Int, Int)) {
        region.waitForCommits(lane: 0, upTo: lengths.0)
        if lanes > 1 { region.waitForCommits(lane: 1, upTo: lengths.1) }
    }

    var isEmpty: Bool { state.withLock { !$0.pending && $0.length($0.active) == 0 } }

    /// Items in both regions.
    var itemCount: Int { state.withLock { $0.tallies.0.items + $0.tallies.1.items } }
}
