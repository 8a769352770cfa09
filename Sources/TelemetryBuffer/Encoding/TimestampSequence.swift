import CTelemetrySignals
import Foundation

/// Numbers each log for `sentry.timestamp.sequence`: 0 for a buffer's first log and for every log whose
/// millisecond (`floor(timestamp × 1000)`) differs from the previous log's, else one more than the previous
/// log's number. It orders logs with equal timestamps, where the clock freezes or has no sub-millisecond
/// precision (the protocol makes it a MUST there; this buffer always sends it).
///
/// One atomic word holds the millisecond and the last number, updated by compare-and-swap: no lock, no
/// allocation. Logs encoded on several threads at once get distinct numbers, in the order of their swaps.
///
/// `@unchecked Sendable`: the word is raw memory, read and written only atomically.
final class TimestampSequence: @unchecked Sendable {
    /// On a cache line of its own (128 bytes: see `Lock`): every log's swap moves it between the adding
    /// threads' cores, and words other objects kept there (read on every add) would move with it.
    private let word = UnsafeMutableRawPointer.allocate(byteCount: 128, alignment: 128).bindMemory(to: UInt64.self, capacity: 1)

    init() { word.initialize(to: .max) }

    deinit { UnsafeMutableRawPointer(word).deallocate() }

    /// The number of the next log, stamped `timestamp`.
    @inline(__always)
    func next(for timestamp: Date) -> Int64 {
        // The millisecond of the timestamp as sent: rounded to the microsecond first, as `JSONWriter` writes it.
        let millis = ((timestamp.timeIntervalSince1970 * 1_000_000).rounded() / 1000).rounded(.down)
        // The word tells apart 2^44 milliseconds centred on 1970 (the years 1691 to 2248); earlier or later
        // timestamps (and NaN) share the first or last.
        let shifted = millis + Double(Self.offset)
        let index: UInt64 = shifted > 0 ? UInt64(min(shifted, Double(TB_SEQUENCE_MAX_MILLIS))) : 0
        return Int64(tb_timestamp_sequence_next(word, index))
    }

    private static let offset: UInt64 = (TB_SEQUENCE_MAX_MILLIS + 1) / 2
}

/// Numbers each trace metric for `sentry.timestamp.sequence`: 0 for a buffer's first, then one more each
/// (the metrics protocol 2.6: continuous, not reset with the millisecond as logs' are; back to 0 only past
/// `Int64.max`). One atomic word, on a cache line of its own (see `TimestampSequence`).
///
/// `@unchecked Sendable`: the word is raw memory, read and written only atomically.
final class ContinuousSequence: @unchecked Sendable {
    private let word = UnsafeMutableRawPointer.allocate(byteCount: 128, alignment: 128).bindMemory(to: UInt64.self, capacity: 1)

    init() { word.initialize(to: 0) }

    deinit { UnsafeMutableRawPointer(word).deallocate() }

    /// The number of the next metric.
    @inline(__always)
    func next() -> Int64 { Int64(tb_continuous_sequence_next(word)) }
}
