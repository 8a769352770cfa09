// swift-tools-version:6.0
import PackageDescription

// An example of its own (it builds SwiftNIO and Hummingbird): a traced HTTP service whose logs, metrics and
// spans go to a TelemetryBuffer through the three integrations.
let package = Package(
    name: "TracedService",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
        // Through `Integrations`, a link to the repository's: the core is `Integrations/TelemetryBuffer` here as
        // it is for each integration, so SwiftPM sees one package.
        .package(path: "Integrations/TelemetryBuffer"),
        .package(path: "Integrations/TelemetryBufferLogging"),
        .package(path: "Integrations/TelemetryBufferMetrics"),
        .package(path: "Integrations/TelemetryBufferTracing"),
    ],
    targets: [
        .executableTarget(name: "TracedService", dependencies: [
            .product(name: "Hummingbird", package: "hummingbird"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "Metrics", package: "swift-metrics"),
            .product(name: "Tracing", package: "swift-distributed-tracing"),
            .product(name: "TelemetryBuffer", package: "TelemetryBuffer"),
            .product(name: "TelemetryBufferLogging", package: "TelemetryBufferLogging"),
            .product(name: "TelemetryBufferMetrics", package: "TelemetryBufferMetrics"),
            .product(name: "TelemetryBufferTracing", package: "TelemetryBufferTracing"),
        ]),
        .testTarget(name: "TracedServiceTests", dependencies: [
            .target(name: "TracedService"),
            .product(name: "TelemetryBuffer", package: "TelemetryBuffer"),
        ]),
    ],
    swiftLanguageModes: [.v6]
)
