import Foundation
import XCTest

/// Sentry's semantic conventions registry (`sentry-conventions` 0.29.0 on PyPI), consulted by
/// `Tests/Conformance/check_conventions.py` in a child process.
enum ConventionsRegistry {
    /// The script: this file is Tests/TelemetryBufferTests/Support/ConventionsRegistry.swift.
    private static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Conformance/check_conventions.py")

    /// Why the registry cannot be read here, or `nil` when it can; asked once per test process.
    private static let missing: String? = {
        do {
            let probe = try run([])
            switch probe.status {
            case 0: return nil
            case 3, 127: return "needs Sentry's conventions registry (pip install sentry-conventions==0.29.0); python3 said: \(probe.errors)"
            default: return "the conventions check did not start (status \(probe.status)): \(probe.errors)"
            }
        } catch {
            return "needs python3 with sentry-conventions==0.29.0: \(error)"
        }
    }()

    /// Throws `XCTSkip` naming what to install when the registry cannot be read here, or fails the test
    /// when `TB_REQUIRE_PARSER=1` (as `.ci/run` sets it, so CI never skips it).
    static func require() throws {
        guard let missing else { return }
        if ProcessInfo.processInfo.environment["TB_REQUIRE_PARSER"] == "1" {
            throw WalkError("TB_REQUIRE_PARSER=1: \(missing)")
        }
        throw XCTSkip(missing)
    }

    /// The attribute keys of every log, span and metric in the envelopes under `folders` (but `ignoring`,
    /// the test's own), with their types, and what the registry finds wrong with them.
    static func check(_ folders: URL..., ignoring: Set<String>) throws -> (seen: [String: String], problems: [String]) {
        try require()
        let checked = try run(["--ignore", ignoring.sorted().joined(separator: ",")] + folders.map(\.path))
        guard checked.status == 0 else { throw WalkError("the conventions check failed: \(checked.errors)") }
        let result = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(checked.output.utf8)) as? [String: Any])
        return (try XCTUnwrap(result["seen"] as? [String: String]), try XCTUnwrap(result["problems"] as? [String]))
    }

    private static func run(_ arguments: [String]) throws -> Demo.Run {
        try Demo.run(["python3", script.path] + arguments, deadline: 60, program: URL(fileURLWithPath: "/usr/bin/env"))
    }
}
