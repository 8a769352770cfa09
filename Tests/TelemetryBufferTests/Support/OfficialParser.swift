import Foundation
import XCTest

/// The official Sentry Python SDK's envelope parser (`sentry_sdk.envelope.Envelope.deserialize_from`,
/// sentry-sdk 2.75.0), run as a child process by `Tests/Conformance/parse_envelopes.py`.
enum OfficialParser {
    /// The script: this file is Tests/TelemetryBufferTests/Support/OfficialParser.swift.
    private static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Conformance/parse_envelopes.py")

    /// Why the parser cannot run here, or `nil` when it can; asked once per test process.
    private static let missing: String? = {
        do {
            let probe = try run([])
            switch probe.status {
            case 0: return nil
            case 3, 127: return "needs the official Sentry Python SDK (pip install sentry-sdk==2.75.0); python3 said: \(probe.errors)"
            default: return "the official parser did not start (status \(probe.status)): \(probe.errors)"
            }
        } catch {
            return "needs python3 with the official Sentry Python SDK (pip install sentry-sdk==2.75.0): \(error)"
        }
    }()

    /// Call first in a test that needs the parser: throws `XCTSkip` naming what to install when it cannot
    /// run here, or fails the test when `TB_REQUIRE_PARSER=1` (as `.ci/run` sets it, so CI never skips it).
    static func require() throws {
        guard let missing else { return }
        if ProcessInfo.processInfo.environment["TB_REQUIRE_PARSER"] == "1" {
            throw WalkError("TB_REQUIRE_PARSER=1: \(missing)")
        }
        throw XCTSkip(missing)
    }

    /// Parses every `*.envelope` under `folders`: one summary per file, by path. Throws when the parser
    /// rejects an envelope, and when it cannot run (call `require()` first).
    static func parse(_ folders: URL...) throws -> [String: [String: Any]] {
        try require()
        let parsed = try run(folders.map(\.path))
        guard parsed.status == 0 else { throw WalkError("the official parser rejected an envelope: \(parsed.errors)") }
        return try XCTUnwrap(JSONSerialization.jsonObject(with: Data(parsed.output.utf8)) as? [String: [String: Any]])
    }

    private static func run(_ arguments: [String]) throws -> Demo.Run {
        try Demo.run(["python3", script.path] + arguments, deadline: 60, program: URL(fileURLWithPath: "/usr/bin/env"))
    }
}
