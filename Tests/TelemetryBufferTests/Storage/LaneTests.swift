import CTelemetrySignals
import Foundation
import XCTest
@testable import TelemetryBuffer

/// The crash-safe list's lanes (`RecordFraming`, `RecordLanes`): threads adding at once write apart, and
/// whatever reads a list back, a forward or start-up recovery, sends its items in the order they arrived.
final class LaneTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory.remove() }

    private var bufferFolder: String { directory.bufferFolder().path }

    /// A crash-safe list of two lanes for 4 KiB of records, as a buffer leaves it.
    private func twoLaneList(at path: String) throws -> RecordRegion {
        RecordRegion(mapping: try MappedFile(path: path, size: RecordRegion.mappingSize(recordCapacity: 4096, lanes: 2)),
                     kind: .crashSafeList, recordCapacity: 4096, lanes: 2)
    }

    /// Two threads add in turn, each add numbered under a lock of the test's, so the order of arrival is
    /// known: their records land in both lanes of the list, and the logs go out in that order.
    func testLogsAddedOnTwoThreadsGoOutInTheOrderTheyArrived() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory))
        final class Turns: @unchecked Sendable {
            let condition = NSCondition()
            var next = 0
        }
        let turns = Turns()
        let perThread = 45  // 90 in all: one batch, held in the list until close
        let done = DispatchGroup()
        for parity in 0..<2 {
            done.enter()
            Thread {
                defer { done.leave() }
                for _ in 0..<perThread {
                    turns.condition.lock()
                    // Strict turns: the two threads' records alternate, from the first add on.
                    while turns.next % 2 != parity { turns.condition.wait() }
                    buffer.add(log: .test("\(turns.next)"))
                    turns.next += 1
                    turns.condition.broadcast()
                    turns.condition.unlock()
                }
            }.start()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 60), .success, "the adding threads did not finish")
        let list = try XCTUnwrap(try FramedFile.read(folder: bufferFolder, name: "crash-safe-list-1"))
        XCTAssertEqual(list.records.count, RecordRegion.listLanes)
        XCTAssertEqual(list.records.filter { !$0.isEmpty }.count, RecordRegion.listLanes, "each thread wrote into a lane of its own")
        buffer.close()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), (0..<2 * perThread).map(String.init))
    }

    /// A thread whose lane is full goes on in lane 0, which holds whatever the region does; read back, its
    /// items keep the order they were added in.
    func testAThreadWhoseLaneIsFullGoesOnInLaneZeroInOrder() throws {
        try XCTSkipIf(RecordRegion.listLanes == 1, "one lane where records are copied under the lock")
        // 4 KiB of records: lane 1 holds 2 KiB, six records of 325 bytes.
        let regions = RotatingRegions(try twoLaneList(at: directory.url.path + "/list-1"), try twoLaneList(at: directory.url.path + "/list-2"),
                                      limits: .every(100))
        final class Outcomes: @unchecked Sendable { var all: [AppendOutcome] = [] }
        let outcomes = Outcomes()
        // Threads take lane numbers in turn: of two new threads, one picks lane 1.
        for _ in 0..<2 where outcomes.all.isEmpty {
            let done = DispatchSemaphore(value: 0)
            Thread {
                defer { done.signal() }
                guard tb_thread_lane() & 1 == 1 else { return }
                for index in 0..<10 {
                    let payload = Array(("{\"n\":\(index)" + String(repeating: " ", count: 300 - 7) + "}").utf8)
                    outcomes.all.append(payload.withUnsafeBytes {
                        regions.append(EncodedItem(category: .log, payload: $0, payloadCRC: CRC32C.checksum($0), traceID: nil))
                    })
                }
            }.start()
            XCTAssertEqual(done.wait(timeout: .now() + 60), .success)
        }
        XCTAssertEqual(outcomes.all.count, 10, "a thread on lane 1 added")
        XCTAssertFalse(outcomes.all.contains(.rejected(.bufferOverflow)))
        let region = regions.region(0)
        var lanes: [[UInt64]] = [[], []]
        for lane in 0...1 { RecordFraming.forEachRecord(in: region.records(lane: lane)) { lanes[lane].append($0.id.sequence) } }
        XCTAssertEqual(lanes[1], Array(0..<6), "lane 1 until full")
        XCTAssertEqual(lanes[0], Array(6..<10), "then lane 0")
        var merged: [UInt64] = []
        region.records.forEachRecord { merged.append($0.id.sequence) }
        XCTAssertEqual(merged, Array(0..<10))
    }

    /// A list whose lanes hold interleaved items, left by a killed process with its IO cache (which holds
    /// them lane after lane), is published in order of arrival, each item once.
    func testRecoveryMergesALeftListsLanesInOrderOfArrival() throws {
        try FileManager.default.createDirectory(atPath: bufferFolder, withIntermediateDirectories: true)
        let list = try twoLaneList(at: bufferFolder + "/crash-safe-list-1")
        appendLogs(["0", "2", "3", "6"], to: list, lane: 0, sequences: [0, 2, 3, 6])
        appendLogs(["1", "4", "5"], to: list, lane: 1, sequences: [1, 4, 5])
        let cache = AsyncIOCache(path: bufferFolder + "/async-io-cache-1")
        try cache.catchUp(with: list)
        try cache.sync()
        appendLogs(["7"], to: list, lane: 1, sequences: [7])

        let buffer = try TelemetryBuffer(options: testOptions(directory))
        XCTAssertEqual(buffer.recovery.items, 8)
        XCTAssertEqual(buffer.recovery.duplicates, 7, "the cache's copies")
        XCTAssertEqual(buffer.recovery.discardedBytes, 0)
        buffer.close()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), (0..<8).map(String.init))
    }

    /// The same when the list cannot be published as it is (a file that is not a list beside it sends
    /// recovery through deduplication by item ID, which sorts by sequence).
    func testRecoveryOrdersLanesByArrivalWhenItDeduplicates() throws {
        try FileManager.default.createDirectory(atPath: bufferFolder, withIntermediateDirectories: true)
        let list = try twoLaneList(at: bufferFolder + "/crash-safe-list-1")
        appendLogs(["1", "2"], to: list, lane: 1, sequences: [1, 2])
        appendLogs(["0", "3"], to: list, lane: 0, sequences: [0, 3])
        let cache = AsyncIOCache(path: bufferFolder + "/async-io-cache-1")
        try cache.catchUp(with: list)
        try cache.sync()
        try Data([1, 2, 3]).write(to: URL(fileURLWithPath: bufferFolder + "/detected-termination-0"))

        let buffer = try TelemetryBuffer(options: testOptions(directory))
        XCTAssertEqual(buffer.recovery.items, 4)
        XCTAssertEqual(buffer.recovery.discardedBytes, 3)
        buffer.close()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["0", "1", "2", "3"])
    }

    /// A list is read up to the end of its last lane that holds records: an empty lane 1, which starts past
    /// a whole batch, adds nothing (an empty list was read up to there, a megabyte by default, at every
    /// start). A two-lane list says format version 2 and its lane count; a one-lane file stays version 1.
    func testAListIsReadNoFurtherThanItsLanesRecords() throws {
        try FileManager.default.createDirectory(atPath: bufferFolder, withIntermediateDirectories: true)
        let list = try twoLaneList(at: bufferFolder + "/crash-safe-list-1")
        XCTAssertEqual(list.base.load(fromByteOffset: 4, as: UInt16.self), 2, "version 2")
        XCTAssertEqual(list.base.load(fromByteOffset: 7, as: UInt8.self), 2, "two lanes")
        let empty = try XCTUnwrap(try FramedFile.read(folder: bufferFolder, name: "crash-safe-list-1"))
        XCTAssertEqual(empty.bytes.count, RecordFraming.maxHeaderSize, "the first bytes only")
        XCTAssertEqual(empty.withRecords(\.count), 0)

        appendLogs((0..<5).map { "lane 0, item \($0)" }, to: list, lane: 0)
        let lane0End = 128 + list.committedRecordBytes(lane: 0)
        XCTAssertGreaterThan(lane0End, RecordFraming.maxHeaderSize)
        XCTAssertEqual((try FramedFile.read(folder: bufferFolder, name: "crash-safe-list-1"))?.bytes.count, lane0End)

        appendLogs(["lane 1"], to: list, from: 5, lane: 1)
        let read = try XCTUnwrap(try FramedFile.read(folder: bufferFolder, name: "crash-safe-list-1"))
        XCTAssertEqual(read.bytes.count, 4224 + list.committedRecordBytes(lane: 1))
        XCTAssertEqual(read.withRecords(\.count), list.recordBytes)

        let single = RecordRegion(mapping: try MappedFile(path: bufferFolder + "/one-lane", size: 4096 + 32), kind: .crashSafeList)
        XCTAssertEqual(single.base.load(fromByteOffset: 4, as: UInt16.self), 1, "a file of one lane is written as version 1 wrote it")
        XCTAssertEqual(single.base.load(fromByteOffset: 7, as: UInt8.self), 0)
    }

    /// A list written by format version 1 (one lane, no lane count) still recovers, whatever its reserved
    /// byte says (a flipped bit there must not turn its records into a lane table).
    func testAVersionOneListStillRecovers() throws {
        for reserved: UInt8 in [0, 2] {
            let folder = try TemporaryDirectory()
            defer { folder.remove() }
            let buffers = try folder.makeBufferFolder()
            do {
                let list = RecordRegion(mapping: try MappedFile(path: buffers + "/crash-safe-list-2", size: 4096 + 32),
                                        kind: .crashSafeList)
                appendLogs(["a", "b", "c"], to: list)
                list.base.storeBytes(of: UInt16(1).littleEndian, toByteOffset: 4, as: UInt16.self)  // the version
                list.base.storeBytes(of: reserved, toByteOffset: 7, as: UInt8.self)
            }
            let buffer = try TelemetryBuffer(options: testOptions(folder))
            XCTAssertEqual(buffer.recovery.items, 3, "reserved byte \(reserved)")
            XCTAssertEqual(buffer.recovery.discardedBytes, 0, "reserved byte \(reserved)")
            buffer.close()
            XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["a", "b", "c"], "reserved byte \(reserved)")
        }
    }

    /// Crafted lane tables: too many lanes, lanes that start inside the header, run backwards, overlap or
    /// lie past any file, committed lengths past everything. Nothing traps, no byte is read as two lanes'
    /// (no item twice), and what does not add up counts as discarded.
    func testCraftedLaneTablesNeitherTrapNorReadAByteTwice() throws {
        let laneLine = 64, startOffset = 8, committedLine = 64
        // The name, the damage, and whether the lane table no longer adds up (then the file counts whole as
        // discarded, as any header that does not read).
        let crafts: [(String, (UnsafeMutableRawPointer) -> Void, Bool)] = [
            ("nine lanes", { $0.storeBytes(of: UInt8(9), toByteOffset: 7, as: UInt8.self) }, true),
            ("255 lanes", { $0.storeBytes(of: UInt8(255), toByteOffset: 7, as: UInt8.self) }, true),
            ("lane 1 inside the header", { $0.storeBytes(of: UInt64(16).littleEndian, toByteOffset: laneLine + startOffset, as: UInt64.self) }, true),
            ("lane 1 at lane 0's start", { $0.storeBytes(of: UInt64(128).littleEndian, toByteOffset: laneLine + startOffset, as: UInt64.self) }, true),
            ("lane 1 inside lane 0's records", { $0.storeBytes(of: UInt64(200).littleEndian, toByteOffset: laneLine + startOffset, as: UInt64.self) }, false),
            ("lane 1 past the file", { $0.storeBytes(of: UInt64(1 << 40).littleEndian, toByteOffset: laneLine + startOffset, as: UInt64.self) }, true),
            ("lane 1 at the file's end", { $0.storeBytes(of: UInt64(6272).littleEndian, toByteOffset: laneLine + startOffset, as: UInt64.self) }, true),
            ("lane 1 at Int.max", { $0.storeBytes(of: UInt64(Int.max).littleEndian, toByteOffset: laneLine + startOffset, as: UInt64.self) }, true),
            ("lane 1 past any file", { $0.storeBytes(of: UInt64.max.littleEndian, toByteOffset: laneLine + startOffset, as: UInt64.self) }, true),
            ("lane 1 committed past everything", { $0.storeBytes(of: UInt64.max.littleEndian, toByteOffset: committedLine, as: UInt64.self) }, false),
            ("lane 0 committed into lane 1", { $0.storeBytes(of: UInt64(1 << 40).littleEndian, toByteOffset: 16, as: UInt64.self) }, false),
        ]
        for (name, craft, tableBroken) in crafts {
            let folder = try TemporaryDirectory()
            defer { folder.remove() }
            let buffers = try folder.makeBufferFolder()
            do {
                let list = try twoLaneList(at: buffers + "/crash-safe-list-1")
                appendLogs(["0", "2"], to: list, lane: 0, sequences: [0, 2])
                appendLogs(["1", "3"], to: list, lane: 1, sequences: [1, 3])
                craft(list.base)
            }
            let buffer = try TelemetryBuffer(options: testOptions(folder))
            buffer.close()
            let bodies = try logBodies(in: buffer.envelopesDirectory)
            XCTAssertEqual(Set(bodies).count, bodies.count, "\(name): an item twice: \(bodies)")
            XCTAssertTrue(Set(bodies).isSubset(of: ["0", "1", "2", "3"]), "\(name): \(bodies)")
            XCTAssertEqual(bodies, bodies.sorted(), "\(name): out of order")
            if tableBroken {
                XCTAssertEqual(bodies, [], name)
                XCTAssertEqual(buffer.recovery.discardedBytes, RecordRegion.mappingSize(recordCapacity: 4096, lanes: 2), "\(name): the file, counted whole")
            } else if bodies.count < 4 {
                XCTAssertGreaterThan(buffer.recovery.discardedBytes, 0, "\(name): lost without a count")
            }
        }
    }
}
