import Foundation
@testable import TelemetryBuffer
import XCTest

/// A phone pays for every wake-up: the buffer's background work wakes for new work only.
final class WakeUpTests: XCTestCase {
    /// The DoubleRotatingBuffer's IO cache copies the active list on a timer that stops once a run finds
    /// nothing new, though the items wait for their batch's forward; the next item starts it again.
    func testTheIOCacheTimerStopsWhenNothingNewArrives() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let buffer = try TelemetryBuffer(options: testOptions(folder) {
            $0.strategy = .doubleRotatingBuffer
            $0.ioSyncInterval = 0.002
            $0.flushInterval = 30  // the batch waits throughout
        })
        let list = try XCTUnwrap(buffer.doubleRotatingBuffer, "a DoubleRotatingBuffer with mapped lists")
        let cache = try folder.makeBufferFolder() + "/async-io-cache-1"
        // 0 until the first copy creates it, with its header.
        func cacheSize() throws -> Int { (try? FileManager.default.attributesOfItem(atPath: cache))?[.size] as? Int ?? 0 }
        let empty = RecordFraming.headerSize
        XCTAssertTrue(buffer.add(log: .test("first")))
        try eventually { try cacheSize() > empty }
        let copied = try cacheSize(), runs = list.mirrorRuns
        // A hundred intervals with nothing new.
        usleep(200_000)
        XCTAssertLessThanOrEqual(list.mirrorRuns - runs, 2, "the timer stopped once a run found nothing new")
        XCTAssertTrue(buffer.add(log: .test("second")))
        try eventually { try cacheSize() > copied }
        buffer.close()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["first", "second"])
    }

    /// A batch whose forward is due before its IO cache's copy is not copied: its publication's sync makes it
    /// durable, and the copy would only write the same items once more (and wake the process to do it). Nor
    /// is its empty IO cache retired as the batch's power-loss copy: no file is made for it.
    func testABatchForwardedBeforeItsCopyIsNotCopied() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let buffer = try TelemetryBuffer(options: testOptions(folder) {
            $0.strategy = .doubleRotatingBuffer
            $0.flushInterval = 0.05
            $0.ioSyncInterval = 0.1
        })
        defer { buffer.close() }
        // Lists in memory (btrfs, overlayfs) are copied every 100 ms whatever the intervals.
        if buffer.listsInMemory { throw XCTSkip("the lists are in memory on this file system") }
        let list = try XCTUnwrap(buffer.doubleRotatingBuffer)
        for round in 0..<3 {
            XCTAssertTrue(buffer.add(log: .test("\(round)")))
            try eventually { try logBodies(in: buffer.envelopesDirectory).count == round + 1 }
        }
        // Past the copy's time for the last batch, had it been set.
        usleep(300_000)
        XCTAssertEqual(list.mirrorRuns, 0, "each batch was forwarded before its copy was due")
        list.drainQueuedSyncs()
        XCTAssertGreaterThanOrEqual(list.publicationSyncs, 1, "the publications' syncs made the batches durable")
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["0", "1", "2"])
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.makeBufferFolder())
        XCTAssertFalse(files.contains { ["async-io-cache", "awaiting-sync", "spare"].contains(where: $0.hasPrefix) }, "\(files)")
    }

    /// While forwards fail (here the IO cache's retirement, each time), the list that failed is copied into
    /// its IO cache at once, and the items that arrive meanwhile whatever the intervals: their forward may
    /// not come.
    func testBatchesAreCopiedWhileForwardsFail() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let buffer = try TelemetryBuffer(options: testOptions(folder) {
            $0.strategy = .doubleRotatingBuffer
            // No forward of its own: a flush timer that fired before the copy, or before "a2", changed what the
            // lists hold (the IO cache's copies run on real time, as ever).
            $0.clock = ManualClock()
            $0.ioSyncInterval = 0.5
        })
        defer { buffer.close() }
        if buffer.listsInMemory { throw XCTSkip("the lists are in memory on this file system") }
        let list = try XCTUnwrap(buffer.doubleRotatingBuffer)
        Failpoint.retireFails.failNext(1_000_000)
        defer { Failpoint.retireFails.failNext(0) }
        let bufferFolder = try folder.makeBufferFolder()
        /// Record bytes in the list's IO cache.
        func cached(_ number: Int) throws -> Int {
            try FramedFile.read(folder: bufferFolder, name: "async-io-cache-\(number)")?.withRecords(\.count) ?? 0
        }
        // A cache that holds part of its list (as when a batch waits longer than the interval) is retired.
        XCTAssertTrue(buffer.add(log: .test("a")))
        list.copyNow()
        let copied = try cached(1)
        XCTAssertGreaterThan(copied, 0)
        XCTAssertTrue(buffer.add(log: .test("a2")))
        buffer.flush()  // fails: the list stays pending
        XCTAssertGreaterThan(try cached(1), copied, "the rest of the list that failed, copied by the failed forward")
        XCTAssertTrue(buffer.add(log: .test("b")))
        try eventually { try cached(2) > 0 }
        Failpoint.retireFails.failNext(0)
        buffer.flush()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory).sorted(), ["a", "a2", "b"])
    }

    /// A DoubleRotatingBuffer with a 10 s sync interval whose first publication ("0") waits for its round.
    private func bufferWithAWaitingPublication(in folder: TemporaryDirectory, _ configure: (inout Options) -> Void = { _ in })
        throws -> (TelemetryBuffer, DoubleRotatingBuffer) {
        let buffer = try TelemetryBuffer(options: testOptions(folder) {
            $0.strategy = .doubleRotatingBuffer
            $0.ioSyncInterval = 10
            configure(&$0)
        })
        let list = try XCTUnwrap(buffer.doubleRotatingBuffer, "a DoubleRotatingBuffer with mapped lists")
        XCTAssertTrue(buffer.add(log: .test("0")))
        buffer.flush()
        list.drainQueuedSyncs()
        XCTAssertEqual(list.publicationSyncs, 0, "the first waits for the end of the interval too")
        return (buffer, list)
    }

    /// A publication waits up to `ioSyncInterval` for its sync round, which takes every publication since
    /// (each round costs a phone a wake-up and a drive flush, and an envelope sent meanwhile is not synced
    /// at all): the round runs at the end of the interval, or when `close()` (or a durable flush) asks.
    func testPublicationsWithinAnIntervalAreSyncedTogether() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let (buffer, list) = try bufferWithAWaitingPublication(in: folder)
        for index in 1..<3 {
            XCTAssertTrue(buffer.add(log: .test("\(index)")))
            buffer.flush()
        }
        list.drainQueuedSyncs()
        XCTAssertEqual(list.publicationSyncs, 0, "the three wait for the end of the interval")
        buffer.close()
        XCTAssertEqual(list.publicationSyncs, 1, "close() synced them together")
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["0", "1", "2"])

        let shortly = try TemporaryDirectory()
        defer { shortly.remove() }
        let timed = try TelemetryBuffer(options: testOptions(shortly) {
            $0.strategy = .doubleRotatingBuffer
            $0.ioSyncInterval = 0.05
        })
        let itsList = try XCTUnwrap(timed.doubleRotatingBuffer, "a DoubleRotatingBuffer with mapped lists")
        XCTAssertTrue(timed.add(log: .test("a")))
        timed.flush()
        eventually { itsList.publicationSyncs == 1 }  // at the end of the interval, by itself
        timed.close()
    }

    /// Makes `publications` publications of `logs` logs each (padded with `padding` bytes), each through
    /// `flush()` (and first copied into its IO cache if `copied`); returns the sync rounds so far once the
    /// syncs they queued ran.
    private func roundsAfter(_ publications: ClosedRange<Int>, of buffer: TelemetryBuffer, _ list: DoubleRotatingBuffer,
                             logs: Int = 1, padding: Int = 0, copied: Bool = false) -> Int {
        for publication in publications {
            for index in 0..<logs {
                let body = logs == 1 ? "\(publication)" : "\(publication)-\(index) " + String(repeating: "x", count: padding)
                XCTAssertTrue(buffer.add(log: .test(body)))
            }
            if copied { list.copyNow() }
            buffer.flush()
        }
        list.drainQueuedSyncs()
        return list.publicationSyncs
    }

    /// Publications whose batches no IO cache copied (the default intervals) wait for their round, a
    /// busy app's too (every round costs a phone a drive flush per folder), as long as they are fewer than
    /// 17 and their envelopes few and small. Retired copies (each up to a list on disk) still have their
    /// round start at once when more than four wait, and so do envelopes of more than four lists' worth of
    /// bytes, and more than 16 publications (each holds its envelopes' descriptors open).
    func testCopiesBytesOrManyPublicationsCutTheIntervalShort() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let (buffer, list) = try bufferWithAWaitingPublication(in: folder)
        // Lists in memory (btrfs, overlayfs) are copied whole at each publication.
        if list.listsInMemory {
            buffer.close()
            throw XCTSkip("the lists are in memory on this file system")
        }
        XCTAssertEqual(roundsAfter(1...6, of: buffer, list), 0, "seven publications without copies wait for the end of the interval")
        buffer.close()
        XCTAssertEqual(list.publicationSyncs, 1, "close() synced them together")

        let copied = try TemporaryDirectory()
        defer { copied.remove() }
        let (again, copying) = try bufferWithAWaitingPublication(in: copied)
        XCTAssertEqual(roundsAfter(1...5, of: again, copying, copied: true), 1, "the fifth retired copy had its round start at once")
        again.close()
        XCTAssertEqual(try logBodies(in: again.envelopesDirectory).sorted(), ["0", "1", "2", "3", "4", "5"])

        // Lists of 4 KiB: six publications of about 3.5 KiB each are more than four lists' worth.
        let small = try TemporaryDirectory()
        defer { small.remove() }
        let (filled, lists) = try bufferWithAWaitingPublication(in: small) { $0.maxBatchBytes = 4096 }
        XCTAssertEqual(roundsAfter(1...6, of: filled, lists, logs: 4, padding: 600), 1,
                       "more than four lists' worth of envelopes had their round start at once")
        filled.close()

        // An app that flushes after every add: a publication each.
        let flushing = try TemporaryDirectory()
        defer { flushing.remove() }
        let (eager, publications) = try bufferWithAWaitingPublication(in: flushing)
        XCTAssertEqual(roundsAfter(1...16, of: eager, publications), 1, "the 17th publication (\"0\" and 16 more) had its round start at once")
        eager.close()
    }

    /// A sync round flushes the drive once, at its last sync (`F_FULLFSYNC` on Apple platforms, which
    /// flushes the drive's whole cache and is what a phone pays most for): every envelope and the
    /// envelope folder are only handed to the drive before it.
    func testASyncRoundFlushesTheDriveOnce() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let (buffer, list) = try bufferWithAWaitingPublication(in: folder)
        for index in 1...3 {
            XCTAssertTrue(buffer.add(log: .test("\(index)")))
            buffer.flush()
        }
        list.drainQueuedSyncs()
        let flushes = FileDescriptor.durableSyncs.withLock { $0 }
        list.awaitDurable()
        XCTAssertEqual(list.publicationSyncs, 1, "one round for the four publications")
        XCTAssertEqual(list.syncedEnvelopeFiles, 4)
        XCTAssertEqual(FileDescriptor.durableSyncs.withLock { $0 } - flushes, 1, "four envelopes, two folders, one flush")
        buffer.close()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["0", "1", "2", "3"])
    }

    /// `didEnterBackground()` makes what it forwards durable at once: the app may stay suspended longer than
    /// the interval, and a publication waiting for its round is exposed to power loss until then.
    func testGoingToTheBackgroundSyncsWhatItForwards() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let (buffer, list) = try bufferWithAWaitingPublication(in: folder)
        XCTAssertTrue(buffer.add(log: .test("1")))
        buffer.didEnterBackground()
        buffer.flush()  // after the background queue's forward
        list.drainQueuedSyncs()
        XCTAssertEqual(list.publicationSyncs, 1, "synced at once, not at the end of the interval")
        buffer.close()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["0", "1"])
    }

    /// Each waiting envelope keeps a descriptor open: publications that leave more than
    /// `UnsyncedFiles.maxWaiting` of them waiting together (spans of many traces, an envelope each) are
    /// synced at once, whatever the interval (macOS gives a process 256 descriptors by default).
    /// An envelope evicted (or sent) since its publication is closed at the next one: it holds no descriptor,
    /// and counts toward no bound.
    func testManyWaitingEnvelopesAreSyncedAtOnce() throws {
        for kept in [1000, 30] {
            let folder = try TemporaryDirectory()
            defer { folder.remove() }
            let (buffer, list) = try bufferWithAWaitingPublication(in: folder) { $0.maxCachedEnvelopes = kept }
            let half = UnsyncedFiles.maxWaiting / 2 + 1
            for publication in 0..<2 {
                for trace in 1...half {
                    XCTAssertTrue(buffer.add(span: .test("s\(trace)", trace: TraceID(high: 7 + UInt64(publication), low: UInt64(trace)))))
                }
                buffer.flush()
                list.drainQueuedSyncs()
                // With 30 kept, the second publication's eviction deleted the first's 34: 33 wait.
                let synced = kept == 1000 ? publication : 0
                XCTAssertEqual(list.publicationSyncs, synced, "\(kept) kept, after \(half * (publication + 1)) envelopes")
            }
            buffer.close()
        }
    }
}
