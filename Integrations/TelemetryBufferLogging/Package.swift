// swift-tools-version:6.0
import PackageDescription

// A package of its own, so that the library keeps no dependencies: swift-log users add this one. Its folder
// is not named swift-log: a root package takes its folder's name as identity, which would clash with swift-log's.
let package = Package(
    name: "TelemetryBufferLogging",
    platforms: [.macOS(.v10_15), .iOS(.v13), .tvOS(.v13), .watchOS(.v6)],
    products: [
        .library(name: "TelemetryBufferLogging", targets: ["TelemetryBufferLogging"]),
    ],
    dependencies: [
        // 1.16: `LogHandler.log(event:)`, with the event's error.
        .package(url: "https://github.com/apple/swift-log", from: "1.16.0"),
        // Links within this repository, which Scripts/publish-integration.sh turns into URLs. The core comes
        // through the link Integrations/TelemetryBuffer: one path for every package here, so SwiftPM sees one.
        .package(path: "../TelemetryBuffer"),
        // The active trace, which the integrations share.
        .package(path: "../TelemetryBufferContext"),
        // Only for the tests, which set a `ServiceContext` as a tracer does (the context package uses it too).
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
    ],
    targets: [
        .target(name: "TelemetryBufferLogging", dependencies: [
            .product(name: "Logging", package: "swift-log"),
            .product(name: "TelemetryBuffer", package: "TelemetryBuffer"),
            .product(name: "TelemetryBufferContext", package: "TelemetryBufferContext"),
        ]),
        .testTarget(name: "TelemetryBufferLoggingTests", dependencies: [
            "TelemetryBufferLogging",
            .product(name: "Instrumentation", package: "swift-distributed-tracing"),
        ]),
    ],
    swiftLanguageModes: [.v6]
)
