import CTelemetrySignals
import Foundation

/// The one framing of every buffer the library keeps, in memory or in a file, as defined once in
/// `BufferFormat.h` (which the crash handler reads too; `FormatAgreementTests` checks the two agree):
///
/// ```
/// header (32 bytes): magic "TBUF" | u16 version | u8 kind | u8 lanes | u64 created (µs since 1970)
///                    | u64 committed length of the records | publication marker (8 bytes)
/// record:            u32 payload length | u32 CRC-32C | u8 category | 16-byte item ID | payload (JSON)
/// ```
/// A buffer with more than one lane (the crash-safe list) keeps its records in that many runs, each with
/// its own committed length, so that threads adding at once write apart (see `RecordLanes`): its header
/// takes 64 bytes per lane, lane k ≥ 1 keeping its committed length at 64 k and its start at 64 k + 8, and
/// says format version 2. A buffer of one lane is written as version 1 wrote it (lanes byte 0), so that an
/// app run again at an older version still reads every file but the lists.
/// All integers little-endian (the committed length is stored natively by an atomic release store; every
/// supported CPU is little-endian). The CRC covers the payload, then the length, category and ID, so a
/// record torn anywhere, or a header pointing past the written bytes, fails the check.
///
/// The publication marker makes publishing a buffer exactly-once across a crash: `u32 first staged
/// envelope index | u16 envelope count | u8 state | u8 0`, see `Publication`.
enum RecordFraming {
    static let headerSize = Int(TB_HEADER_SIZE)
    static let recordHeaderSize = Int(TB_RECORD_HEADER_SIZE)
    /// The latest format version this code reads (and writes, for buffers with lanes).
    static let version = UInt16(TB_FORMAT_VERSION)
    /// The most lanes a buffer may have, and the header bytes that takes.
    static let maxLanes = Int(TB_MAX_LANES)
    static let maxHeaderSize = maxLanes * Int(TB_LANE_LINE)
    static let committedLengthOffset = Int(TB_HEADER_COMMITTED_OFFSET)
    static let publicationOffset = Int(TB_HEADER_MARKER_OFFSET)
    private static let versionOffset = Int(TB_HEADER_VERSION_OFFSET)
    private static let kindOffset = Int(TB_HEADER_KIND_OFFSET)
    private static let lanesOffset = Int(TB_HEADER_LANES_OFFSET)
    static let createdOffset = Int(TB_HEADER_CREATED_OFFSET)
    private static let magic = withUnsafeBytes(of: tb_header_magic) { Array($0) }

    /// What a framed buffer is, recorded in its header.
    /// (Raw values must be literals: `FormatAgreementTests` checks them against `TB_KIND_*`.)
    enum Kind: UInt8, Sendable, CaseIterable {
        case memoryList = 1
        case crashSafeList = 2
        case asyncIOCache = 3
        case streamCache = 4
        case recovered = 5
    }

    /// How far a buffer's records have been turned into staged `envelope-x` files.
    struct Publication: Equatable, Sendable {
        /// (Checked against `TB_MARKER_IDLE` etc. by `FormatAgreementTests`.)
        enum State: UInt8, Sendable, CaseIterable {
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
        var word: UInt64 {
            UInt64(firstEnvelope) << TB_MARKER_FIRST_SHIFT | UInt64(envelopeCount) << TB_MARKER_COUNT_SHIFT
                | UInt64(state.rawValue) << TB_MARKER_STATE_SHIFT
        }

        init(state: State, firstEnvelope: UInt32, envelopeCount: UInt16) {
            self.state = state
            self.firstEnvelope = firstEnvelope
            self.envelopeCount = envelopeCount
        }

        /// Reads the marker of a header; an unknown state reads as idle.
        init(header bytes: UnsafeRawBufferPointer) {
            self.init(
                state: State(rawValue: bytes[publicationOffset + Int(TB_MARKER_STATE_SHIFT) / 8]) ?? .idle,
                firstEnvelope: UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: publicationOffset + Int(TB_MARKER_FIRST_SHIFT) / 8, as: UInt32.self)),
                envelopeCount: UInt16(littleEndian: bytes.loadUnaligned(fromByteOffset: publicationOffset + Int(TB_MARKER_COUNT_SHIFT) / 8, as: UInt16.self)))
        }
    }

    /// Now, as a header's creation time: microseconds since 1970, 0 for a clock set before it (which trapped
    /// converting to unsigned at every start).
    static func createdNow() -> UInt64 { UInt64(max(0, Date().timeIntervalSince1970 * 1_000_000)) }

    /// Writes a fresh header with no records, for one lane or, given their starts, several.
    static func writeHeader(kind: Kind, createdMicros: UInt64, laneStarts: [Int] = [], to base: UnsafeMutableRawPointer) {
        let lanes = max(1, laneStarts.count)
        base.initializeMemory(as: UInt8.self, repeating: 0, count: headerSize(lanes: lanes))
        for (offset, byte) in magic.enumerated() { base.storeBytes(of: byte, toByteOffset: offset, as: UInt8.self) }
        base.storeBytes(of: (lanes > 1 ? version : 1).littleEndian, toByteOffset: versionOffset, as: UInt16.self)
        base.storeBytes(of: kind.rawValue, toByteOffset: kindOffset, as: UInt8.self)
        if lanes > 1 { base.storeBytes(of: UInt8(lanes), toByteOffset: lanesOffset, as: UInt8.self) }
        base.storeBytes(of: createdMicros.littleEndian, toByteOffset: createdOffset, as: UInt64.self)
        for (lane, start) in laneStarts.enumerated().dropFirst() {
            base.storeBytes(of: UInt64(start).littleEndian, toByteOffset: startOffset(lane: lane), as: UInt64.self)
        }
    }

    /// The header bytes of a buffer with `lanes` lanes: 32 for one, a cache line per lane for more.
    static func headerSize(lanes: Int) -> Int { lanes <= 1 ? headerSize : lanes * Int(TB_LANE_LINE) }

    /// Where a lane's committed length lies in the header: lane 0's is the header's own.
    static func committedOffset(lane: Int) -> Int {
        lane == 0 ? committedLengthOffset : lane * Int(TB_LANE_LINE) + Int(TB_LANE_COMMITTED_OFFSET)
    }

    /// Where the header records a lane's start (lanes 1 and up; lane 0 follows the header).
    private static func startOffset(lane: Int) -> Int { lane * Int(TB_LANE_LINE) + Int(TB_LANE_START_OFFSET) }

    /// The kind recorded in a header, or `nil` if the bytes are not a header this version reads.
    static func kind(ofHeader bytes: UnsafeRawBufferPointer) -> Kind? {
        guard bytes.count >= headerSize, bytes.prefix(magic.count).elementsEqual(magic),
              (1...version).contains(UInt16(littleEndian: bytes.loadUnaligned(fromByteOffset: versionOffset, as: UInt16.self)))
        else { return nil }
        return Kind(rawValue: bytes[kindOffset])
    }

    /// The bytes of each lane's committed records (offsets into the buffer) that a list's header records,
    /// within the first `available` bytes, in lane order; `nil` for a header whose lanes do not add up
    /// (more than `maxLanes`, a lane table cut short, a lane starting no later than the one before it, a
    /// later lane with records starting at or past `available`: crafted or damaged). A committed length
    /// runs no further than the next lane's start, so no byte is read as two lanes'. Version 1 has one
    /// lane, whatever its reserved byte says.
    static func laneRecords(ofHeader bytes: UnsafeRawBufferPointer, available: Int) -> [Range<Int>]? {
        guard kind(ofHeader: bytes) != nil else { return nil }
        let isVersion1 = UInt16(littleEndian: bytes.loadUnaligned(fromByteOffset: versionOffset, as: UInt16.self)) == 1
        let lanes = isVersion1 ? 1 : max(1, Int(bytes[lanesOffset]))
        let header = headerSize(lanes: lanes)
        guard lanes <= maxLanes, bytes.count >= header else { return nil }
        var starts = [header]
        for lane in 1..<lanes {
            let start = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: startOffset(lane: lane), as: UInt64.self))
            guard start > UInt64(starts[lane - 1]), start <= UInt64(Int.max) else { return nil }
            starts.append(Int(start))
        }
        var records: [Range<Int>] = []
        for (lane, start) in starts.enumerated() {
            let committed = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: committedOffset(lane: lane), as: UInt64.self))
            // A lane's records cut off whole by the file's end: the table, not the records, is what is wrong.
            guard lane == 0 || committed == 0 || start < available else { return nil }
            let end = lane + 1 < lanes ? starts[lane + 1] : Int.max
            let length = Int(min(committed, UInt64(end - start)))
            records.append(min(start, available)..<min(start + length, available))
        }
        return records
    }

    /// Whether the bytes are a header a later format version wrote: ours to leave alone, for that version
    /// to read, not to take as damage.
    static func isNewer(header bytes: UnsafeRawBufferPointer) -> Bool {
        bytes.count >= headerSize && bytes.prefix(magic.count).elementsEqual(magic)
            && UInt16(littleEndian: bytes.loadUnaligned(fromByteOffset: versionOffset, as: UInt16.self)) > version
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
        destination.storeBytes(of: UInt32(payloadCount).littleEndian, toByteOffset: lengthOffset, as: UInt32.self)
        destination.storeBytes(of: category.rawValue, toByteOffset: categoryOffset, as: UInt8.self)
        destination.storeBytes(of: id.nonce.littleEndian, toByteOffset: nonceOffset, as: UInt64.self)
        destination.storeBytes(of: id.sequence.littleEndian, toByteOffset: sequenceOffset, as: UInt64.self)
        let crc = headerCRC(destination, continuing: payloadCRC)
        destination.storeBytes(of: crc.littleEndian, toByteOffset: crcOffset, as: UInt32.self)
    }

    private static let lengthOffset = Int(TB_RECORD_LENGTH_OFFSET), crcOffset = Int(TB_RECORD_CRC_OFFSET)
    private static let categoryOffset = Int(TB_RECORD_CATEGORY_OFFSET)
    private static let nonceOffset = Int(TB_RECORD_NONCE_OFFSET), sequenceOffset = Int(TB_RECORD_SEQUENCE_OFFSET)

    /// The CRC of the payload continued over the length, then category and ID (every header byte but the CRC).
    private static func headerCRC(_ record: UnsafeRawPointer, continuing crc: UInt32) -> UInt32 {
        let length = CRC32C.checksum(UnsafeRawBufferPointer(start: record + lengthOffset, count: 4), continuing: crc)
        return CRC32C.checksum(UnsafeRawBufferPointer(start: record + categoryOffset, count: recordHeaderSize - categoryOffset),
                               continuing: length)
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
        /// Valid records of a signal this build does not know (a later version's), skipped, not damage.
        var unknownRecords = 0
    }

    /// Calls `body` for each record of the longest valid prefix of `bytes` (records only, no file header),
    /// and `unknown` with the whole of each valid record of a signal this build does not know, which is
    /// skipped, not taken for damage. Every length is bounds-checked before use; nothing is allocated; a
    /// bad record ends the scan.
    @discardableResult
    static func forEachRecord(
        in bytes: UnsafeRawBufferPointer, unknown: (UnsafeRawBufferPointer) -> Void = { _ in },
        _ body: (Record) throws -> Void
    ) rethrows -> Scan {
        var cursor = Cursor(bytes)
        while let record = cursor.next(unknown: unknown) { try body(record) }
        return cursor.scan
    }

    /// Reads the records of `bytes` one at a time, up to the first that is not valid.
    struct Cursor {
        private let bytes: UnsafeRawBufferPointer
        private var offset = 0

        init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

        /// Records of a signal this build does not know, skipped so far.
        private var unknownRecords = 0

        /// How much was valid, once `next` has returned `nil`.
        var scan: Scan { Scan(validBytes: offset, discardedBytes: bytes.count - offset, unknownRecords: unknownRecords) }

        /// The next record; `nil` at the end or at one that is not valid (every length is bounds-checked
        /// before use, and the CRC checked). A valid record of a signal this build does not know goes to
        /// `unknown`, whole, and the scan goes on after it.
        mutating func next(unknown: (UnsafeRawBufferPointer) -> Void = { _ in }) -> Record? {
            while true {
                guard bytes.count - offset >= recordHeaderSize, let base = bytes.baseAddress else { return nil }
                let record = base + offset
                // Compared before it becomes an `Int`: where `Int` has 32 bits (watchOS), a damaged length of
                // 2^31 or more would trap in the conversion.
                let stated = UInt32(littleEndian: record.loadUnaligned(fromByteOffset: lengthOffset, as: UInt32.self))
                guard stated > 0, UInt(stated) <= UInt(bytes.count - offset - recordHeaderSize) else { return nil }
                let length = Int(stated)
                let payload = UnsafeRawBufferPointer(start: record + recordHeaderSize, count: length)
                let stored = UInt32(littleEndian: record.loadUnaligned(fromByteOffset: crcOffset, as: UInt32.self))
                guard headerCRC(record, continuing: CRC32C.checksum(payload)) == stored else { return nil }
                offset += recordHeaderSize + length
                guard let category = ItemCategory(rawValue: record.load(fromByteOffset: categoryOffset, as: UInt8.self)) else {
                    unknownRecords += 1
                    unknown(UnsafeRawBufferPointer(start: record, count: recordHeaderSize + length))
                    continue
                }
                let id = ItemID(
                    nonce: UInt64(littleEndian: record.loadUnaligned(fromByteOffset: nonceOffset, as: UInt64.self)),
                    sequence: UInt64(littleEndian: record.loadUnaligned(fromByteOffset: sequenceOffset, as: UInt64.self)))
                return Record(category: category, id: id, payload: payload)
            }
        }

        /// The ID of a whole record (as `next` hands an unknown one over).
        static func id(ofRecord record: UnsafeRawBufferPointer) -> ItemID {
            ItemID(nonce: UInt64(littleEndian: record.loadUnaligned(fromByteOffset: nonceOffset, as: UInt64.self)),
                   sequence: UInt64(littleEndian: record.loadUnaligned(fromByteOffset: sequenceOffset, as: UInt64.self)))
        }
    }
}
