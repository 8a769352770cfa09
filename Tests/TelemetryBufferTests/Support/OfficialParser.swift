import Foundation

/// The official Sentry Python SDK's envelope parser (`sentry_sdk.envelope.Envelope.deserialize_from`,
/// sentry-sdk 2.75.0), run as a child process by `Tests/Conformance/parse_envelopes.py`.
enum OfficialParser {
    private static let script = ConformanceScript("parse_envelopes.py", needs: "the official Sentry Python SDK (pip install sentry-sdk==2.75.0)")

    /// Call first in a test that needs the parser: skips naming what to install where it cannot run, or
    /// fails with `TB_REQUIRE_PARSER=1` (see `ConformanceScript.require()`).
    static func require() throws { try script.require() }

    /// Parses every `*.envelope` under `folders`: one summary per file, by path. Throws when the parser
    /// rejects an envelope, and when it cannot run.
    static func parse(_ folders: URL...) throws -> [String: [String: Any]] {
        try script.json(folders.map(\.path), as: [String: [String: Any]].self, failure: "the official parser rejected an envelope")
    }
}
