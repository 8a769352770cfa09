import Foundation
import Hummingbird
import Logging
import Metrics
import TelemetryBuffer
import TelemetryBufferLogging
import TelemetryBufferMetrics
import TelemetryBufferTracing
import Tracing
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A traced HTTP service: `GET /checkout` logs, counts, and calls `GET /inventory` of the same service over
/// HTTP in a client span, with the trace's headers injected; Hummingbird's `TracingMiddleware` makes each
/// request's server span with our tracer, which continues an incoming trace. Everything goes to one buffer.
///
///     TracedService --dir FOLDER [--port N]
///
/// It prints `listening on PORT` once it takes requests, and ends (closing the buffer) on SIGTERM or SIGINT.
@main
struct TracedService {
    static func main() async throws {
        let arguments = CommandLine.arguments
        func value(_ flag: String) -> String? { arguments.firstIndex(of: flag).map { arguments[$0 + 1] } }
        guard let folder = value("--dir") else {
            FileHandle.standardError.write(Data("usage: TracedService --dir FOLDER [--port N]\n".utf8))
            exit(2)
        }
        var options = Options(dsn: "https://caller0public0key@o1.ingest.example.com/1")
        options.cacheDirectory = URL(fileURLWithPath: folder)
        options.upload = false
        options.release = "traced-service@1"
        let buffer = try TelemetryBuffer(options: options)
        InstrumentationSystem.bootstrap(TelemetryBufferTracer(buffer: buffer))
        MetricsSystem.bootstrap(TelemetryBufferMetricsFactory(buffer: buffer))
        LoggingSystem.bootstrap { label in TelemetryBufferLogHandler(label: label, buffer: buffer) }

        let port = Locked(0)
        let router = Router()
        router.add(middleware: TracingMiddleware())
        router.get("checkout") { _, _ -> String in
            let logger = Logger(label: "checkout")
            logger.info("checkout started")
            Counter(label: "checkout.requests").increment()
            let stock = try await inventory(port: port.value)
            logger.info("checkout done", metadata: ["stock": "\(stock)"])
            return "ok \(stock)"
        }
        router.get("inventory") { _, _ -> String in
            Logger(label: "inventory").info("inventory checked")
            return "3"
        }
        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: Int(value("--port") ?? "0") ?? 0)),
                              onServerRunning: { channel in
            port.value = channel.localAddress?.port ?? 0
            FileHandle.standardOutput.write(Data("listening on \(port.value)\n".utf8))
        })
        try await app.runService()
        await buffer.close()
    }

    /// `GET /inventory` of this service, in a client span whose trace headers go with the request.
    static func inventory(port: Int) async throws -> String {
        try await withSpan("GET /inventory", ofKind: .client) { span in
            var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)/inventory")!)
            var headers: [String: String] = [:]
            InstrumentationSystem.instrument.inject(span.context, into: &headers, using: DictionaryInjector())
            for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
            let (data, _) = try await URLSession.shared.data(for: request)
            return String(decoding: data, as: UTF8.self)
        }
    }
}

/// Request headers as a dictionary.
struct DictionaryInjector: Injector {
    func inject(_ value: String, forKey key: String, into carrier: inout [String: String]) { carrier[key] = value }
}

/// A value shared by the server's callback and its handlers.
final class Locked<Value: Sendable>: @unchecked Sendable {
    // @unchecked: `stored` is touched only under `lock`.
    private let lock = NSLock()
    private var stored: Value
    init(_ value: Value) { stored = value }
    var value: Value {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}
