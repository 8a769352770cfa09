import CTelemetrySignals
import Foundation

/// What Sentry allows for one DSN: a rate-limit deadline per category this library sends, one for all,
/// and whether the server refused the DSN for good (401, 403, 404).
///
/// Responses update it (on the upload queue); `add` asks `refusal(for:)` on the calling thread: three
/// atomic loads, and the clock only while a limit is set.
///
/// `@unchecked Sendable`: the deadlines are raw memory, read and written only atomically.
final class RateLimits: @unchecked Sendable {
    /// The categories a limit can name that concern this library: all, and each signal's item category.
    struct Category: Hashable, Sendable {
        /// The deadline's slot: 0 for all, a signal's category byte for its items.
        let rawValue: Int

        /// Every category.
        static let all = Category(rawValue: 0)

        /// How many slots the categories take: one for all, one per category byte a signal may have.
        static let count = BatchTally.maxSignals + 1

        /// The limit that holds the items of a signal.
        init(_ item: ItemCategory) { rawValue = Int(item.rawValue) }

        private init(rawValue: Int) { self.rawValue = rawValue }

        /// The category a header names (`log_item`, `span`), `nil` for one this library does not send
        /// (`log_byte` included: no signal's items are counted by it).
        init?(_ name: Substring) {
            guard let signal = SignalDescription.all.first(where: { $0.dataCategory.rawValue == name }) else { return nil }
            self.init(signal.category)
        }
    }

    /// µs since 1970 until which each category is limited (0 when it is not), then the refusal flag.
    private let deadlines = UnsafeMutablePointer<UInt64>.allocate(capacity: Category.count + 1)
    private var refused: UnsafeMutablePointer<UInt64> { deadlines + Category.count }

    /// What `add` asks for the time, only while a limit is set.
    private let clock: any Clock

    init(clock: any Clock = SystemClock()) {
        self.clock = clock
        deadlines.initialize(repeating: 0, count: Category.count + 1)
    }

    deinit { deadlines.deallocate() }

    /// Why an item of `category` may not be buffered now, or `nil` if it may.
    @inline(__always)
    func refusal(for category: Category) -> DiscardReason? {
        if tb_load_acquire_u64(refused) != 0 { return .sendError }
        let own = tb_load_acquire_u64(deadlines + category.rawValue)
        let all = tb_load_acquire_u64(deadlines + Category.all.rawValue)
        guard own != 0 || all != 0 else { return nil }  // the clock only while a limit is set
        let micros = Self.micros(clock.now())
        return own <= micros && all <= micros ? nil : .ratelimitBackoff
    }

    /// The server refused the DSN for good: every later item is refused.
    func refuseAll() { tb_store_release_u64(refused, 1) }

    /// Whether items of `category` may be sent (or buffered) at `now`.
    @inline(__always)
    func allows(_ category: Category, now: () -> Date = Date.init) -> Bool {
        let own = tb_load_acquire_u64(deadlines + category.rawValue)
        let all = tb_load_acquire_u64(deadlines + Category.all.rawValue)
        guard own != 0 || all != 0 else { return true }
        let micros = Self.micros(now())
        return own <= micros && all <= micros
    }

    /// The time until which `category` is limited, or `nil`.
    func limitedUntil(_ category: Category, now: Date = Date()) -> Date? {
        let deadline = max(tb_load_acquire_u64(deadlines + category.rawValue), tb_load_acquire_u64(deadlines + Category.all.rawValue))
        return deadline > Self.micros(now) ? Date(timeIntervalSince1970: Double(deadline) / 1_000_000) : nil
    }

    /// Applies a response: `X-Sentry-Rate-Limits` if present (any status; a blank one is none), else for a
    /// 429 `Retry-After` (seconds or an HTTP date), else for a 429 sixty seconds on every category.
    func update(status: Int, rateLimits: String?, retryAfter: String?, now: Date = Date()) {
        if let rateLimits, rateLimits.contains(where: { $0 != " " && $0 != "\t" }) {
            for (category, seconds) in Self.parse(rateLimits) { extend(category, by: seconds, now: now) }
        } else if status == 429 {
            extend(.all, by: retryAfter.flatMap { Self.seconds(retryAfter: $0, now: now) } ?? 60, now: now)
        }
    }

    /// After a 429 that limits none of the envelope's `categories` (its header names only others, or
    /// 0 s): they wait as after a bare 429 (`Retry-After`, else 60 s), at least a second; other categories
    /// go on (a client report's `all` counts only in an envelope of nothing else). The envelope is gone (a
    /// 429 is final); the hold keeps the next envelopes of its categories from going at the queue's pace
    /// into the same answer.
    func holdAfter429(_ categories: [Category], retryAfter: String?, now: Date = Date()) {
        guard !categories.contains(where: { limitedUntil($0, now: now) != nil }) else { return }
        let own = Set(categories.filter { $0 != .all })
        let seconds = max(1, retryAfter.flatMap { Self.seconds(retryAfter: $0, now: now) } ?? 60)
        for category in own.isEmpty ? [.all] : own { extend(category, by: seconds, now: now) }
    }

    private func extend(_ category: Category, by seconds: Double, now: Date) {
        let deadline = Self.micros(now.addingTimeInterval(seconds))
        let slot = deadlines + category.rawValue
        // Keep the longest; only the upload queue writes.
        if deadline > tb_load_acquire_u64(slot) { tb_store_release_u64(slot, deadline) }
    }

    /// `retry_after:categories:scope:reason_code[:namespaces]`, comma-separated; spaces ignored; an
    /// empty category list means all (one of only `;` names none); unknown categories are ignored, and so
    /// is a quota naming only unknown ones; for a repeated category the longest wins.
    static func parse(_ header: String) -> [Category: Double] {
        var limits: [Category: Double] = [:]
        for quota in header.split(separator: ",") {
            let fields = quota.filter { $0 != " " && $0 != "\t" }.split(separator: ":", omittingEmptySubsequences: false)
            guard fields.count >= 2, let seconds = Double(fields[0]), !seconds.isNaN, seconds >= 0 else { continue }
            let names = fields[1].split(separator: ";")
            let categories = fields[1].isEmpty ? [Category.all] : names.compactMap(Category.init)
            for category in categories { limits[category] = max(limits[category] ?? 0, seconds) }
        }
        return limits
    }

    /// `Retry-After`: delay seconds (integer or float), or an HTTP date.
    static func seconds(retryAfter: String, now: Date) -> Double? {
        let text = retryAfter.trimmingCharacters(in: .whitespaces)
        if let seconds = Double(text), !seconds.isNaN, seconds >= 0 { return seconds }
        let format = DateFormatter()
        format.locale = Locale(identifier: "en_US_POSIX")
        format.timeZone = TimeZone(identifier: "GMT")
        format.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        return format.date(from: text).map { max(0, $0.timeIntervalSince(now)) }
    }

    /// Microseconds since 1970, saturated: a limit the server sets past any deadline (`1e20` is a valid
    /// number of seconds) lasts for good rather than trapping the conversion.
    private static func micros(_ date: Date) -> UInt64 {
        let micros = date.timeIntervalSince1970 * 1_000_000
        return micros < 0x1p64 ? UInt64(max(0, micros)) : .max
    }
}
