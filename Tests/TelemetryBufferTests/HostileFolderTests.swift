import Foundation
import XCTest
@testable import TelemetryBuffer

/// What the buffer finds in its folders is not to be trusted: files it did not write, or wrote and then
/// found damaged, must neither crash nor wedge it.
final class HostileFolderTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory.remove() }

    private var dsnFolder: URL { directory.url.appendingPathComponent(SHA1.hex(testDSN.utf8)) }

    /// Two expired envelopes that each claim `Int.max` items: counting them as dropped, at start and in
    /// `stats()`, saturates instead of trapping on overflow.
    func testCraftedItemCountsSaturateInsteadOfTrapping() throws {
        let envelopes = dsnFolder.appendingPathComponent("envelopes")
        try FileManager.default.createDirectory(at: envelopes, withIntermediateDirectories: true)
        let crafted = "{}\n{\"type\":\"log\",\"item_count\":9223372036854775807,\"length\":2}\n{}\n"
        for index in 0..<2 {
            // µs since 1970 = 1: long expired.
            try Data(crafted.utf8).write(to: envelopes.appendingPathComponent("0000000000000001-00000\(index)-00000000.envelope"))
        }
        let expiring = try TelemetryBuffer(options: testOptions(directory))
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

    /// Symbolic links and FIFOs with the names of buffer files: nothing is written through a link (a
    /// planted `boot → victim` truncated and overwrote the victim), nothing blocks on a FIFO (one named
    /// `boot` hung the background queue, and with it `flush()` and `close()`), and every item still arrives.
    func testLinksAndFIFOsWithBufferFileNamesAreLeftAlone() throws {
        let victim = directory.url.appendingPathComponent("victim")
        try Data("precious".utf8).write(to: victim)
        for (name, planted) in [("boot", "link"), ("boot", "fifo"), ("envelope-7", "link"), ("flushing", "fifo")] {
            let folder = dsnFolder.appendingPathComponent("telemetry-buffer")
            try? FileManager.default.removeItem(at: dsnFolder)
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
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
                buffer.close()
                delivered.withLock { $0 = (try? logBodies(in: buffer.envelopesDirectory)) ?? [] }
            }
            XCTAssertEqual(finished.wait(timeout: .now() + 30), .success, "\(name) as a \(planted): the buffer hung")
            XCTAssertEqual(delivered.withLock { $0 }, ["one", "two"], "\(name) as a \(planted)")
            XCTAssertEqual(try String(contentsOf: victim, encoding: .utf8), "precious", "\(name) as a \(planted)")
            var status = stat()
            XCTAssertEqual(lstat(path, &status), 0, "\(name) as a \(planted): left where it was")
        }
    }

    /// Files larger than any the buffer writes (sparse here, so they cost no disk): a claimed `cache` of
    /// 1 GiB is set aside unread instead of being read whole at start, and an `.envelope` of 3 MiB is
    /// skipped by `stats()` and deleted (counted) by the uploader instead of being read whole.
    func testFilesLargerThanTheFormatAllowsAreNeverReadWhole() throws {
        let buffers = dsnFolder.appendingPathComponent("telemetry-buffer")
        let envelopes = dsnFolder.appendingPathComponent("envelopes")
        for folder in [buffers, envelopes] { try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true) }
        func sparse(_ url: URL, bytes: UInt64) throws {
            XCTAssertTrue(FileManager.default.createFile(atPath: url.path, contents: nil))
            let handle = try FileHandle(forWritingTo: url)
            try handle.truncate(atOffset: bytes)
            try handle.close()
        }
        try sparse(buffers.appendingPathComponent("cache"), bytes: 1 << 30)
        try sparse(envelopes.appendingPathComponent(FileTransport.name(now: Date(), counter: 0)), bytes: 3 << 20)
        let buffer = try TelemetryBuffer(options: testOptions(directory))
        XCTAssertEqual(buffer.recovery.setAside, ["recovering-0-cache"])
        XCTAssertEqual(buffer.recovery.discardedBytes, 0)
        XCTAssertEqual(buffer.stats().stored, [:], "the oversized envelope is not read")
        buffer.close()

        // No request is made: the file is judged by its size before anything is sent.
        let uploading = try TelemetryBuffer(options: testOptions(directory) { $0.upload = true })
        defer { uploading.close() }
        try eventually { try FileManager.default.contentsOfDirectory(atPath: envelopes.path).isEmpty }
        XCTAssertEqual(uploading.stats().drops["internal_sdk_error/log_item"], 1)
    }
}
