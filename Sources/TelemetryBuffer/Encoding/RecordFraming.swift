/// The one framing of every buffer the library keeps, in memory or in a file.
///
/// ```
/// header (32 bytes): magic "TBUF" | u16 version | u8 kind | u8 0 | u64 created (µs since 1970)
///                    | u64 committed length of the records | publication marker (8 bytes)
/// record:            u32 payload length | u32 CRC-32C | u8 category | 16-byte item ID | payload (JSON)
/// ```
/// All integers little-endian (the committed length is stored natively by an atomic release store; every
/// supported CPU is little-endian). The CRC covers the payload, then the length, category and ID, so a
/// record torn anywhere, or a header pointing past the written bytes, fails the check.
///
/// The publication marker makes publishing a buffer exactly-once across a crash: `u32 first staged
/// envelope index | u16 envelope count | u8 state | u8 0`, see `Publication`.
enum RecordFraming {
    static let headerSize = 32
    static let recordHeaderSize = 25
    static let version: UInt16 = 1
    private static let magic: (UInt8, UInt8, UInt8, UInt8) = (0x54, 0x42, 0x55, 0x46)
    static let committedLengthOffset = 16
    static let publicationOffset = 24

    /// What a framed buffer is, recorded in its header.
    enum Kind: UInt8, Sendable {
        case memoryList = 1
        case crashSafeList = 2
        case asyncIOCache = 3
        case streamCache = 4
        case recovered = 5
    }

    /// How far a buffer's records have been turned into staged `envelope-x` files.
    struct Publication: Equatable, Sendable {
        enum State: UInt8, Sendable {
            /// Not being published.
            case idle = 0
            /// `envelope-first ..< first+count` are being written; they are not yet complete.
            case publishing = 1
            /// Those envelopes are complete: they, not this buffer, now hold the records. Durable only once
            /// synced; recovery trusts this state only within the boot that wrote it.
            case captured = 2
        }

        var state: State
        var firstEnvelope: UInt32
        var envelopeCount: UInt16

        static let idle = Publication(state: .idle, firstEnvelope: 0, envelopeCount: 0)

        /// The staged envelope indices the marker names.
        var envelopes: Range<UInt64> { UInt64(firstEnvelope)..<UInt64(firstEnvelope) + UInt64(envelopeCount) }

        /// The marker's 8 header bytes.
        var bytes: [UInt8] { withUnsafeBytes(of: word.littleEndian) { Array($0) } }

        /// The marker as the one little-endian word it is stored as (the claim byte, the last, 0).
        var word: UInt64 { UInt64(firstEnvelope) | UInt64(envelopeCount) << 32 | UInt64(state.rawValue) << 48 }

        init(state: State, firstEnvelope: UInt32, envelopeCount: UInt16) {
            self.state = state
            self.firstEnvelope = firstEnvelope
            self.envelopeCount = envelopeCount
        }

        /// Reads the marker of a header; an unknown state reads as idle.
        init(header bytes: UnsafeRawBufferPointer) {
            self.init(
                state: State(rawValue: bytes[publicationOffset + 6]) ?? .idle,
                firstEnvelope: UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: publicationOffset, as: UInt32.self)),
                envelopeCount: UInt16(littleEndian: bytes.loadUnaligned(fromByteOffset: publicationOffset + 4, as: UInt16.self)))
        }
    }

    /// Writes a fresh header with no records.
    static func writeHeader(kind: Kind, createdMicros: UInt64, to base: UnsafeMutableRawPointer) {
        base.initializeMemory(as: UInt8.self, repeating: 0, count: headerSize)
        base.storeBytes(of: magic.0, toByteOffset: 0, as: UInt8.self)
        base.storeBytes(of: magic.1, toByteOffset: 1, as: UInt8.self)
        base.storeBytes(of: magic.2, toByteOffset: 2, as: UInt8.self)
        base.storeBytes(of: magic.3, toByteOffset: 3, as: UInt8.self)
        base.storeBytes(of: version.littleEndian, toByteOffset: 4, as: UInt16.self)
        base.storeBytes(of: kind.rawValue, toByteOffset: 6, as: UInt8.self)
        base.storeBytes(of: createdMicros.littleEndian, toByteOffset: 8, as: UInt64.self)
    }

    /// The kind recorded in a header, or `nil` if the bytes are not a header this version reads.
    static func kind(ofHeader bytes: UnsafeRawBufferPointer) -> Kind? {
        guard bytes.count >= headerSize,
              bytes[0] == magic.0, bytes[1] == magic.1, bytes[2] == magic.2, bytes[3] == magic.3,
              UInt16(littleEndian: bytes.loadUnaligned(fromByteOffset: 4, as: UInt16.self)) == version
        else { return nil }
        return Kind(rawValue: bytes[6])
    }

    /// The committed record length a header records.
    static func committedLength(ofHeader bytes: UnsafeRawBufferPointer) -> UInt64 {
        UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: committedLengthOffset, as: UInt64.self))
    }

    /// Writes one record at `destination`, which must have room for `recordHeaderSize + payload.count` bytes.
    /// `payloadCRC` is `CRC32C.checksum(payload)`, computed by the caller outside any lock.
    static func writeRecord(
        category: ItemCategory, id: ItemID, payload: UnsafeRawBufferPointer, payloadCRC: UInt32,
        to destination: UnsafeMutableRawPointer
    ) {
        writeRecordHeader(category: category, id: id, payloadCount: payload.count, payloadCRC: payloadCRC, to: destination)
        if let source = payload.baseAddress {
            (destination + recordHeaderSize).copyMemory(from: source, byteCount: payload.count)
        }
    }

    /// Writes the `recordHeaderSize` bytes that precede a payload.
    static func writeRecordHeader(
        category: ItemCategory, id: ItemID, payloadCount: Int, payloadCRC: UInt32, to destination: UnsafeMutableRawPointer
    ) {
        destination.storeBytes(of: UInt32(payloadCount).littleEndian, toByteOffset: 0, as: UInt32.self)
        destination.storeBytes(of: category.rawValue, toByteOffset: 8, as: UInt8.self)
        destination.storeBytes(of: id.nonce.littleEndian, toByteOffset: 9, as: UInt64.self)
        destination.storeBytes(of: id.sequence.littleEndian, toByteOffset: 17, as: UInt64.self)
        let crc = headerCRC(destination, continuing: payloadCRC)
        destination.storeBytes(of: crc.littleEndian, toByteOffset: 4, as: UInt32.self)
    }

    private static func headerCRC(_ record: UnsafeRawPointer, continuing crc: UInt32) -> UInt32 {
        let length = CRC32C.checksum(UnsafeRawBufferPointer(start: record, count: 4), continuing: crc)
        return CRC32C.checksum(UnsafeRawBufferPointer(start: record + 8, count: 17), continuing: length)
    }

    /// One record read back; `payload` points into the scanned bytes.
    struct Record {
        var category: ItemCategory
        var id: ItemID
        var payload: UnsafeRawBufferPointer
    }

    /// How much of a scan was valid.
    struct Scan: Equatable {
        /// Bytes of whole, valid records from the start.
        var validBytes: Int
        /// Bytes after them that were not valid records (a torn tail, corruption, zeros).
        var discardedBytes: Int
    }

    /// Calls `body` for each record of the longest valid prefix of `bytes` (records only, no file header).
    /// Every length is bounds-checked before use; nothing is allocated; a bad record ends the scan.
    @discardableResult
    static func forEachRecord(
        in bytes: UnsafeRawBufferPointer, _ body: (Record) throws -> Void
    ) rethrows -> Scan {
        var offset = 0
        while bytes.count - offset >= recordHeaderSize, let base = bytes.baseAddress {
            let record = base + offset
            let length = Int(UInt32(littleEndian: record.loadUnaligned(as: UInt32.self)))
            guard length > 0, length <= bytes.count - offset - recordHeaderSize,
                  let category = ItemCategory(rawValue: record.load(fromByteOffset: 8, as: UInt8.self))
            else { break }
            let payload = UnsafeRawBufferPointer(start: record + recordHeaderSize, count: length)
            let stored = UInt32(littleEndian: record.loadUnaligned(fromByteOffset: 4, as: UInt32.self))
            guard headerCRC(record, continuing: CRC32C.checksum(payload)) == stored else { break }
            let id = ItemID(
                nonce: UInt64(littleEndian: record.loadUnaligned(fromByteOffset: 9, as: UInt64.self)),
                sequence: UInt64(littleEndian: record.loadUnaligned(fromByteOffset: 17, as: UInt64.self)))
            try body(Record(category: category, id: id, payload: payload))
            offset += recordHeaderSize + length
        }
        return Scan(validBytes: offset, discardedBytes: bytes.count - offset)
    }
}
