// swift-tools-version:6.0
import PackageDescription

// What the integrations share: the trace a task's work belongs to, which the tracer keeps in the task's
// `ServiceContext` and the swift-log and swift-metrics integrations read; and how deep a thread is in
// sending items, which bounds a hook that makes items of its own. A package of its own, on
// swift-distributed-tracing's `Instrumentation` alone (where `ServiceContext` lives since 1.7), so that
// logging or metrics do not bring in the tracer.
let package = Package(
    name: "TelemetryBufferContext",
    platforms: [.macOS(.v10_15), .iOS(.v13), .tvOS(.v13), .watchOS(.v6)],
    products: [
        .library(name: "TelemetryBufferContext", targets: ["TelemetryBufferContext"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
        // Links within this repository, which Scripts/publish-integration.sh turns into URLs. The core comes
        // through the link Integrations/TelemetryBuffer: one path for every package here, so SwiftPM sees one.
        .package(path: "../TelemetryBuffer"),
    ],
    targets: [
        .target(name: "TelemetryBufferContext", dependencies: [
            .product(name: "Instrumentation", package: "swift-distributed-tracing"),
            .product(name: "TelemetryBuffer", package: "TelemetryBuffer"),
        ]),
        .testTarget(name: "TelemetryBufferContextTests", dependencies: ["TelemetryBufferContext"]),
    ],
    swiftLanguageModes: [.v6]
)
