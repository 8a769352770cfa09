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
        // What Swift cannot do: promise async-signal-safety (the crash handler, the atomics it reads),
        // reach the CPU's CRC-32C and vector instructions (checksums, the scan of JSON strings), and load
        // the system's zlib at run time (gzip of uploads; `dlopen` is in libdl before glibc 2.34).
        // Its test hook (the crash handler's pause) exists in debug builds only, as the failpoints below.
        .target(name: "CTelemetrySignals",
                cSettings: [.define("TELEMETRY_BUFFER_FAILPOINTS", .when(configuration: .debug))],
                linkerSettings: [.linkedLibrary("dl", .when(platforms: [.linux]))]),
        // Its privacy manifest (Apple's required-reason APIs, the data it collects) is a resource. Failpoints
        // (test hooks that kill, crash or stall the process at a named step) exist in debug builds only: a
        // release build of the library reads no such variable from the environment.
        .target(name: "TelemetryBuffer", dependencies: ["CTelemetrySignals"],
                resources: [.copy("Resources/PrivacyInfo.xcprivacy")],
                swiftSettings: [.define("TELEMETRY_BUFFER_FAILPOINTS", .when(configuration: .debug))]),
        // The demo, for macOS and Linux (it runs child processes and forks); its C target holds `fork()`,
        // which Swift's Darwin overlay marks unavailable and watchOS and tvOS prohibit.
        .target(name: "CTelemetryDemo"),
        .executableTarget(name: "telemetry-demo", dependencies: ["TelemetryBuffer", "CTelemetryDemo"]),
        // The tests run the demo as a child process, so it must be built with them.
        .testTarget(name: "TelemetryBufferTests", dependencies: ["TelemetryBuffer", "telemetry-demo"]),
        // User code that imports TelemetryBuffer beside a module with the same type names.
        .target(name: "CollidingNames", path: "Tests/CollidingNames"),
        .testTarget(name: "QualificationTests", dependencies: ["TelemetryBuffer", "CollidingNames"]),
    ],
    swiftLanguageModes: [.v6]
)
