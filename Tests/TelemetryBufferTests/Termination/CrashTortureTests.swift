import Foundation
import XCTest
@testable import TelemetryBuffer

/// Crashes that overlap forwards: real child processes (`telemetry-demo crash`) add logs, spans and metrics across
/// several batches and die by a real signal (or SIGKILL) at a random moment, or at a chosen step of a
/// forward; a fresh process recovers. Every acknowledged item must arrive exactly once (FlushAll may lose
/// what it held in memory on SIGKILL, never duplicate it).
///
/// `TB_CRASH_RUNS` sets the random runs per strategy (3 by default, 30 in CI), and with it the runs of the
/// tests that crash while threads add or around a removal; each test starts its round of kinds at a
/// random one, so that quick runs meet every kind over time. The children run without Swift's backtracer
/// (CrashTests checks that it still runs after the handler).
final class CrashTortureTests: XCTestCase {
    private static let runs = tortureCount("TB_CRASH_RUNS", quick: 3)
    private static let kinds = ["segv", "abort", "fatal", "unwrap", "overflow", "bus", "thread", "kill"]

    func testCrashesAtRandomMomentsAcrossForwardsDeliverEveryAcknowledgedItemExactlyOnce() throws {
        var generator = SystemRandomNumberGenerator()
        // The strategies take the kinds in turn, so that few runs still meet every kind.
        let first = Int.random(in: 0..<Self.kinds.count, using: &generator)
        for (index, strategy) in Options.Strategy.allCases.enumerated() {
            for run in 0..<Self.runs {
                let folder = try TemporaryDirectory()
                defer { folder.remove() }
                let kind = Self.kinds[(first + index * Self.runs + run) % Self.kinds.count]
                let count = Int.random(in: 1...3000, using: &generator)
                let linger = Int.random(in: 0...3000, using: &generator)
                let label = "\(strategy) run \(run): \(kind) after \(count) items, \(linger) µs later"
                let crash = try Demo.run(["crash", "--kind", kind, "--dir", folder.url.path, "--strategy", strategy.rawValue,
                                          "--after", String(count), "--linger-us", String(linger), "--spans", "--metrics",
                                          "--max-envelopes", "1000000"], backtrace: false)
                XCTAssertTrue(crash.status < 0, "\(label): died with status \(crash.status): \(crash.errors.suffix(500))")
                let recovery = try Demo.recover(folder, strategy)
                XCTAssertEqual(recovery.status, 0, recovery.errors)
                try assertDelivered(crash, in: folder, spans: true, metrics: true, crashSafe: strategy != .flushAll || kind != "kill", label)
            }
        }
    }

    /// The DoubleRotatingBuffer with its lists in memory (as where a mapped page could fault: btrfs,
    /// overlayfs; here every file system is taken for one, failpoint `mapping.faults`), two more threads
    /// adding logs and spans: a real crash at a random moment across forwards delivers every acknowledged
    /// item exactly once (the handler writes both lists out); a SIGKILL loses only what the IO caches had
    /// not copied yet, the last items of each thread, and duplicates nothing.
    func testListsInMemoryDeliverEveryAcknowledgedItemOnceAfterACrashAndLoseOnlyTheLastToAKill() throws {
        var generator = SystemRandomNumberGenerator()
        let kinds = ["segv", "abort", "bus", "fatal", "thread", "kill"]
        let first = Int.random(in: 0..<kinds.count, using: &generator)
        for run in 0..<max(2, Self.runs) {
            let folder = try TemporaryDirectory()
            defer { folder.remove() }
            let kind = kinds[(first + run) % kinds.count]
            let count = Int.random(in: 1...3000, using: &generator)
            let linger = Int.random(in: 0...3000, using: &generator)
            let label = "lists in memory, run \(run): \(kind) after \(count) items, \(linger) µs later, two threads adding"
            let crash = try Demo.run(["crash", "--kind", kind, "--dir", folder.url.path, "--strategy", "doubleRotatingBuffer",
                                      "--after", String(count), "--linger-us", String(linger), "--spans", "--metrics",
                                      "--helpers", "2", "--max-envelopes", "1000000"], failpoint: .mappingFaults, backtrace: false)
            XCTAssertTrue(crash.status < 0, "\(label): died with status \(crash.status): \(crash.errors.suffix(500))")
            XCTAssertTrue(crash.errors.contains("keeps its lists in memory"), "\(label): \(crash.errors.suffix(500))")
            let recovery = try Demo.recover(folder, .doubleRotatingBuffer)
            XCTAssertEqual(recovery.status, 0, recovery.errors)
            try assertDelivered(crash, in: folder, spans: true, metrics: true, crashSafe: kind != "kill", threads: 3, label)
            if kind == "kill" { try assertLossesAreTails(crash, in: folder, spans: true, metrics: true, threads: 3, label) }
        }
        // A kill 2 s (200 of the harness's 10 ms sync intervals) after the last add: the caches hold everything by then.
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let kill = try Demo.run(["crash", "--kind", "kill", "--dir", folder.url.path, "--strategy", "doubleRotatingBuffer",
                                 "--after", "1500", "--linger-us", "2000000", "--spans", "--max-envelopes", "1000000"],
                                failpoint: .mappingFaults, backtrace: false)
        XCTAssertEqual(kill.status, -SIGKILL)
        XCTAssertEqual(try Demo.recover(folder, .doubleRotatingBuffer).status, 0)
        try assertDelivered(kill, in: folder, spans: true, crashSafe: true, "lists in memory, killed 2 s after the last add")
    }

    /// Two more threads add all along while the crashing thread adds its items and dies: the signal lands
    /// while other threads are in the middle of adds (with DoubleRotatingBuffer on Linux, records reserved
    /// and not yet committed; with FlushAll, an append the handler must wait for). Every item acknowledged
    /// on any thread arrives exactly once.
    func testCrashesWhileOtherThreadsAddDeliverEveryAcknowledgedItemExactlyOnce() throws {
        var generator = SystemRandomNumberGenerator()
        let kinds = ["segv", "abort", "bus", "fatal", "kill"]
        let first = Int.random(in: 0..<kinds.count, using: &generator)
        for (index, strategy) in Options.Strategy.allCases.enumerated() {
            for run in 0..<max(1, Self.runs / 3) {
                let folder = try TemporaryDirectory()
                defer { folder.remove() }
                // A real crash first (SIGKILL only in later runs), each strategy another kind.
                let kind = run == 0 ? kinds[(first + index) % (kinds.count - 1)] : kinds[(first + index + run) % kinds.count]
                let count = Int.random(in: 1...2000, using: &generator)
                let linger = Int.random(in: 0...3000, using: &generator)
                let label = "\(strategy) run \(run): \(kind) after \(count) items, \(linger) µs later, two threads adding"
                let crash = try Demo.run(["crash", "--kind", kind, "--dir", folder.url.path, "--strategy", strategy.rawValue,
                                          "--after", String(count), "--linger-us", String(linger), "--spans", "--metrics",
                                          "--helpers", "2", "--max-envelopes", "1000000"], backtrace: false)
                XCTAssertTrue(crash.status < 0, "\(label): died with status \(crash.status): \(crash.errors.suffix(500))")
                let recovery = try Demo.recover(folder, strategy)
                XCTAssertEqual(recovery.status, 0, recovery.errors)
                try assertDelivered(crash, in: folder, spans: true, metrics: true, crashSafe: strategy != .flushAll || kind != "kill",
                                    threads: 3, label)
            }
        }
    }

    /// `removeAllData()` part-way, and a real crash signal at a random moment around it: in half the runs
    /// another thread crashes while the removal may still run, in the others the adding thread crashes
    /// later. Nothing is delivered twice or invented; once the removal returned, nothing added before it
    /// comes back, and every item acknowledged after it arrives (the handler stores FlushAll's too).
    func testCrashesAroundARemovalNeverBringBackWhatItRemovedNorDuplicate() throws {
        var generator = SystemRandomNumberGenerator()
        let kinds = ["segv", "abort", "bus", "fatal"]
        let first = Int.random(in: 0..<kinds.count, using: &generator), firstDuring = Int.random(in: 0...1, using: &generator)
        for (index, strategy) in Options.Strategy.allCases.enumerated() {
            for run in 0..<max(1, Self.runs / 3) {
                let folder = try TemporaryDirectory()
                defer { folder.remove() }
                let kind = kinds[(first + index + run) % kinds.count]
                let count = Int.random(in: 200...3000, using: &generator)
                let removeAt = Int.random(in: 1..<count, using: &generator)
                // Every other run dies during the removal, whatever its kind.
                let during = (firstDuring + index + run) % 2 == 0
                // A removal takes a few milliseconds here (syncs): the crash lands before, in or after it.
                let linger = Int.random(in: 0...(during ? 20_000 : 3000), using: &generator)
                let label = "\(strategy) run \(run): \(kind) \(during ? "during" : "after") a removal before \(removeAt) " +
                    "of \(count) items, \(linger) µs later"
                let crash = try Demo.run(["crash", "--kind", kind, "--dir", folder.url.path, "--strategy", strategy.rawValue,
                                          "--after", String(count), "--remove-at", String(removeAt), "--linger-us", String(linger),
                                          "--spans", "--max-envelopes", "1000000"] + (during ? ["--during-removal"] : []),
                                         backtrace: false)
                XCTAssertTrue(crash.status < 0, "\(label): died with status \(crash.status): \(crash.errors.suffix(500))")
                let recovery = try Demo.recover(folder, strategy)
                XCTAssertEqual(recovery.status, 0, recovery.errors)
                try assertRemovalHeld(crash, in: folder, removeAt: removeAt, spans: true, crashSafe: true, label)
            }
        }
    }

    /// The forwarding thread crashes (a real SIGSEGV) at each step of a forward, so the handler runs in
    /// the middle of it; and the main thread crashes while the forward is held at that step. The
    /// DoubleRotatingBuffer's items are paced so that the IO cache copies the batch before its forward,
    /// which then retires the cache (with the defaults it would not).
    func testACrashAtEveryStepOfAForward() throws {
        let steps: [Failpoint] = [.publishMarked, .publishStaged, .publishCaptured, .publishEmptied, .moveOne]
        for strategy in Options.Strategy.allCases {
            for step in steps + (strategy == .doubleRotatingBuffer ? [.publishUnsynced] : []) {
                for action in [Failpoint.Action.segv, .hold] {
                    let folder = try TemporaryDirectory()
                    defer { folder.remove() }
                    let label = "\(strategy) \(step) \(action)"
                    let held = folder.url.appendingPathComponent("held")
                    let crash = try Demo.run(["crash", "--kind", action == .hold ? "abort" : "segv", "--dir", folder.url.path,
                                              "--strategy", strategy.rawValue, "--after", "500", "--spans",
                                              "--max-envelopes", "1000000"] + (action == .hold ? ["--when-held"] : [])
                                                 + (strategy == .doubleRotatingBuffer ? ["--pace-us", "200"] : []),
                                             failpoint: step, action: action, held: held, backtrace: false)
                    XCTAssertEqual(crash.status, action == .hold ? -SIGABRT : -SIGSEGV, "\(label): \(crash.errors.suffix(800))")
                    XCTAssertFalse(crash.errors.contains("never held"), "\(label): the step was never reached")
                    let recovery = try Demo.recover(folder, strategy)
                    XCTAssertEqual(recovery.status, 0, recovery.errors)
                    try assertDelivered(crash, in: folder, spans: true, crashSafe: true, label)
                }
            }
        }
    }
}
