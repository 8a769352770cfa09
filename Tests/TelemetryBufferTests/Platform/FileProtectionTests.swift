import Foundation
import XCTest
@testable import TelemetryBuffer

/// The protection classes (which only Apple platforms apply: here the calls are watched): every folder gets
/// its class before anything is created in it, files an earlier buffer left get it once the folder is
/// locked, the lock file gets none (a start while the device is locked must open it), and a class that
/// cannot be set is a diagnostic, not silence.
final class FileProtectionTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory.remove() }

    /// Each call: the path, the class, for a folder what it held at that moment, and whether it ran on the
    /// test's thread (the main thread, which creates the buffers).
    private typealias Call = (path: String, protection: FileProtection, held: [String]?, creating: Bool)

    private func options(_ calls: Locked<[Call]>, failing: Bool = false,
                         diagnostics: Locked<[String]>? = nil) -> TelemetryBuffer.Options {
        testOptions(directory) {
            $0.strategy = .fileStreamCache
            $0.fileProtection = .completeUnlessOpen
            $0.protector = { url, protection in
                var isFolder: ObjCBool = false
                _ = FileManager.default.fileExists(atPath: url.path, isDirectory: &isFolder)
                let held = isFolder.boolValue ? (try? FileManager.default.contentsOfDirectory(atPath: url.path))?.sorted() : nil
                calls.withLock { $0.append((url.path, protection, held, Thread.isMainThread)) }
                if failing { throw POSIXError(.EPERM) }
            }
            $0.diagnosticHandler = { diagnostic in diagnostics?.withLock { $0.append(diagnostic.message) } }
        }
    }

    func testFoldersAreProtectedBeforeAnythingIsCreatedInThemAndLeftFilesOnceLocked() throws {
        let dsnFolder = directory.dsnFolder().path
        let folders = [dsnFolder, dsnFolder + "/telemetry-buffer", dsnFolder + "/envelopes"]
        let first = Locked<[Call]>([])
        let buffer = try TelemetryBuffer(options: options(first))
        buffer.add(log: .test("left in an envelope"))
        buffer.flush()
        buffer.add(log: .test("left in the stream cache"))
        // The first start: each folder protected while still empty (the DSN folder holds the other two
        // only once they are made, after it), then the lock file, which gets no protection.
        let calls = first.withLock { $0 }
        XCTAssertEqual(calls.prefix(3).map(\.path), folders)
        XCTAssertEqual(calls.prefix(3).map(\.held), [[], [], []])
        XCTAssertTrue(calls.prefix(3).allSatisfy { $0.protection == .completeUnlessOpen })
        XCTAssertEqual(calls.dropFirst(3).map(\.path), [dsnFolder + "/telemetry-buffer/lock"])
        XCTAssertEqual(calls.dropFirst(3).map(\.protection), [.none])
        buffer.close()

        // A later start: whatever the first left gets the class too (the folders already hold it); the
        // envelopes off the creating thread (one call each, every start: a folder of thousands took long).
        let later = Locked<[Call]>([])
        let again = try TelemetryBuffer(options: options(later))
        defer { again.close() }
        XCTAssertFalse(later.withLock { $0 }.contains { $0.creating && $0.path.hasSuffix(".envelope") }, "no envelope on the creating thread")
        again.waitForBackgroundWork()
        let left = try FileManager.default.contentsOfDirectory(atPath: dsnFolder + "/telemetry-buffer").map { "telemetry-buffer/" + $0 }
            + FileManager.default.contentsOfDirectory(atPath: dsnFolder + "/envelopes").map { "envelopes/" + $0 }
        let given = Dictionary(later.withLock { $0 }.map { ($0.path, $0.protection) }, uniquingKeysWith: { first, _ in first })
        XCTAssertTrue(left.contains { $0.hasPrefix("envelopes/") && $0.hasSuffix(".envelope") }, "\(left)")
        for name in left where !name.hasSuffix("/lock") && !name.hasSuffix(".tmp") {
            // Files this start created itself took the folder's class; the ones left before were given it.
            guard let protection = given[dsnFolder + "/" + name] else { continue }
            XCTAssertEqual(protection, .completeUnlessOpen, name)
        }
        XCTAssertEqual(given[dsnFolder + "/telemetry-buffer/lock"], FileProtection.none)
        XCTAssertNotNil(given[dsnFolder + "/telemetry-buffer/cache"], "the stream cache the first start left")
        XCTAssertTrue(left.filter { $0.hasPrefix("envelopes/") }.allSatisfy { given[dsnFolder + "/" + $0] != nil }, "every envelope")
    }

    func testAClassThatCannotBeSetIsADiagnostic() throws {
        let diagnostics = Locked<[String]>([])
        let buffer = try TelemetryBuffer(options: options(Locked([]), failing: true, diagnostics: diagnostics))
        defer { buffer.close() }
        XCTAssertTrue(buffer.add(log: .test("still taken")))
        eventually { diagnostics.withLock { $0.contains { $0.contains("protection class") && $0.contains("telemetry-buffer") } } }
    }
}
