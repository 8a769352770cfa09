import CTelemetrySignals
import Foundation
import XCTest
@testable import TelemetryBuffer

final class StorageTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory.remove() }

    private var bufferFolder: String { directory.bufferFolder().path }

    /// Appends logs with bodies `bodies` (IDs: `nonce`, sequence = index) to a region.
    private func fileSize(_ name: String) throws -> Int {
        try FileManager.default.attributesOfItem(atPath: bufferFolder + "/" + name)[.size] as! Int
    }

    /// The IO caches are created by their first copy, on the IO queue, not by the thread that creates the
    /// buffer (each file created took 0.1 ms of its start on this machine's ext4). A buffer that never
    /// receives an item leaves none; the active list's cache appears with its first item's copy.
    func testTheIOCachesAreCreatedByTheirFirstCopy() throws {
        let caches = [BufferFile.asyncIOCache(1).name, BufferFile.asyncIOCache(2).name]
        let exists = { caches.map { FileManager.default.fileExists(atPath: self.bufferFolder + "/" + $0) } }
        let idle = try TelemetryBuffer(options: testOptions(directory))
        XCTAssertEqual(exists(), [false, false], "created with the buffer")
        idle.close()
        XCTAssertEqual(exists(), [false, false], "a buffer without items")
        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.ioSyncInterval = 0.01 })
        buffer.add(log: .test("one"))
        try eventually { (try FramedFile.read(folder: self.bufferFolder, name: caches[0]))?.withRecords(\.count) ?? 0 > 0 }
        XCTAssertEqual(exists(), [true, false], "the active list's, by its copy")
        buffer.flush()
        buffer.add(log: .test("two"))
        buffer.close()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["one", "two"])
    }

    func testTheIOCacheMirrorsTheListIncrementally() throws {
        try FileManager.default.createDirectory(atPath: directory.url.path + "/f", withIntermediateDirectories: true)
        let list = RecordRegion(mapping: try MappedFile(path: directory.url.path + "/f/list", size: 4096 + 32), kind: .crashSafeList)
        let cache = AsyncIOCache(path: directory.url.path + "/f/cache")
        XCTAssertFalse(try cache.catchUp(with: list), "nothing to copy yet")
        appendLogs(["a", "b"], to: list)
        XCTAssertTrue(try cache.catchUp(with: list))
        appendLogs(["c"], to: list, from: 2)
        XCTAssertTrue(try cache.catchUp(with: list))
        try cache.sync()
        let file = try XCTUnwrap(try FramedFile.read(folder: directory.url.path + "/f", name: "cache"))
        XCTAssertEqual(file.kind, .asyncIOCache)
        XCTAssertEqual(Array(file.bytes[file.records[0]]), Array(list.records(lane: 0)), "the list's records")
        // Retired, the file keeps the records under its new name; an empty one mirrors the list's next records.
        try cache.retire(as: directory.url.path + "/f/retired", reusing: nil)
        XCTAssertEqual((try FramedFile.read(folder: directory.url.path + "/f", name: "retired"))?.bytes, file.bytes)
        XCTAssertEqual((try FramedFile.read(folder: directory.url.path + "/f", name: "cache"))?.withRecords(\.count), 0)
        try list.reset()
        appendLogs(["d"], to: list, from: 3)
        XCTAssertTrue(try cache.catchUp(with: list))
        let fresh = try XCTUnwrap(try FramedFile.read(folder: directory.url.path + "/f", name: "cache"))
        XCTAssertEqual(Array(fresh.bytes[fresh.records[0]]), Array(list.records(lane: 0)))
        // A copy cut to its header takes the cache's place at the next retirement: the same file, not a new one.
        let spare = directory.url.path + "/f/retired"
        XCTAssertEqual(truncate(spare, off_t(RecordFraming.headerSize)), 0)
        let spareInode = try FileManager.default.attributesOfItem(atPath: spare)[.systemFileNumber] as? Int
        try cache.retire(as: directory.url.path + "/f/retired-2", reusing: spare)
        XCTAssertFalse(FileManager.default.fileExists(atPath: spare))
        XCTAssertEqual(try FileManager.default.attributesOfItem(atPath: directory.url.path + "/f/cache")[.systemFileNumber] as? Int,
                       spareInode)
        let reused = try XCTUnwrap(try FramedFile.read(folder: directory.url.path + "/f", name: "cache"))
        XCTAssertEqual(reused.kind, .asyncIOCache)
        XCTAssertEqual(reused.withRecords(\.count), 0)
        XCTAssertEqual((try FramedFile.read(folder: directory.url.path + "/f", name: "retired-2"))?.bytes, fresh.bytes)
    }

    func testRecoverySalvagesDamagedFilesAndCountsWhatItSkips() throws {
        try FileManager.default.createDirectory(atPath: bufferFolder, withIntermediateDirectories: true)
        // List 1: four records committed, the last one torn by a flipped byte, junk past the committed length.
        let list = RecordRegion(mapping: try MappedFile(path: bufferFolder + "/crash-safe-list-1", size: 4096 + 32),
                                kind: .crashSafeList)
        appendLogs(["l0", "l1", "l2", "l3"], to: list)
        let lastRecord = list.records.count / 4
        (list.base + 32 + list.records.count - 3).storeBytes(of: 0x21, as: UInt8.self)
        // Its IO cache copied the first two records.
        let cache = AsyncIOCache(path: bufferFolder + "/async-io-cache-1")
        let half = RecordRegion(recordCapacity: 4096, kind: .memoryList)
        appendLogs(["l0", "l1"], to: half)
        _ = try cache.catchUp(with: half)
        // A termination file of garbage, and a stream cache with one record and a torn tail.
        let garbage = (0..<500).map { _ in UInt8.random(in: 0...255) }
        try Data(garbage).write(to: URL(fileURLWithPath: bufferFolder + "/detected-termination-0"))
        let stream = RecordRegion(recordCapacity: 4096, kind: .streamCache)
        appendLogs(["s0"], to: stream, nonce: 2)
        var streamBytes = Array(UnsafeRawBufferPointer(start: stream.base, count: 32 + stream.records.count))
        streamBytes += Array(streamBytes[32..<52])
        try Data(streamBytes).write(to: URL(fileURLWithPath: bufferFolder + "/cache"))

        let buffer = try TelemetryBuffer(options: testOptions(directory))
        XCTAssertEqual(buffer.recovery.items, 4, "l0 l1 l2 and s0")
        XCTAssertEqual(buffer.recovery.duplicates, 2, "l0 and l1 were also in the IO cache")
        XCTAssertEqual(buffer.recovery.discardedBytes, lastRecord + 500 + 20)
        XCTAssertEqual(Set(buffer.recovery.files), ["async-io-cache-1", "cache", "crash-safe-list-1", "detected-termination-0"])
        // The files were claimed aside for the background queue, and removed once published.
        let left = try FileManager.default.contentsOfDirectory(atPath: bufferFolder)
        XCTAssertFalse(left.contains { $0.hasPrefix("recovering-") || $0.hasPrefix("recovered") }, "\(left)")
        buffer.close()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["l0", "l1", "l2", "s0"])
    }

    /// Recovery reads what a file's header says matters, and never past the file's end.
    func testAFileIsReadNoFurtherThanItsHeaderSays() throws {
        let path = directory.url.path + "/file"
        let bytes = (0..<100).map { UInt8($0) }
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        var asked: [UInt8] = []
        XCTAssertEqual(FileSystem.contents(of: path, prefix: 8) { asked = Array($0); return 20 }, Array(bytes[..<20]))
        XCTAssertEqual(asked, Array(bytes[..<8]), "the length is asked of the first bytes")
        XCTAssertEqual(FileSystem.contents(of: path, prefix: 8) { _ in 1000 }, bytes, "never past the end")
        XCTAssertEqual(FileSystem.contents(of: path, prefix: 8) { _ in 3 }, Array(bytes[..<8]), "the first bytes are always read")
        XCTAssertEqual(FileSystem.contents(of: path, prefix: 200) { _ in 0 }, bytes, "a shorter file is read whole")
        XCTAssertEqual(FileSystem.contents(of: path), bytes)
        XCTAssertNil(FileSystem.contents(of: path + "-missing"))

        // A list is read up to its committed length, not its fixed size.
        let list = RecordRegion(mapping: try MappedFile(path: directory.url.path + "/list", size: 4096 + 32), kind: .crashSafeList)
        appendLogs(["a"], to: list)
        let file = try XCTUnwrap(try FramedFile.read(folder: directory.url.path, name: "list"))
        XCTAssertEqual(file.bytes.count, RecordFraming.maxHeaderSize, "as much as any header takes, not the list's fixed size")
        XCTAssertEqual(file.records, [32..<32 + list.records.count])
    }

    /// A corrupt committed length is not trusted: the list is read to its end and salvaged.
    func testAListWhoseCommittedLengthIsCorruptIsReadToItsEnd() throws {
        try FileManager.default.createDirectory(atPath: bufferFolder, withIntermediateDirectories: true)
        // Two lists of three records each, whose headers then claim more than their files hold: a little
        // more, and more than any length can be.
        for (number, claimed) in [(1, UInt64(1) << 40), (2, UInt64.max)] {
            let list = RecordRegion(mapping: try MappedFile(path: bufferFolder + "/crash-safe-list-\(number)", size: 4096 + 32),
                                    kind: .crashSafeList)
            appendLogs(["a\(number)", "b\(number)", "c\(number)"], to: list, nonce: UInt64(number))
            (list.base + RecordFraming.committedLengthOffset).storeBytes(of: claimed.littleEndian, as: UInt64.self)
        }

        let buffer = try TelemetryBuffer(options: testOptions(directory))
        XCTAssertEqual(buffer.recovery.items, 6)
        buffer.close()
        XCTAssertEqual(Set(try logBodies(in: buffer.envelopesDirectory)), ["a1", "b1", "c1", "a2", "b2", "c2"])
    }

    /// Names the buffer could have written but with numbers it never writes are not its files.
    /// Every reservation, not only the first after the indices wrap at 2^32, skips the envelopes staged
    /// and the ranges older markers name; staging never writes over a file already there, and a stage that
    /// fails removes only what it created; before recovery is done only this process's envelopes move.
    func testReservationsNeverReuseAnIndexInUse() throws {
        let folder = try BufferFolder(path: directory.makeBufferFolder())
        defer { folder.release() }
        for index in [0, 3, Int(UInt32.max) - 1] {
            XCTAssertTrue(FileManager.default.createFile(atPath: bufferFolder + "/envelope-\(index)", contents: Data("theirs".utf8)))
        }
        folder.holdBack(markers: [.init(state: .publishing, firstEnvelope: UInt32.max - 40, envelopeCount: 30),
                                  .init(state: .publishing, firstEnvelope: 6, envelopeCount: 2)])
        var reserved: [Range<UInt64>] = []
        for _ in 0..<4 { reserved.append(try folder.reserve(2).envelopes) }
        XCTAssertEqual(reserved, [UInt64(UInt32.max) - 10..<UInt64(UInt32.max) - 8, UInt64(UInt32.max) - 8..<UInt64(UInt32.max) - 6,
                                  UInt64(UInt32.max) - 6..<UInt64(UInt32.max) - 4, UInt64(UInt32.max) - 4..<UInt64(UInt32.max) - 2])
        // Wrapped: 0 and 3 are staged, 6..<8 held back.
        reserved = try (0..<3).map { _ in try folder.reserve(2).envelopes }
        XCTAssertEqual(reserved, [1..<3, 4..<6, 8..<10])

        // Staging over an index in use fails and leaves that file alone.
        let clash = RecordFraming.Publication(state: .publishing, firstEnvelope: 2, envelopeCount: 2)
        let parts = EnvelopeParts(head: Array("{}".utf8), payloads: [])
        XCTAssertThrowsError(try folder.stage([parts, parts], as: clash))
        XCTAssertEqual(try String(contentsOfFile: bufferFolder + "/envelope-3", encoding: .utf8), "theirs")
        XCTAssertFalse(FileManager.default.fileExists(atPath: bufferFolder + "/envelope-2"), "what the stage created is gone")

        // Before recovery is done, only this process's envelopes move.
        _ = try folder.stage([parts], as: .init(state: .publishing, firstEnvelope: 1, envelopeCount: 1))
        XCTAssertEqual(try folder.stagedPaths().map { ($0 as NSString).lastPathComponent }, ["envelope-1"])
        folder.recoveryDone()
        XCTAssertEqual(try folder.stagedPaths().count, 4)
    }

    /// Files numbered past what the buffer writes (`BufferFile.largestNumber`) are not its own: left alone,
    /// never claimed, and no number in use follows them. (The next number after a planted spare or copy
    /// numbered `Int.max` trapped at the first forward, and after a termination directory so numbered at
    /// every start of FlushAll: a helper found them.)
    func testNamesWithNumbersTheBufferNeverWritesAreLeftAlone() throws {
        for strategy in [Options.Strategy.doubleRotatingBuffer, .flushAll] {
            try FileManager.default.createDirectory(atPath: bufferFolder, withIntermediateDirectories: true)
            let strays = ["envelope-18446744073709551615", "recovering-9223372036854775807-cache",
                          "detected-termination-9223372036854775807", "spare-9223372036854775807",
                          "awaiting-sync-1073741999"]
            for name in strays {
                XCTAssertTrue(FileManager.default.createFile(atPath: bufferFolder + "/" + name, contents: Data("x".utf8)))
            }
            // At the largest number a name may carry: the next ones must not pass it.
            XCTAssertTrue(FileManager.default.createFile(atPath: bufferFolder + "/spare-1073741824", contents: nil))
            let directories = ["detected-termination-9223372036854774000", "awaiting-sync-9223372036854775000",
                               "detected-termination-1073741824"]
            for name in directories {
                try FileManager.default.createDirectory(atPath: bufferFolder + "/" + name, withIntermediateDirectories: false)
            }

            let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.strategy = strategy })
            XCTAssertEqual(buffer.recovery.items, 0, "\(strategy)")
            XCTAssertEqual(buffer.recovery.discardedBytes, 0, "\(strategy): nothing of theirs is read")
            for index in 0..<3 {
                XCTAssertTrue(buffer.add(log: .test("still works \(index)")), "\(strategy)")
                buffer.flush()
            }
            buffer.close()
            XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), (0..<3).map { "still works \($0)" }, "\(strategy)")
            let left = Set(try FileManager.default.contentsOfDirectory(atPath: bufferFolder))
            XCTAssertTrue(left.isSuperset(of: strays + directories), "\(strategy): \(left)")
            let unreadable = left.subtracting(strays + directories).filter { name in
                name.split(separator: "-").last.flatMap { Int($0) }.map { $0 > BufferFile.largestNumber } ?? false
            }
            XCTAssertEqual(unreadable, [], "\(strategy): files named past what reads back")
            try FileManager.default.removeItem(at: buffer.directory)
        }
    }

    /// Files an interrupted start had claimed are recovered together with this start's own, in order.
    func testFilesClaimedByAnInterruptedStartAreRecoveredToo() throws {
        try FileManager.default.createDirectory(atPath: bufferFolder, withIntermediateDirectories: true)
        let older = RecordRegion(mapping: try MappedFile(path: bufferFolder + "/recovering-0-crash-safe-list-1", size: 4096 + 32),
                                 kind: .crashSafeList)
        appendLogs(["a0", "a1"], to: older, nonce: 1)
        let newer = RecordRegion(mapping: try MappedFile(path: bufferFolder + "/crash-safe-list-2", size: 4096 + 32),
                                 kind: .crashSafeList)
        appendLogs(["b0"], to: newer, nonce: 2)

        let buffer = try TelemetryBuffer(options: testOptions(directory))
        XCTAssertEqual(buffer.recovery.items, 3)
        XCTAssertEqual(Set(buffer.recovery.files), ["crash-safe-list-1", "crash-safe-list-2"])
        buffer.close()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["a0", "a1", "b0"])
        let left = try FileManager.default.contentsOfDirectory(atPath: bufferFolder)
        XCTAssertFalse(left.contains { $0.hasPrefix("recovering-") }, "\(left)")
    }

    /// A cache holding records its list lacks (as power loss can leave them) has those records recovered
    /// too; with a cache its list covers, every item arrives once. Either way the copies count as duplicates.
    func testACacheHoldingMoreThanItsListIsRecoveredToo() throws {
        for (cached, expected) in [(["a0", "a1", "a2"], ["a0", "a1", "a2"]), (["a0"], ["a0", "a1"])] {
            try FileManager.default.createDirectory(atPath: bufferFolder, withIntermediateDirectories: true)
            let list = RecordRegion(mapping: try MappedFile(path: bufferFolder + "/crash-safe-list-1", size: 4096 + 32),
                                    kind: .crashSafeList)
            appendLogs(["a0", "a1"], to: list)
            let cache = AsyncIOCache(path: bufferFolder + "/async-io-cache-1")
            let copy = RecordRegion(recordCapacity: 4096, kind: .memoryList)
            appendLogs(cached, to: copy)
            _ = try cache.catchUp(with: copy)

            let buffer = try TelemetryBuffer(options: testOptions(directory))
            XCTAssertEqual(buffer.recovery.items, expected.count, "cache \(cached)")
            XCTAssertEqual(buffer.recovery.duplicates, min(cached.count, 2), "cache \(cached)")
            buffer.close()
            XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), expected, "cache \(cached)")
            try FileManager.default.removeItem(at: buffer.directory)
        }
    }

    /// A publication whose envelopes may not be synced yet (a `captured` list, the copy of a published
    /// list) is trusted in the boot that made it: its items are not published again. After a reboot
    /// (here: another boot recorded beside the files) its envelopes may be lost, so its items are; so too
    /// when no boot is recorded.
    func testUnsyncedPublicationsAreTrustedOnlyInTheBootThatMadeThem() throws {
        let current = try XCTUnwrap(BootSession.current, "this machine names its boot")
        // `nil`: no `boot` at all, as a process leaves it after a failed sync.
        for (boot, expected) in [(current, [String]()), ("another boot", ["a0", "a1", "b0"]), (nil, ["a0", "a1", "b0"])] {
            try FileManager.default.createDirectory(atPath: bufferFolder, withIntermediateDirectories: true)
            // The copy of a list published just before the process died: its envelopes were moved.
            let copy = AsyncIOCache(path: bufferFolder + "/awaiting-sync-0")
            let published = RecordRegion(recordCapacity: 4096, kind: .memoryList)
            appendLogs(["a0", "a1"], to: published)
            try copy.catchUp(with: published)
            // A list that died `captured`, its envelope already moved (and sent).
            let list = RecordRegion(mapping: try MappedFile(path: bufferFolder + "/crash-safe-list-1", size: 4096 + 32),
                                    kind: .crashSafeList)
            appendLogs(["b0"], to: list, nonce: 2)
            try list.mark(.init(state: .captured, firstEnvelope: 5, envelopeCount: 1))
            if let boot { try Data(boot.utf8).write(to: URL(fileURLWithPath: bufferFolder + "/boot")) }

            let buffer = try TelemetryBuffer(options: testOptions(directory))
            XCTAssertEqual(buffer.recovery.items, expected.count, "recorded boot: \(boot ?? "none")")
            buffer.close()
            XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), expected, "recorded boot: \(boot ?? "none")")
            let left = try FileManager.default.contentsOfDirectory(atPath: bufferFolder)
            XCTAssertFalse(left.contains { $0.hasPrefix("recovering-") || $0.hasPrefix("awaiting-sync-") }, "\(left)")
            XCTAssertEqual(try String(contentsOfFile: bufferFolder + "/boot", encoding: .utf8), current, "this process's boot")
            try FileManager.default.removeItem(at: buffer.directory)
        }
    }

    /// A list a later format version wrote (an app run again at an older version) is not this version's to
    /// read: claimed and set aside under its claimed name, for the newer version, at this start and the
    /// next.
    func testAListOfALaterFormatVersionIsSetAsideNotDeleted() throws {
        try FileManager.default.createDirectory(atPath: bufferFolder, withIntermediateDirectories: true)
        let list = RecordRegion(mapping: try MappedFile(path: bufferFolder + "/crash-safe-list-1", size: 4096 + 32),
                                kind: .crashSafeList)
        appendLogs(["v2 a", "v2 b"], to: list)
        list.base.storeBytes(of: (RecordFraming.version + 1).littleEndian, toByteOffset: 4, as: UInt16.self)  // the version (BufferFormat.h)
        for start in 0..<2 {
            let buffer = try TelemetryBuffer(options: testOptions(directory))
            XCTAssertEqual(buffer.recovery.items, 0, "start \(start)")
            XCTAssertEqual(buffer.recovery.discardedBytes, 0, "start \(start)")
            XCTAssertEqual(buffer.recovery.setAside, ["recovering-0-crash-safe-list-1"], "start \(start)")
            buffer.close()
            XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), [], "start \(start)")
        }
        let kept = try XCTUnwrap(FileManager.default.contents(atPath: bufferFolder + "/recovering-0-crash-safe-list-1"))
        XCTAssertEqual(kept.count, 4096 + 32)
    }

    /// Gives the record at `record` category byte 9, a signal this version does not know, and the CRC that
    /// covers it again (a valid record still); returns the record's size.
    private static func makeSignalUnknown(_ record: UnsafeRawPointer) -> Int {
        let record = UnsafeMutableRawPointer(mutating: record)
        let header = Int(TB_RECORD_HEADER_SIZE), category = Int(TB_RECORD_CATEGORY_OFFSET), lengthOffset = Int(TB_RECORD_LENGTH_OFFSET)
        let length = Int(UInt32(littleEndian: record.loadUnaligned(fromByteOffset: lengthOffset, as: UInt32.self)))
        record.storeBytes(of: 9, toByteOffset: category, as: UInt8.self)
        var crc = CRC32C.checksum(UnsafeRawBufferPointer(start: record + header, count: length))
        crc = CRC32C.checksum(UnsafeRawBufferPointer(start: record + lengthOffset, count: 4), continuing: crc)
        crc = CRC32C.checksum(UnsafeRawBufferPointer(start: record + category, count: header - category), continuing: crc)
        record.storeBytes(of: crc.littleEndian, toByteOffset: Int(TB_RECORD_CRC_OFFSET), as: UInt32.self)
        return header + length
    }

    /// Records of a signal this version does not know (a later version's), among logs: skipped, not taken
    /// for damage (no log after them is lost, no byte counted as discarded), and kept in `kept` for a version
    /// that knows them, at this start and the next, never published; the logs around them are published once.
    func testRecordsOfAnUnknownSignalAreKeptForALaterVersion() throws {
        try FileManager.default.createDirectory(atPath: bufferFolder, withIntermediateDirectories: true)
        let list = RecordRegion(mapping: try MappedFile(path: bufferFolder + "/crash-safe-list-1", size: 4096 + 32),
                                kind: .crashSafeList)
        for (index, body) in ["a0", "metric 1", "a1", "metric 2", "a2"].enumerated() {
            let start = list.committedRecordBytes(lane: 0)
            appendLogs([body], to: list, nonce: 5, from: UInt64(index))
            guard body.hasPrefix("metric") else { continue }
            _ = Self.makeSignalUnknown(list.records(lane: 0).baseAddress! + start)
        }
        for start in 0..<2 {
            let buffer = try TelemetryBuffer(options: testOptions(directory))
            XCTAssertEqual(buffer.recovery.items, start == 0 ? 3 : 0, "start \(start)")
            XCTAssertEqual(buffer.recovery.keptForALaterVersion, 2, "start \(start)")
            XCTAssertEqual(buffer.recovery.discardedBytes, 0, "start \(start)")
            buffer.close()
            XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["a0", "a1", "a2"], "start \(start)")
            let kept = try XCTUnwrap(try FramedFile.read(folder: bufferFolder, name: "kept"), "start \(start)")
            var ids: [UInt64] = []
            _ = kept.withRecords { $0.forEachRecord(unknown: { ids.append(RecordFraming.Cursor.id(ofRecord: $0).sequence) }) { _ in } }
            XCTAssertEqual(ids, [1, 3], "start \(start): the unknown records, as they were")
        }
    }

    /// More records of an unknown signal than one framed file is read back at (8 MiB): kept in parts, each
    /// read back whole at the next start (one file past the limit would never be read again).
    func testKeptRecordsPastOneFilesLimitGoInParts() throws {
        try FileManager.default.createDirectory(atPath: bufferFolder, withIntermediateDirectories: true)
        let payload = [UInt8](repeating: 0x78, count: 100_000)
        var sequence: UInt64 = 0
        for file in 1...6 {
            let list = RecordRegion(mapping: try MappedFile(path: bufferFolder + "/crash-safe-list-\(file)", size: 1_600_032),
                                    kind: .crashSafeList)
            for _ in 0..<15 {
                let offset = list.committedRecordBytes(lane: 0)
                payload.withUnsafeBytes { bytes in
                    list.write(category: .log, id: ItemID(nonce: 4, sequence: sequence), payload: bytes,
                               payloadCRC: CRC32C.checksum(bytes), lane: 0, at: offset)
                }
                let size = Self.makeSignalUnknown(list.records(lane: 0).baseAddress! + offset)
                list.commit(lane: 0, from: offset, to: offset + size)
                sequence += 1
            }
        }
        for start in 0..<2 {
            let buffer = try TelemetryBuffer(options: testOptions(directory))
            XCTAssertEqual(buffer.recovery.keptForALaterVersion, 90, "start \(start)")
            XCTAssertEqual(buffer.recovery.discardedBytes, 0, "start \(start)")
            buffer.close()
            let parts = try FileManager.default.contentsOfDirectory(atPath: bufferFolder).filter { $0.hasPrefix("kept") }.sorted()
            XCTAssertEqual(parts, ["kept", "kept-1"], "start \(start)")
            for part in parts {
                XCTAssertLessThanOrEqual(try fileSize(part), FileSystem.maxFramedFileBytes, "start \(start): \(part)")
            }
        }
    }

    /// A list of a later version that it published (`captured`, in this boot) and its IO cache: the cache's
    /// copies of records of a signal unknown here are not kept (they were kept, to be published again by
    /// that version).
    func testCopiesOfUnknownRecordsALaterVersionPublishedAreNotKept() throws {
        try FileManager.default.createDirectory(atPath: bufferFolder, withIntermediateDirectories: true)
        let list = RecordRegion(mapping: try MappedFile(path: bufferFolder + "/crash-safe-list-1", size: 4096 + 32),
                                kind: .crashSafeList)
        appendLogs(["metric 0", "metric 1"], to: list, nonce: 6)
        var offset = 0
        while offset < list.committedRecordBytes(lane: 0) {
            offset += Self.makeSignalUnknown(list.records(lane: 0).baseAddress! + offset)
        }
        let cache = AsyncIOCache(path: bufferFolder + "/async-io-cache-1")
        _ = try cache.catchUp(with: list)
        try list.mark(.init(state: .captured, firstEnvelope: 0, envelopeCount: 0))
        XCTAssertTrue(FileManager.default.createFile(atPath: bufferFolder + "/boot", contents: Data((BootSession.current ?? "").utf8)))
        let buffer = try TelemetryBuffer(options: testOptions(directory))
        XCTAssertEqual(buffer.recovery.keptForALaterVersion, 0)
        buffer.close()
        XCTAssertFalse(FileManager.default.fileExists(atPath: bufferFolder + "/kept"), "nothing kept")
    }

    /// A later format version's publication is left as that version left it: its staged envelope is neither
    /// moved nor removed (it was taken for an orphan and moved: then the newer version, finding its marker
    /// without the boot of its generation, which was deleted too, published the list again), the boot
    /// stays while the file does, and this version's envelopes never take the indices its marker names.
    func testAPublicationOfALaterFormatVersionIsLeftAsItIs() throws {
        let elsewhere = try TemporaryDirectory()
        defer { elsewhere.remove() }
        let maker = try TelemetryBuffer(options: testOptions(elsewhere))
        maker.add(log: .test("the newer version's"))
        maker.close()
        let envelope = try XCTUnwrap(try walkEnvelopes(in: maker.envelopesDirectory).first).bytes

        try FileManager.default.createDirectory(atPath: bufferFolder, withIntermediateDirectories: true)
        let list = RecordRegion(mapping: try MappedFile(path: bufferFolder + "/crash-safe-list-1", size: 4096 + 32),
                                kind: .crashSafeList)
        appendLogs(["the newer version's"], to: list)
        try list.mark(.init(state: .captured, firstEnvelope: 1, envelopeCount: 1))
        list.base.storeBytes(of: (RecordFraming.version + 1).littleEndian, toByteOffset: 4, as: UInt16.self)  // the version (BufferFormat.h)
        XCTAssertTrue(FileManager.default.createFile(atPath: bufferFolder + "/envelope-1", contents: Data(envelope)))
        XCTAssertTrue(FileManager.default.createFile(atPath: bufferFolder + "/boot", contents: Data((BootSession.current ?? "").utf8)))
        var ours: [String] = []
        for start in 0..<2 {
            let buffer = try TelemetryBuffer(options: testOptions(directory))
            XCTAssertEqual(buffer.recovery.setAside, ["recovering-0-crash-safe-list-1"], "start \(start)")
            for index in 0..<3 {
                ours.append("ours \(start) \(index)")
                XCTAssertTrue(buffer.add(log: .test(ours.last!)))
                buffer.flush()
            }
            buffer.close()
            XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ours, "start \(start)")
            let left = try FileManager.default.contentsOfDirectory(atPath: bufferFolder)
            XCTAssertTrue(left.contains("recovering-0-boot"), "start \(start): \(left)")
            XCTAssertEqual(FileManager.default.contents(atPath: bufferFolder + "/envelope-1"), Data(envelope), "start \(start): \(left)")
        }
    }

    /// A list recovery published from its file (re-marked there, in this boot) and could not remove is
    /// judged at the next start by the boot it was marked in, not by the boot of the process that filled
    /// it: its items are not published again.
    func testAListRecoveryPublishedAndCouldNotRemoveIsNotPublishedAgain() throws {
        try FileManager.default.createDirectory(atPath: bufferFolder, withIntermediateDirectories: true)
        let list = RecordRegion(mapping: try MappedFile(path: bufferFolder + "/crash-safe-list-1", size: 4096 + 32),
                                kind: .crashSafeList)
        appendLogs(["a0", "a1"], to: list)
        // Filled before a restart.
        XCTAssertTrue(FileManager.default.createFile(atPath: bufferFolder + "/boot", contents: Data("another boot".utf8)))
        Failpoint.recoveryKeepsFiles.failNext()
        let first = try TelemetryBuffer(options: testOptions(directory))
        XCTAssertEqual(first.recovery.items, 2)
        first.close()
        XCTAssertEqual(try logBodies(in: first.envelopesDirectory), ["a0", "a1"])
        XCTAssertTrue(try FileManager.default.contentsOfDirectory(atPath: bufferFolder).contains { $0.hasSuffix("crash-safe-list-1") && $0.hasPrefix("recovering-") },
                      "the list could not be removed")

        let second = try TelemetryBuffer(options: testOptions(directory))
        XCTAssertEqual(second.recovery.items, 0)
        second.close()
        XCTAssertEqual(try logBodies(in: second.envelopesDirectory), ["a0", "a1"], "once")
    }

    /// Live items past what one framed file is read back at (8 MiB; here ten copies of published lists
    /// from another boot, as failed syncs leave them, about 1 MiB each) are all published, in order. (They
    /// were written as one `recovered` file too large to read again: nothing was published, and every
    /// later start set it aside.)
    func testRecoveryPublishesMoreThanOneFramedFileHolds() throws {
        try FileManager.default.createDirectory(atPath: bufferFolder, withIntermediateDirectories: true)
        let padding = String(repeating: "p", count: 1000)
        let expected = try plantPublishedCopies(in: bufferFolder, files: 10) { "f\($0) i\($1) \(padding)" }
        let buffer = try TelemetryBuffer(options: testOptions(directory) {
            $0.maxCachedEnvelopes = 1000
            $0.maxCacheBytes = 1 << 30
        })
        XCTAssertEqual(buffer.recovery.items, expected.count)
        buffer.close()
        let bodies = try logBodies(in: buffer.envelopesDirectory)
        XCTAssertTrue(bodies == expected, "\(bodies.count) of \(expected.count) published, in order: \(bodies.elementsEqual(expected.prefix(bodies.count)))")
        let left = try FileManager.default.contentsOfDirectory(atPath: bufferFolder)
        XCTAssertFalse(left.contains { $0.hasPrefix("recover") || $0.hasPrefix("awaiting-sync-") }, "\(left)")
    }

    /// Recovery publishes up to 8 MiB at once, more than a buffer's batch: its envelopes still keep their
    /// item within `maxBatchBytes` (100 logs of 20 KB: 2 MB in one item before, which the uploader deletes
    /// as larger than any envelope, and the protocol's 1 MiB item limit refuses).
    func testRecoveredEnvelopesKeepTheirItemWithinTheBatchBytes() throws {
        try FileManager.default.createDirectory(atPath: bufferFolder, withIntermediateDirectories: true)
        let copy = AsyncIOCache(path: bufferFolder + "/awaiting-sync-0")
        let published = RecordRegion(recordCapacity: 4 << 20, kind: .memoryList)
        let bodies = (0..<100).map { "l\($0) " + String(repeating: "x", count: 20_000) }
        appendLogs(bodies, to: published)
        try copy.catchUp(with: published)
        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.maxCacheBytes = 1 << 30 })
        XCTAssertEqual(buffer.recovery.items, 100)
        buffer.close()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), bodies)
        let envelopes = try walkEnvelopes(in: buffer.envelopesDirectory)
        XCTAssertGreaterThan(envelopes.count, 1)
        for envelope in envelopes {
            for item in envelope.items { XCTAssertLessThanOrEqual(item.payload.count, 1 << 20) }
        }
    }

    /// A heap region gives the pages past its records back (memory pressure): none of them is resident
    /// afterwards (`mincore`), and the region takes records as before.
    func testAHeapRegionGivesItsUnusedPagesBack() throws {
        let capacity = 1 << 20
        let region = RecordRegion(recordCapacity: capacity, kind: .memoryList)
        appendLogs((0..<2000).map { "item \($0) " + String(repeating: "x", count: 150) }, to: region)
        XCTAssertGreaterThan(region.records.count, capacity / 2)
        func residentPages() -> Int {
            let page = Int(sysconf(Int32(_SC_PAGESIZE)))
            let start = (Int(bitPattern: region.base) + 32 + page - 1) / page * page
            let end = (Int(bitPattern: region.base) + 32 + capacity) / page * page
            var vector = [UInt8](repeating: 0, count: (end - start) / page)
            XCTAssertEqual(mincore(UnsafeMutableRawPointer(bitPattern: start), end - start, &vector), 0)
            return vector.filter { $0 & 1 == 1 }.count
        }
        XCTAssertGreaterThan(residentPages(), 100, "written pages are resident")
        try region.reset()
        region.releaseUnusedPages(lane: 0, after: region.recordBytes)
        XCTAssertEqual(residentPages(), 0)
        appendLogs(["after"], to: region)
        var bodies: [String] = []
        region.records.forEachRecord { record in
            bodies.append(String(decoding: record.payload, as: UTF8.self))
        }
        XCTAssertEqual(bodies.count, 1)
        XCTAssertTrue(bodies[0].contains("\"body\":\"after\""), bodies[0])
    }

    /// Creating a buffer on an empty folder reads none of its new lists' pages but the header's: a read-ahead
    /// of the first store into a fresh mapping would zero a window of pages on the creating thread, most of
    /// its start-up time (`LoadDriver startup`). Counted in the page cache with `mincore`.
    func testANewListIsNotReadAheadWhenTheBufferIsCreated() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory))
        defer { buffer.close() }
        // Where a store into a mapped page may ask for new space (btrfs, overlayfs), there is no mapped list.
        if buffer.listsInMemory { throw XCTSkip("the lists are in memory on this file system") }
        let path = try directory.makeBufferFolder() + "/crash-safe-list-1"
        let fd = open(path, O_RDONLY)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        let size = Int(lseek(fd, 0, SEEK_END))
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        let mapping = try XCTUnwrap(mmap(nil, size, PROT_READ, MAP_SHARED, fd, 0))
        defer { munmap(mapping, size) }
        var vector = [UInt8](repeating: 0, count: (size + page - 1) / page)
        XCTAssertEqual(mincore(mapping, size, &vector), 0)
        let resident = vector.filter { $0 & 1 == 1 }.count
        XCTAssertLessThanOrEqual(resident, 2, "pages of the new list in the page cache: \(resident) of \(vector.count)")
    }

    /// Things under the names of spares and copies that are not the buffer's files (a directory, a link, a
    /// FIFO) are neither reused nor renamed onto: every forward publishes, each item once, and they stay.
    func testForeignSparesAndCopiesDoNotStopTheForwards() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory))
        XCTAssertEqual(buffer.recovery.items, 0)
        let outside = directory.url.appendingPathComponent("outside").path
        _ = FileManager.default.createFile(atPath: outside, contents: Data("keep".utf8))
        try FileManager.default.createDirectory(atPath: bufferFolder + "/spare-0", withIntermediateDirectories: false)
        try FileManager.default.createSymbolicLink(atPath: bufferFolder + "/spare-1", withDestinationPath: outside)
        XCTAssertEqual(mkfifo(bufferFolder + "/spare-2", 0o600), 0)
        try FileManager.default.createDirectory(atPath: bufferFolder + "/awaiting-sync-3", withIntermediateDirectories: false)
        for round in 0..<4 {
            buffer.add(log: .test("r\(round)"))
            buffer.doubleRotatingBuffer?.copyNow()  // a cache that holds the list's records is retired
            buffer.flush()
        }
        buffer.close()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["r0", "r1", "r2", "r3"])
        XCTAssertEqual(try String(contentsOfFile: outside, encoding: .utf8), "keep")
        for name in ["spare-0", "spare-1", "spare-2", "awaiting-sync-3"] {
            XCTAssertNotNil(try? FileManager.default.attributesOfItem(atPath: bufferFolder + "/" + name), name)
        }
    }

    /// A spare of ours swapped for a link after the buffer took note of it: the retirement that would reuse
    /// it fails once (the link is not followed), the spare is dropped, and the next forward retires into a
    /// new file, and the list's items go out.
    func testASpareSwappedForALinkIsDroppedNotRetriedForever() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory))
        XCTAssertEqual(buffer.recovery.items, 0)
        // Each batch's cache holds its records (as when a batch waits longer than the interval), so each
        // forward retires it, and the spares take its place.
        buffer.add(log: .test("first"))
        buffer.doubleRotatingBuffer?.copyNow()
        buffer.flush()
        buffer.doubleRotatingBuffer?.awaitDurable()  // its round empties the retired cache into `spare-0`
        let spare = bufferFolder + "/spare-0"
        XCTAssertTrue(FileManager.default.fileExists(atPath: spare))
        let outside = directory.url.appendingPathComponent("outside").path
        _ = FileManager.default.createFile(atPath: outside, contents: Data("keep".utf8))
        try FileManager.default.removeItem(atPath: spare)
        try FileManager.default.createSymbolicLink(atPath: spare, withDestinationPath: outside)
        for round in 0..<3 {
            buffer.add(log: .test("r\(round)"))
            buffer.doubleRotatingBuffer?.copyNow()
            buffer.flush()
        }
        buffer.close()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["first", "r0", "r1", "r2"])
        XCTAssertEqual(try String(contentsOfFile: outside, encoding: .utf8), "keep")
    }

    /// A forward that fails after the list's envelopes are staged (its IO cache cannot be retired) must not
    /// stage the list again when the next forward retries.
    func testAFailedRetirementIsRetriedWithoutPublishingTheListTwice() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory))
        XCTAssertEqual(buffer.recovery.items, 0)
        // The first publication's retirement fails before the IO cache is moved.
        Failpoint.retireFails.failNext()
        buffer.add(log: .test("a"))
        buffer.add(log: .test("b"))
        buffer.doubleRotatingBuffer?.copyNow()  // a cache that holds the list's records is retired
        buffer.flush()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["a", "b"], "the staged envelopes are published")
        XCTAssertFalse(FileManager.default.fileExists(atPath: bufferFolder + "/awaiting-sync-0"), "not moved")
        buffer.add(log: .test("c"))
        buffer.flush()
        buffer.close()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory).sorted(), ["a", "b", "c"], "each item once")
        let left = try FileManager.default.contentsOfDirectory(atPath: bufferFolder)
        XCTAssertFalse(left.contains { $0.hasPrefix("awaiting-sync-") }, "\(left)")
        for name in ["crash-safe-list-1", "crash-safe-list-2"] {
            XCTAssertEqual((try FramedFile.read(folder: bufferFolder, name: name))?.withRecords(\.count), 0, name)
        }
    }

    /// The same when the IO cache was moved but no empty file could take its place: the retry only starts
    /// the empty file.
    func testARetirementThatMovedTheCacheIsFinishedByTheRetry() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory))
        XCTAssertEqual(buffer.recovery.items, 0)
        // The first publication moves the IO cache, then no empty file can take its place.
        Failpoint.retireRestartFails.failNext()
        buffer.add(log: .test("a"))
        buffer.doubleRotatingBuffer?.copyNow()  // a cache that holds the list's records is retired
        buffer.flush()
        XCTAssertFalse(FileManager.default.fileExists(atPath: bufferFolder + "/async-io-cache-1"))
        XCTAssertTrue(FileManager.default.fileExists(atPath: bufferFolder + "/awaiting-sync-0"), "the cache was moved")
        buffer.add(log: .test("b"))
        buffer.flush()
        buffer.close()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory).sorted(), ["a", "b"], "each item once")
        XCTAssertEqual(try fileSize("async-io-cache-1"), 32, "an empty cache took the moved one's place")
        for name in ["crash-safe-list-1", "crash-safe-list-2"] {
            XCTAssertEqual((try FramedFile.read(folder: bufferFolder, name: name))?.withRecords(\.count), 0, name)
        }
    }

    func testEachStrategyKeepsItsFilesAndEmptiesThemOnClose() throws {
        let bytes = 8192
        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.maxBatchBytes = bytes })
        let listSize = RecordRegion.mappingSize(recordCapacity: bytes, lanes: RecordRegion.listLanes)
        XCTAssertEqual(try fileSize("crash-safe-list-1"), listSize, "preallocated in full")
        XCTAssertEqual(try fileSize("crash-safe-list-2"), listSize)
        buffer.add(log: .test("in the list"))
        buffer.doubleRotatingBuffer?.copyNow()  // a cache that holds the list's records is retired by the forward
        let list = try XCTUnwrap(try FramedFile.read(folder: bufferFolder, name: "crash-safe-list-1"))
        XCTAssertEqual(list.withRecords(\.count), 25 + 1 + list.withRecords { raw in
            var size = -1
            raw.forEachRecord { size = $0.payload.count - 1 }
            return size
        }, "visible in the file as soon as add returns")
        buffer.close()
        XCTAssertFalse(try FileManager.default.contentsOfDirectory(atPath: bufferFolder).contains { $0.hasPrefix("awaiting-sync-") },
                       "close waits for the sync that turns the published list's copy into a spare")
        // The retired one's place was taken by an empty file; the other, never used, was never created.
        XCTAssertEqual(try fileSize("async-io-cache-1"), 32)
        XCTAssertFalse(FileManager.default.fileExists(atPath: bufferFolder + "/async-io-cache-2"))
        for name in ["crash-safe-list-1", "crash-safe-list-2"] {
            XCTAssertEqual((try FramedFile.read(folder: bufferFolder, name: name))?.withRecords(\.count), 0, name)
        }
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["in the list"])
    }

    func testTheStreamCacheWritesOnTheCallingThread() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.strategy = .fileStreamCache })
        buffer.add(log: .test("one"))
        buffer.add(log: .test("two"))
        let file = try XCTUnwrap(try FramedFile.read(folder: bufferFolder, name: "cache"))
        var bodies: [String] = []
        _ = file.withRecords { raw in
            raw.forEachRecord { record in
                let object = try? JSONSerialization.jsonObject(with: Data(record.payload)) as? [String: Any]
                bodies.append(object?["body"] as? String ?? "")
            }
        }
        XCTAssertEqual(bodies, ["one", "two"], "in the file when add returns")
        buffer.flush()
        XCTAssertNil((try FramedFile.read(folder: bufferFolder, name: "flushing")))
        XCTAssertEqual((try FramedFile.read(folder: bufferFolder, name: "cache"))?.withRecords(\.count), 0)
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["one", "two"])
    }

    /// A `flushing` of ours found at a rotation (a published one whose removal failed) is replaced: its
    /// items went out before it was to be removed. Only something not ours there stops the rotation
    /// (`HostileFolderTests`). (A first version refused every rotation from then on.)
    func testTheStreamCachesOwnLeftoverFlushingIsReplacedByTheNextRotation() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.strategy = .fileStreamCache })
        defer { buffer.close() }
        XCTAssertTrue(buffer.add(log: .test("published")))
        buffer.flush()
        let flushing = URL(fileURLWithPath: bufferFolder).appendingPathComponent(BufferFile.streamFlushing.name)
        try Data("left by a removal that failed".utf8).write(to: flushing)
        XCTAssertTrue(buffer.add(log: .test("next")))
        buffer.flush()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["published", "next"])
        XCTAssertNil(try FramedFile.read(folder: bufferFolder, name: BufferFile.streamFlushing.name))
        XCTAssertTrue(buffer.add(log: .test("and on")), "adds go on")
    }

    /// An append torn part-way (a real one: the file size limit, RLIMIT_FSIZE, stops the `writev` in the
    /// record) whose partial record cannot be cut off (failpoint `stream.truncate-fails`, as `ftruncate`
    /// failing on a network file system): no later record may follow those bytes, where every scan
    /// stops. The appends wait for the probe that looks for room (once a second), which cuts them off,
    /// once or twice failing to. Either way every acknowledged item arrives once. (Later records were
    /// appended after the torn bytes, and lost.)
    func testARecordTornWhereItCannotBeCutOffIsNeverFollowed() throws {
        for failures in [1, 2] {
            let folder = try TemporaryDirectory()
            defer { folder.remove() }
            let buffer = try TelemetryBuffer(options: testOptions(folder) { $0.strategy = .fileStreamCache })
            XCTAssertTrue(buffer.add(log: .test("before")))
            Failpoint.streamTruncateFails.failNext(failures)
            // A limit 40 bytes past the file's end: the record's header goes, its payload does not.
            let torn = try withFileSizeLimit(cacheSize(buffer) + 40, handler: { _ in }) {
                buffer.add(log: .test("torn " + String(repeating: "t", count: 200)))
            }
            XCTAssertFalse(torn, "the torn append is refused")
            eventually { buffer.add(log: .test("after")) }
            buffer.flush()
            XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["before", "after"], "\(failures)")
            buffer.close()
        }
    }

    /// A stream cache that runs out of room (here the file size limit, RLIMIT_FSIZE, under which a write
    /// fails with EFBIG and raises SIGXFSZ, counted here): after the first append that does not fit, the
    /// calling thread writes nothing more and its items are refused at once (counted), until the
    /// background's probe sees an append fit again (the limit lifted); then adds go on, and every
    /// acknowledged item arrives.
    func testAFullDiskCostsTheCallingThreadNoMoreWrites() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let buffer = try TelemetryBuffer(options: testOptions(folder) { $0.strategy = .fileStreamCache })
        defer { buffer.close() }
        XCTAssertTrue(buffer.add(log: .test("before")))
        fileSizeSignals = 0
        let refused = try withFileSizeLimit(cacheSize(buffer), handler: { _ in fileSizeSignals += 1 }) {
            (0..<1000).filter { !buffer.add(log: .test("refused \($0)")) }.count
        }
        let signals = fileSizeSignals
        XCTAssertEqual(refused, 1000)
        // The add that found no room, and at most a probe or two (once a second) while the others ran.
        XCTAssertLessThanOrEqual(signals, 3, "writes made for refused adds")
        eventually { buffer.add(log: .test("after")) }
        buffer.flush()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["before", "after"])
        XCTAssertGreaterThanOrEqual(buffer.stats().drops["internal_sdk_error/log_item"] ?? 0, 1000)
    }

    /// The size of a FileStreamCache buffer's `cache` file.
    private func cacheSize(_ buffer: TelemetryBuffer) throws -> Int {
        var status = stat()
        XCTAssertEqual(stat(buffer.directory.appendingPathComponent("telemetry-buffer/cache").path, &status), 0)
        return Int(status.st_size)
    }

    /// Runs `body` with the process's file size limit (RLIMIT_FSIZE) at `bytes`, so that a write past it
    /// fails (EFBIG) and raises SIGXFSZ, which `handler` takes (instead of ending the process); then puts
    /// both back.
    private func withFileSizeLimit<Result>(_ bytes: Int, handler: @escaping @convention(c) (Int32) -> Void,
                                           _ body: () -> Result) throws -> Result {
        var previous = rlimit(), limit = rlimit()
        XCTAssertEqual(getrlimit(Self.fileSizeLimit, &previous), 0)
        limit.rlim_cur = rlim_t(bytes)
        limit.rlim_max = previous.rlim_max
        let before = signal(SIGXFSZ, handler)
        XCTAssertEqual(setrlimit(Self.fileSizeLimit, &limit), 0)
        defer {
            XCTAssertEqual(setrlimit(Self.fileSizeLimit, &previous), 0)
            signal(SIGXFSZ, before)
        }
        return body()
    }

    #if canImport(Glibc)
    private static let fileSizeLimit = __rlimit_resource_t(RLIMIT_FSIZE.rawValue)
    #else
    private static let fileSizeLimit = RLIMIT_FSIZE
    #endif

    func testTheRolesSwapManyTimesWithoutLossOrDuplicates() throws {
        for strategy in [Options.Strategy.doubleRotatingBuffer, .fileStreamCache] {
            let folder = try TemporaryDirectory()
            defer { folder.remove() }
            let buffer = try TelemetryBuffer(options: testOptions(folder) {
                $0.strategy = strategy
                $0.maxBatchBytes = 4096
                $0.maxCachedEnvelopes = 10_000
            })
            var accepted: [String] = []
            for index in 0..<600 {
                let body = "swap \(index) " + String(repeating: "s", count: 200)
                if !buffer.add(log: .test(body)) {
                    buffer.flush()
                    XCTAssertTrue(buffer.add(log: .test(body)))
                }
                accepted.append(body)
            }
            buffer.close()
            let envelopes = try walkEnvelopes(in: buffer.envelopesDirectory)
            XCTAssertGreaterThan(envelopes.count, 40, "\(strategy): many rotations")
            XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), accepted, strategy.rawValue)
        }
    }

    /// `ulimit -f` makes the file system refuse the list's preallocation, as a full disk would.
    func testAFullDiskFailsAtCreationWithAClearError() throws {
        let run = try Demo.run(["-c", "trap '' XFSZ; ulimit -f 16; exec \"$0\" stress --dir \"$1\" --count 1",
                                Demo.executable.path, directory.url.path], program: URL(fileURLWithPath: "/bin/sh"))
        XCTAssertEqual(run.status, 1, "an error, not a crash: \(run.errors)")
        XCTAssertTrue(run.errors.contains("crash-safe-list-1") && run.errors.contains("File too large"), run.errors)
    }

    func testACommitWaitsForTheRecordsReservedBeforeIt() throws {
        // Written on two threads at once, each its own place: the region's contract for `write` and `commit`.
        nonisolated(unsafe) let region = RecordRegion(recordCapacity: 4096, kind: .memoryList)
        let first = Array(#"{"body":"first"}"#.utf8), second = Array(#"{"body":"second"}"#.utf8)
        let firstEnd = RecordFraming.recordHeaderSize + first.count
        let secondEnd = firstEnd + RecordFraming.recordHeaderSize + second.count
        @Sendable func write(_ payload: [UInt8], sequence: UInt64, at offset: Int) {
            payload.withUnsafeBytes {
                region.write(category: .log, id: ItemID(nonce: 1, sequence: sequence), payload: $0,
                             payloadCRC: CRC32C.checksum($0), lane: 0, at: offset)
            }
        }
        let committed = DispatchSemaphore(value: 0)
        Thread {
            write(second, sequence: 1, at: firstEnd)
            region.commit(lane: 0, from: firstEnd, to: secondEnd)
            committed.signal()
        }.start()
        XCTAssertEqual(committed.wait(timeout: .now() + 0.3), .timedOut, "the second record waits for the first")
        XCTAssertEqual(region.committedRecordBytes(lane: 0), 0, "nothing is published past a record still being written")
        write(first, sequence: 0, at: 0)
        region.commit(lane: 0, from: 0, to: firstEnd)
        XCTAssertEqual(committed.wait(timeout: .now() + 60), .success)
        XCTAssertEqual(region.committedRecordBytes(lane: 0), secondEnd)
        var sequences: [UInt64] = []
        let scan = region.records.forEachRecord { sequences.append($0.id.sequence) }
        XCTAssertEqual(sequences, [0, 1])
        XCTAssertEqual(scan.discardedBytes, 0)
    }

    /// Two threads append (writing their records after the lock) while a third forwards the regions as
    /// fast as it can: every forward finds whole records only, and every accepted item is forwarded once.
    func testAForwardTakesARegionOnlyOnceItsRecordsAreWritten() throws {
        let regions = RotatingRegions(RecordRegion(recordCapacity: 16 << 10, kind: .memoryList),
                                      RecordRegion(recordCapacity: 16 << 10, kind: .memoryList),
                                      limits: .every(1_000_000))
        let adders = 2, perAdder = 50_000
        let accepted = Locked(0), addersDone = Locked(0)
        let forwarded = Locked((ids: Set<ItemID>(), items: 0, discarded: 0, forwards: 0))
        let finished = DispatchGroup()
        for adder in 0..<adders {
            finished.enter()
            Thread {
                let payload = Array(("{\"body\":\"adder \(adder)\"" + String(repeating: " ", count: 40 * adder) + "}").utf8)
                var mine = 0, attempts = 0
                payload.withUnsafeBytes { bytes in
                    let item = EncodedItem(category: .log, payload: bytes, payloadCRC: CRC32C.checksum(bytes), traceID: nil)
                    // At least `perAdder` adds, and on until the forwarder has taken 20 regions while they add
                    // (on a loaded machine it may get few turns: a count of items forwarded failed there).
                    while attempts < perAdder || (attempts % 1000 != 0 || forwarded.withLock { $0.forwards } < 20) {
                        if case .accepted = regions.append(item) { mine += 1 }
                        attempts += 1
                    }
                }
                accepted.withLock { $0 += mine }
                addersDone.withLock { $0 += 1 }
                finished.leave()
            }.start()
        }
        finished.enter()
        Thread {
            while true {
                let last = addersDone.withLock { $0 } == adders
                guard let batch = regions.beginForwarding() else {
                    if last { break } else { continue }
                }
                let scan = batch.records.forEachRecord { record in
                    forwarded.withLock { $0.items += 1; $0.ids.insert(record.id) }
                }
                forwarded.withLock { $0.discarded += scan.discardedBytes; $0.forwards += 1 }
                try? regions.endForwarding()
            }
            finished.leave()
        }.start()
        XCTAssertEqual(finished.wait(timeout: .now() + 60), .success, "the adders and the forwarder finish")
        let seen = forwarded.withLock { $0 }
        XCTAssertEqual(seen.discarded, 0, "no forward found a torn record")
        XCTAssertEqual(seen.items, accepted.withLock { $0 }, "every accepted item forwarded")
        XCTAssertEqual(seen.ids.count, seen.items, "none twice")
    }

    /// `close()` returns only once the records reserved before it are written and committed: after it,
    /// the regions hold every item they counted, whole (a late write could otherwise land in a list that
    /// a new buffer on the same folder has already taken over).
    func testCloseWaitsForTheWritesUnderWay() throws {
        for _ in 0..<300 {
            // Spans, which no queued-item cap stops, into regions that take thousands: the adder is still
            // adding when the close comes.
            let regions = RotatingRegions(RecordRegion(recordCapacity: 8 << 20, kind: .memoryList),
                                          RecordRegion(recordCapacity: 8 << 20, kind: .memoryList),
                                          limits: .every(1_000_000))
            let stopped = DispatchSemaphore(value: 0)
            Thread {
                let payload = Array(("{\"body\":\"" + String(repeating: "x", count: 600) + "\"}").utf8)
                payload.withUnsafeBytes { bytes in
                    let item = EncodedItem(category: .span, payload: bytes, payloadCRC: CRC32C.checksum(bytes), traceID: nil)
                    while case .accepted = regions.append(item) {}
                }
                stopped.signal()
            }.start()
            let deadline = DispatchTime.now() + 60
            while regions.itemCount < 20, DispatchTime.now() < deadline {}
            XCTAssertGreaterThanOrEqual(regions.itemCount, 20, "the adder adds")
            regions.close()
            var committed = 0
            for index in 0...1 { regions.region(index).records.forEachRecord { _ in committed += 1 } }
            XCTAssertEqual(stopped.wait(timeout: .now() + 60), .success, "the adder stops once closed")
            XCTAssertEqual(committed, regions.itemCount, "every item counted before close() is committed when it returns")
            if committed != regions.itemCount { break }
        }
    }

    func testRotatingRegionsCutATraceAtTheOverflowAndKeepWhatTheyAccepted() throws {
        let regions = RotatingRegions(RecordRegion(recordCapacity: 400, kind: .memoryList),
                                      RecordRegion(recordCapacity: 400, kind: .memoryList),
                                      limits: .every(100))
        let doomed = TraceID(high: 1, low: 1), kept = TraceID(high: 2, low: 2)
        func span(_ trace: TraceID, size: Int) -> AppendOutcome {
            let payload = Array(("{\"trace_id\":\"" + trace.description + "\"" + String(repeating: " ", count: size) + "}").utf8)
            return payload.withUnsafeBytes {
                regions.append(EncodedItem(category: .span, payload: $0, payloadCRC: CRC32C.checksum($0), traceID: trace))
            }
        }
        XCTAssertEqual(span(doomed, size: 0), .accepted(startTimer: true, forwardNow: false))
        XCTAssertNotNil(regions.beginForwarding(), "the first region is now being forwarded")
        XCTAssertEqual(span(doomed, size: 0), .accepted(startTimer: true, forwardNow: false))
        XCTAssertEqual(span(kept, size: 0), .accepted(startTimer: false, forwardNow: false))
        XCTAssertEqual(span(doomed, size: 300), .rejected(.bufferOverflow), "does not fit while the other is busy")
        XCTAssertEqual(span(doomed, size: 0), .rejected(.bufferOverflow), "its trace is cut in this region")
        XCTAssertEqual(span(kept, size: 0), .accepted(startTimer: false, forwardNow: false))
        try regions.endForwarding()
        let second = try XCTUnwrap(regions.beginForwarding())
        var traces: [TraceID?] = []
        second.records.forEachRecord { traces.append(ItemEncoder.traceID(ofSpan: $0.payload)) }
        XCTAssertEqual(traces, [doomed, kept, kept], "the accepted doomed span stays")
        try regions.endForwarding()
        XCTAssertEqual(span(doomed, size: 0), .accepted(startTimer: true, forwardNow: false), "a new region takes it again")
    }

    #if os(Linux)
    /// A list of spans makes an envelope per trace, and each staged envelope held a descriptor open until its
    /// sync: a list of 200 traces under a limit of 80 free descriptors (macOS gives a process 256) failed every
    /// forward with EMFILE and was never published. Staging syncs and closes every `UnsyncedFiles.maxWaiting`.
    func testAPublicationOfManyTracesHoldsFewDescriptorsOpen() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let buffer = try TelemetryBuffer(options: testOptions(folder) {
            $0.strategy = .doubleRotatingBuffer
            $0.maxCachedEnvelopes = 1000
        })
        XCTAssertTrue(buffer.add(log: .test("warm-up")))  // the first publication opens what later ones reuse
        buffer.flush()
        let traces = 200
        for trace in 1...traces {
            XCTAssertTrue(buffer.add(span: .test("s\(trace)", trace: TraceID(high: 9, low: UInt64(trace)))))
        }
        XCTAssertEqual(try walkEnvelopes(in: buffer.envelopesDirectory).count, 1, "only the warm-up's so far")
        let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        var saved = rlimit()
        XCTAssertEqual(getrlimit(resource, &saved), 0)
        let open = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count
        var lowered = saved
        lowered.rlim_cur = rlim_t(open + UnsyncedFiles.maxWaiting + 16)
        XCTAssertEqual(setrlimit(resource, &lowered), 0)
        defer { XCTAssertEqual(setrlimit(resource, &saved), 0) }  // whatever throws: later tests need descriptors
        buffer.flush()
        let spans = try walkEnvelopes(in: buffer.envelopesDirectory).flatMap { $0.items.filter { $0.type == "span" } }.count
        XCTAssertEqual(spans, traces, "an envelope per trace, all published by the flush")
        buffer.close()
    }
    #endif
}

/// SIGXFSZ deliveries (each write past the file size limit raises one), counted by a test's handler.
nonisolated(unsafe) private var fileSizeSignals = 0
