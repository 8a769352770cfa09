// swift-tools-version:6.0
import PackageDescription

// A package of its own, so that the library keeps no dependencies: swift-distributed-tracing users add
// this one. Its folder is not named swift-distributed-tracing: a root package takes its folder's name as identity.
let package = Package(
    name: "TelemetryBufferTracing",
    platforms: [.macOS(.v10_15), .iOS(.v13), .tvOS(.v13), .watchOS(.v6)],
    products: [
        .library(name: "TelemetryBufferTracing", targets: ["TelemetryBufferTracing"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
        // Links within this repository, which Scripts/publish-integration.sh turns into URLs. The core comes
        // through the link Integrations/TelemetryBuffer: one path for every package here, so SwiftPM sees one.
        .package(path: "../TelemetryBuffer"),
        // The active trace, which the integrations share.
        .package(path: "../TelemetryBufferContext"),
    ],
    targets: [
        .target(name: "TelemetryBufferTracing", dependencies: [
            .product(name: "Tracing", package: "swift-distributed-tracing"),
            .product(name: "TelemetryBuffer", package: "TelemetryBuffer"),
            .product(name: "TelemetryBufferContext", package: "TelemetryBufferContext"),
        ]),
        .testTarget(name: "TelemetryBufferTracingTests", dependencies: [
            "TelemetryBufferTracing",
            .product(name: "TelemetryBufferContext", package: "TelemetryBufferContext"),
        ]),
    ],
    swiftLanguageModes: [.v6]
)
