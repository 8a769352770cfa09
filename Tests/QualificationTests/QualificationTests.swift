import CollidingNames
import Foundation
import TelemetryBuffer
import XCTest

/// User code that imports TelemetryBuffer beside a module with the same type names (and the standard
/// library, which has a `Span` of its own) compiles: every public type can be qualified as
/// `TelemetryBuffer.<Name>` although the module and its main class share that name. The check is
/// that this file compiles; the assertions only use what it built.
final class QualificationTests: XCTestCase {
    func testEveryPublicTypeCanBeQualified() throws {
        var options = TelemetryBuffer.Options(dsn: "https://a1b2c3d4e5f60718293a4b5c6d7e8f90@o7.ingest.us.sentry.io/4242")
        options.upload = false
        options.crashDetection = false
        options.cacheDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("tb-qualified-\(UUID())")
        defer { try? FileManager.default.removeItem(at: options.cacheDirectory) }
        let buffer = try TelemetryBuffer(options: options)
        defer { buffer.close() }

        let trace = TelemetryBuffer.TraceID.random()
        let log = TelemetryBuffer.Log(level: .info, body: "qualified", traceID: trace)
        let span = TelemetryBuffer.Span(traceID: trace, spanID: TelemetryBuffer.SpanID.random(), name: "qualified",
                                        isSegment: true, startTimestamp: Date(), endTimestamp: Date())
        XCTAssertTrue(buffer.add(log: log))
        XCTAssertTrue(buffer.add(span: span))
        // The README's templated log, and the message type qualified.
        let ms = 412
        XCTAssertTrue(buffer.add(log: .info("Upload finished in \(ms) ms", traceID: trace)))
        let message: TelemetryBuffer.LogMessage = "qualified \(ms)"
        XCTAssertTrue(buffer.add(log: TelemetryBuffer.Log(level: .debug, message)))

        // The other module's types and the standard library's `Span` stay reachable.
        let theirs: [any CollidingNames.Span] = []
        let bytes = [UInt8](repeating: 1, count: 3)
        let standard: Swift.Span<UInt8> = bytes.span
        XCTAssertEqual(theirs.count + standard.count, 3)
        let transport: (any TelemetryBuffer.Transport)? = nil
        let client: (any TelemetryBuffer.HTTPClient)? = nil
        XCTAssertNil(transport)
        XCTAssertNil(client)
        _ = CollidingNames.Options()
        _ = TelemetryBuffer.Envelope.self
    }
}
