import Foundation
import XCTest
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The service in a child process on 127.0.0.1, sent requests without and with an incoming trace, then
/// ended with SIGTERM; what its buffer stored is read from the envelope files.
final class TracedServiceTests: XCTestCase {
    /// The service's binary, built next to the test bundle.
    private var executable: URL {
        get throws {
            let folders = [URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()]
                + Bundle.allBundles.map { $0.bundleURL.deletingLastPathComponent() }
            let found = folders.map { $0.appendingPathComponent("TracedService") }
                .first { FileManager.default.isExecutableFile(atPath: $0.path) }
            return try XCTUnwrap(found, "TracedService is built beside the tests (swift build first)")
        }
    }

    /// Every item of `type` in the envelopes under `folder`, with its envelope's `trace` header.
    private func items(_ type: String, in folder: URL) throws -> [(item: [String: Any], trace: [String: String]?)] {
        let files = FileManager.default.enumerator(at: folder, includingPropertiesForKeys: nil)?
            .compactMap { $0 as? URL }.filter { $0.pathExtension == "envelope" } ?? []
        return try files.flatMap { file -> [(item: [String: Any], trace: [String: String]?)] in
            let bytes = try Data(contentsOf: file)
            let end = try XCTUnwrap(bytes.firstIndex(of: 0x0A))
            let header = try XCTUnwrap(JSONSerialization.jsonObject(with: bytes[..<end]) as? [String: Any])
            var offset = end + 1, found: [(item: [String: Any], trace: [String: String]?)] = []
            while offset < bytes.count {
                let itemEnd = try XCTUnwrap(bytes[offset...].firstIndex(of: 0x0A))
                let itemHeader = try XCTUnwrap(JSONSerialization.jsonObject(with: bytes[offset..<itemEnd]) as? [String: Any])
                let length = try XCTUnwrap(itemHeader["length"] as? Int)
                if itemHeader["type"] as? String == type {
                    let payload = try XCTUnwrap(JSONSerialization.jsonObject(with: bytes[(itemEnd + 1)..<(itemEnd + 1 + length)]) as? [String: Any])
                    for item in payload["items"] as? [[String: Any]] ?? [] { found.append((item, header["trace"] as? [String: String])) }
                }
                offset = itemEnd + 1 + length + 1
            }
            return found
        }
    }

    private func get(_ port: Int, _ path: String, headers: [String: String] = [:]) async throws -> String {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)\(path)")!, timeoutInterval: 30)
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        let (data, _) = try await URLSession.shared.data(for: request)
        return String(decoding: data, as: UTF8.self)
    }

    func testATraceCrossesTheHTTPCallAndLogsAndMetricsCarryTheirSpans() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("traced-service-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        let process = Process()
        process.executableURL = try executable
        process.arguments = ["--dir", folder.path]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        // The port, from the first line; a service that does not start in 60 s fails the test with what it printed.
        let printed = Printed(output.fileHandleForReading)
        let port = try await printed.port(deadline: 60)

        let incoming = (trace: "4f2b8e1c9a7d43e6b0c5d1e2f3a4b5c6", span: "9c1d2e3f4a5b6c7d")
        let unsampled = "0af7651916cd43dd8448eb211c80319c"
        let answers = [
            try await get(port, "/checkout"),
            try await get(port, "/checkout", headers: [
                "sentry-trace": "\(incoming.trace)-\(incoming.span)-1",
                "baggage": "sentry-trace_id=\(incoming.trace),sentry-public_key=caller,sentry-sample_rate=0.5,sentry-sample_rand=0.25,vendor=x",
            ]),
            try await get(port, "/checkout", headers: ["traceparent": "00-\(unsampled)-b7ad6b7169203331-00"]),
        ]
        XCTAssertEqual(answers, ["ok 3", "ok 3", "ok 3"])
        kill(process.processIdentifier, SIGTERM)
        for _ in 0..<200 where process.isRunning { try await Task.sleep(nanoseconds: 100_000_000) }
        XCTAssertFalse(process.isRunning, "ended within 20 s of SIGTERM; it printed: \(printed.text)")

        let spans = try items("span", in: folder)
        func named(_ name: String, in trace: String) throws -> [String: Any] {
            try XCTUnwrap(spans.first { $0.item["name"] as? String == name && $0.item["trace_id"] as? String == trace }?.item,
                          "\(name) in \(trace): \(spans.map { "\($0.item["name"] ?? "") \($0.item["trace_id"] ?? "")" })")
        }
        // A new trace: the server segment, its client span, and the segment the call made on the other side.
        let first = try XCTUnwrap(spans.first { $0.item["name"] as? String == "/checkout" && $0.item["trace_id"] as? String != incoming.trace }?.item["trace_id"] as? String)
        // Two continued traces: the incoming sampled one, and the one the call continues.
        for trace in [first, incoming.trace] {
            let checkout = try named("/checkout", in: trace), client = try named("GET /inventory", in: trace)
            let inventory = try named("/inventory", in: trace)
            XCTAssertEqual(checkout["is_segment"] as? Bool, true)
            XCTAssertEqual(client["parent_span_id"] as? String, checkout["span_id"] as? String, "the client span is the handler's")
            XCTAssertEqual(inventory["parent_span_id"] as? String, client["span_id"] as? String, "the called segment's parent is the client span")
            XCTAssertEqual(inventory["is_segment"] as? Bool, true)
        }
        XCTAssertNil(try named("/checkout", in: first)["parent_span_id"])
        XCTAssertEqual(try named("/checkout", in: incoming.trace)["parent_span_id"] as? String, incoming.span)
        XCTAssertFalse(spans.contains { $0.item["trace_id"] as? String == unsampled }, "an unsampled trace records no span")
        // The continued trace's envelopes carry the caller's sampling context, as the call propagated it.
        let continued = spans.filter { $0.item["trace_id"] as? String == incoming.trace }
        XCTAssertTrue(continued.allSatisfy { $0.trace == ["trace_id": incoming.trace, "public_key": "caller", "sample_rate": "0.5", "sample_rand": "0.25"] },
                      "\(continued.map(\.trace))")

        // Logs and metrics carry the span they ran in; an unsampled trace's logs still carry its trace.
        let logs = try items("log", in: folder), metrics = try items("trace_metric", in: folder)
        for trace in [first, incoming.trace] {
            let started = try XCTUnwrap(logs.first { $0.item["body"] as? String == "checkout started" && $0.item["trace_id"] as? String == trace }?.item)
            XCTAssertEqual(started["span_id"] as? String, try named("/checkout", in: trace)["span_id"] as? String)
            let checked = try XCTUnwrap(logs.first { $0.item["body"] as? String == "inventory checked" && $0.item["trace_id"] as? String == trace }?.item)
            XCTAssertEqual(checked["span_id"] as? String, try named("/inventory", in: trace)["span_id"] as? String)
            let counted = try XCTUnwrap(metrics.first { $0.item["name"] as? String == "checkout.requests" && $0.item["trace_id"] as? String == trace }?.item)
            XCTAssertEqual(counted["span_id"] as? String, try named("/checkout", in: trace)["span_id"] as? String)
        }
        XCTAssertTrue(logs.contains { $0.item["body"] as? String == "checkout started" && $0.item["trace_id"] as? String == unsampled })

        // The official Sentry Python SDK's parser reads every envelope, where it is installed.
        var root = URL(fileURLWithPath: #filePath)
        for _ in 0..<5 { root.deleteLastPathComponent() }
        let parser = Process()
        parser.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        parser.arguments = ["python3", root.appendingPathComponent("Tests/Conformance/parse_envelopes.py").path, folder.path]
        let parsed = Pipe(), complaint = Pipe()
        (parser.standardOutput, parser.standardError) = (parsed, complaint)
        try parser.run()
        _ = parsed.fileHandleForReading.readDataToEndOfFile()
        let errors = String(decoding: complaint.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        parser.waitUntilExit()
        if parser.terminationStatus == 3 || parser.terminationStatus == 127 {
            if ProcessInfo.processInfo.environment["TB_REQUIRE_PARSER"] == "1" { XCTFail("needs sentry-sdk==2.75.0: \(errors)") }
        } else {
            XCTAssertEqual(parser.terminationStatus, 0, "the official parser rejected an envelope: \(errors)")
        }

        // Every attribute key written (Hummingbird's through the tracer among them) is in Sentry's conventions
        // registry, of its type, not deprecated, where sentry-conventions is installed. `stock` is the handler's own.
        let conventions = Process()
        conventions.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        conventions.arguments = ["python3", root.appendingPathComponent("Tests/Conformance/check_conventions.py").path,
                                 "--ignore", "stock", folder.path]
        let checked = Pipe(), said = Pipe()
        (conventions.standardOutput, conventions.standardError) = (checked, said)
        try conventions.run()
        let result = checked.fileHandleForReading.readDataToEndOfFile()
        let complaints = String(decoding: said.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        conventions.waitUntilExit()
        if conventions.terminationStatus == 3 || conventions.terminationStatus == 127 {
            if ProcessInfo.processInfo.environment["TB_REQUIRE_PARSER"] == "1" { XCTFail("needs sentry-conventions==0.29.0: \(complaints)") }
        } else {
            let found = try XCTUnwrap(JSONSerialization.jsonObject(with: result) as? [String: Any])
            XCTAssertNotNil((found["seen"] as? [String: String])?["http.route"], "Hummingbird's attributes were seen")
            XCTAssertEqual(found["problems"] as? [String], [], "seen: \(found["seen"] ?? "")")
        }
    }
}

/// What a child process prints, read as it comes.
final class Printed: @unchecked Sendable {
    // @unchecked: `bytes` is touched only under `lock`.
    private let lock = NSLock()
    private var bytes = Data()

    init(_ handle: FileHandle) {
        handle.readabilityHandler = { [weak self] handle in
            let chunk = handle.availableData
            guard let self else { return }
            if chunk.isEmpty { handle.readabilityHandler = nil }
            self.lock.withLock { self.bytes.append(chunk) }
        }
    }

    var text: String { lock.withLock { String(decoding: bytes, as: UTF8.self) } }

    /// The port of `listening on PORT`, once printed; throws after `deadline` seconds without it.
    func port(deadline: TimeInterval) async throws -> Int {
        let end = Date().addingTimeInterval(deadline)
        while Date() < end {
            if let line = text.split(separator: "\n").first(where: { $0.hasPrefix("listening on ") }),
               let port = Int(line.dropFirst("listening on ".count)) { return port }
            try await Task.sleep(nanoseconds: 50_000_000)
        }
        throw NotStarted(printed: text)
    }

    struct NotStarted: Error, CustomStringConvertible {
        var printed: String
        var description: String { "the service did not print its port in time; it printed: \(printed)" }
    }
}
