// swift-tools-version:6.1
import PackageDescription

// The benchmarks live in their own package so the library keeps no dependencies.
let package = Package(
    name: "TelemetryBufferBenchmarks",
    platforms: [.macOS(.v13)],
    dependencies: [
        // Through `Integrations`, a link to the repository's: the core is `Integrations/TelemetryBuffer` here as
        // it is for the swift-metrics backend, so SwiftPM sees one package (named TelemetryBuffer whatever the
        // clone is called).
        .package(path: "Integrations/TelemetryBuffer"),
        .package(path: "Integrations/TelemetryBufferMetrics"),
        .package(url: "https://github.com/ordo-one/package-benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
    ],
    targets: [
        .executableTarget(
            name: "TelemetryBufferBenchmarks",
            dependencies: [
                .product(name: "Benchmark", package: "package-benchmark"),
                .product(name: "TelemetryBuffer", package: "TelemetryBuffer"),
                .product(name: "TelemetryBufferMetrics", package: "TelemetryBufferMetrics"),
                .product(name: "GRDB", package: "GRDB.swift"),
                "Floor",
            ],
            path: "Benchmarks/TelemetryBufferBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "package-benchmark")]
        ),
        // The floor both measure against: the log hand-encoded and copied into a mapped page under a mutex.
        .target(
            name: "Floor",
            dependencies: [.product(name: "TelemetryBuffer", package: "TelemetryBuffer")],
            path: "Floor"
        ),
        // Per-call tails under sustained load, resident memory and threads that add throughout: figures the
        // harness cannot give (p99.9, a process per scenario).
        .executableTarget(
            name: "LoadDriver",
            dependencies: [.product(name: "TelemetryBuffer", package: "TelemetryBuffer"), "Floor"],
            path: "LoadDriver"
        ),
    ]
)
