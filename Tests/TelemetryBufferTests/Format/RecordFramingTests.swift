import Foundation
import XCTest
@testable import TelemetryBuffer

final class RecordFramingTests: XCTestCase {
    /// Three framed records (payloads `{"n":0}`, `{"n":1}`, …) as bytes.
    private func framed(_ count: Int) -> [UInt8] {
        let region = RecordRegion(recordCapacity: 4096, kind: .memoryList)
        for index in 0..<count {
            let payload = Array("{\"n\":\(index)}".utf8)
            payload.withUnsafeBytes {
                region.append(category: index % 2 == 0 ? .log : .span, id: ItemID(nonce: 7, sequence: UInt64(index)),
                              payload: $0, payloadCRC: CRC32C.checksum($0))
            }
        }
        return Array(region.records(lane: 0))
    }

    private func read(_ bytes: [UInt8]) -> (payloads: [String], scan: RecordFraming.Scan) {
        var payloads: [String] = []
        let scan = bytes.withUnsafeBytes { buffer in
            RecordFraming.forEachRecord(in: buffer) { payloads.append(String(decoding: $0.payload, as: UTF8.self)) }
        }
        return (payloads, scan)
    }

    func testRoundTrip() {
        let bytes = framed(3)
        var records: [(ItemCategory, ItemID)] = []
        _ = bytes.withUnsafeBytes { buffer in
            RecordFraming.forEachRecord(in: buffer) { records.append(($0.category, $0.id)) }
        }
        XCTAssertEqual(records.map(\.0), [.log, .span, .log])
        XCTAssertEqual(records.map(\.1.sequence), [0, 1, 2])
        XCTAssertEqual(read(bytes).payloads, [#"{"n":0}"#, #"{"n":1}"#, #"{"n":2}"#])
        XCTAssertEqual(read(bytes).scan, .init(validBytes: bytes.count, discardedBytes: 0))
    }

    func testSalvagesTheValidPrefixOfDamagedBytes() {
        let bytes = framed(3)
        let recordSize = bytes.count / 3
        let damaged: [String: [UInt8]] = [
            "torn tail": Array(bytes.dropLast(3)),
            "bit flip in the last payload": { var b = bytes; b[b.count - 2] ^= 0x10; return b }(),
            "bit flip in the last id": { var b = bytes; b[2 * recordSize + 12] ^= 0x01; return b }(),
            "zero-filled tail": Array(bytes.prefix(2 * recordSize)) + [UInt8](repeating: 0, count: 200),
            "garbage tail": Array(bytes.prefix(2 * recordSize)) + (0..<200).map { _ in UInt8.random(in: 1...255) },
            "absurd length": { var b = bytes; b[2 * recordSize + 3] = 0x7F; return b }(),
            // Past what a 32-bit `Int` holds (watchOS): compared, never converted.
            "length 2^31": { var b = bytes; b.replaceSubrange(2 * recordSize..<2 * recordSize + 4, with: [0, 0, 0, 0x80]); return b }(),
            "length 2^32 - 1": { var b = bytes; b.replaceSubrange(2 * recordSize..<2 * recordSize + 4, with: [0xFF, 0xFF, 0xFF, 0xFF]); return b }(),
            "truncated header": Array(bytes.prefix(2 * recordSize + 10)),
        ]
        for (name, bytes) in damaged {
            let (payloads, scan) = read(bytes)
            XCTAssertEqual(payloads, [#"{"n":0}"#, #"{"n":1}"#], name)
            XCTAssertEqual(scan.validBytes, 2 * recordSize, name)
            XCTAssertEqual(scan.discardedBytes, bytes.count - 2 * recordSize, name)
        }
        XCTAssertEqual(read([UInt8](repeating: 0xFF, count: 64)).payloads, [], "garbage only")
    }

    func testRegionHeaderRecordsKindAndCommittedLength() throws {
        let region = RecordRegion(recordCapacity: 1024, kind: .memoryList)
        let header = UnsafeRawBufferPointer(start: region.base, count: RecordFraming.headerSize)
        XCTAssertEqual(RecordFraming.kind(ofHeader: header), .memoryList)
        XCTAssertEqual(RecordFraming.laneRecords(ofHeader: header, available: .max), [32..<32])
        Array("{}".utf8).withUnsafeBytes {
            region.append(category: .log, id: ItemID(nonce: 1, sequence: 1), payload: $0, payloadCRC: CRC32C.checksum($0))
        }
        XCTAssertEqual(RecordFraming.laneRecords(ofHeader: header, available: .max), [32..<32 + RecordFraming.recordHeaderSize + 2])
        XCTAssertFalse(region.fits(payloadCount: 1024, after: region.recordBytes))
        try region.reset()
        XCTAssertEqual(region.recordBytes, 0)
        XCTAssertEqual(RecordFraming.laneRecords(ofHeader: header, available: .max), [32..<32])
    }
}
