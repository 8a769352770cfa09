import Foundation

/// Writes JSON bytes into a `ByteBuffer` without allocating once the buffer is warm.
///
/// It keeps the buffer's pointer and count in locals (a struct on the caller's stack) so the hot loops
/// are plain pointer stores; `finish()` hands the count back to the buffer.
struct JSONWriter {
    private let storage: ByteBuffer
    private var base: UnsafeMutablePointer<UInt8>
    private var capacity: Int
    private(set) var count: Int

    /// Starts writing after the bytes `storage` already holds.
    init(appendingTo storage: ByteBuffer) {
        self.storage = storage
        base = storage.base
        capacity = storage.capacity
        count = storage.count
    }

    /// Stores the number of written bytes back into the buffer.
    func finish() { storage.count = count }

    @inline(__always)
    private mutating func reserve(_ extra: Int) {
        if count &+ extra > capacity { growSlow(extra) }
    }

    @inline(never)
    private mutating func growSlow(_ extra: Int) {
        storage.count = count
        storage.grow(toFit: extra)
        base = storage.base
        capacity = storage.capacity
    }

    // MARK: Raw bytes

    @inline(__always)
    mutating func byte(_ value: UInt8) {
        reserve(1)
        base[count] = value
        count &+= 1
    }

    /// Writes ASCII text known at compile time (keys and punctuation).
    @inline(__always)
    mutating func raw(_ text: StaticString) {
        raw(UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    @inline(__always)
    mutating func raw(_ bytes: UnsafeRawBufferPointer) {
        guard let source = bytes.baseAddress, !bytes.isEmpty else { return }
        reserve(bytes.count)
        (base + count).update(from: source.assumingMemoryBound(to: UInt8.self), count: bytes.count)
        count &+= bytes.count
    }

    mutating func raw(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { raw($0) }
    }

    // MARK: Strings

    /// Writes `value` as a JSON string: quotes, backslashes and every control character escaped,
    /// everything else copied as UTF-8.
    mutating func string(_ value: String) {
        byte(0x22)
        var value = value
        // Native Swift strings are contiguous UTF-8; this only copies for bridged Cocoa strings.
        value.withUTF8 { escaped(UnsafeRawBufferPointer($0)) }
        byte(0x22)
    }

    private mutating func escaped(_ bytes: UnsafeRawBufferPointer) {
        // Most strings need no escape: reserve for that, then copy runs of plain bytes.
        reserve(bytes.count)
        var runStart = 0
        for index in 0..<bytes.count {
            let byte = bytes[index]
            guard byte < 0x20 || byte == 0x22 || byte == 0x5C else { continue }
            raw(UnsafeRawBufferPointer(rebasing: bytes[runStart..<index]))
            switch byte {
            case 0x22: pair(0x5C, 0x22)
            case 0x5C: pair(0x5C, 0x5C)
            case 0x0A: pair(0x5C, 0x6E)
            case 0x0D: pair(0x5C, 0x72)
            case 0x09: pair(0x5C, 0x74)
            case 0x08: pair(0x5C, 0x62)
            case 0x0C: pair(0x5C, 0x66)
            default:
                raw("\\u00")
                pair(HexDigits.digit(byte >> 4), HexDigits.digit(byte & 0xF))
            }
            runStart = index &+ 1
        }
        raw(UnsafeRawBufferPointer(rebasing: bytes[runStart...]))
    }

    @inline(__always)
    private mutating func pair(_ first: UInt8, _ second: UInt8) {
        reserve(2)
        base[count] = first
        base[count &+ 1] = second
        count &+= 2
    }

    // MARK: Numbers

    /// Writes a signed integer in decimal.
    mutating func integer(_ value: Int64) {
        if value < 0 { byte(0x2D) }
        unsigned(value.magnitude)
    }

    mutating func unsigned(_ value: UInt64) {
        var digits = 1
        var rest = value
        while rest >= 10 { rest /= 10; digits &+= 1 }
        reserve(digits)
        var remaining = value
        var index = count &+ digits &- 1
        repeat {
            base[index] = UInt8(truncatingIfNeeded: remaining % 10) &+ 0x30
            remaining /= 10
            index &-= 1
        } while remaining > 0
        count &+= digits
    }

    /// Writes a finite double in the shortest form that parses back to exactly the same value
    /// (Swift's `description`, which is valid JSON for every finite value). Callers handle non-finite values.
    mutating func double(_ value: Double) {
        precondition(value.isFinite, "JSON has no form for \(value)")
        // Short results (≤ 15 bytes, the common case) are small strings: no allocation.
        var text = value.description
        text.withUTF8 { raw(UnsafeRawBufferPointer($0)) }
    }

    /// Writes a time as seconds since 1970 with microsecond precision, e.g. `1767261600.125`.
    /// A date whose microseconds do not fit in 64 bits (or NaN) is written as 0.
    mutating func timestamp(_ date: Date) {
        let micros = (date.timeIntervalSince1970 * 1_000_000).rounded()
        guard micros.isFinite, abs(micros) < 9.2e18 else { return byte(0x30) }
        let total = Int64(micros)
        if total < 0 { byte(0x2D) }
        let magnitude = total.magnitude
        unsigned(magnitude / 1_000_000)
        var fraction = magnitude % 1_000_000
        guard fraction != 0 else { return }
        var digits = 6
        while fraction % 10 == 0 { fraction /= 10; digits &-= 1 }
        byte(0x2E)
        reserve(digits)
        var index = count &+ digits &- 1
        for _ in 0..<digits {
            base[index] = UInt8(truncatingIfNeeded: fraction % 10) &+ 0x30
            fraction /= 10
            index &-= 1
        }
        count &+= digits
    }

    /// Writes `digits` lowercase hex digits of `value` (most significant first), without quotes.
    mutating func hex(_ value: UInt64, digits: Int = 16) {
        reserve(digits)
        for index in 0..<digits {
            let shift = UInt64(4 * (digits - 1 - index))
            base[count &+ index] = HexDigits.digit(UInt8(truncatingIfNeeded: value >> shift) & 0xF)
        }
        count &+= digits
    }
}
