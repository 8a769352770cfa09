import Foundation
import XCTest
@testable import TelemetryBuffer

/// `setAttribute`, `removeAttribute` and `setUser`: they apply to every later log and span, not to earlier
/// ones; an item's own attribute wins; `user.*` only with `sendDefaultPii`.
final class ScopeTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory.remove() }

    func testAttributesApplyToLaterItemsUntilRemoved() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.environment = "production" })
        defer { buffer.close() }
        let trace = TraceID(high: 1, low: 2)
        buffer.add(log: .test("before"))
        buffer.setAttribute("blue", forKey: "app.theme")
        buffer.setAttribute("staging", forKey: "sentry.environment")
        buffer.add(log: .test("during"))
        buffer.add(log: .test("own", attributes: ["app.theme": "red"]))
        buffer.add(span: .test("span during", trace: trace))
        buffer.removeAttribute(forKey: "app.theme")
        buffer.add(log: .test("after"))
        let items = try storedAttributes(buffer)
        XCTAssertNil(items["before"]?["app.theme"], "items added before keep what they had")
        XCTAssertEqual(items["before"]?["sentry.environment"]?["value"] as? String, "production")
        XCTAssertEqual(items["during"]?["app.theme"]?["value"] as? String, "blue")
        XCTAssertEqual(items["during"]?["sentry.environment"]?["value"] as? String, "staging", "it replaces a default")
        XCTAssertEqual(items["own"]?["app.theme"]?["value"] as? String, "red", "the item's own attribute wins")
        XCTAssertEqual(items["span during"]?["app.theme"]?["value"] as? String, "blue", "spans get them too")
        XCTAssertNil(items["after"]?["app.theme"])
        XCTAssertEqual(items["after"]?["sentry.environment"]?["value"] as? String, "staging")
        XCTAssertNotNil(items["after"]?["sentry.timestamp.sequence"])
        XCTAssertNotNil(items["after"]?["os.name"])
    }

    /// The buffer numbers `sentry.timestamp.sequence` itself: set as an attribute for every item it is
    /// ignored, never sent twice. Removing everything leaves the buffer's own defaults.
    func testTheSequenceCannotBeSetAndRemovingEverythingRestoresTheDefaults() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory))
        defer { buffer.close() }
        buffer.setAttribute(99, forKey: "sentry.timestamp.sequence")
        buffer.setAttribute("x", forKey: "app.mode")
        buffer.add(log: .test("set"))
        buffer.removeAttribute(forKey: "sentry.timestamp.sequence")
        buffer.removeAttribute(forKey: "app.mode")
        buffer.add(log: .test("removed"))
        buffer.flush()
        let payloads = try walkEnvelopes(in: buffer.envelopesDirectory).flatMap(\.items).map { String(decoding: $0.payload, as: UTF8.self) }
        let json = payloads.joined()
        XCTAssertEqual(json.components(separatedBy: "sentry.timestamp.sequence").count - 1, 2, "once per log")
        XCTAssertFalse(json.contains(#""value":99"#))
        let items = try storedAttributes(buffer)
        XCTAssertEqual(items["set"]?["app.mode"]?["value"] as? String, "x")
        XCTAssertNil(items["removed"]?["app.mode"])
    }

    func testTheUserIsSentOnlyWithSendDefaultPii() throws {
        for sendDefaultPii in [false, true] {
            let folder = try TemporaryDirectory()
            defer { folder.remove() }
            let buffer = try TelemetryBuffer(options: testOptions(folder) { $0.sendDefaultPii = sendDefaultPii })
            buffer.setUser(id: "42", email: "ada@example.com", username: "ada")
            buffer.add(log: .test("with user"))
            buffer.add(span: .test("span with user", trace: TraceID(high: 1, low: 2)))
            buffer.setUser(id: "43")
            buffer.add(log: .test("other user"))
            buffer.setUser(id: nil)
            buffer.add(log: .test("no user"))
            let items = try storedAttributes(buffer)
            buffer.close()
            if sendDefaultPii {
                XCTAssertEqual(items["with user"]?["user.id"]?["value"] as? String, "42")
                XCTAssertEqual(items["with user"]?["user.email"]?["value"] as? String, "ada@example.com")
                XCTAssertEqual(items["with user"]?["user.name"]?["value"] as? String, "ada")
                XCTAssertEqual(items["span with user"]?["user.id"]?["value"] as? String, "42")
                XCTAssertEqual(items["other user"]?["user.id"]?["value"] as? String, "43")
                XCTAssertNil(items["other user"]?["user.email"], "a new user replaces the whole user")
            }
            for (name, attributes) in items where !sendDefaultPii || name == "no user" {
                XCTAssertFalse(attributes.keys.contains { $0.hasPrefix("user.") }, "\(name), sendDefaultPii \(sendDefaultPii)")
            }
        }
    }

    /// Threads adding while another changes an attribute: every item gets a whole default set (the
    /// buffer's own and one of the values set), and nothing is lost.
    func testUpdatesWhileThreadsAddAreWholeAndLoseNothing() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.flushInterval = 30; $0.maxLogsPerBatch = 100 })
        defer { buffer.close() }
        let done = DispatchGroup()
        DispatchQueue.global().async(group: done) {
            for round in 0..<200 {
                buffer.setAttribute(.integer(Int64(round)), forKey: "round")
            }
        }
        let accepted = Locked(0)
        DispatchQueue.concurrentPerform(iterations: 2) { thread in
            for index in 0..<100 where buffer.add(span: .test("\(thread).\(index)", trace: TraceID(high: 1, low: UInt64(thread)))) {
                accepted.withLock { $0 += 1 }
            }
        }
        done.wait()
        let items = try storedAttributes(buffer)
        XCTAssertEqual(items.count, accepted.withLock { $0 })
        for (name, attributes) in items {
            if let round = attributes["round"]?["value"] as? Int { XCTAssertTrue((0..<200).contains(round), name) }
            XCTAssertNotNil(attributes["os.name"], "\(name) has the whole default set")
        }
    }
}
