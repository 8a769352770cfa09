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
        if bytes.count <= 32 {
            // Most writes are a few bytes of punctuation or a key: cheaper inline than a memcpy call.
            let from = source.assumingMemoryBound(to: UInt8.self)
            for index in 0..<bytes.count { base[count &+ index] = from[index] }
        } else {
            (base + count).update(from: source.assumingMemoryBound(to: UInt8.self), count: bytes.count)
        }
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
        // Most strings need no escape: reserve for that, skip clean words eight bytes at a time, and copy
        // runs of plain bytes whole.
        reserve(bytes.count)
        var runStart = 0
        var index = 0
        while index < bytes.count {
            if bytes.count &- index >= 8,
               !Self.needsEscape(UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self))) {
                index &+= 8
                continue
            }
            let byte = bytes[index]
            index &+= 1
            guard byte < 0x20 || byte == 0x22 || byte == 0x5C else { continue }
            raw(UnsafeRawBufferPointer(rebasing: bytes[runStart..<index &- 1]))
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
            runStart = index
        }
        raw(UnsafeRawBufferPointer(rebasing: bytes[runStart...]))
    }

    /// Whether any of the eight bytes is `"`, `\` or below 0x20 (exact, branch-free: a byte is zero after
    /// the XOR, or below the bound, exactly when its high bit survives the subtraction and the mask).
    @inline(__always)
    private static func needsEscape(_ word: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080
        let quote = word ^ (0x22 &* ones), backslash = word ^ (0x5C &* ones)
        let found = ((quote &- ones) & ~quote) | ((backslash &- ones) & ~backslash) | ((word &- 0x20 &* ones) & ~word)
        return found & highs != 0
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

    /// Writes the 16 lowercase hex digits of `value` (most significant first), without quotes.
    mutating func hex(_ value: UInt64) {
        reserve(16)
        let pairs = Self.hexPairs.utf8Start
        for index in 0..<8 {
            let byte = Int(truncatingIfNeeded: value >> UInt64(56 &- 8 &* index)) & 0xFF
            base[count &+ 2 &* index] = pairs[2 &* byte]
            base[count &+ 2 &* index &+ 1] = pairs[2 &* byte &+ 1]
        }
        count &+= 16
    }

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
