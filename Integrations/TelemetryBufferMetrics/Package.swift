// swift-tools-version:6.0
import PackageDescription

// A package of its own, so that the library keeps no dependencies: swift-metrics users add this one. Its
// folder is not named swift-metrics: a root package takes its folder's name as identity.
let package = Package(
    name: "TelemetryBufferMetrics",
    platforms: [.macOS(.v10_15), .iOS(.v13), .tvOS(.v13), .watchOS(.v6)],
    products: [
        .library(name: "TelemetryBufferMetrics", targets: ["TelemetryBufferMetrics"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        // Links within this repository, which Scripts/publish-integration.sh turns into URLs. The core comes
        // through the link Integrations/TelemetryBuffer: one path for every package here, so SwiftPM sees one.
        .package(path: "../TelemetryBuffer"),
        // The active trace, which the integrations share.
        .package(path: "../TelemetryBufferContext"),
        // Only for the tests, which set a `ServiceContext` as a tracer does (the context package uses it too).
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
    ],
    targets: [
        .target(name: "TelemetryBufferMetrics", dependencies: [
            .product(name: "CoreMetrics", package: "swift-metrics"),
            .product(name: "TelemetryBuffer", package: "TelemetryBuffer"),
            .product(name: "TelemetryBufferContext", package: "TelemetryBufferContext"),
        ]),
        .testTarget(name: "TelemetryBufferMetricsTests", dependencies: [
            "TelemetryBufferMetrics",
            .product(name: "Metrics", package: "swift-metrics"),
            .product(name: "Instrumentation", package: "swift-distributed-tracing"),
        ]),
    ],
    swiftLanguageModes: [.v6]
)
