import CTelemetrySignals
import Foundation

/// A fixed-capacity run of framed records (`RecordFraming`) in one contiguous block of memory: heap
/// memory for FlushAll, a `MAP_SHARED` file mapping for the crash-safe list.
///
/// Appending is a bounds check, a copy and a release store of the committed length; never an allocation,
/// and no syscall unless a commit waits for an earlier writer that is not running. Readers on other
/// threads (the IO cache) or in a crash handler trust only the committed length, read with acquire.
/// Writers either append one at a time (`append`), or reserve their records' places one at a time and
/// then write them at once (`write`, then `commit`, which publishes the records of a lane in the order of
/// their places). Resets are the owner's, with no write under way.
///
/// A region may have several lanes, each a run of records with its own committed length (see
/// `RecordFraming`): threads that add at once each write into a lane of their own, so that neither waits
/// for the other's commit nor shares cache lines with its records. Lane 0 can hold `recordCapacity`
/// bytes, so any item fits it; the others half that (the owner keeps all lanes together within
/// `recordCapacity`).
final class RecordRegion {
    /// Header plus records.
    let base: UnsafeMutableRawPointer
    /// Bytes of records all lanes hold together at most (the owner's to keep to: see `fits`).
    let recordCapacity: Int
    /// How many lanes the region has: 1, or `listLanes` for the crash-safe list.
    let laneCount: Int
    /// Keeps the mapping alive; `nil` for heap memory.
    private let mapping: MappedFile?
    /// Each lane's records, committed length and capacity; owned, allocated once (no array on the hot path).
    private let lanes: UnsafeMutablePointer<Lane>

    private struct Lane {
        var records: UnsafeMutableRawPointer
        var committed: UnsafeMutablePointer<UInt64>
        var capacity: Int
        /// Every byte past `written` and past the records (committed or reserved) is zero: `written` is the
        /// end of what resets cut off and `zeroUnused` has not cleared yet. Owner only.
        var written: Int
    }

    /// The lanes a crash-safe list has: two, for two threads adding at once (more would take the lock's
    /// state past a cache line, see `RotatingRegions`); one on Apple platforms, where records are copied
    /// under the lock (see `RotatingRegions`), so threads never write at once.
    #if canImport(Darwin)
    static let listLanes = 1
    #else
    static let listLanes = 2
    #endif

    /// Bytes each lane can hold: lane 0 all of `recordCapacity`, the others half.
    private static func laneCapacities(_ recordCapacity: Int, lanes: Int) -> [Int] {
        [recordCapacity] + Array(repeating: recordCapacity / 2, count: lanes - 1)
    }

    /// Bytes of a mapped region with `lanes` lanes for `recordCapacity` bytes of records.
    static func mappingSize(recordCapacity: Int, lanes: Int) -> Int {
        RecordFraming.headerSize(lanes: lanes) + laneCapacities(recordCapacity, lanes: lanes).reduce(0, +)
    }

    /// A heap region with room for `recordCapacity` bytes of records, in one lane.
    init(recordCapacity: Int, kind: RecordFraming.Kind) {
        self.recordCapacity = recordCapacity
        mapping = nil
        laneCount = 1
        base = .allocate(byteCount: RecordFraming.headerSize + recordCapacity, alignment: 16)
        lanes = Self.lay(base, capacities: [recordCapacity], written: recordCapacity)
        Self.initialize(base, kind: kind, lanes: lanes, count: 1)
    }

    /// A region in a mapped file of `mappingSize(recordCapacity:lanes:)` bytes, emptied (the caller
    /// recovered its old contents first).
    init(mapping: MappedFile, kind: RecordFraming.Kind, recordCapacity: Int, lanes: Int) {
        precondition(mapping.size == Self.mappingSize(recordCapacity: recordCapacity, lanes: lanes))
        self.mapping = mapping
        self.recordCapacity = recordCapacity
        laneCount = lanes
        base = mapping.base
        self.lanes = Self.lay(base, capacities: Self.laneCapacities(recordCapacity, lanes: lanes),
                              written: mapping.wasEmpty ? 0 : .max)
        Self.initialize(base, kind: kind, lanes: self.lanes, count: lanes)
    }

    /// A region of one lane filling a mapped file, emptied.
    convenience init(mapping: MappedFile, kind: RecordFraming.Kind) {
        self.init(mapping: mapping, kind: kind, recordCapacity: mapping.size - RecordFraming.headerSize, lanes: 1)
    }

    /// The lanes of a region at `base`, one after another after the header.
    private static func lay(_ base: UnsafeMutableRawPointer, capacities: [Int], written: Int) -> UnsafeMutablePointer<Lane> {
        let lanes = UnsafeMutablePointer<Lane>.allocate(capacity: capacities.count)
        var start = RecordFraming.headerSize(lanes: capacities.count)
        for (index, capacity) in capacities.enumerated() {
            lanes.advanced(by: index).initialize(to: Lane(
                records: base + start,
                committed: (base + RecordFraming.committedOffset(lane: index)).assumingMemoryBound(to: UInt64.self),
                capacity: capacity, written: min(written, capacity)))
            start += capacity
        }
        return lanes
    }

    /// A fresh header: no records, an idle marker, the creation time now.
    private static func initialize(_ base: UnsafeMutableRawPointer, kind: RecordFraming.Kind, lanes: UnsafeMutablePointer<Lane>, count: Int) {
        let starts: [Int] = count == 1 ? [] : (0..<count).map { lane in base.distance(to: lanes[lane].records) }
        RecordFraming.writeHeader(kind: kind, createdMicros: RecordFraming.createdNow(),
                                  laneStarts: starts, to: base)
    }

    deinit {
        if mapping == nil { base.deallocate() }
        lanes.deallocate()
    }

    /// Bytes from `base`: the header, then every lane.
    var size: Int { mapping?.size ?? RecordFraming.headerSize + recordCapacity }

    /// The open file of a mapped region, `nil` for heap memory.
    var fileDescriptor: FileDescriptor? { mapping?.descriptor }

    /// Bytes of committed records in all lanes: the header's committed lengths, written by `append`,
    /// `commit` and `reset` only, are the one copy (no stored property to keep in step).
    var recordBytes: Int { (0..<laneCount).reduce(0) { $0 + committedRecordBytes(lane: $1) } }

    /// Whether a record with a payload of `payloadCount` bytes fits after `length` bytes of records in all
    /// lanes.
    @inline(__always)
    func fits(payloadCount: Int, after length: Int) -> Bool {
        length + RecordFraming.recordHeaderSize + payloadCount <= recordCapacity
    }

    /// Bytes of records `lane` can hold.
    func capacity(lane: Int) -> Int { lanes[lane].capacity }

    /// Appends one record after the committed ones of lane 0, then publishes it with a release store; the
    /// caller checked `fits` first.
    @inline(__always)
    func append(category: ItemCategory, id: ItemID, payload: UnsafeRawBufferPointer, payloadCRC: UInt32) {
        let committed = committedRecordBytes(lane: 0)
        write(category: category, id: id, payload: payload, payloadCRC: payloadCRC, lane: 0, at: committed)
        tb_store_release_u64(lanes[0].committed, UInt64(committed + RecordFraming.recordHeaderSize + payload.count))
    }

    /// Writes one record at `offset` (bytes into the lane's records), a place the caller reserved and
    /// checked with `fits`, without publishing it (see `commit`).
    @inline(__always)
    func write(category: ItemCategory, id: ItemID, payload: UnsafeRawBufferPointer, payloadCRC: UInt32, lane: Int, at offset: Int) {
        RecordFraming.writeRecord(category: category, id: id, payload: payload, payloadCRC: payloadCRC,
                                  to: lanes[lane].records + offset)
    }

    /// Publishes the record written at `offset..<end` of `lane` once the lane's records before it are:
    /// the committed length only ever covers whole records, so a crash at any moment loses none that a
    /// `commit` returned for. Waits while a record reserved before this one in the lane is still being
    /// written: on another thread, a copy of a few hundred bytes.
    @inline(__always)
    func commit(lane: Int, from offset: Int, to end: Int) {
        let committed = lanes[lane].committed
        if tb_load_acquire_u64(committed) != UInt64(offset) { waitForCommits(lane: lane, upTo: offset) }
        tb_store_release_u64(committed, UInt64(end))
    }

    /// Waits until the records of `lane` before `length` are committed (`length` is the end of a reserved
    /// place): spins briefly, then yields, then sleeps 50 µs at a time, so that a writer it waits for runs
    /// even where yielding does not let it (real-time priorities, one CPU).
    func waitForCommits(lane: Int, upTo length: Int) {
        let committed = lanes[lane].committed
        var turns = 0
        while tb_load_acquire_u64(committed) != UInt64(length) {
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

    /// A lane's committed length, safe to read from any thread while the owner appends.
    func committedRecordBytes(lane: Int) -> Int { Int(tb_load_acquire_u64(lanes[lane].committed)) }

    /// A lane's committed records.
    func records(lane: Int) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: lanes[lane].records, count: committedRecordBytes(lane: lane))
    }

    /// The committed records of every lane.
    var records: RecordLanes { RecordLanes((0..<laneCount).map(records(lane:))) }

    /// Zeroes, from `cursor` on, up to `limit` bytes of what resets cut off past `lane`'s records
    /// (`length` bytes, those written or reserved), and returns where the next step starts; `nil` once
    /// everything past the records is zero. Callers release the owner's lock between steps, so appends
    /// wait for one step at most (and move the records' end, which the next step starts after). Readers,
    /// which stop at the committed length, need not wait. Stores into a mapping need no new disk space
    /// where DoubleRotatingBuffer runs (see `MappedFile`). Not concurrently with `reset`.
    func zeroUnused(lane: Int, from cursor: Int, after length: Int, limit: Int) -> Int? {
        let start = max(cursor, length)
        let end = min(lanes[lane].written, start + limit)
        guard start < end else {
            lanes[lane].written = length
            return nil
        }
        (lanes[lane].records + start).initializeMemory(as: UInt8.self, repeating: 0, count: end - start)
        return end
    }

    /// Gives the whole pages past `lane`'s records (`length` bytes, those committed or reserved) back to
    /// the system (heap memory only: a mapping's pages are the file's, which the kernel may drop by itself
    /// once written). What they held was cut off by a reset; later appends find zeros there, or the old
    /// bytes. Under the owner's lock.
    func releaseUnusedPages(lane: Int, after length: Int) {
        guard mapping == nil else { return }
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        let start = UInt(bitPattern: lanes[lane].records + length)
        let end = UInt(bitPattern: lanes[lane].records + lanes[lane].capacity)
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

    /// Empties the region and clears its marker: first the committed lengths, so a handler that claims the
    /// region in between finds a `captured` marker or no records, never published records under an idle
    /// marker. Then a new creation time.
    ///
    /// - Throws: `CrashInProgress` if the region is claimed (its records are then
    ///   already cut off; the marker stays as the handler found it).
    func reset() throws {
        for lane in 0..<laneCount {
            lanes[lane].written = max(lanes[lane].written, committedRecordBytes(lane: lane))
            tb_store_release_u64(lanes[lane].committed, 0)
        }
        try mark(.idle)
        base.storeBytes(of: RecordFraming.createdNow().littleEndian, toByteOffset: RecordFraming.createdOffset, as: UInt64.self)
    }
}

/// The crash handler has claimed a region: it stores the region's items now, so a forward leaves it as it is.
struct CrashInProgress: Error, CustomStringConvertible {
    var description: String { "the crash handler is storing this buffer's items" }
}
