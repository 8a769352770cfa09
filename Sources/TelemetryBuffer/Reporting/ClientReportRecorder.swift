import Foundation

/// Why an item was dropped, as named in Sentry client reports: the reasons this library has drop points for.
enum DiscardReason: String, Sendable, CaseIterable {
    case bufferOverflow = "buffer_overflow"
    case cacheOverflow = "cache_overflow"
    case ratelimitBackoff = "ratelimit_backoff"
    case sendError = "send_error"
    case internalSDKError = "internal_sdk_error"
    case invalid = "invalid"
    case beforeSend = "before_send"
}

/// The data categories this library reports: logs count once per item and once per byte.
enum DataCategory: String, Sendable, CaseIterable {
    case logItem = "log_item"
    case logByte = "log_byte"
    case span = "span"
    case traceMetric = "trace_metric"
    case traceMetricByte = "trace_metric_byte"
}

/// Discarded-item counts, the payload of a `client_report` item.
struct ClientReport: Sendable, Equatable {
    /// When the counts were taken.
    var timestamp: Date

    struct Entry: Sendable, Equatable {
        var reason: DiscardReason
        var category: DataCategory
        var quantity: Int
    }

    var entries: [Entry]

    func quantity(_ reason: DiscardReason, _ category: DataCategory) -> Int {
        entries.first { $0.reason == reason && $0.category == category }?.quantity ?? 0
    }
}

/// The one thread-safe aggregator of drops of a buffer (reason × category → quantity).
///
/// Every drop point records here; counts leave only in a `client_report` item. Recording is a lock and
/// an addition in a fixed table, so it is safe on the calling thread's hot path.
final class ClientReportRecorder: Sendable {
    private static let width = DataCategory.allCases.count
    /// Counts not yet sent, and every count since the buffer started (for `QueueStats`).
    private let counts = Locked((pending: [Int](repeating: 0, count: DiscardReason.allCases.count * width),
                                 total: [Int](repeating: 0, count: DiscardReason.allCases.count * width)))

    /// Each known signal's data categories (items, bytes) by category byte, read once: a drop on `add`'s
    /// path reads no description.
    private let signalCategories: [(items: DataCategory, bytes: DataCategory?)?] = {
        var categories = [(items: DataCategory, bytes: DataCategory?)?](repeating: nil, count: BatchTally.maxSignals + 1)
        for signal in SignalDescription.all { categories[Int(signal.category.rawValue)] = (signal.dataCategory, signal.byteCategory) }
        return categories
    }()

    private static func slot(_ reason: DiscardReason, _ category: DataCategory) -> Int {
        DiscardReason.allCases.firstIndex(of: reason)! * width + DataCategory.allCases.firstIndex(of: category)!
    }

    func record(_ reason: DiscardReason, _ category: DataCategory, quantity: Int = 1) {
        guard quantity > 0 else { return }
        let slot = Self.slot(reason, category)
        counts.withLock {
            $0.pending[slot] = $0.pending[slot].saturatingAdding(quantity)
            $0.total[slot] = $0.total[slot].saturatingAdding(quantity)
        }
    }

    /// Records one dropped item: as its signal's item category, and its bytes as its byte category if it
    /// has one (a log: `log_item` and `log_byte`; a span: `span`).
    func recordDrop(of category: ItemCategory, bytes: Int, reason: DiscardReason) {
        let signal = signalCategories[Int(category.rawValue)] ?? (category.signal.dataCategory, category.signal.byteCategory)
        let itemSlot = Self.slot(reason, signal.items)
        let byteSlot = signal.bytes.map { Self.slot(reason, $0) }
        counts.withLock {
            $0.pending[itemSlot] = $0.pending[itemSlot].saturatingAdding(1)
            $0.total[itemSlot] = $0.total[itemSlot].saturatingAdding(1)
            if let byteSlot {
                $0.pending[byteSlot] = $0.pending[byteSlot].saturatingAdding(bytes)
                $0.total[byteSlot] = $0.total[byteSlot].saturatingAdding(bytes)
            }
        }
    }

    /// Where the counts not sent are saved for the next buffer on the DSN (once its folder is open), what
    /// the file there holds as far as this buffer knows (`nil` for no file of ours, `[]` for one it could
    /// not read), and whether it was synced. Taken before `counts`, never on `add`'s path.
    private struct Saved {
        var file: SavedClientReport?
        var holds: [ClientReport.Entry]?
        var synced = true
    }
    private let saved = Locked(Saved())
    /// When a forward last tried to save: read before `saved`, which a request's removal may hold while it
    /// syncs, so that a forward within the interval never waits for it.
    private let lastForwardSave = Locked<Date?>(nil)

    /// Everything counted so far, and resets the counts; `nil` when nothing was dropped. The saved file
    /// goes first: a request may then deliver its counts, and a later start must not send them again. If
    /// it cannot be removed, its counts stay pending (and saved) and only the others go.
    func take() -> ClientReport? {
        saved.withLock { saved in
            var kept: [ClientReport.Entry] = []
            if let holds = saved.holds {
                if (try? saved.file?.remove()) != nil { (saved.holds, saved.synced) = (nil, true) } else { kept = holds }
            }
            return takePending(keeping: kept)
        }
    }

    /// The counts not sent yet, reset but for `kept` (as far as they are pending).
    private func takePending(keeping kept: [ClientReport.Entry] = []) -> ClientReport? {
        Self.report(counts.withLock { counts in
            var left = [Int](repeating: 0, count: counts.pending.count)
            for entry in kept {
                let slot = Self.slot(entry.reason, entry.category)
                left[slot] = min(counts.pending[slot], left[slot].saturatingAdding(entry.quantity))
            }
            defer { counts.pending = left }
            return zip(counts.pending, left).map { $0 - $1 }
        })
    }

    /// Adds the counts an earlier buffer on the DSN saved to those pending (not to the totals: they were
    /// not dropped by this buffer), and saves later ones to `file`. Once, when the folder is open.
    func attach(_ file: SavedClientReport) {
        saved.withLock { saved in
            do {
                // A damaged file of ours (no entries) goes too, with the first request or save.
                let earlier = try file.read()
                if let earlier { restore(ClientReport(timestamp: Date(), entries: earlier)) }
                saved = Saved(file: file, holds: earlier)
            } catch {
                // Not readable now: not taken for damaged, so not removed (a save would replace it).
                saved = Saved(file: file)
            }
        }
    }

    /// Saves the counts not sent yet for the next buffer on the DSN, durably (removing the file if there are
    /// none), unless the file holds just those. With `detaching` (the folder is given up) the file takes
    /// them over, and nothing is saved after: a request the uploader starts late (a buffer released without
    /// `close()` does not wait for it) sends only what is counted after. If that last save fails, what an
    /// earlier one saved stays, and the rest is lost (nothing here would send it).
    func saveUnsent(detaching: Bool = false) throws {
        try saved.withLock { saved in
            defer { if detaching { saved = Saved() } }
            try save(detaching ? takePending() : peek(), in: &saved, durably: true)
        }
    }

    /// After a forward: saves the counts not sent yet as `saveUnsent` does, but at most once per `interval`
    /// (a save that fails counts) and not durably (no sync: safe from a crash or a kill, not from power
    /// loss), so that a death of the process between the moments `saveUnsent` runs loses less: what was
    /// counted since the last forward that saved.
    func saveUnsentAfterForward(now: Date, interval: TimeInterval) throws {
        guard lastForwardSave.withLock({ last in last.map { now.timeIntervalSince($0) >= interval || now < $0 } ?? true }) else { return }
        try saved.withLock { saved in
            let report = peek()
            guard report?.entries != saved.holds else { return }
            lastForwardSave.withLock { $0 = now }
            try save(report, in: &saved, durably: false)
        }
    }

    /// After a request failed and before the uploader waits (the counts it carried are pending again, and
    /// the file that held some was removed for it): saves what is pending at once (unless the file holds just
    /// that), without a sync, so that a death of the process before its next request or forward does not
    /// lose it. That request removes the file again, with a sync: once per attempt, which the backoff spaces.
    func saveUnsentAfterFailedRequest() throws {
        try saved.withLock { try save(peek(), in: &$0, durably: false) }
    }

    /// Writes `report` to the saved file unless it holds just that (synced, if `durably`).
    private func save(_ report: ClientReport?, in saved: inout Saved, durably: Bool) throws {
        guard let file = saved.file, report?.entries != saved.holds || (durably && !saved.synced) else { return }
        // A save that fails after its rename (the folder's sync) leaves the file: it must go before a request.
        // A last save that fails leaves what an earlier one saved: nothing would send the counts here.
        if report != nil { saved.holds = [] }
        try file.save(report, durably: durably)
        (saved.holds, saved.synced) = (report?.entries, durably || report == nil)  // a removal is always synced
    }

    /// Saves no more counts, and leaves what was saved (the folder is emptied for a key the server refuses).
    func detach() { saved.withLock { $0 = Saved() } }

    /// The counts not yet sent, without resetting them; `nil` when there are none.
    func peek() -> ClientReport? { Self.report(counts.withLock { $0.pending }) }

    /// Every count since the start, sent or not.
    func totals() -> ClientReport? { Self.report(counts.withLock { $0.total }) }

    /// Puts counts back after the envelope that carried them was not accepted.
    func restore(_ report: ClientReport) {
        counts.withLock { counts in
            for entry in report.entries {
                let slot = Self.slot(entry.reason, entry.category)
                counts.pending[slot] = counts.pending[slot].saturatingAdding(entry.quantity)
            }
        }
    }

    private static func report(_ counts: [Int]) -> ClientReport? {
        var entries: [ClientReport.Entry] = []
        for (reasonIndex, reason) in DiscardReason.allCases.enumerated() {
            for (categoryIndex, category) in DataCategory.allCases.enumerated() {
                let quantity = counts[reasonIndex * width + categoryIndex]
                if quantity > 0 { entries.append(.init(reason: reason, category: category, quantity: quantity)) }
            }
        }
        return entries.isEmpty ? nil : ClientReport(timestamp: Date(), entries: entries)
    }
}
