import CTelemetrySignals
import Foundation

/// Writes JSON bytes into a `ByteBuffer` without allocating once the buffer is warm.
///
/// It keeps the buffer's pointer and count in locals (a struct on the caller's stack) so the hot loops
/// are plain pointer stores; `finish()` hands the count back to the buffer. The buffer must outlive the
/// writer (it is not retained: the hot path's writer is made and dropped inside `add`).
struct JSONWriter {
    private unowned(unsafe) let storage: ByteBuffer
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
        // For compile-time text the length is a constant here, so this becomes a few inline moves.
        UnsafeMutableRawPointer(base + count).copyMemory(from: source, byteCount: bytes.count)
        count &+= bytes.count
    }

    mutating func raw(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { raw($0) }
    }

    // MARK: Strings

    /// Writes `value` as a JSON string: quotes, backslashes and every control character escaped,
    /// everything else copied as UTF-8.
    mutating func string(_ value: String) {
        // Native and small strings are contiguous UTF-8, read in place (no copy, no retain); only bridged
        // Cocoa strings take the copying path.
        let written: Void? = value.utf8.withContiguousStorageIfAvailable { quoted(UnsafeRawBufferPointer($0)) }
        if written == nil {
            var copy = value
            copy.withUTF8 { quoted(UnsafeRawBufferPointer($0)) }
        }
    }

    /// Writes `"bytes"`, escaped: the vector scan copies each clean run, and the byte that ends it is escaped.
    @inline(__always)
    private mutating func quoted(_ bytes: UnsafeRawBufferPointer) {
        let length = bytes.count
        // The quotes and every byte as is; an escape reserves its extra bytes itself.
        reserve(length &+ 2)
        base[count] = 0x22
        count &+= 1
        if let source = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) {
            var index = 0
            while true {
                let clean = tb_json_copy_clean(base + count, source + index, length &- index)
                count &+= clean
                index &+= clean
                if index == length { break }
                escape(source[index], left: length &- index)
                index &+= 1
            }
        }
        closeQuote()
    }

    @inline(__always)
    private mutating func closeQuote() {
        base[count] = 0x22
        count &+= 1
    }

    /// Writes the escape for `byte`. `left`: the bytes of the string not yet written, this one included
    /// (room for them as they are and for the closing quote stays reserved).
    @inline(never)
    private mutating func escape(_ byte: UInt8, left: Int) {
        reserve(16 &+ left)
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
        let digits = Self.decimalDigits(value)
        reserve(digits)
        writeDigits(value, count: digits)
    }

    /// Writes the last `digits` decimal digits of `value`, with leading zeros (a fraction's digits).
    mutating func zeroPadded(_ value: UInt64, digits: Int) {
        reserve(digits)
        writeDigits(value, count: digits)
    }

    /// The number of decimal digits of `value` (1 for 0), without a loop: the bit length gives it to
    /// within one (`bits × 1233 / 4096` is ⌊bits × log10 2⌋), one comparison decides.
    @inline(__always)
    private static func decimalDigits(_ value: UInt64) -> Int {
        let guess = ((64 &- (value | 1).leadingZeroBitCount) &* 1233) &>> 12
        return guess &+ (value >= powersOfTen[guess] ? 1 : 0)
    }

    /// 10^n for n in 0...19, but 0 for n = 0, so that 0 counts one digit.
    private static let powersOfTen: [UInt64] = [
        0, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000, 100_000_000, 1_000_000_000,
        10_000_000_000, 100_000_000_000, 1_000_000_000_000, 10_000_000_000_000, 100_000_000_000_000,
        1_000_000_000_000_000, 10_000_000_000_000_000, 100_000_000_000_000_000, 1_000_000_000_000_000_000,
        10_000_000_000_000_000_000,
    ]

    /// Writes the last `digits` decimal digits of `value`, two per step from the right.
    @inline(__always)
    private mutating func writeDigits(_ value: UInt64, count digits: Int) {
        let pairs = Self.decimalPairs.utf8Start
        var rest = value
        var index = count &+ digits
        while index &- count >= 2 {
            let pair = Int(truncatingIfNeeded: rest % 100) &* 2
            rest /= 100
            index &-= 2
            base[index] = pairs[pair]
            base[index &+ 1] = pairs[pair &+ 1]
        }
        if index > count { base[count] = UInt8(truncatingIfNeeded: rest % 10) &+ 0x30 }
        count &+= digits
    }

    /// Writes a finite double in the shortest form that parses back to exactly the same value.
    /// Callers handle non-finite values.
    mutating func double(_ value: Double) {
        precondition(value.isFinite, "JSON has no form for \(value)")
        if shortDecimal(value) { return }
        // Swift's `description` is valid JSON for every finite value; short results (≤ 15 bytes) are small
        // strings, so this allocates nothing either, it is only slower.
        var text = value.description
        text.withUTF8 { raw(UnsafeRawBufferPointer($0)) }
    }

    /// The fast form of `double` for the common values, e.g. `412.75`, `0.001` or `200.0`: the fewest
    /// fraction digits (at most 9) whose decimal parses back to `value`. The check is exact: `n / 10^k` in
    /// floating point is the double nearest to the decimal, which is what a correct parser returns.
    /// Returns `false`, writing nothing, for anything else (then `description` decides, with an exponent
    /// where it uses one: below 1e-4 and from 1e15).
    private mutating func shortDecimal(_ value: Double) -> Bool {
        let magnitude = value.magnitude
        guard magnitude >= 1e-4 && magnitude < 1e15 else { return false }
        var scale = 1.0
        for fractionDigits in 0...9 {
            let product = magnitude * scale
            guard product < 9_007_199_254_740_992 else { return false }  // 2^53: every integer below is exact
            // Rounded by truncating `product + 0.5`: a conversion instruction, where `rounded()` is a libm
            // call. A tie rounding up instead of to even only changes which candidate the check below sees.
            let digits = UInt64(product + 0.5)
            if Double(digits) / scale == magnitude {
                writeDecimal(digits, fractionDigits: fractionDigits, negative: value < 0)
                return true
            }
            scale *= 10
        }
        return false
    }

    /// Writes `scaled / 10^fractionDigits` in fixed notation, with at least one digit on each side of the point.
    private mutating func writeDecimal(_ scaled: UInt64, fractionDigits: Int, negative: Bool) {
        var power: UInt64 = 1
        for _ in 0..<fractionDigits { power &*= 10 }
        reserve(fractionDigits &+ 24)
        if negative { byte(0x2D) }
        unsigned(scaled / power)
        byte(0x2E)
        if fractionDigits == 0 { return byte(0x30) }
        writeDigits(scaled % power, count: fractionDigits)
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
        reserve(digits &+ 1)
        byte(0x2E)
        writeDigits(fraction, count: digits)
    }

    /// Writes the 16 lowercase hex digits of `value` (most significant first), without quotes.
    mutating func hex(_ value: UInt64) {
        reserve(16)
        let pairs = UnsafeRawPointer(Self.hexPairs.utf8Start)
        let output = UnsafeMutableRawPointer(base + count)
        for index in 0..<8 {
            let byte = Int(truncatingIfNeeded: value >> UInt64(56 &- 8 &* index)) & 0xFF
            // Both digits at once: a two-byte copy from the table.
            output.storeBytes(of: pairs.loadUnaligned(fromByteOffset: 2 &* byte, as: UInt16.self),
                              toByteOffset: 2 &* index, as: UInt16.self)
        }
        count &+= 16
    }

    /// The two decimal digits of 0 to 99, in order.
    private static let decimalPairs: StaticString = """
        00010203040506070809101112131415161718192021222324252627282930313233343536373839\
        40414243444546474849505152535455565758596061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899
        """

    /// The two hex digits of every byte value, in order.
    private static let hexPairs: StaticString = """
        000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f\
        303132333435363738393a3b3c3d3e3f404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f\
        606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f\
        909192939495969798999a9b9c9d9e9fa0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf\
        c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedfe0e1e2e3e4e5e6e7e8e9eaebecedeeef\
        f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff
        """
}
