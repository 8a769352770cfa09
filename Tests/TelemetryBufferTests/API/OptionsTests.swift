import Foundation
import XCTest
@testable import TelemetryBuffer

final class OptionsTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory.remove() }

    private func assertInvalid(_ name: String, _ configure: (inout Options) -> Void, line: UInt = #line) {
        XCTAssertThrowsError(try TelemetryBuffer(options: testOptions(directory, configure)), line: line) { error in
            guard let error = error as? TelemetryBufferError else { return XCTFail("\(error)", line: line) }
            // As a caller switches on the code: a `default` keeps the switch valid when codes are added.
            switch error.code {
            case .invalidOption:
                XCTAssertEqual(error.option, name, line: line)
                XCTAssertFalse(error.reason.isEmpty, line: line)
                XCTAssertTrue(error.description.contains(name), error.description, line: line)
            default:
                XCTFail("\(error.code): \(error)", line: line)
            }
        }
    }

    func testLimitsOutOfRangeAreRejected() {
        assertInvalid("flushInterval") { $0.flushInterval = 0 }
        assertInvalid("flushInterval") { $0.flushInterval = -1 }
        assertInvalid("flushInterval") { $0.flushInterval = 30.5 }
        assertInvalid("maxLogsPerBatch") { $0.maxLogsPerBatch = 101 }
        assertInvalid("maxLogsPerBatch") { $0.maxLogsPerBatch = 0 }
        assertInvalid("maxSpansPerBatch") { $0.maxSpansPerBatch = 1001 }
        assertInvalid("maxBatchBytes") { $0.maxBatchBytes = (1 << 20) + 1 }
        assertInvalid("maxBatchBytes") { $0.maxBatchBytes = 100 }
        assertInvalid("maxCachedEnvelopes") { $0.maxCachedEnvelopes = 0 }
        assertInvalid("maxCacheBytes") { $0.maxCacheBytes = (1 << 20) - 1 }
        assertInvalid("maxCacheBytes") { $0.maxBatchBytes = 8192; $0.maxCacheBytes = 8191 }
        assertInvalid("fileProtection") { $0.fileProtection = .complete }
        assertInvalid("fileProtection") { $0.fileProtection = .completeUnlessOpen }
        assertInvalid("maxEnvelopeAge") { $0.maxEnvelopeAge = 0 }
        assertInvalid("tracesSampleRate") { $0.tracesSampleRate = 0 }
        assertInvalid("sdkName") { $0.sdkName = "" }
        assertInvalid("sdkName") { $0.sdkName = "my sdk" }
        assertInvalid("sdkName") { $0.sdkName = "sdk\u{85}" }
        assertInvalid("sdkVersion") { $0.sdkVersion = "1.0\r\nX-Injected: 1" }
        assertInvalid("ioSyncInterval") { $0.ioSyncInterval = 0 }
        // Sentry's own limits; a release of megabytes made every span envelope larger than any the uploader
        // sends (deleted, counted as nothing).
        assertInvalid("release") { $0.release = String(repeating: "r", count: 201) }
        assertInvalid("environment") { $0.environment = String(repeating: "e", count: 65) }
        assertInvalid("sdkName") { $0.sdkName = String(repeating: "s", count: 201) }
        assertInvalid("sdkVersion") { $0.sdkVersion = String(repeating: "1", count: 201) }
        // A NaN backoff made the uploader retry without waiting.
        assertInvalid("uploadOptions.pacing") { $0.uploadOptions.pacing = -0.1 }
        assertInvalid("uploadOptions.backoffBase") { $0.uploadOptions.backoffBase = .nan }
        assertInvalid("uploadOptions.backoffBase") { $0.uploadOptions.backoffBase = 0 }
        assertInvalid("uploadOptions.maxAttempts") { $0.uploadOptions.maxAttempts = 0 }
        assertInvalid("uploadOptions.coolOff") { $0.uploadOptions.coolOff = .infinity }
        assertInvalid("uploadOptions.requestTimeout") { $0.uploadOptions.requestTimeout = 0 }
    }

    func testTheLimitsThemselvesAreAccepted() throws {
        _ = try TelemetryBuffer(options: testOptions(directory) {
            $0.flushInterval = 30
            $0.maxLogsPerBatch = 100
            $0.maxSpansPerBatch = 1000
            $0.maxBatchBytes = 1 << 20
            $0.release = String(repeating: "r", count: 200)
            $0.environment = String(repeating: "é", count: 64)
        }).close()
        // The classes that keep closed files locked, with the strategies that cope with them.
        for (protection, strategy) in [(FileProtection.complete, Options.Strategy.fileStreamCache), (.completeUnlessOpen, .flushAll)] {
            try TelemetryBuffer(options: testOptions(directory) { ($0.fileProtection, $0.strategy) = (protection, strategy) }).close()
        }
    }

    func testInvalidDSNIsRejected() {
        XCTAssertThrowsError(try TelemetryBuffer(options: testOptions(directory) { $0.dsn = "https://nokey.example/1" })) {
            XCTAssertTrue("\($0)".contains("public key"), "\($0)")
        }
    }

    func testACacheDirectoryIsCreatedWithItsMissingParentsAndKeptPrivate() throws {
        let nested = directory.url.appendingPathComponent("a/b/c", isDirectory: true)
        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.cacheDirectory = nested })
        defer { buffer.close() }
        XCTAssertTrue(buffer.add(log: .test("kept")))
        for folder in [nested, buffer.directory] {
            var status = stat()
            XCTAssertEqual(stat(folder.path, &status), 0, folder.path)
            XCTAssertEqual(status.st_mode & S_IFMT, S_IFDIR, folder.path)
            XCTAssertEqual(status.st_mode & 0o077, 0, "\(folder.path): no access for others")
        }
    }

    func testUnusableCacheDirectoriesAreRejected() throws {
        let file = directory.url.appendingPathComponent("a-file")
        try Data("x".utf8).write(to: file)
        for path in [file, file.appendingPathComponent("below")] {
            XCTAssertThrowsError(try TelemetryBuffer(options: testOptions(directory) { $0.cacheDirectory = path })) { error in
                guard let error = error as? TelemetryBufferError, error.code == .unusableCacheDirectory else {
                    return XCTFail("\(error)")
                }
                XCTAssertEqual(error.path, path.path)
            }
        }
    }

    func testASecondBufferOnTheSameDSNFailsClearlyUntilTheFirstIsGone() throws {
        for strategy in Options.Strategy.allCases {
            var first: TelemetryBuffer? = try TelemetryBuffer(options: testOptions(directory) { $0.strategy = strategy })
            XCTAssertThrowsError(try TelemetryBuffer(options: testOptions(directory))) { error in
                guard let error = error as? TelemetryBufferError, error.code == .folderInUse, let path = error.path else {
                    return XCTFail("\(error)")
                }
                XCTAssertTrue(path.hasSuffix("/telemetry-buffer"), path)
            }
            XCTAssertNotNil(try? TelemetryBuffer(options: testOptions(directory) { $0.dsn = testDSN + "1" }),
                            "another DSN has its own folder")
            first?.close()
            XCTAssertNoThrow(try TelemetryBuffer(options: testOptions(directory)).close(), "close releases the folder")
            first = nil
        }
    }

    /// A buffer released without `close()` holds its folder until its final forward has run; a new buffer
    /// on the same DSN right after waits for that instead of failing, and finds the first one's items stored.
    func testANewBufferOnTheDSNWaitsForTheFinalForwardOfOneReleasedWithoutClose() throws {
        for strategy in Options.Strategy.allCases {
            let folder = try TemporaryDirectory()
            defer { folder.remove() }
            var first: TelemetryBuffer? = try TelemetryBuffer(options: testOptions(folder) { $0.strategy = strategy })
            let bodies = (0..<150).map { "log \($0) of the released buffer" }
            for body in bodies { XCTAssertTrue(first?.add(log: .test(body)) ?? false) }
            let envelopes = try XCTUnwrap(first?.envelopesDirectory)
            first = nil
            let second = try TelemetryBuffer(options: testOptions(folder) { $0.strategy = strategy })
            second.close()
            XCTAssertEqual(try logBodies(in: envelopes), bodies, "\(strategy)")
        }
    }

    func testFoldersAreNamedBySHA1OfTheDSN() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory))
        XCTAssertEqual(buffer.directory.lastPathComponent, SHA1.hex(testDSN.utf8))
        XCTAssertEqual(buffer.directory.lastPathComponent.count, 40)
        XCTAssertTrue(FileManager.default.fileExists(atPath: buffer.envelopesDirectory.path))
    }
}

final class MinimumLogLevelTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory.remove() }

    /// Below the minimum: `false` at once, nothing stored, nothing counted as dropped; at and above it,
    /// stored as usual.
    func testLogsBelowTheMinimumLevelAreRefusedUncounted() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.minimumLogLevel = .warn })
        defer { buffer.close() }
        var accepted: [String] = []
        for level in Log.Level.allCases {
            if buffer.add(log: Log(level: level, body: level.rawValue, traceID: TraceID(high: 1, low: 2))) {
                accepted.append(level.rawValue)
            }
        }
        XCTAssertEqual(accepted, ["warn", "error", "fatal"])
        buffer.flush()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["warn", "error", "fatal"])
        XCTAssertNil(buffer.pendingDiscards, "a level filtered out by configuration is not a drop")
    }

    func testTheDefaultMinimumKeepsEveryLevel() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory))
        defer { buffer.close() }
        for level in Log.Level.allCases {
            XCTAssertTrue(buffer.add(log: Log(level: level, body: level.rawValue, traceID: TraceID(high: 1, low: 2))))
        }
        buffer.flush()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), Log.Level.allCases.map(\.rawValue))
    }
}

/// `flush()` and `close()` for Swift concurrency: they suspend, and keep the blocking forms' guarantees.
final class AsyncLifecycleTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory.remove() }

    func testAsyncFlushStoresEverythingAddedBefore() async throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.flushInterval = 30 })
        for index in 0..<5 { buffer.add(log: .test("log \(index)")) }
        await buffer.flush()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), (0..<5).map { "log \($0)" })
        await buffer.close()
    }

    func testAsyncCloseForwardsThenRefusesAndReleasesTheFolder() async throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.flushInterval = 30 })
        buffer.add(log: .test("before close"))
        await buffer.close()
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory), ["before close"])
        XCTAssertFalse(buffer.add(log: .test("after close")))
        // The folder is free again: a new buffer on the DSN opens it at once.
        let next = try TelemetryBuffer(options: testOptions(directory))
        await next.close()
    }

    /// Many tasks flushing at once on the cooperative pool (2 threads here): none blocks a thread, so
    /// they cannot starve one another.
    func testManyTasksFlushingAtOnceAllFinish() async throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.flushInterval = 30 })
        await withTaskGroup(of: Void.self) { group in
            for index in 0..<64 {
                group.addTask {
                    buffer.add(log: .test("task \(index)"))
                    await buffer.flush()
                }
            }
        }
        XCTAssertEqual(try logBodies(in: buffer.envelopesDirectory).count, 64)
        await buffer.close()
    }
}
