import CTelemetrySignals
import XCTest
@testable import TelemetryBuffer

/// The buffer format is defined once, in BufferFormat.h: the crash handler reads it in C, Swift imports
/// its constants. Where Swift needs literals (enum raw values), and where both sides touch the same bytes,
/// these tests check that they agree.
final class FormatAgreementTests: XCTestCase {
    func testSwiftEnumsCarryTheHeaderValues() {
        XCTAssertEqual(RecordFraming.Kind.allCases.map { Int($0.rawValue) },
                       [TB_KIND_MEMORY_LIST, TB_KIND_CRASH_SAFE_LIST, TB_KIND_ASYNC_IO_CACHE, TB_KIND_STREAM_CACHE,
                        TB_KIND_RECOVERED].map { Int($0) })
        XCTAssertEqual(RecordFraming.Publication.State.allCases.map { Int($0.rawValue) },
                       [TB_MARKER_IDLE, TB_MARKER_PUBLISHING, TB_MARKER_CAPTURED].map { Int($0) })
        XCTAssertEqual([ItemCategory.log, .span, .traceMetric].map { Int($0.rawValue) }, [TB_CATEGORY_LOG, TB_CATEGORY_SPAN, TB_CATEGORY_TRACE_METRIC].map { Int($0) })
        XCTAssertEqual([SignalDescription.log, .span, .traceMetric].map(\.category), [.log, .span, .traceMetric])
        // A batch's tally counts each signal in line, by category byte.
        XCTAssertTrue(SignalDescription.all.allSatisfy { (1...BatchTally.maxSignals).contains(Int($0.category.rawValue)) })
    }

    /// A region Swift framed, read at the offsets the crash handler reads: magic, kind, committed length,
    /// marker word, and the claim that makes Swift's marker store fail.
    func testTheCrashHandlerReadsWhatSwiftWrites() throws {
        let region = RecordRegion(recordCapacity: 4096, kind: .memoryList)
        let payload: [UInt8] = Array(#"{"body":"agreement"}"#.utf8)
        payload.withUnsafeBytes {
            region.append(category: .span, id: ItemID(nonce: 0x0102_0304_0506_0708, sequence: 9), payload: $0,
                          payloadCRC: CRC32C.checksum($0))
        }
        let marker = RecordFraming.Publication(state: .captured, firstEnvelope: 0xA1B2_C3D4, envelopeCount: 0x0E0F)
        try region.mark(marker)
        let header = region.base.assumingMemoryBound(to: UInt8.self)

        XCTAssertEqual((0..<4).map { header[$0] }, withUnsafeBytes(of: tb_header_magic) { Array($0) })
        XCTAssertEqual(Int(header[Int(TB_HEADER_KIND_OFFSET)]), Int(TB_KIND_MEMORY_LIST))
        XCTAssertEqual(tb_header_committed(header), UInt64(Int(TB_RECORD_HEADER_SIZE) + payload.count))
        let word = tb_header_marker_word(header)!.pointee
        XCTAssertEqual(word, UInt64(0xA1B2_C3D4) << TB_MARKER_FIRST_SHIFT | UInt64(0x0E0F) << TB_MARKER_COUNT_SHIFT
                       | UInt64(TB_MARKER_CAPTURED) << TB_MARKER_STATE_SHIFT)
        // The record as C would walk it.
        let record = header + Int(TB_HEADER_SIZE)
        XCTAssertEqual(record[Int(TB_RECORD_CATEGORY_OFFSET)], UInt8(TB_CATEGORY_SPAN))
        XCTAssertEqual(UnsafeRawPointer(record).loadUnaligned(fromByteOffset: Int(TB_RECORD_LENGTH_OFFSET), as: UInt32.self),
                       UInt32(payload.count))
        XCTAssertEqual(UnsafeRawPointer(record).loadUnaligned(fromByteOffset: Int(TB_RECORD_SEQUENCE_OFFSET), as: UInt64.self), 9)
        XCTAssertEqual(Array(UnsafeBufferPointer(start: record + Int(TB_RECORD_HEADER_SIZE), count: payload.count)), payload)

        // The handler's claim (the top byte of the word) stops every later marker change from Swift.
        tb_header_marker_word(header)!.pointee |= UInt64(1) << TB_MARKER_CLAIM_SHIFT
        XCTAssertTrue(region.isClaimed)
        XCTAssertThrowsError(try region.mark(.idle))
        XCTAssertEqual(region.publication, marker, "the claim byte is not part of the marker Swift reads")
    }
}
