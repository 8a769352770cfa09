import CTelemetrySignals

/// CRC-32C (Castagnoli), the checksum of every stored record.
///
/// Castagnoli rather than the zlib polynomial because x86 (SSE 4.2) and ARMv8 compute it in hardware:
/// `checksum` uses the CPU's instruction when it has one, else the portable slicing-by-8 form below.
enum CRC32C {
    private static let instruction = tb_crc32c_available() != 0

    /// Continues `crc` (0 to start) over `bytes`.
    @inline(__always)
    static func checksum(_ bytes: UnsafeRawBufferPointer, continuing crc: UInt32 = 0) -> UInt32 {
        guard instruction, let base = bytes.baseAddress else { return portable(bytes, continuing: crc) }
        return tb_crc32c(crc, base, bytes.count)
    }

    private static let tables: [UInt32] = {
        var tables = [UInt32](repeating: 0, count: 8 * 256)
        for index in 0..<256 {
            var crc = UInt32(index)
            for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0x82F6_3B78 : crc >> 1 }
            tables[index] = crc
        }
        for index in 0..<256 {
            var crc = tables[index]
            for slice in 1..<8 {
                crc = tables[Int(crc & 0xFF)] ^ (crc >> 8)
                tables[slice * 256 + index] = crc
            }
        }
        return tables
    }()

    /// The table-driven form, eight bytes per step.
    static func portable(_ bytes: UnsafeRawBufferPointer, continuing crc: UInt32 = 0) -> UInt32 {
        tables.withUnsafeBufferPointer { table in
            var crc = ~crc
            var index = 0
            let count = bytes.count
            while count &- index >= 8 {
                let word = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self))
                    ^ UInt64(crc)
                crc = table[7 &* 256 &+ Int(word & 0xFF)]
                    ^ table[6 &* 256 &+ Int((word >> 8) & 0xFF)]
                    ^ table[5 &* 256 &+ Int((word >> 16) & 0xFF)]
                    ^ table[4 &* 256 &+ Int((word >> 24) & 0xFF)]
                    ^ table[3 &* 256 &+ Int((word >> 32) & 0xFF)]
                    ^ table[2 &* 256 &+ Int((word >> 40) & 0xFF)]
                    ^ table[1 &* 256 &+ Int((word >> 48) & 0xFF)]
                    ^ table[Int(word >> 56)]
                index &+= 8
            }
            while index < count {
                crc = table[Int((crc ^ UInt32(bytes[index])) & 0xFF)] ^ (crc >> 8)
                index &+= 1
            }
            return ~crc
        }
    }
}
