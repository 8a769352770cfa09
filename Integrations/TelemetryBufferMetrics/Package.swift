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
        // A link to the repository root, so the dependency is named TelemetryBuffer whatever the clone is called.
        .package(path: "TelemetryBuffer"),
    ],
    targets: [
        .target(name: "TelemetryBufferMetrics", dependencies: [
            .product(name: "CoreMetrics", package: "swift-metrics"),
            .product(name: "TelemetryBuffer", package: "TelemetryBuffer"),
        ]),
        .testTarget(name: "TelemetryBufferMetricsTests", dependencies: [
            "TelemetryBufferMetrics",
            .product(name: "Metrics", package: "swift-metrics"),
        ]),
    ],
    swiftLanguageModes: [.v6]
)
