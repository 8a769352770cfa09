import Foundation
import XCTest
@testable import TelemetryBuffer

/// Real child processes (`telemetry-demo stress`) killed with SIGKILL, then recovered by a new process.
///
/// The contract: with DoubleRotatingBuffer and FileStreamCache every item whose `ack` was printed is
/// delivered exactly once, whenever the kill lands (during adds, a flush, a move or start-up recovery);
/// nothing is delivered twice, and nothing that was never added appears. FlushAll keeps items in memory,
/// so it may lose unacknowledged batches, but never duplicates or invents one.
/// `TB_KILL_RUNS` sets the randomized runs per strategy (2 by default, 50 in CI), and with it the runs of
/// the tests that kill while threads add or around a removal.
final class KillTests: XCTestCase {
    private static let runs = tortureCount("TB_KILL_RUNS", quick: 2)
    private static let count = 3000
    private static let crashSafe: [Options.Strategy] = [.doubleRotatingBuffer, .fileStreamCache]
    /// `Options.ioSyncInterval`'s default, in milliseconds: the demo's tests otherwise run at 10 ms.
    private static let defaultIOSync = Int(Options(dsn: "https://key@localhost/1").ioSyncInterval * 1000)

    func testRandomKillsThenRecoveryDeliverEveryAcknowledgedItemExactlyOnce() throws {
        var generator = SystemRandomNumberGenerator()
        for (index, strategy) in Options.Strategy.allCases.enumerated() {
            for run in 0..<Self.runs {
                let folder = try TemporaryDirectory()
                defer { folder.remove() }
                let spans = (run + index) % 2 == 1
                // Every other run at the default interval: no batch is copied before its forward.
                let stress = try Demo.stress(folder, strategy, count: Self.count, spans: spans, metrics: true,
                                              ioSyncMilliseconds: run % 2 == 1 ? Self.defaultIOSync : nil,
                                              killAfter: .random(in: 0...250_000, using: &generator))
                // A third of the runs also kill the first recovery part-way.
                if run % 3 == 0 {
                    _ = try Demo.recover(folder, strategy, killAfter: .random(in: 0...40_000, using: &generator))
                }
                let recovery = try Demo.recover(folder, strategy)
                XCTAssertEqual(recovery.status, 0, recovery.errors)
                try assertDelivered(stress, in: folder, spans: spans, metrics: true, crashSafe: Self.crashSafe.contains(strategy),
                                    "\(strategy) run \(run)")
            }
        }
    }

    /// Three threads add at once (with DoubleRotatingBuffer on Linux their records are copied after the
    /// list's lock and committed in the order of their places), killed at a random moment spanning several
    /// forwards: every item acknowledged on any thread is delivered exactly once after recovery.
    func testRandomKillsWhileThreadsAddAtOnceDeliverEveryAcknowledgedItemExactlyOnce() throws {
        var generator = SystemRandomNumberGenerator()
        for (index, strategy) in Self.crashSafe.enumerated() {
            for run in 0..<max(1, Self.runs / 4) {
                let folder = try TemporaryDirectory()
                defer { folder.remove() }
                let spans = (run + index) % 2 == 1
                let stress = try Demo.stress(folder, strategy, count: Self.count * 2, spans: spans, metrics: true, threads: 3,
                                              killAfter: .random(in: 0...250_000, using: &generator))
                let recovery = try Demo.recover(folder, strategy)
                XCTAssertEqual(recovery.status, 0, recovery.errors)
                try assertDelivered(stress, in: folder, spans: spans, metrics: true, crashSafe: true, threads: 3, "\(strategy) run \(run)")
            }
        }
    }

    /// The DoubleRotatingBuffer with its lists in memory (failpoint `mapping.faults`, as on btrfs or
    /// overlayfs), three threads adding, killed at a random moment spanning several forwards: nothing is
    /// delivered twice, and what is lost is the last items of each thread, which the IO caches had not
    /// copied yet (at most the last 100 ms's, here 10 ms: the demo's `--io-sync-ms`).
    func testKillsWithListsInMemoryLoseOnlyTheLastItemsAndDuplicateNothing() throws {
        var generator = SystemRandomNumberGenerator()
        for run in 0..<max(2, Self.runs / 2) {
            let folder = try TemporaryDirectory()
            defer { folder.remove() }
            let spans = run % 2 == 1
            let stress = try Demo.stress(folder, .doubleRotatingBuffer, count: Self.count * 2, spans: spans, threads: 3,
                                          killAfter: .random(in: 0...250_000, using: &generator), failpoint: .mappingFaults)
            let recovery = try Demo.recover(folder, .doubleRotatingBuffer)
            XCTAssertEqual(recovery.status, 0, recovery.errors)
            try assertDelivered(stress, in: folder, spans: spans, crashSafe: false, threads: 3, "lists in memory, run \(run)")
            try assertLossesAreTails(stress, in: folder, spans: spans, threads: 3, "lists in memory, run \(run)")
        }
    }

    /// Lists in memory whose IO cache cannot be retired (every rename fails): the envelopes of a publication
    /// whose cache stays in place stay staged, never moved while the cache holds their items as live; the
    /// next start drops them for the cache and delivers every item once. (They moved, and the cache's items
    /// went out a second time.)
    func testListsInMemoryWhoseCacheCannotBeRetiredDeliverEveryItemOnce() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let stress = try Demo.run(["stress", "--dir", folder.url.path, "--strategy", "doubleRotatingBuffer", "--count", "500",
                                   "--spans", "--max-envelopes", "100000"], failpoint: .mappingFaults, failing: .retireFails)
        XCTAssertEqual(stress.status, 0, stress.errors.suffix(500).description)
        XCTAssertTrue(stress.errors.contains("keeps its lists in memory"), stress.errors.suffix(500).description)
        let recovery = try Demo.recover(folder, .doubleRotatingBuffer)
        XCTAssertEqual(recovery.status, 0, recovery.errors)
        try assertDelivered(stress, in: folder, spans: true, crashSafe: true, "retirement failing")
    }

    /// Killed at a random moment with the envelopes bounded to a few, so that nearly every forward evicts
    /// one and the recovery evicts again: logs, spans and metrics, all of one rank, so the oldest go. Nothing
    /// is delivered twice or invented, the folder holds no more than the bound, and what was evicted is
    /// each kind's oldest: once an acknowledged item is delivered, every later one is.
    func testRandomKillsWhileEvictingKeepTheNewestAndDuplicateNothing() throws {
        var generator = SystemRandomNumberGenerator()
        let bound = 6
        var kept = 0
        for (index, strategy) in Self.crashSafe.enumerated() {
            for run in 0..<max(2, Self.runs / 2) {
                let folder = try TemporaryDirectory()
                defer { folder.remove() }
                let spans = (run + index) % 2 == 0
                let stress = try Demo.run(["stress", "--dir", folder.url.path, "--strategy", strategy.rawValue, "--count", String(Self.count),
                                           "--max-envelopes", String(bound), "--metrics"] + (spans ? ["--spans"] : []),
                                          killAfter: .random(in: 0...250_000, using: &generator))
                if run % 3 == 1 {
                    _ = try Demo.run(["recover", "--dir", folder.url.path, "--strategy", strategy.rawValue, "--max-envelopes", String(bound)],
                                     killAfter: .random(in: 0...40_000, using: &generator))
                }
                let recovery = try Demo.run(["recover", "--dir", folder.url.path, "--strategy", strategy.rawValue,
                                             "--max-envelopes", String(bound)])
                XCTAssertEqual(recovery.status, 0, recovery.errors)
                let label = "\(strategy) run \(run)"
                try assertDelivered(stress, in: folder, spans: spans, metrics: true, crashSafe: false, label)
                let stored = try walkEnvelopes(in: folder.envelopesFolder(demoDefaultDSN))
                XCTAssertLessThanOrEqual(stored.count, bound, label)
                kept += try assertLossesAreHeads(stress, in: folder, spans: spans, metrics: true, label).values.reduce(0, +)
            }
        }
        XCTAssertGreaterThan(kept, 0, "no run kept an acknowledged item: the kills all came before the first")
    }

    /// `removeAllData()` in the middle of a run, with a kill at a random moment before, during or after it.
    /// Once it returned (`removed` printed), nothing added before it is ever delivered, and with the
    /// crash-safe strategies every item acknowledged after it is, exactly once; whenever the kill lands,
    /// nothing is delivered twice and nothing never added is delivered.
    func testKillsAroundARemovalNeverBringBackWhatItRemovedNorDuplicate() throws {
        var generator = SystemRandomNumberGenerator()
        let aim = Int.random(in: 0...1, using: &generator)  // which runs aim at the removal: every other one
        for (index, strategy) in Options.Strategy.allCases.enumerated() {
            for run in 0..<max(1, Self.runs / 5) {
                let folder = try TemporaryDirectory()
                defer { folder.remove() }
                let removeAt = Int.random(in: 1000...25_000, using: &generator)
                // A debug build adds about one item per 22 µs here after a start-up of some 25 ms: every other
                // run aims the kill at the removal, the others anywhere in the run.
                let around = 25_000 + removeAt * 22
                let killAfter = (run + index + aim) % 2 == 0 ? useconds_t.random(in: 0...350_000, using: &generator)
                    : useconds_t.random(in: useconds_t(around - 20_000)...useconds_t(around + 20_000), using: &generator)
                let spans = (run + index) % 4 == 1
                let stress = try Demo.run(["stress", "--dir", folder.url.path, "--strategy", strategy.rawValue,
                                           "--count", "30000", "--max-envelopes", "100000", "--remove-at", String(removeAt)]
                                          + (spans ? ["--spans"] : []),
                                          killAfter: killAfter)
                let recovery = try Demo.recover(folder, strategy)
                XCTAssertEqual(recovery.status, 0, recovery.errors)
                try assertRemovalHeld(stress, in: folder, removeAt: removeAt, spans: spans, crashSafe: strategy != .flushAll,
                                      "\(strategy) run \(run), removal before \(removeAt)")
            }
        }
    }

    /// A kill at each step of publishing (a flush), of moving staged envelopes and, for the
    /// DoubleRotatingBuffer, after the forward returned and before its envelopes were synced.
    func testKillsAtEveryStepOfPublishing() throws {
        let steps: [Failpoint] = [.publishMarked, .publishStaged, .publishCaptured, .publishEmptied, .moveOne]
        for strategy in Self.crashSafe {
            // The DoubleRotatingBuffer paced at 10 ms, so that its forwards retire IO caches that copied their
            // batch, and at the default interval, where no IO cache is copied or retired.
            let intervals: [Int?] = strategy == .doubleRotatingBuffer ? [nil, Self.defaultIOSync] : [nil]
            let cases = (steps + (strategy == .doubleRotatingBuffer ? [.publishUnsynced] : [])).flatMap { step in intervals.map { (step, $0) } }
            for (step, ioSync) in cases {
                let folder = try TemporaryDirectory()
                defer { folder.remove() }
                let paced = strategy == .doubleRotatingBuffer && ioSync == nil
                let stress = try Demo.stress(folder, strategy, count: 500, spans: true, ioSyncMilliseconds: ioSync,
                                             paceMicroseconds: paced ? 200 : nil, failpoint: step)
                let name = "\(strategy) \(step)\(ioSync.map { " at \($0) ms" } ?? "")"
                XCTAssertEqual(stress.status, -SIGKILL, "\(name) must have been reached")
                let recovery = try Demo.recover(folder, strategy)
                XCTAssertEqual(recovery.status, 0, recovery.errors)
                try assertDelivered(stress, in: folder, spans: true, crashSafe: true, name)
            }
        }
    }

    /// A spare that still holds records (its emptying lost to power loss; here planted: items 0–19 as an
    /// earlier process published them) becomes an IO cache at the first retirement: the process killed
    /// right after that publication recovers its own items once, and none of the spare's again. (The
    /// spare was reused without being truncated: its records read back after the fresh header as the
    /// cache's, and were published twice.)
    func testASpareThatStillHoldsRecordsIsNotReadBackAsTheCaches() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let buffer = try folder.makeBufferFolder(dsn: demoDefaultDSN)
        let spare = AsyncIOCache(path: buffer + "/spare-0")
        let published = RecordRegion(recordCapacity: 1 << 16, kind: .memoryList)
        appendLogs((0..<20).map { "item \($0)" }, to: published, nonce: 99)
        try spare.catchUp(with: published)
        // Paced, so that the first batch is copied before its forward, which then retires the cache.
        let stress = try Demo.stress(folder, .doubleRotatingBuffer, count: 500, spans: true, paceMicroseconds: 500,
                                     failpoint: .publishEmptied)
        XCTAssertEqual(stress.status, -SIGKILL, "the first publication must have been reached")
        let files = try FileManager.default.contentsOfDirectory(atPath: buffer)
        XCTAssertFalse(files.contains("spare-0"), "the spare took the retired cache's place: \(files)")
        XCTAssertTrue(files.contains("awaiting-sync-1"), "\(files)")
        let recovery = try Demo.recover(folder, .doubleRotatingBuffer)
        XCTAssertEqual(recovery.status, 0, recovery.errors)
        try assertDelivered(stress, in: folder, spans: true, crashSafe: true, "a spare holding records")
    }

    /// Recovery gathers more than one part (ten copies of published lists, 10 MiB) and is killed after
    /// publishing the first: the next start delivers every item once. The first and the last copy each hold
    /// an item with the same bytes (same body and timestamp; distinct items, by their IDs). (Each part was
    /// removed once published, so its staged envelopes were orphans at the next start, judged by their
    /// bytes: the one holding the twin was removed with the 99 other items in it.)
    func testARecoveryKilledBetweenItsPartsDeliversEveryItemOnce() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let buffer = try folder.makeBufferFolder(dsn: demoDefaultDSN)
        let padding = String(repeating: "p", count: 1000)
        let expected = try plantPublishedCopies(in: buffer, files: 10) { file, index in
            (file == 0 || file == 9) && index == 5 ? "twin" : "f\(file) i\(index) \(padding)"
        }
        let killed = try Demo.recover(folder, .doubleRotatingBuffer, failpoint: .recoveryPartDone)
        XCTAssertEqual(killed.status, -SIGKILL, "the first part must have been published")
        let recovery = try Demo.recover(folder, .doubleRotatingBuffer)
        XCTAssertEqual(recovery.status, 0, recovery.errors)
        let envelopes = folder.envelopesFolder(demoDefaultDSN)
        let bodies = try logBodies(in: envelopes)
        XCTAssertTrue(bodies.sorted() == expected.sorted(), "\(bodies.count) delivered of \(expected.count)")
    }

    /// A deferred sync that fails (an `fsync` error, or an error starting the writeback before it, injected):
    /// the copies of what it was to make durable stay, no longer dated to this boot, so recovery publishes
    /// what they hold again rather than trusting envelopes whose bytes may never reach the disk. Every item
    /// still arrives, some perhaps twice.
    func testAFailedSyncKeepsItsCopiesAndDatesThemToNoBoot() throws {
        for failpoint in [Failpoint.syncFails, .writebackFails] {
            let folder = try TemporaryDirectory()
            defer { folder.remove() }
            // Paced, so that batches are copied before their forwards, which then retire the caches.
            let stress = try Demo.stress(folder, .doubleRotatingBuffer, count: 500, spans: true, paceMicroseconds: 500,
                                         failpoint: failpoint)
            XCTAssertEqual(stress.status, 0, stress.errors)
            XCTAssertTrue(stress.errors.contains("could not sync published envelopes"), "\(failpoint): \(stress.errors)")
            let files = try FileManager.default.contentsOfDirectory(atPath: folder.bufferFolder(demoDefaultDSN).path)
            XCTAssertFalse(files.contains("boot"), "\(failpoint): \(files)")
            XCTAssertTrue(files.contains { $0.hasPrefix("awaiting-sync-") }, "\(failpoint): \(files)")
            let recovery = try Demo.recover(folder, .doubleRotatingBuffer)
            XCTAssertEqual(recovery.status, 0, recovery.errors)
            try assertDelivered(stress, in: folder, spans: true, crashSafe: true, atLeastOnce: true, "\(failpoint)")
        }
    }

    /// An app that exits holding its buffer (no `close()`): the exit hook's forward publishes the last
    /// batch, whose sync runs a moment later (here slowed, `publish.unsynced:pause`). The hook waits for it
    /// too: otherwise the process ended first, left the batch's copy `awaiting-sync-x` dated to this boot,
    /// and after a reboot recovery took it for live items and published the batch again.
    func testAGracefulExitWaitsForTheDeferredSyncSoARebootPublishesNothingTwice() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        // Paced, so that the IO caches hold the lists' items when they are retired (as in an app that runs on).
        // Fewer than a batch: the exit's forward is the one paused (every pause takes from the hook's 2 s).
        let stress = try Demo.run(["stress", "--dir", folder.url.path, "--count", "50", "--spans", "--max-envelopes", "100000",
                                   "--pace-us", "2000", "--exit-holding"], failpoint: .publishUnsynced, action: .pause)
        XCTAssertEqual(stress.status, 0, stress.errors)
        // The phone restarts: the boot the files were dated to is not this one any more.
        let buffers = try folder.makeBufferFolder(dsn: demoDefaultDSN)
        try Data("another boot".utf8).write(to: URL(fileURLWithPath: buffers + "/boot"))
        let recovery = try Demo.recover(folder, .doubleRotatingBuffer)
        XCTAssertEqual(recovery.status, 0, recovery.errors)
        try assertDelivered(stress, in: folder, spans: true, crashSafe: true, "exit holding the buffer, then a reboot")
    }

    /// A start that claims what a killed process left, killed itself once its claims are made: the next
    /// start still knows the boot those files were written in (claimed first, as a copy), so the copies of
    /// lists whose envelopes were published are not taken for live items.
    func testARecoveryKilledAfterItsClaimsKeepsTheirBoot() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        // Killed after a forward returned, before its sync: its IO cache, which had caught up with the list
        // (paced adds), waits as `awaiting-sync-x`.
        let stress = try Demo.run(["stress", "--dir", folder.url.path, "--count", "500", "--spans", "--max-envelopes", "100000",
                                   "--pace-us", "2000"], failpoint: .publishUnsynced)
        XCTAssertEqual(stress.status, -SIGKILL, stress.errors)
        let interrupted = try Demo.recover(folder, .doubleRotatingBuffer, failpoint: .recoveryClaimed)
        XCTAssertEqual(interrupted.status, -SIGKILL, "the claims must have been made")
        let recovery = try Demo.recover(folder, .doubleRotatingBuffer)
        XCTAssertEqual(recovery.status, 0, recovery.errors)
        try assertDelivered(stress, in: folder, spans: true, crashSafe: true, "recovery killed after its claims")
    }

    /// FileStreamCache syncs before it removes `flushing`: after a failed sync (injected) the file says
    /// `captured`, and the next forward removes it without staging its items again (they are moved already).
    func testAFailedStreamCacheSyncDoesNotPublishTwice() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let stress = try Demo.stress(folder, .fileStreamCache, count: 3000, spans: true, failpoint: .syncFails)
        XCTAssertEqual(stress.status, 0, stress.errors)
        XCTAssertTrue(stress.errors.contains("could not publish flushing"), stress.errors)
        let recovery = try Demo.recover(folder, .fileStreamCache)
        XCTAssertEqual(recovery.status, 0, recovery.errors)
        try assertDelivered(stress, in: folder, spans: true, crashSafe: true, "failed stream cache sync")
    }

    /// FileStreamCache whose next `cache` cannot be created when it rotates (injected, as with no
    /// descriptor left): the adds keep going into `cache` (or are refused and counted), nothing renamed
    /// under them is published and unlinked, and the next start delivers every acknowledged item once.
    func testAStreamCacheThatCannotRotateLosesNothing() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let stress = try Demo.stress(folder, .fileStreamCache, count: 3000, spans: true, failpoint: .streamCacheFails)
        XCTAssertEqual(stress.status, 0, stress.errors)
        XCTAssertTrue(stress.errors.contains("could not rotate the stream cache"), stress.errors)
        let recovery = try Demo.recover(folder, .fileStreamCache)
        XCTAssertEqual(recovery.status, 0, recovery.errors)
        try assertDelivered(stress, in: folder, spans: true, crashSafe: true, "stream cache that cannot rotate")
    }

    /// A `flushing` that cannot be read is not taken for published: it stays, the adds fill `cache` and are
    /// then refused (counted), and the next start delivers everything acknowledged.
    func testAnUnreadableFlushingFileStays() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let stress = try Demo.run(["stress", "--dir", folder.url.path, "--strategy", "fileStreamCache", "--count", "3000",
                                   "--spans", "--max-envelopes", "100000"], failing: .streamReadFails)
        XCTAssertEqual(stress.status, 0, stress.errors)
        XCTAssertTrue(stress.errors.contains("could not publish flushing"), stress.errors)
        let buffers = folder.bufferFolder(demoDefaultDSN)
        XCTAssertTrue(FileManager.default.fileExists(atPath: buffers.appendingPathComponent(BufferFile.streamFlushing.name).path))
        let recovery = try Demo.recover(folder, .fileStreamCache)
        XCTAssertEqual(recovery.status, 0, recovery.errors)
        try assertDelivered(stress, in: folder, spans: true, crashSafe: true, "unreadable flushing")
    }

    /// No descriptor left (`RLIMIT_NOFILE` lowered and used up in the child) from just after start:
    /// nothing can be staged, rotated or published, so adds are refused once the buffer is full (counted),
    /// and everything acknowledged waits in the buffer files for the next start. FlushAll keeps items in
    /// memory: what it cannot store by `close()` goes with the process, counted, never duplicated.
    func testNoDescriptorsLeftLosesNothingAcknowledged() throws {
        for strategy in Options.Strategy.allCases {
            let folder = try TemporaryDirectory()
            defer { folder.remove() }
            let stress = try Demo.run(["stress", "--dir", folder.url.path, "--strategy", strategy.rawValue, "--count", "3000",
                                       "--spans", "--max-envelopes", "100000", "--exhaust-descriptors"])
            XCTAssertEqual(stress.status, 0, stress.errors)
            XCTAssertTrue(stress.errors.contains("Too many open files"), "\(strategy): \(stress.errors.suffix(1000))")
            let recovery = try Demo.recover(folder, strategy)
            XCTAssertEqual(recovery.status, 0, recovery.errors)
            try assertDelivered(stress, in: folder, spans: true, crashSafe: Self.crashSafe.contains(strategy),
                                "\(strategy) without descriptors")
        }
    }

    /// A planted `recovering-2147483647-x` (the largest generation recovery reads): the next start's claims
    /// must still be readable, so what a killed process left is recovered, and the planted file is read
    /// as the foreign bytes it is.
    func testAPlantedGenerationDoesNotWedgeRecovery() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let buffers = folder.bufferFolder(demoDefaultDSN)
        // Killed with a list marked and nothing staged: only the list holds its items.
        let stress = try Demo.stress(folder, .doubleRotatingBuffer, count: 500, spans: true, failpoint: .publishMarked)
        XCTAssertEqual(stress.status, -SIGKILL, stress.errors)
        // Planted after that process's start (whose recovery would have read and removed it).
        try Data("not ours".utf8).write(to: buffers.appendingPathComponent("recovering-2147483647-cache"))
        let recovery = try Demo.recover(folder, .doubleRotatingBuffer)
        XCTAssertEqual(recovery.status, 0, recovery.errors)
        try assertDelivered(stress, in: folder, spans: true, crashSafe: true, "planted generation")
        let left = try FileManager.default.contentsOfDirectory(atPath: buffers.path)
        XCTAssertFalse(left.contains { $0.hasPrefix("recovering-") }, "claimed files left: \(left)")
    }

    /// A list marked `captured` before power loss took its unsynced envelopes, recovered after the restart
    /// by a process killed once it moved the list into a generation of its own (dated this boot), before
    /// marking it: the next start must not take that marker for this boot's, and publishes every item
    /// once. (Moved with its old marker, the list's items were skipped as published: all lost.)
    func testARecoveryKilledAfterMovingAListCapturedInAnotherBootLosesNothing() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let stress = try Demo.stress(folder, .doubleRotatingBuffer, count: 500, spans: true, failpoint: .publishCaptured)
        XCTAssertEqual(stress.status, -SIGKILL)
        // Power loss: the envelopes were never synced; the restart is another boot.
        let buffer = folder.bufferFolder(demoDefaultDSN)
        for name in try FileManager.default.contentsOfDirectory(atPath: buffer.path) where name.hasPrefix("envelope-") {
            try FileManager.default.removeItem(at: buffer.appendingPathComponent(name))
        }
        try Data("another boot".utf8).write(to: buffer.appendingPathComponent("boot"))
        let interrupted = try Demo.recover(folder, .doubleRotatingBuffer, failpoint: .recoveryListMoved)
        XCTAssertEqual(interrupted.status, -SIGKILL, "the step must have been reached: \(interrupted.errors.suffix(500))")
        let recovery = try Demo.recover(folder, .doubleRotatingBuffer)
        XCTAssertEqual(recovery.status, 0, recovery.errors)
        try assertDelivered(stress, in: folder, spans: true, crashSafe: true, "moved, then killed")
    }

    /// A buffer closed cleanly leaves its lists behind, empty: the next start removes them with their
    /// caches, and moves, marks and syncs none of them, as it would to publish one. (Each start after a
    /// clean close copied the boot, moved, marked and synced both.)
    func testEmptyListsAreRemovedWithoutBeingPublished() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let buffer = try folder.makeBufferFolder(dsn: demoDefaultDSN)
        let closed = try Demo.recover(folder, .doubleRotatingBuffer)
        XCTAssertEqual(closed.status, 0, closed.errors)
        let left = try FileManager.default.contentsOfDirectory(atPath: buffer)
        XCTAssertTrue(left.contains("crash-safe-list-1") && left.contains("crash-safe-list-2"), "lists left: \(left)")
        let next = try Demo.recover(folder, .doubleRotatingBuffer, failpoint: .recoveryListMoved)
        XCTAssertEqual(next.status, 0, "an empty list was moved to be published: \(next.errors.suffix(500))")
        let after = try FileManager.default.contentsOfDirectory(atPath: buffer)
        XCTAssertFalse(after.contains { $0.hasPrefix("recovering-") }, "claimed files left: \(after)")
    }

    /// A buffer released at once after a kill, without `close()`: its final forward, which may run before
    /// the sync recovery queued for what it published (the folder is released after it), syncs that and
    /// removes the lists, so that no claimed list is left to be published again from another boot.
    func testABufferReleasedAtOnceAfterAKillLeavesNoClaimedList() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let stress = try Demo.stress(folder, .doubleRotatingBuffer, count: 500, spans: true, failpoint: .publishStaged)
        XCTAssertEqual(stress.status, -SIGKILL, stress.errors)
        var options = testOptions(folder)
        options.dsn = demoDefaultDSN
        options.maxCachedEnvelopes = 100_000
        _ = try TelemetryBuffer(options: options)
        LiveBuffers.awaitReleases(within: 60)
        let left = try FileManager.default.contentsOfDirectory(atPath: try folder.makeBufferFolder(dsn: demoDefaultDSN))
        XCTAssertFalse(left.contains { $0.hasPrefix("recovering-") }, "claimed files left: \(left)")
        try assertDelivered(stress, in: folder, spans: true, crashSafe: true, "released at once")
    }

    /// A kill in the middle of the IO cache's write leaves a record torn at the cache's end, one in the
    /// middle of its creation a cache without its header (and power loss may leave a list's last record
    /// damaged): recovery still publishes the list straight from its file, the bad bytes counted as
    /// discarded. (Such a list went through the deduplicating rewrite, and a kill at `recovery.list-done`
    /// was never reached: CI failed so, twice.)
    func testAListWithATornTailIsStillPublishedStraightFromItsFile() throws {
        for damage in ["cache", "no cache header", "part of a cache header", "list"] {
            for interrupted in [false, true] {
                try recoverList(damaged: damage, interrupted: interrupted)
            }
        }
    }

    private func recoverList(damaged damage: String, interrupted: Bool) throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let buffer = try folder.makeBufferFolder(dsn: demoDefaultDSN)
        let list = RecordRegion(mapping: try MappedFile(path: buffer + "/crash-safe-list-1", size: 4096 + 32), kind: .crashSafeList)
        appendLogs(["l0", "l1", "l2"], to: list)
        let expected: String
        if damage.hasSuffix("cache header") {
            // Created, and killed before its header was written (0 bytes; or a part of it, after power loss).
            let bytes: [UInt8] = damage == "no cache header" ? [] : [7, 7, 7]
            XCTAssertTrue(FileManager.default.createFile(atPath: buffer + "/async-io-cache-1", contents: Data(bytes)))
            expected = "recovered 3 items (0 duplicates skipped, \(bytes.count) bytes discarded)"
        } else if damage == "cache" {
            let cache = AsyncIOCache(path: buffer + "/async-io-cache-1")
            try cache.catchUp(with: list)
            let handle = try XCTUnwrap(FileHandle(forWritingAtPath: buffer + "/async-io-cache-1"))
            handle.seekToEndOfFile()
            handle.write(Data([1, 2, 3]))  // the first bytes of a record whose write the kill stopped
            handle.closeFile()
            expected = "recovered 3 items (3 duplicates skipped, 3 bytes discarded)"
        } else {
            let last = list.records.count / 3
            (list.base + 32 + list.records.count - 3).storeBytes(of: 0x21, as: UInt8.self)
            expected = "recovered 2 items (0 duplicates skipped, \(last) bytes discarded)"
        }
        if interrupted {
            let killed = try Demo.recover(folder, .doubleRotatingBuffer, failpoint: .recoveryListDone)
            XCTAssertEqual(killed.status, -SIGKILL, "\(damage): the list path must have been taken: \(killed.errors.suffix(500))")
        }
        let recovery = try Demo.recover(folder, .doubleRotatingBuffer)
        XCTAssertEqual(recovery.status, 0, recovery.errors)
        if !interrupted { XCTAssertTrue(recovery.output.contains(expected), "\(damage): \(recovery.output)") }
        XCTAssertEqual(try logBodies(in: folder.envelopesFolder(demoDefaultDSN)), damage == "list" ? ["l0", "l1"] : ["l0", "l1", "l2"], damage)
    }

    /// A kill at each step of start-up recovery, then a second recovery.
    func testKillsAtEveryStepOfRecovery() throws {
        for strategy in Self.crashSafe {
            // Recovery publishes with the same steps as a flush: DoubleRotatingBuffer's lists straight from
            // their files, one after the other; FileStreamCache's files through `recovered`.
            let steps: [Failpoint] = strategy == .doubleRotatingBuffer
                ? [.publishMarked, .publishStaged, .publishCaptured, .recoveryListDone, .recoveryUnsynced]
                : [.recoveryWritten, .recoveryRemoved, .publishMarked, .publishStaged, .publishCaptured]
            for step in steps {
                let folder = try TemporaryDirectory()
                defer { folder.remove() }
                // Leave work for recovery: die in the middle of a publication.
                let stress = try Demo.stress(folder, strategy, count: 500, spans: true, failpoint: .publishStaged)
                XCTAssertEqual(stress.status, -SIGKILL, stress.errors)
                let interrupted = try Demo.recover(folder, strategy, failpoint: step)
                XCTAssertEqual(interrupted.status, -SIGKILL, "\(strategy) \(step) must have been reached: \(interrupted.output.suffix(500))")
                let recovery = try Demo.recover(folder, strategy)
                XCTAssertEqual(recovery.status, 0, recovery.errors)
                try assertDelivered(stress, in: folder, spans: true, crashSafe: true, "\(strategy) \(step)")
            }
        }
    }
}
