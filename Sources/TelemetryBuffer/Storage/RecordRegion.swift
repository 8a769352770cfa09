import CTelemetrySignals
import Foundation

/// A fixed-capacity run of framed records (`RecordFraming`) in one contiguous block of memory: heap
/// memory for FlushAll, a `MAP_SHARED` file mapping for the crash-safe list.
///
/// Appending is a bounds check, a copy and a release store of the committed length; never an allocation
/// or a syscall. Readers on other threads (the IO cache) or in a crash handler trust only the committed
/// length, read with acquire. Not thread-safe for writers: its owner serialises appends and resets.
final class RecordRegion {
    /// Header plus records.
    let base: UnsafeMutableRawPointer
    /// Bytes available for records (after the header).
    let recordCapacity: Int
    private let kind: RecordFraming.Kind
    /// Keeps the mapping alive; `nil` for heap memory.
    private let mapping: MappedFile?

    /// A heap region with room for `recordCapacity` bytes of records.
    init(recordCapacity: Int, kind: RecordFraming.Kind) {
        self.recordCapacity = recordCapacity
        self.kind = kind
        mapping = nil
        base = .allocate(byteCount: RecordFraming.headerSize + recordCapacity, alignment: 16)
        reset()
    }

    /// A region in a mapped file, emptied (the caller recovered its old contents first).
    init(mapping: MappedFile, kind: RecordFraming.Kind) {
        self.mapping = mapping
        self.kind = kind
        base = mapping.base
        recordCapacity = mapping.size - RecordFraming.headerSize
        reset()
    }

    deinit { if mapping == nil { base.deallocate() } }

    /// Bytes of committed records, as the owner sees them: the header's committed length, which it alone
    /// writes, is the one copy (no stored property to keep in step).
    var recordBytes: Int { committedRecordBytes }

    var isEmpty: Bool { recordBytes == 0 }

    /// Whether a record with a payload of `payloadCount` bytes fits.
    @inline(__always)
    func fits(payloadCount: Int) -> Bool {
        recordBytes + RecordFraming.recordHeaderSize + payloadCount <= recordCapacity
    }

    /// Appends one record, then publishes it with a release store; the caller checked `fits` first.
    @inline(__always)
    func append(category: ItemCategory, id: ItemID, payload: UnsafeRawBufferPointer, payloadCRC: UInt32) {
        let committed = recordBytes
        RecordFraming.writeRecord(
            category: category, id: id, payload: payload, payloadCRC: payloadCRC,
            to: base + RecordFraming.headerSize + committed)
        tb_store_release_u64(committedLength, UInt64(committed + RecordFraming.recordHeaderSize + payload.count))
    }

    private var committedLength: UnsafeMutablePointer<UInt64> {
        (base + RecordFraming.committedLengthOffset).assumingMemoryBound(to: UInt64.self)
    }

    /// The committed length, safe to read from any thread while the owner appends.
    var committedRecordBytes: Int { Int(tb_load_acquire_u64(committedLength)) }

    /// The committed records, for reading with `RecordFraming.forEachRecord`.
    var records: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: base + RecordFraming.headerSize, count: recordBytes)
    }

    /// Records the publication marker (a plain store: it must survive process death, not power loss).
    func mark(_ publication: RecordFraming.Publication) {
        publication.bytes.withUnsafeBytes {
            (base + RecordFraming.publicationOffset).copyMemory(from: $0.baseAddress!, byteCount: $0.count)
        }
    }

    /// Empties the region, clears its marker and stamps a new creation time.
    func reset() {
        let micros = UInt64(max(0, Date().timeIntervalSince1970 * 1_000_000))
        RecordFraming.writeHeader(kind: kind, createdMicros: micros, to: base)
        tb_store_release_u64(committedLength, 0)
    }
}
