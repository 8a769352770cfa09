import Foundation

/// Sentry's semantic conventions registry (`sentry-conventions` 0.29.0 on PyPI), consulted by
/// `Tests/Conformance/check_conventions.py` in a child process.
enum ConventionsRegistry {
    private static let script = ConformanceScript("check_conventions.py", needs: "Sentry's conventions registry (pip install sentry-conventions==0.29.0)")

    /// Call first in a test that needs the registry: skips naming what to install where it cannot be read,
    /// or fails with `TB_REQUIRE_PARSER=1` (see `ConformanceScript.require()`).
    static func require() throws { try script.require() }

    /// The attribute keys of every log, span and metric in the envelopes under `folders` (but `ignoring`,
    /// the test's own), with their types, and what the registry finds wrong with them.
    static func check(_ folders: URL..., ignoring: Set<String>) throws -> (seen: [String: String], problems: [String]) {
        let result = try script.json(["--ignore", ignoring.sorted().joined(separator: ",")] + folders.map(\.path),
                                     as: [String: Any].self, failure: "the conventions check failed")
        return (result["seen"] as? [String: String] ?? [:], result["problems"] as? [String] ?? ["no problems list printed"])
    }
}
