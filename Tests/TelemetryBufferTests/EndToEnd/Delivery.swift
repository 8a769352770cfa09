import Foundation
import XCTest
@testable import TelemetryBuffer

extension XCTestCase {
    /// Checks what a `stress` or `crash` child acknowledged against the envelopes a recovery left: every
    /// acknowledged item delivered (when `crashSafe`) and, unless `atLeastOnce`, none twice; nothing dropped
    /// or never added delivered; no staged file left behind.
    func assertDelivered(_ stress: Demo.Run, in folder: TemporaryDirectory, spans: Bool, metrics: Bool = false, crashSafe: Bool,
                         atLeastOnce: Bool = false, threads: Int = 1, _ label: String,
                         file: StaticString = #filePath, line: UInt = #line) throws {
        // Every seq is printed once, in its thread's order: `ack <seq>`, or `drop <seq> <kinds dropped>`
        // (thread t adds t, t+threads, t+2×threads…).
        let lines = stress.lines.map { $0.split(separator: " ").map(String.init) }
        let seqs = lines.compactMap { $0.count >= 2 ? Int($0[1]) : nil }
        var attempted = Set(seqs)
        for thread in 0..<threads {
            let own = seqs.filter { $0 % threads == thread }
            let expected = Array(stride(from: thread, to: thread + own.count * threads, by: threads))
            XCTAssertTrue(own == expected, "\(label): seqs printed out of order", file: file, line: line)
            // The item after a thread's last one printed may be held, killed before its line was printed.
            attempted.insert(thread + own.count * threads)
        }
        for (kind, names) in try deliveredNames(in: folder, spans: spans, metrics: metrics) {
            let dropped = Set(lines.filter { $0.first == "drop" && $0.contains(kind) }.map { Int($0[1])! })
            let acked = Set(seqs).subtracting(dropped)
            let delivered = names.compactMap { Int($0.dropFirst(5)) }
            XCTAssertEqual(delivered.count, names.count, "\(label): malformed \(kind) names", file: file, line: line)
            if !atLeastOnce {
                XCTAssertEqual(delivered.count, Set(delivered).count, "\(label): a \(kind) was delivered twice", file: file, line: line)
            }
            XCTAssertTrue(delivered.allSatisfy { attempted.contains($0) }, "\(label): a \(kind) never added", file: file, line: line)
            XCTAssertTrue(dropped.isDisjoint(with: delivered), "\(label): a dropped \(kind) was delivered", file: file, line: line)
            if crashSafe {
                let missing = acked.subtracting(delivered)
                XCTAssertTrue(missing.isEmpty, "\(label): \(missing.count) acknowledged \(kind)s lost, e.g. \(missing.sorted().prefix(5))",
                              file: file, line: line)
            }
        }
        try assertNoStagedFiles(in: folder, label, file: file, line: line)
    }

    /// Checks a `stress` or `crash` child that called `removeAllData()` at item `removeAt` (and printed
    /// `removed` once it returned) against what a recovery left: nothing delivered twice and nothing never
    /// added, whenever the child died; once `removed` was printed, nothing added before it, and (when
    /// `crashSafe`) every item acknowledged after it.
    func assertRemovalHeld(_ run: Demo.Run, in folder: TemporaryDirectory, removeAt: Int, spans: Bool, crashSafe: Bool,
                           _ label: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let lines = run.lines.map { $0.split(separator: " ").map(String.init) }
        let removed = lines.contains(["removed"])
        let attempted = lines.filter { $0.first == "ack" || $0.first == "drop" }.count + 1
        let acked = Set(lines.filter { $0.first == "ack" }.map { Int($0[1])! })
        for (kind, names) in try deliveredNames(in: folder, spans: spans) {
            let delivered = names.compactMap { Int($0.dropFirst(5)) }
            XCTAssertEqual(delivered.count, Set(delivered).count, "\(label): a \(kind) was delivered twice", file: file, line: line)
            XCTAssertTrue(delivered.allSatisfy { $0 < attempted }, "\(label): a \(kind) never added", file: file, line: line)
            guard removed else { continue }
            XCTAssertTrue(delivered.allSatisfy { $0 >= removeAt }, "\(label): a removed \(kind) came back", file: file, line: line)
            if crashSafe {
                let missing = acked.filter { $0 >= removeAt }.subtracting(delivered)
                XCTAssertTrue(missing.isEmpty, "\(label): \(missing.count) \(kind)s acknowledged after the removal lost",
                              file: file, line: line)
            }
        }
    }

    /// For a DoubleRotatingBuffer with lists in memory killed by SIGKILL: what it lost is what its IO
    /// caches had not copied yet, the last items each thread added. So on each thread, once an acknowledged
    /// item is missing, every later one is too (an older list lost while a newer one arrived fails this).
    /// Returns how many acknowledged items were lost, of each kind.
    @discardableResult
    func assertLossesAreTails(_ run: Demo.Run, in folder: TemporaryDirectory, spans: Bool, metrics: Bool = false, threads: Int = 1,
                              _ label: String,
                              file: StaticString = #filePath, line: UInt = #line) throws -> [String: Int] {
        let lines = run.lines.map { $0.split(separator: " ").map(String.init) }
        var lost: [String: Int] = [:]
        for (kind, acked, delivered) in try acknowledgedAndDelivered(run, in: folder, spans: spans, metrics: metrics) {
            for thread in 0..<threads {
                // Acknowledged, and the item after the thread's last line (held, killed before its line).
                var own = acked.filter { $0 % threads == thread }
                let printed = lines.compactMap { $0.count >= 2 ? Int($0[1]) : nil }.filter { $0 % threads == thread }
                own.append(thread + printed.count * threads)
                guard let first = own.firstIndex(where: { !delivered.contains($0) }) else { continue }
                let tail = own[first...]
                let kept = tail.filter(delivered.contains)
                XCTAssertEqual(kept, [], "\(label): \(kind)s delivered after \(own[first]), lost, on thread \(thread)", file: file, line: line)
                lost[kind, default: 0] += tail.count - kept.count - 1
            }
        }
        return lost
    }

    /// For a run whose envelopes were bounded to a few (`--max-envelopes`), all of one rank (the demo's logs
    /// are `info`, as spans and metrics rank): what eviction took is each kind's oldest envelopes, so once an
    /// acknowledged item is delivered, every later acknowledged one is (an evicted envelope's items brought
    /// back by a recovery, or a newer envelope evicted before an older one, fails this). Single thread.
    /// Returns how many acknowledged items were delivered, of each kind.
    @discardableResult
    func assertLossesAreHeads(_ run: Demo.Run, in folder: TemporaryDirectory, spans: Bool, metrics: Bool = false, _ label: String,
                              file: StaticString = #filePath, line: UInt = #line) throws -> [String: Int] {
        var kept: [String: Int] = [:]
        for (kind, acked, delivered) in try acknowledgedAndDelivered(run, in: folder, spans: spans, metrics: metrics) {
            if let first = acked.firstIndex(where: delivered.contains) {
                let missing = acked[first...].filter { !delivered.contains($0) }
                XCTAssertEqual(missing, [], "\(label): \(kind)s lost after \(acked[first]) was kept", file: file, line: line)
            }
            kept[kind] = acked.filter(delivered.contains).count
        }
        return kept
    }

    /// For each kind: the items acknowledged for it, in order (an `ack`, or a `drop` of other kinds only),
    /// and the items delivered.
    private func acknowledgedAndDelivered(_ run: Demo.Run, in folder: TemporaryDirectory, spans: Bool, metrics: Bool)
        throws -> [(kind: String, acked: [Int], delivered: Set<Int>)] {
        let lines = run.lines.map { $0.split(separator: " ").map(String.init) }
        return try deliveredNames(in: folder, spans: spans, metrics: metrics).map { kind, names in
            let acked = lines.filter { $0.first == "ack" || ($0.first == "drop" && !$0.contains(kind)) }.compactMap { Int($0[1]) }
            return (kind, acked, Set(names.compactMap { Int($0.dropFirst(5)) }))
        }
    }

    /// The names of the logs (their bodies), with `spans` of the spans, and with `metrics` of the metrics
    /// (`item <seq>`, from their attribute `seq`) in the envelopes a recovery left.
    private func deliveredNames(in folder: TemporaryDirectory, spans: Bool, metrics: Bool = false) throws -> [(kind: String, names: [String])] {
        let envelopes = folder.envelopesFolder(demoDefaultDSN)
        var kinds = [("log", try logBodies(in: envelopes))]
        if spans {
            kinds.append(("span", try walkEnvelopes(in: envelopes).flatMap { $0.items.filter { $0.type == "span" }.flatMap(\.elements) }
                .compactMap { $0["name"] as? String }))
        }
        if metrics {
            kinds.append(("metric", try walkEnvelopes(in: envelopes).flatMap { $0.items.filter { $0.type == "trace_metric" }.flatMap(\.elements) }
                .compactMap { (($0["attributes"] as? [String: [String: Any]])?["seq"]?["value"] as? Int).map { "item \($0)" } }))
        }
        return kinds
    }

    private func assertNoStagedFiles(in folder: TemporaryDirectory, _ label: String, file: StaticString, line: UInt) throws {
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: folder.bufferFolder(demoDefaultDSN).path)
        XCTAssertFalse(leftovers.contains { $0.hasPrefix("envelope-") || $0.hasPrefix("recovered") || $0 == "flushing" },
                       "\(label): staged files left after a clean recovery: \(leftovers)", file: file, line: line)
    }
}
