import Foundation
import XCTest

/// A script of `Tests/Conformance`, run by python3 in a child process (60 s deadline), that needs a PyPI
/// package: it exits with status 3 when that package cannot be imported.
struct ConformanceScript: Sendable {
    private let script: URL
    /// Why the script cannot run here, or `nil` when it can; asked once, when the value is made.
    private let missing: String?

    /// - Parameters:
    ///   - name: The script's file name in `Tests/Conformance`.
    ///   - needs: What it needs and how to install it, for the skip's reason (which `.ci/run` looks for).
    init(_ name: String, needs package: String) {
        // This file is Tests/TelemetryBufferTests/Support/ConformanceScript.swift.
        script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Conformance/\(name)")
        do {
            let probe = try Demo.run(["python3", script.path], deadline: 60, program: URL(fileURLWithPath: "/usr/bin/env"))
            switch probe.status {
            case 0: missing = nil
            case 3, 127: missing = "needs \(package); python3 said: \(probe.errors)"
            default: missing = "\(name) did not start (status \(probe.status)): \(probe.errors)"
            }
        } catch {
            missing = "needs python3 with \(package): \(error)"
        }
    }

    /// Throws `XCTSkip` naming what to install when the script cannot run here, or fails the test when
    /// `TB_REQUIRE_PARSER=1` (as `.ci/run` sets it, so CI never skips it).
    func require() throws {
        guard let missing else { return }
        if ProcessInfo.processInfo.environment["TB_REQUIRE_PARSER"] == "1" {
            throw WalkError("TB_REQUIRE_PARSER=1: \(missing)")
        }
        throw XCTSkip(missing)
    }

    /// Runs the script with `arguments` (call `require()` first) and returns what it printed as JSON;
    /// throws, naming `failure`, when it exits with another status than 0.
    func json<Result>(_ arguments: [String], as: Result.Type, failure: String) throws -> Result {
        try require()
        let run = try Demo.run(["python3", script.path] + arguments, deadline: 60, program: URL(fileURLWithPath: "/usr/bin/env"))
        guard run.status == 0 else { throw WalkError("\(failure): \(run.errors)") }
        return try XCTUnwrap(JSONSerialization.jsonObject(with: Data(run.output.utf8)) as? Result)
    }
}
