import Foundation
import XCTest
@testable import TelemetryBuffer

final class SHA1Tests: XCTestCase {
    func testKnownVectors() {
        XCTAssertEqual(SHA1.hex("".utf8), "da39a3ee5e6b4b0d3255bfef95601890afd80709")
        XCTAssertEqual(SHA1.hex("abc".utf8), "a9993e364706816aba3e25717850c26c9cd0d89d")
        XCTAssertEqual(SHA1.hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8),
                       "84983e441c3bd26ebaae4aa1f95129e5e54670f1")
        XCTAssertEqual(SHA1.hex("The quick brown fox jumps over the lazy dog".utf8),
                       "2fd4e1c67a2d28fced849ee1bb76e7391b93eb12")
        XCTAssertEqual(SHA1.hex([UInt8](repeating: 0x61, count: 1_000_000)), "34aa973cd4c4daa4f61eeb2bdbad27316534016f")
    }

    func testBlockBoundaries() {
        // 55, 56 and 64 bytes straddle the padding boundary (values from Python's hashlib).
        XCTAssertEqual(SHA1.hex([UInt8](repeating: 0x61, count: 55)), "c1c8bbdc22796e28c0e15163d20899b65621d65a")
        XCTAssertEqual(SHA1.hex([UInt8](repeating: 0x61, count: 56)), "c2db330f6083854c99d4b5bfb6e8f29f201be699")
        XCTAssertEqual(SHA1.hex([UInt8](repeating: 0x61, count: 64)), "0098ba824b5c16427bd7a1122a5a442a25ec644d")
    }
}

final class CRC32CTests: XCTestCase {
    func testCheckValueAndContinuation() {
        let bytes = Array("123456789".utf8)
        bytes.withUnsafeBytes { all in
            XCTAssertEqual(CRC32C.checksum(all), 0xE306_9283)
            let first = CRC32C.checksum(UnsafeRawBufferPointer(rebasing: all[0..<4]))
            XCTAssertEqual(CRC32C.checksum(UnsafeRawBufferPointer(rebasing: all[4...]), continuing: first), 0xE306_9283)
        }
        XCTAssertEqual([UInt8](repeating: 0, count: 32).withUnsafeBytes { CRC32C.checksum($0) }, 0x8A91_36AA)
        XCTAssertEqual(bytes.withUnsafeBytes { CRC32C.portable($0) }, 0xE306_9283)
    }

    func testTheInstructionAndTheTableAgree() {
        let bytes = (0..<70_001).map { _ in UInt8.random(in: 0...255) }
        bytes.withUnsafeBytes { all in
            // Every length up to three 768-byte chunks and past: each way the three-stream form splits a buffer.
            for length in Array(0...2400) + [4099, 70_001] {
                let raw = UnsafeRawBufferPointer(rebasing: all[0..<length])
                XCTAssertEqual(CRC32C.checksum(raw, continuing: 0x1234_5678), CRC32C.portable(raw, continuing: 0x1234_5678),
                               "length \(length)")
            }
        }
    }
}

final class DSNTests: XCTestCase {
    func testParsesAndDerivesTheEndpoint() throws {
        let dsn = try DSN("https://a1b2c3@o7.ingest.us.sentry.io/4242")
        XCTAssertEqual(dsn.publicKey, "a1b2c3")
        XCTAssertNil(dsn.secretKey)
        XCTAssertEqual(dsn.projectID, "4242")
        XCTAssertEqual(dsn.organizationID, "7")
        XCTAssertEqual(dsn.envelopeEndpoint.absoluteString, "https://o7.ingest.us.sentry.io/api/4242/envelope/")

        let local = try DSN("http://key:secret@127.0.0.1:9000/prefix/path/17")
        XCTAssertEqual(local.secretKey, "secret")
        XCTAssertEqual(local.port, 9000)
        XCTAssertNil(local.organizationID)
        XCTAssertEqual(local.envelopeEndpoint.absoluteString, "http://127.0.0.1:9000/prefix/path/api/17/envelope/")

        // An IPv6 host keeps its brackets; an internationalised one stays in its ASCII (punycode) form.
        let v6 = try DSN("http://key@[::1]:9000/17")
        XCTAssertEqual(v6.host, "[::1]")
        XCTAssertEqual(v6.envelopeEndpoint.absoluteString, "http://[::1]:9000/api/17/envelope/")
        let idn = try DSN("https://key@xn--bcher-kva.example/17")
        XCTAssertEqual(idn.envelopeEndpoint.absoluteString, "https://xn--bcher-kva.example/api/17/envelope/")
    }

    func testRejectsInvalidDSNsSayingWhy() {
        let cases = [
            "": "empty", "not-a-url": "scheme", "ftp://k@h/1": "scheme", "https://h/1": "public key",
            "https://k@h": "project ID", "https://k@h/": "project ID", "https://k@h/1?x=y": "query",
            "https://k@/1": "host", "https://k@exa%20mple.com/1": "envelope URL",
            "https://k%0D%0AX:1@h/1": "keys", "https://k:s%20t@h/1": "keys", "https://k,1@h/1": "keys",
            // Whitespace around it (an environment variable's newline) made the project ID `1\n`: every
            // request a 404, and the buffer stopped as if the project were disabled.
            "https://k@h/1\n": "whitespace", "https://k@h/1 ": "whitespace", "https://k@h/1\t": "whitespace",
            "https://k@h/1\u{A0}": "whitespace", " https://k@h/1": "whitespace",
            // Decoded, a path's `%3F` or `%23` became a query or fragment of the endpoint.
            "https://k@h/1%3Fx": "path", "https://k@h/1%23x": "path", "https://k@h/p%20q/1": "path", "https://k@h/1%00": "path",
            "https://k@h:0/1": "port", "https://k@h:65536/1": "port", "https://k@h:99999/1": "port",
        ]
        for (text, reason) in cases {
            XCTAssertThrowsError(try DSN(text), text) { error in
                guard let error = error as? TelemetryBufferError, error.code == .invalidDSN, let dsn = error.dsn else {
                    return XCTFail("\(text): \(error)")
                }
                let why = error.reason
                XCTAssertEqual(dsn, ["https://k:s%20t@h/1": "https://k:***@h/1", "https://k%0D%0AX:1@h/1": "https://k%0D%0AX:***@h/1"][text] ?? text)
                XCTAssertTrue(why.contains(reason), "\(text): '\(why)' should mention \(reason)")
            }
        }
    }

    /// A DSN's secret key appears in no description or error message (they end up in logs).
    func testTheSecretKeyIsRedacted() throws {
        let dsn = try DSN("https://public:s3cret@o1.ingest.sentry.io/42")
        XCTAssertEqual(dsn.secretKey, "s3cret")
        XCTAssertEqual(dsn.description, "https://public:***@o1.ingest.sentry.io/42")
        XCTAssertEqual(try DSN("https://public@o1.ingest.sentry.io/42").description, "https://public@o1.ingest.sentry.io/42")
        XCTAssertThrowsError(try DSN("https://public:s3cret@o1.ingest.sentry.io/42?x=1")) { error in
            XCTAssertFalse("\(error)".contains("s3cret"), "\(error)")
        }
        XCTAssertThrowsError(try TelemetryBuffer(options: Options(dsn: "https://public:s3cret@/42"))) { error in
            XCTAssertFalse("\(error)".contains("s3cret"), "\(error)")
        }
    }
}

final class BufferFileTests: XCTestCase {
    /// Every buffer file's name parses back to its role; other spellings, and numbers past what the buffer
    /// writes, are no buffer file's.
    func testNamesRoundTripAndNothingElseParses() {
        let files: [BufferFile] = [.crashSafeList(1), .asyncIOCache(2), .streamCache, .streamFlushing, .recovered(0),
                                   .recovered(2), .detectedTermination(3), .stagedEnvelope(UInt64(UInt32.max)), .awaitingSync(4),
                                   .spare(5), .spare(BufferFile.largestNumber), .boot, .kept(0), .kept(3),
                                   .claimed(generation: 7, .crashSafeList(2)), .claimed(generation: 0, .boot)]
        for file in files { XCTAssertEqual(BufferFile(name: file.name), file, file.name) }
        for foreign in ["crash-safe-list-+1", "envelope-4294967296", "envelope-01", "recovering-2147483648-cache",
                        "recovering-1-unknown", "lock", ".cache.tmp", "cache2", "spare-", "recovered-0", "recovered-", "kept-0",
                        "spare-1073741825", "detected-termination-9223372036854775807", "awaiting-sync-99999999999999999999"] {
            XCTAssertNil(BufferFile(name: foreign), foreign)
        }
        XCTAssertEqual(files.filter(\.holdsRecords).count, 10)
    }

    /// New numbers follow the largest in use, and never pass what a name may carry: there, the smallest
    /// free ones are taken instead (a copy named past it would read back as a stranger's: never recovered).
    func testFreshNumbersNeverPassTheLargestANameMayCarry() {
        let largest = BufferFile.largestNumber
        XCTAssertEqual(BufferFile.freshNumbers(2, taken: []), [0, 1])
        XCTAssertEqual(BufferFile.freshNumbers(2, taken: [0, 3]), [4, 5])
        XCTAssertEqual(BufferFile.freshNumbers(1, taken: [largest - 1]), [largest])
        XCTAssertEqual(BufferFile.freshNumbers(2, taken: [0, 2, largest - 1]), [1, 3])
        XCTAssertEqual(BufferFile.freshNumbers(3, taken: [1, largest]), [0, 2, 3])
        for number in BufferFile.freshNumbers(3, taken: [largest]) {
            XCTAssertEqual(BufferFile(name: BufferFile.awaitingSync(number).name), .awaitingSync(number))
        }
    }
}
