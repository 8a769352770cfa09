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
        // A link to the repository root, so the dependency is named TelemetryBuffer whatever the clone is called.
        .package(path: "TelemetryBuffer"),
    ],
    targets: [
        .target(name: "TelemetryBufferLogging", dependencies: [
            .product(name: "Logging", package: "swift-log"),
            .product(name: "TelemetryBuffer", package: "TelemetryBuffer"),
        ]),
        .testTarget(name: "TelemetryBufferLoggingTests", dependencies: ["TelemetryBufferLogging"]),
    ],
    swiftLanguageModes: [.v6]
)
