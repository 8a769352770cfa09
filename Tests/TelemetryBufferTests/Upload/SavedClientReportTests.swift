import Foundation
import XCTest
@testable import TelemetryBuffer

/// The drop counts a buffer saves for the next one on its DSN, at the edges of a save: real files in a
/// temporary folder, two recorders standing for two buffers one after the other.
final class SavedClientReportTests: XCTestCase {
    private var directory: TemporaryDirectory!
    private var folder: BufferFolder!

    override func setUpWithError() throws {
        directory = try TemporaryDirectory()
        folder = try BufferFolder(path: directory.makeBufferFolder())
    }

    override func tearDown() {
        folder.release()
        directory.remove()
    }

    private func recorder() -> ClientReportRecorder {
        let reports = ClientReportRecorder()
        reports.attach(SavedClientReport(folder: folder))
        return reports
    }

    private static let evicted = [ClientReport.Entry(reason: .cacheOverflow, category: .logItem, quantity: 4)]

    /// A buffer released without `close()` does not wait for its uploader: a request may take the counts
    /// after the last save, which then holds them.
    func testARequestAfterTheLastSaveSendsOnlyWhatWasCountedAfterIt() throws {
        let released = recorder()
        released.record(.cacheOverflow, .logItem, quantity: 4)
        try released.saveUnsent(detaching: true)
        XCTAssertNil(released.take(), "the saved file holds them")
        released.record(.sendError, .span)
        XCTAssertEqual(released.take()?.entries, [.init(reason: .sendError, category: .span, quantity: 1)])
        XCTAssertEqual(recorder().take()?.entries, Self.evicted, "the next buffer sends the saved ones")
    }

    /// A save that fails once the file has its name (its folder's sync) may have left the file: it goes
    /// before a request takes the counts, which are then not sent again.
    func testASaveThatFailsAfterItsRenameIsRemovedBeforeARequest() throws {
        let reports = recorder()
        reports.record(.cacheOverflow, .logItem, quantity: 4)
        Failpoint.reportFileFails.failNext()
        XCTAssertThrowsError(try reports.saveUnsent())
        XCTAssertEqual(reports.take()?.entries, Self.evicted)
        XCTAssertNil(recorder().take(), "not sent again")
    }

    /// A forward's save is not synced: the last save syncs the file even when its counts did not change
    /// since (a new file), and then does not write it again.
    func testTheLastSaveSyncsWhatAForwardSavedUnsynced() throws {
        let reports = recorder()
        reports.record(.cacheOverflow, .logItem, quantity: 4)
        try reports.saveUnsentAfterForward(now: Date(), interval: 5)
        let path = folder.path + "/client-report"
        func inode() throws -> Int? { try FileManager.default.attributesOfItem(atPath: path)[.systemFileNumber] as? Int }
        let unsynced = try inode()
        try reports.saveUnsent()
        let synced = try inode()
        XCTAssertNotEqual(synced, unsynced, "written again, synced")
        try reports.saveUnsent(detaching: true)
        XCTAssertEqual(try inode(), synced, "unchanged and synced: not written again")
        XCTAssertEqual(recorder().take()?.entries, Self.evicted)
    }

    /// A forward's save that fails (here a link where its temporary file goes) is tried again only once the
    /// interval passed, not by every forward.
    func testAForwardsSaveThatFailsIsTriedAgainOnlyAfterTheInterval() throws {
        let reports = recorder()
        reports.record(.cacheOverflow, .logItem, quantity: 4)
        XCTAssertEqual(symlink(directory.url.appendingPathComponent("elsewhere").path, folder.path + "/.client-report.tmp"), 0)
        let now = Date()
        XCTAssertThrowsError(try reports.saveUnsentAfterForward(now: now, interval: 5))
        reports.record(.sendError, .span)
        XCTAssertNoThrow(try reports.saveUnsentAfterForward(now: now.addingTimeInterval(1), interval: 5), "not within the interval")
        XCTAssertThrowsError(try reports.saveUnsentAfterForward(now: now.addingTimeInterval(5), interval: 5), "once it passed")
    }

    /// A file that cannot be removed (here: its removal fails once) keeps its counts: only the others go.
    func testASavedFileThatCannotBeRemovedKeepsItsCountsAndTheOthersGo() throws {
        let first = recorder()
        first.record(.cacheOverflow, .logItem, quantity: 4)
        try first.saveUnsent(detaching: true)
        let next = recorder()
        next.record(.sendError, .span)
        Failpoint.reportFileFails.failNext()
        XCTAssertEqual(next.take()?.entries, [.init(reason: .sendError, category: .span, quantity: 1)], "only its own")
        XCTAssertEqual(next.take()?.entries, Self.evicted, "the saved ones, once the removal is done")
        XCTAssertNil(recorder().take(), "and not again")
    }

    /// The last save failing (here a link where its temporary file goes; a full disk alike) leaves what an
    /// earlier save wrote for the next buffer: nothing in this one would send the counts any more.
    func testALastSaveThatFailsLeavesTheEarlierOne() throws {
        let closing = recorder()
        closing.record(.cacheOverflow, .logItem, quantity: 4)
        try closing.saveUnsent()  // the app went to the background
        closing.record(.sendError, .span)
        XCTAssertEqual(symlink(directory.url.appendingPathComponent("elsewhere").path, folder.path + "/.client-report.tmp"), 0)
        XCTAssertThrowsError(try closing.saveUnsent(detaching: true))
        XCTAssertEqual(recorder().take()?.entries, Self.evicted)
    }
}
