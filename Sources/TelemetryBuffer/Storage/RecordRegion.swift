import CTelemetrySignals
import Foundation

/// A fixed-capacity run of framed records (`RecordFraming`) in one contiguous block of memory: heap
/// memory for FlushAll, a `MAP_SHARED` file mapping for the crash-safe list.
///
/// Appending is a bounds check, a copy and a release store of the committed length; never an allocation,
/// and no syscall unless a commit waits for an earlier writer that is not running. Readers on other threads (the IO cache) or in a crash handler trust only the committed
/// length, read with acquire. Writers either append one at a time (`append`), or reserve their records'
/// places one at a time and then write them at once (`write`, then `commit`, which publishes the records
/// in the order of their places). Resets are the owner's, with no write under way.
final class RecordRegion {
    /// Header plus records.
    let base: UnsafeMutableRawPointer
    /// Bytes available for records (after the header).
    let recordCapacity: Int
    private let kind: RecordFraming.Kind
    /// Keeps the mapping alive; `nil` for heap memory.
    private let mapping: MappedFile?
    /// Every byte past `written` and past the records (committed or reserved) is zero: `written` is the
    /// end of what resets cut off and `zeroUnused` has not cleared yet. Owner only.
    private var written: Int

    /// A heap region with room for `recordCapacity` bytes of records.
    init(recordCapacity: Int, kind: RecordFraming.Kind) {
        self.recordCapacity = recordCapacity
        self.kind = kind
        mapping = nil
        written = recordCapacity
        base = .allocate(byteCount: RecordFraming.headerSize + recordCapacity, alignment: 16)
        Self.initialize(base, kind: kind)
    }

    /// A region in a mapped file, emptied (the caller recovered its old contents first).
    init(mapping: MappedFile, kind: RecordFraming.Kind) {
        self.mapping = mapping
        self.kind = kind
        base = mapping.base
        recordCapacity = mapping.size - RecordFraming.headerSize
        written = mapping.wasEmpty ? 0 : recordCapacity
        Self.initialize(base, kind: kind)
    }

    /// A fresh header: no records, an idle marker, the creation time now.
    private static func initialize(_ base: UnsafeMutableRawPointer, kind: RecordFraming.Kind) {
        RecordFraming.writeHeader(kind: kind, createdMicros: UInt64(max(0, Date().timeIntervalSince1970 * 1_000_000)), to: base)
    }

    deinit { if mapping == nil { base.deallocate() } }

    /// The open file of a mapped region, `nil` for heap memory.
    var fileDescriptor: FileDescriptor? { mapping?.descriptor }

    /// Bytes of committed records: the header's committed length, written by `append`, `commit` and
    /// `reset` only, is the one copy (no stored property to keep in step).
    var recordBytes: Int { committedRecordBytes }

    /// Whether a record with a payload of `payloadCount` bytes fits after `length` bytes of records.
    @inline(__always)
    func fits(payloadCount: Int, after length: Int) -> Bool {
        length + RecordFraming.recordHeaderSize + payloadCount <= recordCapacity
    }

    /// Appends one record after the committed ones, then publishes it with a release store; the caller
    /// checked `fits` first.
    @inline(__always)
    func append(category: ItemCategory, id: ItemID, payload: UnsafeRawBufferPointer, payloadCRC: UInt32) {
        let committed = recordBytes
        write(category: category, id: id, payload: payload, payloadCRC: payloadCRC, at: committed)
        tb_store_release_u64(committedLength, UInt64(committed + RecordFraming.recordHeaderSize + payload.count))
    }

    /// Writes one record at `offset` (bytes into the records), a place the caller reserved and checked
    /// with `fits`, without publishing it (see `commit`).
    @inline(__always)
    func write(category: ItemCategory, id: ItemID, payload: UnsafeRawBufferPointer, payloadCRC: UInt32, at offset: Int) {
        RecordFraming.writeRecord(
            category: category, id: id, payload: payload, payloadCRC: payloadCRC,
            to: base + RecordFraming.headerSize + offset)
    }

    /// Publishes the record written at `offset..<end` once the records before it are: the committed
    /// length only ever covers whole records, so a crash at any moment loses none that a `commit` returned
    /// for. Waits while a record reserved before this one is still being written: on another thread, a
    /// copy of a few hundred bytes.
    @inline(__always)
    func commit(from offset: Int, to end: Int) {
        if tb_load_acquire_u64(committedLength) != UInt64(offset) { waitForCommits(upTo: offset) }
        tb_store_release_u64(committedLength, UInt64(end))
    }

    /// Waits until the records before `length` are committed (`length` is the end of a reserved place):
    /// spins briefly, then yields, then sleeps 50 µs at a time, so that a writer it waits for runs even
    /// where yielding does not let it (real-time priorities, one CPU).
    func waitForCommits(upTo length: Int) {
        var turns = 0
        while tb_load_acquire_u64(committedLength) != UInt64(length) {
            turns += 1
            if turns < 100 {
                tb_cpu_relax()
            } else if turns < 200 {
                sched_yield()
            } else {
                usleep(50)
            }
        }
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

    /// Zeroes, from `cursor` on, up to `limit` bytes of what resets cut off past the records (`length`
    /// bytes, those written or reserved), and returns where the next step starts; `nil` once everything
    /// past the records is zero. Callers release the owner's lock between steps, so appends wait for one
    /// step at most (and move the records' end, which the next step starts after). Readers, which stop at
    /// the committed length, need not wait. Stores into a mapping need no new disk space where
    /// DoubleRotatingBuffer runs (see `MappedFile`). Not concurrently with `reset`.
    func zeroUnused(from cursor: Int, after length: Int, limit: Int) -> Int? {
        let start = max(cursor, length)
        let end = min(written, start + limit)
        guard start < end else {
            written = length
            return nil
        }
        (base + RecordFraming.headerSize + start).initializeMemory(as: UInt8.self, repeating: 0, count: end - start)
        return end
    }

    /// Gives the whole pages past the records (`length` bytes, those committed or reserved) back to the
    /// system (heap memory only: a mapping's pages are the file's, which the kernel may drop by itself once
    /// written). What they held was cut off by a reset; later appends find zeros there, or the old bytes.
    /// Under the owner's lock.
    func releaseUnusedPages(after length: Int) {
        guard mapping == nil else { return }
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        let start = UInt(bitPattern: base + RecordFraming.headerSize + length)
        let end = UInt(bitPattern: base + RecordFraming.headerSize + recordCapacity)
        let first = (start + UInt(page) - 1) & ~UInt(page - 1), last = end & ~UInt(page - 1)
        guard first < last, let pages = UnsafeMutableRawPointer(bitPattern: first) else { return }
        #if canImport(Darwin)
        _ = madvise(pages, Int(last - first), MADV_FREE)
        #else
        _ = madvise(pages, Int(last - first), MADV_DONTNEED)
        #endif
    }

    /// Writes a mapped region's pages to disk (nothing to do for heap memory).
    func sync() throws { try mapping?.sync() }

    /// Records the publication marker (a plain store for memory's sake: it must survive process death,
    /// not power loss), unless the crash handler has claimed the region.
    ///
    /// - Throws: `CrashInProgress` if the region is claimed: the handler stores its
    ///   items now, with the marker it found.
    func mark(_ publication: RecordFraming.Publication) throws {
        guard tb_marker_store(markerWord, publication.word) != 0 else { throw CrashInProgress() }
    }

    /// The publication marker as it stands.
    var publication: RecordFraming.Publication {
        RecordFraming.Publication(header: UnsafeRawBufferPointer(start: base, count: RecordFraming.headerSize))
    }

    /// Whether the crash handler has claimed the region (see `TB_MARKER_CLAIMED`).
    var isClaimed: Bool { tb_marker_claimed(markerWord) != 0 }

    private var markerWord: UnsafeMutablePointer<UInt64> {
        (base + RecordFraming.publicationOffset).assumingMemoryBound(to: UInt64.self)
    }

    /// Empties the region and clears its marker: first the committed length, so a handler that claims the
    /// region in between finds a `captured` marker or no records, never published records under an idle
    /// marker. Then a new creation time.
    ///
    /// - Throws: `CrashInProgress` if the region is claimed (its records are then
    ///   already cut off; the marker stays as the handler found it).
    func reset() throws {
        written = max(written, recordBytes)
        tb_store_release_u64(committedLength, 0)
        try mark(.idle)
        let micros = UInt64(max(0, Date().timeIntervalSince1970 * 1_000_000))
        base.storeBytes(of: micros.littleEndian, toByteOffset: RecordFraming.createdOffset, as: UInt64.self)
    }
}

/// The crash handler has claimed a region: it stores the region's items now, so a forward leaves it as it is.
struct CrashInProgress: Error, CustomStringConvertible {
    var description: String { "the crash handler is storing this buffer's items" }
}
