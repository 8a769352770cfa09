/// The strategy of a buffer created while the device's protected data is unavailable (an iPhone not
/// unlocked since it restarted, woken in the background): its folder cannot be opened yet, so items wait
/// in memory, one batch's worth, as FlushAll holds them. At the first forward after the data becomes
/// available (the unlock's notification, a flush, backgrounding, `close`) it builds the folder's parts,
/// moves what it holds into the strategy they bring, and from then on passes everything to it.
///
/// Guarantees: until then, an item is refused (counted as `buffer_overflow`) once a batch is full; what
/// is held is lost if the process dies before the unlock (counted at `close`, as FlushAll's unstored
/// items are). It holds at most what one batch of the new strategy takes, and moves it before any later
/// item, so none is refused there or taken out of order. After the takeover each `add` takes this
/// strategy's lock as well as the new strategy's.
///
/// `@unchecked Sendable`: `region` (raw memory) is written and read only under `state`'s lock.
final class HeldUntilUnlock: BufferStrategy, @unchecked Sendable {
    private struct State {
        var tally = BatchTally()
        /// Builds the folder's parts and returns their strategy; throws while protected data is
        /// unavailable. Background queue.
        var start: (@Sendable (FolderLock?) throws -> any BufferStrategy)?
        /// The folder's lock, if it could be taken while waiting: kept, so that no other buffer takes the
        /// folder meanwhile, and handed to the folder's parts.
        var lock: FolderLock?
        /// A removal (`removeAllData`, a revocation) that could not reach the folder: it runs once it opens.
        var removalOwed = false
        /// The folder's strategy, once the takeover built it: every item goes there from then on.
        var started: (any BufferStrategy)?
        /// A takeover is building the folder's parts: one reached from within it (a forward that code run
        /// during the build starts) does nothing.
        var opening = false
        /// No takeover from now on (`seal`), nor any item before one (`close`).
        var sealed = false
        var closed = false
    }

    private let state = Locked(State())
    /// What is held is one region's bytes and each signal's cap (a limit reached changes nothing here).
    private let limits: BatchLimits
    private let region: RecordRegion
    private let reports: ClientReportRecorder

    init(maxBatchBytes: Int, limits: BatchLimits, reports: ClientReportRecorder) {
        region = RecordRegion(recordCapacity: maxBatchBytes, kind: .memoryList)
        self.limits = limits
        self.reports = reports
    }

    /// Sets how the folder's parts are built, and the folder's lock if it was taken: once, right after
    /// `init` (the builder needs the buffer).
    func opens(keeping lock: FolderLock?, with start: @escaping @Sendable (FolderLock?) throws -> any BufferStrategy) {
        state.withLock { state in
            state.start = start
            state.lock = lock
        }
    }

    /// Notes a removal that could not reach the folder, for the takeover to run, and before the takeover
    /// drops what is held now (nothing of it was stored): a takeover under way would move it in after its
    /// own removal and publish it, for the uploader to send before the removal the caller queued runs.
    func oweRemoval() {
        state.withLock { state in
            state.removalOwed = true
            guard state.started == nil else { return }
            try? region.reset()
            state.tally = BatchTally()
        }
    }

    /// Whether a removal is owed; it is not any more.
    func takeOwedRemoval() -> Bool {
        state.withLock { state in
            defer { state.removalOwed = false }
            return state.removalOwed
        }
    }

    /// The strategy items pass to once the folder is open.
    var started: (any BufferStrategy)? { state.withLock { $0.started } }

    func append(_ item: EncodedItem) -> AppendOutcome {
        let outcome: AppendOutcome? = state.withLock { state in
            guard state.started == nil else { return nil }
            guard !state.closed, !state.tally.isCut(item), state.tally.hasRoom(for: item.category, limits: limits),
                  region.fits(payloadCount: item.payload.count, after: region.recordBytes)
            else {
                state.tally.overflowed(item)
                return .rejected(.bufferOverflow)
            }
            region.append(category: item.category, id: ItemID(nonce: 0, sequence: 0), payload: item.payload,
                          payloadCRC: item.payloadCRC)
            // No timer, no wake-up: nothing can be forwarded before the folder opens.
            _ = state.tally.count(item.category, limits: limits)
            return .accepted(startTimer: false, forwardNow: false)
        }
        return outcome ?? started!.append(item)
    }

    /// Opens the folder if it is not open yet: builds its parts, moves the held items into their strategy
    /// (an item it refuses is counted) and hands every later item to it. Returns that strategy, or `nil`
    /// while the folder cannot be opened (the items stay held). Background queue.
    @discardableResult
    func takeOver() -> (any BufferStrategy)? {
        if let started { return started }
        typealias Start = (start: @Sendable (FolderLock?) throws -> any BufferStrategy, lock: FolderLock?)
        let next: Start? = state.withLock { state in
            guard !state.sealed, !state.opening, let start = state.start else { return nil }
            state.opening = true
            return (start, state.lock)
        }
        guard let (start, lock) = next else { return nil }
        defer { state.withLock { $0.opening = false } }
        guard let strategy = try? start(lock) else { return nil }
        state.withLock { state in
            // Under the lock, so that no item added meanwhile comes before the held ones.
            _ = region.records.forEachRecord { record in
                let item = EncodedItem(category: record.category, payload: record.payload,
                                       payloadCRC: CRC32C.checksum(record.payload), traceID: nil)
                if let reason = strategy.append(item).refusal {
                    reports.recordDrop(of: record.category, bytes: record.payload.count, reason: reason)
                }
            }
            try? region.reset()
            state.tally = BatchTally()
            state.started = strategy
        }
        region.releaseUnusedPages(lane: 0, after: 0)
        return strategy
    }

    func batchStarted() { started?.batchStarted() }

    func forward(everything: Bool) -> (any Error)? {
        guard let started = takeOver() else { return nil }
        return started.forward(everything: everything)
    }

    func awaitDurable() { started?.awaitDurable() }

    /// Whether `close` came before any takeover.
    var isClosed: Bool { state.withLock { $0.closed } }

    /// No takeover from now on: the buffer is closing (it tried one first).
    func seal() { state.withLock { $0.sealed = true } }

    /// Before the takeover, refuses every later item (and every takeover): what is held is counted by
    /// `countUnstored`.
    func close() {
        if let started { return started.close() }
        state.withLock { state in
            state.sealed = true
            state.closed = true
            // The folder is free for a later buffer.
            state.lock?.release()
            state.lock = nil
        }
    }

    /// Before the takeover, every held item is lost with the process: counted as `internal_sdk_error`,
    /// once.
    func countUnstored() {
        if let started { return started.countUnstored() }
        state.withLock { state in
            _ = region.records.forEachRecord {
                reports.recordDrop(of: $0.category, bytes: $0.payload.count, reason: .internalSDKError)
            }
            try? region.reset()
            state.tally = BatchTally()
        }
    }

    func scrub() throws { try started?.scrub() }

    func releaseMemory() { started?.releaseMemory() }

    /// Before the takeover: nothing a timer could forward (the unlock's notification, a flush or
    /// backgrounding tries again), so no timer polls a locked folder.
    var isEmpty: Bool { started?.isEmpty ?? true }

    var bufferedItems: Int { started?.bufferedItems ?? state.withLock { $0.tally.items } }

    /// The new strategy's plan is registered when the folder's parts are built.
    var crashPlan: CrashPlan? { nil }
}
