import Foundation
import XCTest
@testable import TelemetryBuffer

/// A signal is its description: a fourth one, described here in the test target and nowhere else, flows
/// through batching, the framing, the strategies, drop counting and start-up recovery as the library's
/// three do.
final class SignalDescriptionTests: XCTestCase {
    /// Items of any traces, three to an envelope, counted as spans are when dropped.
    static let fake = SignalDescription(
        category: ItemCategory(byte: 4), envelopeItemType: "fake_signal", contentType: "application/vnd.test.fake+json",
        grouping: .anyTraces, queueCap: nil, dataCategory: .span, byteCategory: nil, ranksByLevel: false,
        batchLimit: { _ in 3 })
    private static let registered: Void = SignalDescription.register(fake)

    private var directory: TemporaryDirectory!

    override func setUpWithError() throws {
        _ = Self.registered
        directory = try TemporaryDirectory()
    }

    override func tearDown() { directory.remove() }

    /// The fake's items, `{"n":…}` each, in the envelopes of `folder`, by envelope.
    private func fakeItems(in folder: URL) throws -> [[Int]] {
        try walkEnvelopes(in: folder).flatMap(\.items).filter { $0.type == "fake_signal" }.map { item in
            XCTAssertEqual(item.header["content_type"] as? String, "application/vnd.test.fake+json")
            XCTAssertEqual(item.header["item_count"] as? Int, item.elements.count)
            return item.elements.compactMap { $0["n"] as? Int }
        }
    }

    private func submit(_ n: Int, to buffer: TelemetryBuffer) -> Bool {
        Array(#"{"n":\#(n)}"#.utf8).withUnsafeBytes { buffer.submit(Self.fake.category, $0, traceID: nil) }
    }

    /// With each strategy: the fake's items go at most three to an envelope of their own type, in order,
    /// beside the logs; reaching its limit forwards a batch; one too large is counted under its data category.
    func testAFourthSignalGoesByItsDescriptionWithEveryStrategy() throws {
        for strategy in TelemetryBuffer.Options.Strategy.allCases {
            let folder = try TemporaryDirectory()
            defer { folder.remove() }
            let buffer = try TelemetryBuffer(options: testOptions(folder) {
                $0.strategy = strategy
                $0.maxBatchBytes = 4096
            })
            for n in 0..<7 {
                XCTAssertTrue(submit(n, to: buffer), strategy.rawValue)
                if n == 3 { buffer.add(log: .test("between")) }
            }
            XCTAssertFalse(Array(repeating: UInt8(ascii: " "), count: 5000).withUnsafeBytes { buffer.submit(Self.fake.category, $0, traceID: nil) })
            XCTAssertEqual(buffer.pendingDiscards?.quantity(.invalid, Self.fake.dataCategory), 1, strategy.rawValue)
            buffer.close()
            // The forward that the limit at item 2 wakes takes item 3 too if it runs after it came (a run here
            // saw [[0, 1, 2], [3], [4, 5, 6]], 1 in 16): the limit bounds each envelope, and starts a forward.
            let envelopes = try fakeItems(in: buffer.envelopesDirectory)
            XCTAssertEqual(envelopes.flatMap { $0 }, Array(0..<7), strategy.rawValue)
            XCTAssertEqual(envelopes.first, [0, 1, 2], strategy.rawValue)
            XCTAssertTrue(envelopes.allSatisfy { $0.count <= 3 }, "\(strategy.rawValue): \(envelopes)")
            XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["between"], strategy.rawValue)
        }
    }

    /// Records of the fake in a list an earlier process left are recovered (not kept for a later build),
    /// each once, in envelopes of their own, beside the logs.
    func testAFourthSignalIsRecovered() throws {
        let folder = try directory.makeBufferFolder()
        let list = RecordRegion(mapping: try MappedFile(path: folder + "/crash-safe-list-1", size: 8192 + 32), kind: .crashSafeList)
        for n in 0..<4 {
            let payload = Array(#"{"n":\#(n)}"#.utf8)
            let offset = list.committedRecordBytes(lane: 0)
            payload.withUnsafeBytes { payload in
                list.write(category: Self.fake.category, id: ItemID(nonce: 5, sequence: UInt64(n)), payload: payload,
                           payloadCRC: CRC32C.checksum(payload), lane: 0, at: offset)
            }
            list.commit(lane: 0, from: offset, to: offset + RecordFraming.recordHeaderSize + payload.count)
        }
        appendLogs(["l0"], to: list, nonce: 5, from: 4)
        let buffer = try TelemetryBuffer(options: testOptions(directory))
        XCTAssertEqual(buffer.recovery.items, 5)
        XCTAssertEqual(buffer.recovery.keptForALaterVersion, 0)
        buffer.close()
        XCTAssertEqual(try fakeItems(in: buffer.envelopesDirectory), [[0, 1, 2], [3]])
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["l0"])
    }
}
