#!/usr/bin/env bash
# Checks that the integrations can be used the way a user adds them, by URL: the core as a repository of
# its own at its version, each integration published from it (Scripts/publish-integration.sh), and a
# throwaway consumer package that depends on all four by `file://` URL resolves, builds and runs a
# `withSpan` with a log and a metric inside, then finds them in its envelopes. CI runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n 's/.*static let version = "\(.*\)".*/\1/p' Sources/TelemetryBuffer/API/TelemetryBuffer.swift)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

git clone -q "$(pwd)" "$work/TelemetryBuffer"
git -C "$work/TelemetryBuffer" tag "$version"
core="file://$work/TelemetryBuffer"
for name in TelemetryBufferLogging TelemetryBufferMetrics TelemetryBufferTracing; do
    Scripts/publish-integration.sh "$name" "$work/$name" "$core" "$version" > /dev/null
done

mkdir -p "$work/Consumer/Sources/Consumer"
cat > "$work/Consumer/Package.swift" <<MANIFEST
// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "Consumer",
    platforms: [.macOS(.v13)],
    dependencies: [
        .package(url: "https://github.com/apple/swift-log", from: "1.16.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
        .package(url: "$core", from: "$version"),
        .package(url: "file://$work/TelemetryBufferLogging", from: "$version"),
        .package(url: "file://$work/TelemetryBufferMetrics", from: "$version"),
        .package(url: "file://$work/TelemetryBufferTracing", from: "$version"),
    ],
    targets: [
        .executableTarget(name: "Consumer", dependencies: [
            .product(name: "Logging", package: "swift-log"),
            .product(name: "Metrics", package: "swift-metrics"),
            .product(name: "Tracing", package: "swift-distributed-tracing"),
            .product(name: "TelemetryBuffer", package: "TelemetryBuffer"),
            .product(name: "TelemetryBufferLogging", package: "TelemetryBufferLogging"),
            .product(name: "TelemetryBufferMetrics", package: "TelemetryBufferMetrics"),
            .product(name: "TelemetryBufferTracing", package: "TelemetryBufferTracing"),
        ]),
    ]
)
MANIFEST
cat > "$work/Consumer/Sources/Consumer/main.swift" <<'SOURCE'
import Foundation
import Logging
import Metrics
import TelemetryBuffer
import TelemetryBufferLogging
import TelemetryBufferMetrics
import TelemetryBufferTracing
import Tracing

// The README's bootstrap lines.
var options = Options(dsn: "https://key@o1.ingest.example.com/1")
options.cacheDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("consumer-\(UUID().uuidString)")
options.upload = false
let buffer = try TelemetryBuffer(options: options)
InstrumentationSystem.bootstrap(TelemetryBufferTracer(buffer: buffer))
MetricsSystem.bootstrap(TelemetryBufferMetricsFactory(buffer: buffer, trace: TelemetryBufferTracer.activeSpan))
LoggingSystem.bootstrap { TelemetryBufferLogHandler(label: $0, buffer: buffer) {
    TelemetryBufferTracer.activeSpan().map { ActiveTrace(traceID: $0.traceID, spanID: $0.spanID) } } }

withSpan("consumer") { _ in
    Logger(label: "consumer").info("inside the span")
    Counter(label: "consumer.runs").increment()
}
buffer.close()
let names = try FileManager.default.contentsOfDirectory(atPath: buffer.envelopesDirectory.path)
var types = Set<String>()
for name in names {
    let text = try String(contentsOf: buffer.envelopesDirectory.appendingPathComponent(name), encoding: .utf8)
    for type in ["log", "span", "trace_metric"] where text.contains("\"type\":\"\(type)\"") { types.insert(type) }
}
try? FileManager.default.removeItem(at: options.cacheDirectory)
print("stored: \(types.sorted().joined(separator: ", "))")
exit(types == ["log", "span", "trace_metric"] ? 0 : 1)
SOURCE
(cd "$work/Consumer" && swift run -q Consumer)
