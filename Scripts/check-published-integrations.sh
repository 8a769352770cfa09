#!/usr/bin/env bash
# Checks that the integrations can be used the way a user adds them, by URL: the core as a repository of
# its own at its version, each integration published from it (Scripts/publish-integration.sh), and a
# throwaway consumer package that depends on the core and the three integrations by `file://` URL (the
# integrations' shared context package comes with them) resolves, builds and runs a `withSpan` with a log
# and a metric inside, then finds them in its envelopes, carrying the span. CI runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n 's/.*static let version = "\(.*\)".*/\1/p' Sources/TelemetryBuffer/API/TelemetryBuffer.swift)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

git clone -q "$(pwd)" "$work/TelemetryBuffer"
git -C "$work/TelemetryBuffer" tag "$version"
core="file://$work/TelemetryBuffer"
for name in TelemetryBufferContext TelemetryBufferLogging TelemetryBufferMetrics TelemetryBufferTracing; do
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
MetricsSystem.bootstrap(TelemetryBufferMetricsFactory(buffer: buffer))
LoggingSystem.bootstrap { TelemetryBufferLogHandler(label: $0, buffer: buffer) }

withSpan("consumer") { _ in
    Logger(label: "consumer").info("inside the span")
    Counter(label: "consumer.runs").increment()
}
buffer.close()
// Each item's type and span ID, from the envelopes' lines: a header, then an item header and its payload.
var spans: [String: Set<String>] = [:]
for name in try FileManager.default.contentsOfDirectory(atPath: buffer.envelopesDirectory.path) {
    let text = try String(contentsOf: buffer.envelopesDirectory.appendingPathComponent(name), encoding: .utf8)
    let lines = text.split(separator: "\n").dropFirst().map { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    for index in stride(from: 0, to: lines.count - 1, by: 2) {
        guard let type = lines[index]?["type"] as? String, let items = lines[index + 1]?["items"] as? [[String: Any]] else { continue }
        for item in items { spans[type, default: []].insert(item["span_id"] as? String ?? "none") }
    }
}
try? FileManager.default.removeItem(at: options.cacheDirectory)
print("span IDs by item type: \(spans)")
// The log and the metric carry the span they ran in.
exit(spans["span"]?.count == 1 && spans["log"] == spans["span"] && spans["trace_metric"] == spans["span"] ? 0 : 1)
SOURCE
(cd "$work/Consumer" && swift run -q Consumer)
