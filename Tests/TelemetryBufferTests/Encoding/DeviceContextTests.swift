import Foundation
import XCTest
@testable import TelemetryBuffer

/// Every log says where it runs (`os.name`, `os.version`; on Apple platforms `device.*` too), every span
/// its OS, read once per process; an item's own attribute of the same name wins.
final class DeviceContextTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory.remove() }

    private func attributes(of elements: [[String: Any]]) throws -> [[String: [String: Any]]] {
        try elements.map { try XCTUnwrap($0["attributes"] as? [String: [String: Any]]) }
    }

    func testLogsCarryTheOSAndSpansItsName() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory))
        defer { buffer.close() }
        buffer.add(log: .test("log"))
        buffer.add(span: .test("span", trace: TraceID(high: 1, low: 2)))
        buffer.flush()
        let envelopes = try walkEnvelopes(in: buffer.envelopesDirectory)
        let logs = try attributes(of: envelopes.flatMap { $0.items.filter { $0.type == "log" }.flatMap(\.elements) })
        let spans = try attributes(of: envelopes.flatMap { $0.items.filter { $0.type == "span" }.flatMap(\.elements) })
        XCTAssertEqual(logs.count, 1)
        XCTAssertEqual(spans.count, 1)
        #if os(Linux)
        // What `uname -sr` says, read independently of the library.
        var names = utsname()
        XCTAssertEqual(uname(&names), 0)
        let release = withUnsafeBytes(of: &names.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        XCTAssertEqual(logs[0]["os.name"]?["value"] as? String, "Linux")
        XCTAssertEqual(logs[0]["os.version"]?["value"] as? String, release)
        XCTAssertFalse(logs[0].keys.contains { $0.hasPrefix("device.") }, "no device to name on Linux")
        #endif
        XCTAssertEqual(logs[0]["os.name"]?["type"] as? String, "string")
        XCTAssertEqual(spans[0]["os.name"]?["value"] as? String, logs[0]["os.name"]?["value"] as? String)
        XCTAssertNil(spans[0]["os.version"], "spans carry the OS's name only (the protocol's common span attributes)")
    }

    func testTheItemsOwnAttributeWins() throws {
        let buffer = try TelemetryBuffer(options: testOptions(directory))
        defer { buffer.close() }
        buffer.add(log: .test("log", attributes: ["os.name": "Plan 9"]))
        buffer.flush()
        let envelope = try XCTUnwrap(walkEnvelopes(in: buffer.envelopesDirectory).first)
        let logs = try attributes(of: envelope.items.flatMap(\.elements))
        XCTAssertEqual(logs.first?["os.name"]?["value"] as? String, "Plan 9")
        let json = String(decoding: try XCTUnwrap(envelope.items.first?.payload), as: UTF8.self)
        XCTAssertEqual(json.components(separatedBy: "\"os.name\"").count, 2, "the key appears once")
    }
}
