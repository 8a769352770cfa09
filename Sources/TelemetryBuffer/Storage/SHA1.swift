/// SHA-1 (FIPS 180-4), used only to name the per-DSN folder as sentry-cocoa does
/// (40 lowercase hex digits of the DSN string). Not for security. Hand-written because CryptoKit
/// does not exist on Linux and the package takes no dependencies.
enum SHA1 {
    /// The digest of `bytes` as 40 lowercase hex digits.
    static func hex<Bytes: Collection<UInt8>>(_ bytes: Bytes) -> String {
        digest(bytes).map { byte in
            String(decoding: [HexDigits.digit(byte >> 4), HexDigits.digit(byte & 0xF)], as: UTF8.self)
        }.joined()
    }

    /// The 20-byte digest of `bytes`.
    static func digest<Bytes: Collection<UInt8>>(_ bytes: Bytes) -> [UInt8] {
        var message = Array(bytes)
        let bitLength = UInt64(message.count) &* 8
        message.append(0x80)
        while message.count % 64 != 56 { message.append(0) }
        for shift in stride(from: 56, through: 0, by: -8) { message.append(UInt8(truncatingIfNeeded: bitLength >> UInt64(shift))) }

        var h: (UInt32, UInt32, UInt32, UInt32, UInt32) = (0x6745_2301, 0xEFCD_AB89, 0x98BA_DCFE, 0x1032_5476, 0xC3D2_E1F0)
        var w = [UInt32](repeating: 0, count: 80)
        for chunk in stride(from: 0, to: message.count, by: 64) {
            for index in 0..<16 {
                let offset = chunk + index * 4
                w[index] = UInt32(message[offset]) << 24 | UInt32(message[offset + 1]) << 16
                    | UInt32(message[offset + 2]) << 8 | UInt32(message[offset + 3])
            }
            for index in 16..<80 {
                w[index] = rotate(w[index - 3] ^ w[index - 8] ^ w[index - 14] ^ w[index - 16], 1)
            }
            var (a, b, c, d, e) = h
            for index in 0..<80 {
                let (f, k): (UInt32, UInt32)
                switch index {
                case 0..<20: (f, k) = ((b & c) | (~b & d), 0x5A82_7999)
                case 20..<40: (f, k) = (b ^ c ^ d, 0x6ED9_EBA1)
                case 40..<60: (f, k) = ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC)
                default: (f, k) = (b ^ c ^ d, 0xCA62_C1D6)
                }
                let temp = rotate(a, 5) &+ f &+ e &+ k &+ w[index]
                (e, d, c, b, a) = (d, c, rotate(b, 30), a, temp)
            }
            h = (h.0 &+ a, h.1 &+ b, h.2 &+ c, h.3 &+ d, h.4 &+ e)
        }
        return [h.0, h.1, h.2, h.3, h.4].flatMap { word in
            [UInt8(word >> 24), UInt8(truncatingIfNeeded: word >> 16), UInt8(truncatingIfNeeded: word >> 8),
             UInt8(truncatingIfNeeded: word)]
        }
    }

    private static func rotate(_ value: UInt32, _ count: UInt32) -> UInt32 {
        value << count | value >> (32 - count)
    }
}
