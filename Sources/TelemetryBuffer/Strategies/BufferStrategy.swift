/// An item as `add` hands it to a strategy: encoded once, checksummed outside any lock.
struct EncodedItem {
    var category: ItemCategory
    var payload: UnsafeRawBufferPointer
    var payloadCRC: UInt32
    /// The span's trace (for whole-trace drops); `nil` for logs.
    var traceID: TraceID?
}

/// What became of an item handed to a strategy.
enum AppendOutcome: Equatable {
    /// The strategy holds the item. `startTimer`: it is the first item of a batch, so the flush timer
    /// starts, or the first since the strategy's background copy went idle, so it starts again
    /// (`batchStarted`); `forwardNow`: a batch reached a limit (or the regions rotated), so that batch
    /// should be forwarded now.
    case accepted(startTimer: Bool, forwardNow: Bool)
    /// The item was dropped; the caller counts it for `reason`.
    case rejected(DiscardReason)
    /// The item was dropped because a crash handler claimed the strategy's memory and the process survived
    /// the signal: the caller counts it as `internal_sdk_error` and wakes the background queue, whose
    /// forward settles the handler (file removals, a directory sync: never on the adding thread), so that
    /// later items are taken.
    case refusedWhileClaimed

    /// Why the item was dropped; `nil` when it was accepted.
    var refusal: DiscardReason? {
        switch self {
        case .accepted: nil
        case .rejected(let reason): reason
        case .refusedWhileClaimed: .internalSDKError
        }
    }
}

/// How a buffer holds items between `add` and the envelope on disk (Sentry's mobile telemetry-buffer
/// spec names three: FlushAll, FileStreamCache, DoubleRotatingBuffer).
///
/// `append` runs on the calling thread and must not wait on I/O; every other requirement runs on the
/// buffer's one serial background queue.
protocol BufferStrategy: AnyObject, Sendable {
    /// Takes a copy of the item, or rejects it. Calling thread; no I/O, no allocation.
    func append(_ item: EncodedItem) -> AppendOutcome
    /// A batch has begun (its first item was accepted), or an item arrived after the strategy's background
    /// copy went idle. Background queue, soon after that `add`: work to start for new items is started
    /// here, so that `add` wakes one queue, not two.
    func batchStarted()
    /// Publishes held items as envelopes and returns once the transport has them: everything held when
    /// it began (`everything`), or only the batches that are due: one swapped out full, and one that
    /// reached a limit (a wake-up may stand for both). Returns the failure (also logged)
    /// that left items it was to publish held; `nil` when there is none. Background queue.
    @discardableResult
    func forward(everything: Bool) -> (any Error)?
    /// Waits until what forwards published is durable against power loss (a sync they left to run later).
    /// Background queue.
    func awaitDurable()
    /// Rejects every later item, then publishes everything held. Background queue.
    func close()
    /// After `close()` and the removal of the crash registration: counts as lost (`internal_sdk_error`)
    /// what the strategy still holds that nothing keeps, since it goes with the process. Background queue.
    func countUnstored()
    /// Clears what the strategy's files still hold of items it forwarded (for `removeAllData`, after a
    /// forward), durably: waits for deferred syncs and overwrites the bytes past the lists' records.
    /// Background queue.
    func scrub() throws
    /// Gives memory it holds but does not need now back to the system (memory pressure, after a forward).
    /// Background queue.
    func releaseMemory()
    /// Whether nothing is held (so the flush timer may stop).
    var isEmpty: Bool { get }
    /// Items held that are not yet envelopes.
    var bufferedItems: Int { get }
    /// What the crash handler does for this strategy; `nil` when every item is already in a file when
    /// `add` returns and nothing is left to do.
    var crashPlan: CrashPlan? { get }
}

extension BufferStrategy {
    func batchStarted() {}

    /// Forwards sync what they publish before they return.
    func awaitDurable() {}

    /// Every item is in a file that stays.
    func countUnstored() {}

    /// Nothing to clear: the strategy's forwarded files are gone once the forward returns.
    func scrub() {}

    /// Nothing held in memory worth giving back.
    func releaseMemory() {}
}
