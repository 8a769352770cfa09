import Foundation
import XCTest
@testable import TelemetryBuffer

/// What the buffer finds in its folders is not to be trusted: files it did not write, or wrote and then
/// found damaged, must neither crash nor wedge it.
final class HostileFolderTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory.remove() }

    /// Two expired envelopes that each claim `Int.max` items: counting them as dropped, at start and in
    /// `stats()`, saturates instead of trapping on overflow.
    func testCraftedItemCountsSaturateInsteadOfTrapping() throws {
        let envelopes = directory.envelopesFolder()
        try FileManager.default.createDirectory(at: envelopes, withIntermediateDirectories: true)
        let crafted = "{}\n{\"type\":\"log\",\"item_count\":9223372036854775807,\"length\":2}\n{}\n"
        for index in 0..<2 {
            // Eight days old: expired.
            let name = FileTransport.name(now: Date().addingTimeInterval(-8 * 24 * 3600), counter: UInt64(index))
            try Data(crafted.utf8).write(to: envelopes.appendingPathComponent(name))
        }
        let expiring = try TelemetryBuffer(options: testOptions(directory))
        expiring.waitForBackgroundWork()  // the start's expiry runs there
        XCTAssertEqual(expiring.stats().drops["cache_overflow/log_item"], Int.max)
        expiring.close()

        for index in 0..<2 {
            let name = FileTransport.name(now: Date(), counter: UInt64(index))
            try Data(crafted.utf8).write(to: envelopes.appendingPathComponent(name))
        }
        let stored = try TelemetryBuffer(options: testOptions(directory))
        defer { stored.close() }
        XCTAssertEqual(stored.stats().stored["log"]?.items, Int.max)
    }

    /// A FIFO or link where a strategy's own file goes (a list, an IO cache, the stream cache, the file it
    /// rotates into) is neither opened, followed nor moved: the buffer does not start, and says which file is in
    /// the way.
    func testAForeignFileWhereTheBufferKeepsItsItemsFailsStartClearly() throws {
        let buffer = directory.bufferFolder()
        for (strategy, name) in [(Options.Strategy.doubleRotatingBuffer, BufferFile.crashSafeList(1).name),
                                 (.doubleRotatingBuffer, BufferFile.asyncIOCache(2).name),
                                 (.fileStreamCache, BufferFile.streamCache.name),
                                 (.fileStreamCache, BufferFile.streamFlushing.name)] {
            _ = try directory.makeBufferFolder()
            let planted = buffer.appendingPathComponent(name)
            XCTAssertEqual(mkfifo(planted.path, 0o600), 0)
            XCTAssertThrowsError(try TelemetryBuffer(options: testOptions(directory) { $0.strategy = strategy })) { error in
                guard let error = error as? TelemetryBufferError, error.code == .unusableCacheDirectory else {
                    return XCTFail("\(strategy): \(error)")
                }
                XCTAssertEqual(error.path, buffer.path, "\(strategy)")
                XCTAssertTrue(error.reason.contains(name), "\(strategy): \(error.reason)")
            }
            var status = stat()
            XCTAssertEqual(lstat(planted.path, &status), 0, "\(strategy): the FIFO stays")
            XCTAssertEqual(status.st_mode & S_IFMT, S_IFIFO, "\(strategy)")
            try FileManager.default.removeItem(at: buffer)
        }
    }

    /// A recovery that fails part-way keeps its claimed files, markers and all, and a later recovery
    /// removes the envelopes a `publishing` marker names. What this process stages meanwhile must carry
    /// other indices, or that removal takes them, with items whose `captured` list says they are stored;
    /// also when the indices wrap at 2^32 (a planted marker names the last ones).
    func testEnvelopeIndicesAfterAFailedRecoveryMissEveryOlderMarker() throws {
        for wrapping in [false, true] {
            let bufferFolder = try BufferFolder(path: directory.makeBufferFolder())
            // An earlier process's stream cache, claimed; its publication was cut after the marker.
            try plantClaimed("recovering-0-" + BufferFile.streamFlushing.name, marker: .init(state: .publishing, firstEnvelope: 0, envelopeCount: 4), in: bufferFolder)
            if wrapping {
                try plantClaimed("recovering-1-" + BufferFile.streamFlushing.name,
                                 marker: .init(state: .publishing, firstEnvelope: UInt32.max - 16, envelopeCount: 32), in: bufferFolder)
            }
            bufferFolder.release()

            // This process's recovery fails; it is killed once its first publication is captured, not moved.
            let stress = try Demo.run(["stress", "--dir", directory.url.path, "--strategy", "fileStreamCache",
                                       "--count", "300", "--max-envelopes", "100000"],
                                      failpoint: .publishCaptured, failing: .recoveryFails)
            XCTAssertEqual(stress.status, -SIGKILL, stress.errors)
            // (Its diagnostic may not be printed before the kill: the claimed file still there says it.)
            let left = try FileManager.default.contentsOfDirectory(atPath: directory.bufferFolder().path)
            XCTAssertTrue(left.contains("recovering-0-" + BufferFile.streamFlushing.name), "recovery failed: \(left)")
            let recovery = try Demo.run(["recover", "--dir", directory.url.path, "--strategy", "fileStreamCache",
                                         "--max-envelopes", "100000"])
            XCTAssertEqual(recovery.status, 0, recovery.errors)
            try assertDelivered(stress, in: directory, spans: false, crashSafe: true, "after a failed recovery, wrapping: \(wrapping)")
            try FileManager.default.removeItem(at: directory.dsnFolder())
        }
    }

    /// A recovery that fails leaves what earlier processes staged where it is: a publication cut before
    /// its commit is moved by nobody but the recovery that later removes it (moved meanwhile, its items
    /// came twice: once from the envelopes, once from the list recovery publishes again).
    func testAFailedRecoveryMovesNoEnvelopeOfAnInterruptedPublication() throws {
        let cut = try Demo.run(["stress", "--dir", directory.url.path, "--strategy", "fileStreamCache", "--count", "300",
                                "--max-envelopes", "100000"], failpoint: .publishStaged)
        XCTAssertEqual(cut.status, -SIGKILL, cut.errors)
        let failed = try Demo.run(["stress", "--dir", directory.url.path, "--strategy", "fileStreamCache", "--count", "0",
                                   "--max-envelopes", "100000"], failing: .recoveryFails)
        XCTAssertEqual(failed.status, 0, failed.errors)
        XCTAssertTrue(failed.errors.contains("start-up recovery failed"), failed.errors)
        let recovery = try Demo.run(["recover", "--dir", directory.url.path, "--strategy", "fileStreamCache",
                                     "--max-envelopes", "100000"])
        XCTAssertEqual(recovery.status, 0, recovery.errors)
        try assertDelivered(cut, in: directory, spans: false, crashSafe: true, "after a failed recovery")
    }

    private func plantClaimed(_ name: String, marker: RecordFraming.Publication, in folder: BufferFolder) throws {
        try FramedFile.write(records: [], kind: .streamCache, name: name, in: folder)
        try FramedFile.mark(marker, name: name, in: folder)
    }

    /// Symbolic links and FIFOs with the names of buffer files: nothing is written through a link (a
    /// planted `boot → victim` truncated and overwrote the victim), nothing blocks on a FIFO (one named
    /// `boot` hung the background queue, and with it `flush()` and `close()`), a link under a temporary
    /// file's name is not swept away as a leftover, the saved drop counts are neither read nor written
    /// through one, and every item still arrives.
    func testLinksAndFIFOsWithBufferFileNamesAreLeftAlone() throws {
        let victim = directory.url.appendingPathComponent("victim")
        try Data("precious".utf8).write(to: victim)
        for (name, planted) in [("boot", "link"), ("boot", "fifo"), ("envelope-7", "link"), ("flushing", "fifo"),
                                ("." + BufferFile.crashSafeList(1).name + ".tmp", "link"), ("client-report", "link"),
                                ("client-report", "fifo"), (".client-report.tmp", "link"), (".client-report.tmp", "fifo")] {
            try? FileManager.default.removeItem(at: directory.dsnFolder())
            let folder = URL(fileURLWithPath: try directory.makeBufferFolder(), isDirectory: true)
            let path = folder.appendingPathComponent(name).path
            if planted == "link" {
                try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: victim.path)
            } else {
                XCTAssertEqual(mkfifo(path, 0o600), 0)
            }
            let finished = DispatchSemaphore(value: 0)
            let delivered = Locked<[String]>([])
            let options = testOptions(directory)
            DispatchQueue.global().async {
                defer { finished.signal() }
                guard let buffer = try? TelemetryBuffer(options: options) else { return }
                buffer.add(log: .test("one"))
                buffer.flush()
                buffer.add(log: .test("two"))
                // A drop, so that `close()` saves the counts (through `.client-report.tmp`, then `client-report`).
                buffer.add(log: .test(String(repeating: "x", count: options.maxBatchBytes)))
                buffer.close()
                delivered.withLock { $0 = (try? logBodies(in: buffer.envelopesDirectory)) ?? [] }
            }
            XCTAssertEqual(finished.wait(timeout: .now() + 30), .success, "\(name) as a \(planted): the buffer hung")
            XCTAssertEqual(delivered.withLock { $0 }, ["one", "two"], "\(name) as a \(planted)")
            XCTAssertEqual(try String(contentsOf: victim, encoding: .utf8), "precious", "\(name) as a \(planted)")
            var status = stat()
            XCTAssertEqual(lstat(path, &status), 0, "\(name) as a \(planted): left where it was")
            XCTAssertEqual(status.st_mode & S_IFMT, planted == "link" ? S_IFLNK : S_IFIFO, "\(name) as a \(planted): not replaced")
        }
    }

    /// Files larger than any the buffer writes (sparse here, so they cost no disk): a claimed `cache` of
    /// 1 GiB is set aside unread instead of being read whole at start, and an `.envelope` of 3 MiB is
    /// skipped by `stats()` and deleted (counted by its first 2 MiB) by the uploader instead of being read whole.
    func testFilesLargerThanTheFormatAllowsAreNeverReadWhole() throws {
        let buffers = directory.bufferFolder()
        let envelopes = directory.envelopesFolder()
        for folder in [buffers, envelopes] { try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true) }
        func sparse(_ url: URL, bytes: UInt64, beginning: String = "") throws {
            XCTAssertTrue(FileManager.default.createFile(atPath: url.path, contents: Data(beginning.utf8)))
            let handle = try FileHandle(forWritingTo: url)
            try handle.truncate(atOffset: bytes)
            try handle.close()
        }
        try sparse(buffers.appendingPathComponent("cache"), bytes: 1 << 30)
        try sparse(envelopes.appendingPathComponent(FileTransport.name(now: Date(), counter: 0)), bytes: 3 << 20,
                   beginning: "{}\n{\"type\":\"log\",\"length\":3000000}\n")
        let buffer = try TelemetryBuffer(options: testOptions(directory))
        XCTAssertEqual(buffer.recovery.setAside, ["recovering-0-cache"])
        XCTAssertEqual(buffer.recovery.discardedBytes, 0)
        XCTAssertEqual(buffer.stats().stored, [:], "the oversized envelope is not read")
        buffer.close()

        // No request is made: the file is judged by its size before anything is sent.
        let uploading = try TelemetryBuffer(options: testOptions(directory) { $0.upload = true })
        defer { uploading.close() }
        try eventually { try FileManager.default.contentsOfDirectory(atPath: envelopes.path).isEmpty }
        // Counted by what its readable part names.
        XCTAssertEqual(uploading.stats().drops["internal_sdk_error/log_item"], 1)
    }

    /// Planted `.envelope` files whose sizes add up past `Int.max` (sparse, on a tmpfs, where a file may
    /// reach 2⁶³ − 1 bytes, as on XFS, btrfs or APFS): a start over the bounds evicts them, unread, and
    /// keeps the newest of its own. The sum of the sizes saturated, and taking each victim's size off it
    /// overflowed: every start trapped (in a child here), before it removed anything.
    func testEnvelopeSizesAddingUpPastTheLargestIntegerAreEvicted() throws {
        let shm = URL(fileURLWithPath: "/dev/shm")
        guard let folder = try? TemporaryDirectory(in: shm) else { throw XCTSkip("no /dev/shm here") }
        defer { folder.remove() }
        let envelopes = folder.envelopesFolder(demoDefaultDSN)
        try FileManager.default.createDirectory(at: envelopes, withIntermediateDirectories: true)
        let names = (0..<6).map { FileTransport.name(now: Date(), counter: $0) }
        for (counter, name) in names.enumerated() {
            let path = envelopes.appendingPathComponent(name).path
            XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data("{}\n{\"type\":\"log\",\"length\":2}\n{}\n".utf8)))
            if counter < 3 {
                guard truncate(path, off_t.max) == 0 else { throw XCTSkip("\(shm.path) takes no file of 2⁶³ − 1 bytes: errno \(errno)") }
            }
        }
        let recovery = try Demo.run(["recover", "--dir", folder.url.path, "--max-envelopes", "3"])
        XCTAssertEqual(recovery.status, 0, recovery.errors.suffix(2000).description)
        let left = try FileManager.default.contentsOfDirectory(atPath: envelopes.path).sorted()
        XCTAssertEqual(left, Array(names[3...]))
    }

    /// Start-up on buffer files damaged at random: a byte flipped, a range zeroed, a file cut short, a
    /// garbage header, a huge committed or record length, a random publication marker. The files come from
    /// real processes killed in the middle of a publication (DoubleRotatingBuffer, FileStreamCache).
    /// Every start must finish (no crash, no hang), and no item may be delivered twice.
    /// `TB_FUZZ_STARTS` sets the number of starts (100 by default, 1,000 in CI).
    func testStartUpSurvivesRandomlyDamagedFiles() throws {
        let starts = tortureCount("TB_FUZZ_STARTS", quick: 100)
        var snapshots: [(strategy: Options.Strategy, files: [(name: String, bytes: [UInt8])])] = []
        for strategy in [Options.Strategy.doubleRotatingBuffer, .fileStreamCache] {
            let folder = try TemporaryDirectory()
            defer { folder.remove() }
            let stress = try Demo.stress(folder, strategy, count: 300, spans: true, metrics: true, failpoint: .publishStaged)
            XCTAssertEqual(stress.status, -SIGKILL, stress.errors)
            let buffers = folder.bufferFolder(demoDefaultDSN)
            let files = try FileManager.default.contentsOfDirectory(atPath: buffers.path).filter { $0 != "lock" }.map { name in
                // A list is useful up to its committed length; the rest of its megabyte is zeros. (One thread
                // adds, so one lane holds records: the first, after the lane table.)
                var bytes = FileSystem.contents(of: buffers.appendingPathComponent(name).path) ?? []
                if name.hasPrefix("crash-safe-list-"),
                   let lanes = bytes.withUnsafeBytes({ RecordFraming.laneRecords(ofHeader: $0, available: $0.count) }) {
                    bytes = Array(bytes.prefix(lanes[0].upperBound))
                }
                return (name, bytes)
            }
            snapshots.append((strategy, files))
        }

        let finished = DispatchSemaphore(value: 0)
        let failures = Locked<[String]>([])
        // In memory where there is a tmpfs: the test is about what recovery makes of damaged bytes, and the
        // thousands of syncs and deletions on a disk would only make it slow.
        let shm = URL(fileURLWithPath: "/dev/shm/tb-fuzz-\(UUID().uuidString)")
        let root = (try? FileManager.default.createDirectory(at: shm, withIntermediateDirectories: true)) != nil ? shm : directory.url
        defer { try? FileManager.default.removeItem(at: shm) }
        DispatchQueue.global().async { [snapshots] in
            defer { finished.signal() }
            var generator = SystemRandomNumberGenerator()
            for start in 0..<starts {
                let snapshot = snapshots[start % snapshots.count]
                let cache = root.appendingPathComponent("start-\(start)")
                let buffers = TemporaryDirectory.dsnFolder(in: cache, demoDefaultDSN).appendingPathComponent(BufferFolder.name)
                try? FileManager.default.createDirectory(at: buffers, withIntermediateDirectories: true)
                var damages: [String] = []
                for (name, original) in snapshot.files {
                    var bytes = original
                    for _ in 0..<Int.random(in: 0...2, using: &generator) {
                        damages.append("\(name): \(Self.damage(&bytes, using: &generator))")
                    }
                    XCTAssertTrue(FileManager.default.createFile(atPath: buffers.appendingPathComponent(name).path, contents: Data(bytes)))
                }
                var options = Options(dsn: demoDefaultDSN)
                options.cacheDirectory = cache
                options.upload = false
                options.maxCachedEnvelopes = 100_000
                options.maxBatchBytes = 16 << 10  // small new files: the old ones are what is tested
                options.strategy = Bool.random(using: &generator) ? snapshot.strategy : Options.Strategy.allCases.randomElement(using: &generator)!
                guard let buffer = try? TelemetryBuffer(options: options) else {
                    failures.withLock { $0.append("start \(start): the buffer could not be created") }
                    continue
                }
                _ = buffer.recovery
                buffer.close()
                // Whole objects, not names: damage to a staged envelope can turn one item's body into
                // another's name without making a duplicate.
                let envelopes = buffer.envelopesDirectory
                let names = (try? FileManager.default.contentsOfDirectory(atPath: envelopes.path)) ?? []
                let elements = names.flatMap { name in
                    EnvelopeReader.elements(in: FileSystem.contents(of: envelopes.appendingPathComponent(name).path) ?? []).map(Array.init)
                }
                if Set(elements).count != elements.count {
                    failures.withLock { $0.append("start \(start): an item twice after \(damages)") }
                }
                try? FileManager.default.removeItem(at: cache)
            }
        }
        XCTAssertEqual(finished.wait(timeout: .now() + 600), .success, "a start hung")
        XCTAssertEqual(failures.withLock { $0 }, [])
    }

    /// One random damage to a file's bytes; says which.
    private static func damage(_ bytes: inout [UInt8], using generator: inout SystemRandomNumberGenerator) -> String {
        guard !bytes.isEmpty else {
            bytes = (0..<64).map { _ in UInt8.random(in: 0...255, using: &generator) }
            return "garbage"
        }
        let at = Int.random(in: 0..<bytes.count, using: &generator)
        switch Int.random(in: 0..<6, using: &generator) {
        case 0:
            bytes[at] ^= UInt8(1) << UInt8.random(in: 0..<8, using: &generator)
            return "flip at \(at)"
        case 1:
            for index in at..<min(bytes.count, at + Int.random(in: 1...512, using: &generator)) { bytes[index] = 0 }
            return "zeros at \(at)"
        case 2:
            bytes.removeLast(bytes.count - at)
            return "cut at \(at)"
        case 3:
            for index in 0..<min(bytes.count, RecordFraming.headerSize) { bytes[index] = .random(in: 0...255, using: &generator) }
            return "garbage header"
        case 4:
            // A huge committed length (header), record length (first record, its low 4 bytes), or lane 1's
            // committed length or start (in a list's lane table): past every size, or at the edges of 32
            // and 64 bits (where `Int` has 32 bits, as on watchOS, 2^31 and more would trap in a conversion).
            let firstRecord = bytes.withUnsafeBytes { RecordFraming.laneRecords(ofHeader: $0, available: $0.count)?.first?.lowerBound }
            let offset = [RecordFraming.committedLengthOffset, firstRecord ?? RecordFraming.headerSize, 64, 72].randomElement(using: &generator)!
            let huge: UInt64 = [UInt64.random(in: 0xFFFF_FFFF_FFFF_FF00...UInt64.max, using: &generator), 1 << 63, (1 << 63) - 1, 1 << 32,
                        (1 << 32) - 1, 1 << 31, (1 << 31) - 1].randomElement(using: &generator)!
            withUnsafeBytes(of: huge.littleEndian) { word in
                for (index, byte) in word.enumerated() where offset + index < bytes.count { bytes[offset + index] = byte }
            }
            return "length \(huge) at \(offset)"
        default:
            // A random publication marker.
            for index in RecordFraming.publicationOffset..<RecordFraming.headerSize where index < bytes.count {
                bytes[index] = .random(in: 0...255, using: &generator)
            }
            return "random marker"
        }
    }
}
