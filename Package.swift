// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "TelemetryBuffer",
    platforms: [.macOS(.v10_15), .iOS(.v13), .tvOS(.v13), .watchOS(.v6)],
    products: [
        .library(name: "TelemetryBuffer", targets: ["TelemetryBuffer"]),
        .executable(name: "telemetry-demo", targets: ["telemetry-demo"]),
    ],
    targets: [
        // Code Swift cannot promise to be async-signal-safe (atomics now, the crash handler next).
        .target(name: "CTelemetrySignals"),
        .target(name: "TelemetryBuffer", dependencies: ["CTelemetrySignals"]),
        .executableTarget(name: "telemetry-demo", dependencies: ["TelemetryBuffer"]),
        // The tests run the demo as a child process, so it must be built with them.
        .testTarget(name: "TelemetryBufferTests", dependencies: ["TelemetryBuffer", "telemetry-demo"]),
    ],
    swiftLanguageModes: [.v6]
)
