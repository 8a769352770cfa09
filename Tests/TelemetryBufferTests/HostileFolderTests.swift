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
}
