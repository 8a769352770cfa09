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
        // A link to the repository root, so the dependency is named TelemetryBuffer whatever the clone is called.
        .package(path: "TelemetryBuffer"),
    ],
    targets: [
        .target(name: "TelemetryBufferTracing", dependencies: [
            .product(name: "Tracing", package: "swift-distributed-tracing"),
            .product(name: "TelemetryBuffer", package: "TelemetryBuffer"),
        ]),
        .testTarget(name: "TelemetryBufferTracingTests", dependencies: ["TelemetryBufferTracing"]),
    ],
    swiftLanguageModes: [.v6]
)
