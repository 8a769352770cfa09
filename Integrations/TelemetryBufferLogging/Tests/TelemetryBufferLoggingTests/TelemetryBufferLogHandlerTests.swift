import Foundation
import Instrumentation
import Logging
import TelemetryBuffer
import TelemetryBufferLogging
import XCTest

/// The handler against a real buffer in a temporary folder; what it stored is read back from the envelope
/// files, each walked by its framing (header line, item header with `length`, payload).
final class TelemetryBufferLogHandlerTests: XCTestCase {
    private var folder: URL!
    private var buffer: TelemetryBuffer!

    override func setUpWithError() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("tb-logging-\(UUID().uuidString)")
        var options = Options(dsn: "https://key@o1.ingest.example.com/1")
        options.cacheDirectory = folder
        options.upload = false
        buffer = try TelemetryBuffer(options: options)
    }

    override func tearDown() {
        buffer.close()
        try? FileManager.default.removeItem(at: folder)
    }

    private func logger(_ configure: (inout TelemetryBufferLogHandler) -> Void = { _ in }) -> Logger {
        Logger(label: "checkout") { label in
            var handler = TelemetryBufferLogHandler(label: label, buffer: buffer, metadataProvider: nil)
            handler.logLevel = .trace
            configure(&handler)
            return handler
        }
    }

    /// Every log stored so far, as JSON objects, oldest first.
    private func storedLogs() throws -> [[String: Any]] {
        buffer.flush()
        let names = try FileManager.default.contentsOfDirectory(atPath: buffer.envelopesDirectory.path)
            .filter { $0.hasSuffix(".envelope") }.sorted()
        return try names.flatMap { name -> [[String: Any]] in
            let bytes = try Data(contentsOf: buffer.envelopesDirectory.appendingPathComponent(name))
            var offset = try XCTUnwrap(bytes.firstIndex(of: 0x0A)) + 1
            var logs: [[String: Any]] = []
            while offset < bytes.count {
                let headerEnd = try XCTUnwrap(bytes[offset...].firstIndex(of: 0x0A))
                let header = try XCTUnwrap(JSONSerialization.jsonObject(with: bytes[offset..<headerEnd]) as? [String: Any])
                let length = try XCTUnwrap(header["length"] as? Int)
                let payload = bytes[(headerEnd + 1)..<(headerEnd + 1 + length)]
                let items = try XCTUnwrap(JSONSerialization.jsonObject(with: payload) as? [String: Any])["items"] as? [[String: Any]]
                if header["type"] as? String == "log" { logs += items ?? [] }
                offset = headerEnd + 1 + length + 1
            }
            return logs
        }
    }

    private func attributes(_ log: [String: Any]) -> [String: [String: Any]] {
        log["attributes"] as? [String: [String: Any]] ?? [:]
    }

    func testEveryLevelIsMapped() throws {
        let logger = logger()
        for level in Logger.Level.allCases { logger.log(level: level, "at \(level)") }
        let logs = try storedLogs()
        XCTAssertEqual(logs.map { $0["body"] as? String }, Logger.Level.allCases.map { "at \($0)" })
        XCTAssertEqual(logs.map { $0["level"] as? String }, ["trace", "debug", "info", "info", "warn", "error", "fatal"])
    }

    /// A log made while the handler sends one on the same thread (from `beforeSendLog`, a metadata provider
    /// or the `trace` closure) is sent, but one made while sending that is not: a hook that logs what it
    /// saw logged its own message, and that one's, without end (a stack overflow, 300 deep when a test
    /// stopped it). Each dropped is counted: the provider's and the hook's logs while sending each of the two
    /// sent from within.
    func testALogMadeWhileSendingOneIsSentButNoDeeper() throws {
        buffer.close()
        final class Hooked: @unchecked Sendable {  // @unchecked: its one field is guarded by the lock
            private let lock = NSLock()
            private var stored: Logger?
            var logger: Logger? {
                get { lock.withLock { stored } }
                set { lock.withLock { stored = newValue } }
            }
        }
        let hooked = Hooked()
        var options = Options(dsn: "https://key@o1.ingest.example.com/1")
        options.cacheDirectory = folder
        options.upload = false
        options.beforeSendLog = { log in
            hooked.logger?.info("saw \(log.body)")
            return log
        }
        buffer = try TelemetryBuffer(options: options)
        let logger = logger { $0.metadataProvider = Logger.MetadataProvider { [hooked] in
            hooked.logger?.debug("provided")
            return [:]
        } }
        hooked.logger = logger
        logger.info("outer")
        XCTAssertEqual(try storedLogs().compactMap { $0["body"] as? String }.sorted(), ["outer", "provided", "saw outer"])
        XCTAssertEqual(buffer.stats().drops["internal_sdk_error/log_item"], 4)
    }

    func testBelowTheHandlersLevelNothingIsSent() throws {
        let logger = logger { $0.logLevel = .warning }
        logger.info("quiet")
        logger.warning("loud")
        XCTAssertEqual(try storedLogs().map { $0["body"] as? String }, ["loud"])
    }

    func testMetadataOfEveryKindBecomesTypedAttributes() throws {
        var logger = logger {
            $0.metadata = ["handler": "h", "shared": "from handler"]
            $0.metadataProvider = Logger.MetadataProvider { ["provided": "p", "shared": "from provider"] }
        }
        logger[metadataKey: "logger"] = "l"
        logger.info("with metadata", metadata: [
            "text": "value", "count": .stringConvertible(3), "ratio": .stringConvertible(0.5),
            "small": .stringConvertible(UInt8(7)), "huge": .stringConvertible(UInt64.max), "single": .stringConvertible(Float(0.25)),
            "flag": .stringConvertible(true), "date": .stringConvertible(URL(fileURLWithPath: "/x")),
            "http": ["status": .stringConvertible(200), "route": "/checkout", "request": ["id": "r1"]],
            "tags": ["a", "b"], "mixed": ["a", .stringConvertible(1)], "shared": "from the call",
        ])
        let attributes = attributes(try XCTUnwrap(storedLogs().first))
        func value(_ key: String) -> String? {
            guard let attribute = attributes[key] else { return nil }
            return "\(attribute["type"] ?? "?"):\(attribute["value"] ?? "?")"
        }
        XCTAssertEqual(value("text"), "string:value")
        XCTAssertEqual(value("count"), "integer:3")
        XCTAssertEqual(value("ratio"), "double:0.5")
        XCTAssertEqual(value("small"), "integer:7")
        XCTAssertEqual(value("huge"), "string:18446744073709551615", "beyond Int64: its text")
        XCTAssertEqual(value("single"), "double:0.25")
        XCTAssertEqual(value("flag"), "boolean:1")
        XCTAssertEqual(value("date"), "string:file:///x")
        XCTAssertEqual(value("http.status"), "integer:200")
        XCTAssertEqual(value("http.route"), "string:/checkout")
        XCTAssertEqual(value("http.request.id"), "string:r1")
        XCTAssertEqual(attributes["tags"]?["value"] as? [String], ["a", "b"])
        XCTAssertEqual(attributes["mixed"]?["value"] as? [String], ["a", "1"])
        XCTAssertEqual(value("handler"), "string:h")
        XCTAssertEqual(value("logger"), "string:l")
        XCTAssertEqual(value("provided"), "string:p")
        XCTAssertEqual(value("shared"), "string:from the call", "the call's metadata wins, then the provider's")
    }

    /// Later metadata replaces a key whole, nested values and all, as swift-log merges metadata: a call's
    /// `http` string does not leave the handler's `http.status` beside it.
    func testALaterKeyReplacesAnEarlierOneWithItsNestedValues() throws {
        let logger = logger {
            $0.metadata = ["http": ["status": .stringConvertible(200)], "kept": ["a": "1"]]
            $0.metadataProvider = Logger.MetadataProvider { ["user": ["id": "u1"], "both": ["x": "1"]] }
        }
        logger.info("merged", metadata: ["http": "GET", "user": "anonymous", "both": ["y": "2"]])
        let attributes = attributes(try XCTUnwrap(storedLogs().first))
        XCTAssertEqual(attributes["http"]?["value"] as? String, "GET")
        XCTAssertNil(attributes["http.status"], "the handler's http went with its key")
        XCTAssertEqual(attributes["user"]?["value"] as? String, "anonymous")
        XCTAssertNil(attributes["user.id"], "the provider's user went with its key")
        XCTAssertEqual(attributes["both.y"]?["value"] as? String, "2")
        XCTAssertNil(attributes["both.x"])
        XCTAssertEqual(attributes["kept.a"]?["value"] as? String, "1")

        // A flattened key that collides with a literal one of an earlier source: the later source wins,
        // whether or not another key overlaps.
        for extra in [[:], ["kept": "replaced"]] as [Logger.Metadata] {
            let colliding = self.logger { $0.metadata = ["a.b": "handler", "kept": "h"] }
            colliding.info("collides \(extra.count)", metadata: ["a": ["b": "call"]].merging(extra) { $1 })
            let logged = try XCTUnwrap(storedLogs().first { $0["body"] as? String == "collides \(extra.count)" })
            XCTAssertEqual(self.attributes(logged)["a.b"]?["value"] as? String, "call", "\(extra)")
        }
    }

    /// Arrays keep a type where all their values share one (integers, numbers, booleans); a dictionary in an
    /// array is written the same way every time (keys in order), so equal metadata groups in Sentry.
    func testArraysKeepTheirTypeAndDictionariesInThemAreStable() throws {
        let logger = logger()
        let nested: Logger.Metadata.Value = .array([.dictionary(["b": "2", "a": "1", "c": ["z": "9", "y": "8"]])])
        logger.info("arrays", metadata: [
            "ints": [.stringConvertible(1), .stringConvertible(2)], "doubles": [.stringConvertible(0.5), .stringConvertible(1.5)],
            "flags": [.stringConvertible(true), .stringConvertible(false)], "nested": nested,
            "numbers": [.stringConvertible(1), .stringConvertible(2.5)],
        ])
        let attributes = attributes(try XCTUnwrap(storedLogs().first))
        XCTAssertNil(attributes["ints"]?["value"] as? [String], "numbers, not texts")
        XCTAssertEqual(attributes["ints"]?["value"] as? [Int], [1, 2])
        XCTAssertNil(attributes["doubles"]?["value"] as? [String])
        XCTAssertEqual(attributes["doubles"]?["value"] as? [Double], [0.5, 1.5])
        XCTAssertNil(attributes["flags"]?["value"] as? [String])
        XCTAssertEqual(attributes["flags"]?["value"] as? [Bool], [true, false])
        XCTAssertEqual(attributes["nested"]?["value"] as? [String], [#"[a: 1, b: 2, c: [y: 8, z: 9]]"#])
        XCTAssertEqual(attributes["numbers"]?["value"] as? [Double], [1, 2.5], "integers among numbers: numbers")
    }

    /// `notice` is an `info` log with the severity number above `info`'s (10), so the two stay apart.
    func testANoticeIsAnInfoOfHigherSeverity() throws {
        let logger = logger()
        logger.info("info")
        logger.notice("notice")
        XCTAssertEqual(try storedLogs().map { "\($0["level"] ?? "?") \($0["severity_number"] ?? "?")" }, ["info 9", "info 10"])
    }

    func testTheCallSiteOriginLabelAndErrorAreAttributes() throws {
        struct PaymentDeclined: Error, CustomStringConvertible { var description: String { "card declined" } }
        let logger = logger()
        let line = #line + 1
        logger.error("failed", error: PaymentDeclined())
        let attributes = attributes(try XCTUnwrap(storedLogs().first))
        XCTAssertEqual(attributes["exception.message"]?["value"] as? String, "card declined")
        XCTAssertEqual((attributes["exception.type"]?["value"] as? String)?.hasSuffix("PaymentDeclined"), true)
        XCTAssertEqual(attributes["code.file.path"]?["value"] as? String, #fileID, "swift-log passes the file ID")
        XCTAssertEqual(attributes["code.function.name"]?["value"] as? String, #function)
        XCTAssertEqual(attributes["code.line.number"]?["value"] as? Int, line)
        XCTAssertEqual(attributes["code.namespace"]?["value"] as? String, "TelemetryBufferLoggingTests")
        XCTAssertEqual(attributes["logger.name"]?["value"] as? String, "checkout")
        XCTAssertEqual(attributes["sentry.origin"]?["value"] as? String, "auto.log.swift-log")
    }

    /// A message's trace: the task's `ActiveTrace` (set by hand, or by a tracer's span inside it: the
    /// innermost), else the provider's, else the process's.
    func testTheActiveTraceComesFromTheTaskThenTheProviderThenTheProcess() async throws {
        let provided = ActiveTrace(traceID: TraceID(high: 7, low: 7))
        let logger = logger { $0.trace = { provided } }
        let active = ActiveTrace(traceID: TraceID(high: 0xA, low: 0xB), spanID: SpanID(0xC))
        let span = ActiveTrace(traceID: TraceID(high: 0xD, low: 0xE), spanID: SpanID(0xF))
        await ActiveTrace.withValue(active) {
            await Task { logger.info("in a child task") }.value
            // As a tracer's span started inside makes its context.
            var context = ServiceContext.current ?? .topLevel
            context.activeTrace = span
            ServiceContext.withValue(context) { logger.info("in a span") }
        }
        logger.info("outside")
        let plain = self.logger()
        plain.info("no trace")
        let logs = try storedLogs()
        XCTAssertEqual(logs[0]["trace_id"] as? String, "000000000000000a000000000000000b")
        XCTAssertEqual(logs[0]["span_id"] as? String, "000000000000000c")
        XCTAssertEqual(logs[1]["trace_id"] as? String, "000000000000000d000000000000000e")
        XCTAssertEqual(logs[1]["span_id"] as? String, "000000000000000f")
        XCTAssertEqual(logs[2]["trace_id"] as? String, "00000000000000070000000000000007")
        XCTAssertNil(logs[2]["span_id"])
        XCTAssertEqual(logs[3]["trace_id"] as? String, TraceID.process.description)
    }

    /// Every attribute key the handler writes (with the library's) is one Sentry's conventions registry
    /// knows, of its type, not deprecated; checked by the core's `Tests/Conformance/check_conventions.py`.
    /// Skips without `sentry-conventions` (pip install sentry-conventions==0.29.0), unless
    /// `TB_REQUIRE_PARSER=1`, as in CI.
    func testEveryAttributeKeyTheHandlerWritesIsInSentrysRegistry() throws {
        struct Failure: Error, CustomStringConvertible { var description: String }
        logger().error("checkout failed", error: Failure(description: "declined"), metadata: ["cart": "3"])
        buffer.flush()
        // This file is Integrations/TelemetryBufferLogging/Tests/TelemetryBufferLoggingTests/<name>.swift.
        var root = URL(fileURLWithPath: #filePath)
        for _ in 0..<5 { root.deleteLastPathComponent() }
        let script = root.appendingPathComponent("Tests/Conformance/check_conventions.py")
        // Published on its own (Scripts/publish-integration.sh), the integration has no core beside it.
        guard FileManager.default.fileExists(atPath: script.path) else { throw XCTSkip("the conventions check is the core repository's") }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script.path,
                             "--ignore", "cart", buffer.envelopesDirectory.path]
        let output = Pipe(), errors = Pipe()
        (process.standardOutput, process.standardError) = (output, errors)
        try process.run()
        let printed = output.fileHandleForReading.readDataToEndOfFile()
        let complaint = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        if process.terminationStatus == 3 || process.terminationStatus == 127 {
            let missing = "needs sentry-conventions==0.29.0: \(complaint)"
            if ProcessInfo.processInfo.environment["TB_REQUIRE_PARSER"] == "1" { return XCTFail(missing) }
            throw XCTSkip(missing)
        }
        XCTAssertEqual(process.terminationStatus, 0, complaint)
        let result = try XCTUnwrap(JSONSerialization.jsonObject(with: printed) as? [String: Any])
        let seen = try XCTUnwrap(result["seen"] as? [String: String])
        for key in ["code.file.path", "code.function.name", "code.line.number", "logger.name", "sentry.origin", "exception.type"] {
            XCTAssertNotNil(seen[key], "\(key) was written: \(seen.keys.sorted())")
        }
        XCTAssertEqual(result["problems"] as? [String], [], "seen: \(seen)")
    }
}
