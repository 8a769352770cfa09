import Foundation

/// A fixed-capacity run of framed records (`RecordFraming`) in one contiguous block of memory.
///
/// Appending is a bounds check and a copy, never an allocation or a syscall. The block is the whole
/// crash-relevant state of a list: a crash handler can write it out as is. Not thread-safe: its owner
/// serialises access. The memory comes from the heap here; a file mapping backs the crash-safe list.
final class RecordRegion {
    /// Header plus records.
    let base: UnsafeMutableRawPointer
    /// Bytes available for records (after the header).
    let recordCapacity: Int
    /// Bytes of committed records.
    private(set) var recordBytes = 0
    private let kind: RecordFraming.Kind

    /// A heap region with room for `recordCapacity` bytes of records.
    init(recordCapacity: Int, kind: RecordFraming.Kind) {
        self.recordCapacity = recordCapacity
        self.kind = kind
        base = .allocate(byteCount: RecordFraming.headerSize + recordCapacity, alignment: 16)
        reset()
    }

    deinit { base.deallocate() }

    var isEmpty: Bool { recordBytes == 0 }

    /// Whether a record with a payload of `payloadCount` bytes fits.
    @inline(__always)
    func fits(payloadCount: Int) -> Bool {
        recordBytes + RecordFraming.recordHeaderSize + payloadCount <= recordCapacity
    }

    /// Appends one record; the caller checked `fits` first.
    @inline(__always)
    func append(category: ItemCategory, id: ItemID, payload: UnsafeRawBufferPointer, payloadCRC: UInt32) {
        let destination = base + RecordFraming.headerSize + recordBytes
        RecordFraming.writeRecord(
            category: category, id: id, payload: payload, payloadCRC: payloadCRC, to: destination)
        recordBytes += RecordFraming.recordHeaderSize + payload.count
        base.storeBytes(
            of: UInt64(recordBytes).littleEndian, toByteOffset: RecordFraming.committedLengthOffset,
            as: UInt64.self)
    }

    /// The committed records, for reading with `RecordFraming.forEachRecord`.
    var records: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: base + RecordFraming.headerSize, count: recordBytes)
    }

    /// Empties the region and stamps a new creation time.
    func reset() {
        recordBytes = 0
        let micros = UInt64(max(0, Date().timeIntervalSince1970 * 1_000_000))
        RecordFraming.writeHeader(kind: kind, createdMicros: micros, to: base)
    }
}
