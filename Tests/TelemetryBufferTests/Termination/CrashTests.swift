import Foundation
import XCTest
@testable import TelemetryBuffer

/// Real child processes (`telemetry-demo crash`) die in each way a process dies; a new process recovers.
final class CrashTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory.remove() }

    /// 60 items: below every batch limit, so the first list holds them all when the process dies.
    private func crash(_ kind: String, strategy: Options.Strategy = .doubleRotatingBuffer, after: Int = 60,
                       _ extra: [String] = []) throws -> Demo.Run {
        try Demo.run(["crash", "--kind", kind, "--dir", directory.url.path, "--strategy", strategy.rawValue,
                      "--after", String(after), "--spans", "--max-envelopes", "100000"] + extra)
    }

    /// Recovers in a new process and checks every acknowledged log and span arrived exactly once.
    private func assertRecoveredExactlyOnce(_ run: Demo.Run, count: Int, dsn: String = demoDefaultDSN, _ label: String,
                                            file: StaticString = #filePath, line: UInt = #line) throws {
        XCTAssertEqual(run.lines, (0..<count).map { "ack \($0)" }, "\(label): every add acknowledged", file: file, line: line)
        let recovery = try Demo.run(["recover", "--dir", directory.url.path, "--dsn", dsn, "--max-envelopes", "100000"])
        XCTAssertEqual(recovery.status, 0, recovery.errors, file: file, line: line)
        let envelopes = directory.envelopesFolder(dsn)
        let expected = (0..<count).map { "item \($0)" }
        XCTAssertEqual(try logBodies(in: envelopes).sorted(), expected.sorted(), "\(label): logs", file: file, line: line)
        let spans = try walkEnvelopes(in: envelopes).flatMap { $0.items.filter { $0.type == "span" }.flatMap(\.elements) }
        XCTAssertEqual(spans.compactMap { $0["name"] as? String }.sorted(), expected.sorted(), "\(label): spans", file: file, line: line)
    }

    private func terminationFiles(_ dsn: String = demoDefaultDSN) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory.bufferFolder(dsn).path)) ?? [])
            .filter { $0.hasPrefix("detected-termination-") }
    }

    func testEveryKindOfCrashKeepsEveryAcknowledgedItemAndDiesOfItsOwnSignal() throws {
        // Swift traps (fatalError, a nil unwrap, an index out of range, an overflow) are SIGILL on x86_64 and SIGTRAP on arm64.
        let trap: Set<Int32> = [-SIGILL, -SIGTRAP]
        let kinds: [(kind: String, signals: Set<Int32>, detected: Bool)] = [
            ("segv", [-SIGSEGV], true), ("abort", [-SIGABRT], true), ("fatal", trap, true), ("unwrap", trap, true),
            ("index", trap, true), ("overflow", trap, true), ("stack", [-SIGSEGV], true), ("thread", [-SIGSEGV], true),
            ("bus", [-SIGBUS], true), ("kill", [-SIGKILL], false),
        ]
        for strategy in [Options.Strategy.doubleRotatingBuffer, .flushAll] {
            for (kind, signals, detected) in kinds {
                let folder = try TemporaryDirectory()
                directory.remove()  // setUp's, or the last kind's: one folder per kind
                directory = folder
                defer { folder.remove() }
                let run = try crash(kind, strategy: strategy)
                XCTAssertTrue(signals.contains(run.status), "\(strategy) \(kind): died with status \(run.status)")
                // The mapped lists need no copy; FlushAll's memory is written out (one region holds the 60 items).
                XCTAssertEqual(terminationFiles(), detected && strategy == .flushAll ? ["detected-termination-0"] : [],
                               "\(strategy) \(kind)")
                if strategy == .flushAll, !detected { continue }  // SIGKILL: FlushAll's memory is gone
                try assertRecoveredExactlyOnce(run, count: 60, "\(strategy) \(kind)")
            }
        }
    }

    /// With no handler before ours, a fault runs into its instruction again once the handler has put the
    /// default action back, so the process dies of the fault itself: the signal's last delivery, as strace
    /// shows it, keeps the fault's `si_code` (a raise from the handler would show `SI_TKILL`, a signal sent
    /// by software). What does not recur (`abort()`, a signal sent to the process, a trap on arm64) is
    /// raised again, and still ends the process.
    func testAFaultDiesAtItsInstructionAndWhatDoesNotRecurIsRaisedAgain() throws {
        guard let strace = ["/usr/bin/strace", "/bin/strace"].first(where: FileManager.default.isExecutableFile(atPath:)) else {
            throw XCTSkip("needs strace (Debian: apt-get install strace)")
        }
        let kinds: [(kind: String, signals: Set<Int32>)] = [
            ("segv", [SIGSEGV]), ("bus", [SIGBUS]), ("stack", [SIGSEGV]), ("thread", [SIGSEGV]),
            ("fatal", [SIGILL, SIGTRAP]), ("abort", [SIGABRT]), ("sent-segv", [SIGSEGV]),
        ]
        for (kind, signals) in kinds {
            let folder = try TemporaryDirectory()
            directory.remove()  // setUp's, or the last kind's: one folder per kind
            directory = folder
            defer { folder.remove() }
            let trace = folder.url.appendingPathComponent("strace")
            let run = try Demo.run(["-f", "-qq", "-e", "trace=none", "-o", trace.path, Demo.executable.path,
                                    "crash", "--kind", kind, "--dir", folder.url.path, "--strategy", "flushAll",
                                    "--after", "60", "--spans", "--max-envelopes", "100000"],
                                   backtrace: false, program: URL(fileURLWithPath: strace))
            let lines = try String(contentsOf: trace, encoding: .utf8).split(separator: "\n").map(String.init)
            guard let killed = lines.last(where: { $0.contains("+++ killed by SIG") }) else {
                if lines.contains(where: { $0.contains("Operation not permitted") }) {
                    throw XCTSkip("strace may not trace here: \(lines.prefix(3))")
                }
                XCTFail("\(kind): not killed by a signal (\(run.status)): \(lines.suffix(5)) \(run.errors.suffix(500))")
                continue
            }
            let name = String(killed.split(separator: " ").first { $0.hasPrefix("SIG") } ?? "")
            XCTAssertTrue(signals.map(Self.signalName).contains(name), "\(kind): \(killed)")
            // Every delivery of that signal: the first ran the handler, the last killed the process.
            let codes = lines.filter { $0.contains("--- \(name) {") }.compactMap { line in
                line.range(of: "si_code=").map { String(line[$0.upperBound...].prefix { $0 != "," && $0 != "}" }) }
            }
            XCTAssertGreaterThanOrEqual(codes.count, 2, "\(kind): the handler ran, then the signal killed: \(codes)")
            let recurs = ["SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE"].contains(name) && kind != "sent-segv"
            if recurs {
                XCTAssertTrue(codes.allSatisfy { !$0.hasPrefix("SI_") }, "\(kind): died of its own fault, not a raise: \(codes)")
            } else {
                XCTAssertEqual(codes.last, "SI_TKILL", "\(kind): raised again: \(codes)")
            }
            try assertRecoveredExactlyOnce(run, count: 60, "\(kind) under strace")
        }
    }

    /// After a crash signal the process survived, FlushAll's handler is settled (its files unlinked, the
    /// folder synced, its signals taken back) on the background queue, never inside `add` on the app's
    /// thread, where the regions' lock made every other adder wait for that I/O. Adds are refused while
    /// the claim stands (a second, in case the signal recurs), counted; every acknowledged item arrives once.
    func testASurvivedSignalIsSettledOffTheAddingThread() throws {
        guard let strace = ["/usr/bin/strace", "/bin/strace"].first(where: FileManager.default.isExecutableFile(atPath:)) else {
            throw XCTSkip("needs strace (Debian: apt-get install strace)")
        }
        let trace = directory.url.appendingPathComponent("strace")
        let run = try Demo.run(["-f", "-qq", "-e", "trace=execve,unlinkat", "-o", trace.path, Demo.executable.path,
                                "crash", "--kind", "segv", "--dir", directory.url.path, "--strategy", "flushAll",
                                "--after", "40", "--survive-first", "--then-pace-us", "50000", "--max-envelopes", "100000"],
                               backtrace: false, program: URL(fileURLWithPath: strace))
        let lines = try String(contentsOf: trace, encoding: .utf8).split(separator: "\n").map(String.init)
        if lines.contains(where: { $0.contains("Operation not permitted") && $0.contains("ptrace") }) {
            throw XCTSkip("strace may not trace here: \(lines.prefix(3))")
        }
        // The demo's main thread adds; its thread ID is the process ID, the one that ran `execve`.
        let main = try XCTUnwrap(lines.first { $0.contains("execve(\"\(Demo.executable.path)\"") }?.split(separator: " ").first)
        let settles = lines.filter { $0.contains("unlinkat(") && $0.contains("detected-termination-") }
        XCTAssertFalse(settles.isEmpty, "the handler's file was undone: \(lines.suffix(5)) \(run.errors.suffix(500))")
        XCTAssertEqual(settles.filter { $0.split(separator: " ").first == main }, [], "undone by the adding thread")
        XCTAssertEqual(run.status, -SIGSEGV, run.errors.suffix(500).description)
        let acknowledged = run.lines.filter { $0.hasPrefix("ack ") }.map { "item " + $0.dropFirst(4) }
        // The 40 before the signal, and 40 more once the handler is settled (the demo adds until then).
        XCTAssertEqual(acknowledged.count, 80, "items are taken again once the handler is settled")
        let recovery = try Demo.run(["recover", "--dir", directory.url.path, "--max-envelopes", "100000"])
        XCTAssertEqual(recovery.status, 0, recovery.errors)
        XCTAssertEqual(try logBodies(in: directory.envelopesFolder(demoDefaultDSN)).sorted(), acknowledged.sorted())
    }

    private static func signalName(_ signal: Int32) -> String {
        [SIGSEGV: "SIGSEGV", SIGBUS: "SIGBUS", SIGILL: "SIGILL", SIGTRAP: "SIGTRAP", SIGABRT: "SIGABRT"][signal] ?? "\(signal)"
    }

    /// A crash reporter that catches Mach exceptions (sentry-cocoa's SentryCrash, older KSCrash) runs
    /// before any signal handler and puts back the signal actions it saw at its own install. A buffer made
    /// before it is among them: its handler runs, and every item arrives. A buffer made after it loses its
    /// handler at the crash: FlushAll's items go with the process; the mapped lists keep theirs anyway.
    func testAReporterThatPutsBackWhatItSawKeepsOurHandlerWhenTheBufferCameFirst() throws {
        for strategy in [Options.Strategy.flushAll, .doubleRotatingBuffer] {
            for order in ["after", "before"] {
                let folder = try TemporaryDirectory()
                directory.remove()  // setUp's, or the last case's: one folder per case
                directory = folder
                defer { folder.remove() }
                let label = "\(strategy), reporter installed \(order) the buffer"
                let run = try crash("segv", strategy: strategy, ["--reporter", order])
                XCTAssertEqual(run.status, -SIGSEGV, label)
                XCTAssertTrue(run.errors.contains("stand-in reporter restored"), "\(label): \(run.errors)")
                let handled = order == "after"
                XCTAssertEqual(terminationFiles(), handled && strategy == .flushAll ? ["detected-termination-0"] : [], label)
                if strategy == .flushAll, !handled { continue }  // FlushAll's memory is gone, as with SIGKILL
                try assertRecoveredExactlyOnce(run, count: 60, label)
            }
        }
    }

    func testFlushAllsCrashFileBecomesEnvelopesTheOfficialParserAccepts() throws {
        try OfficialParser.require()
        for kind in ["segv", "abort", "fatal"] {
            let folder = try TemporaryDirectory()
            directory.remove()  // setUp's, or the last kind's: one folder per kind
            directory = folder
            defer { folder.remove() }
            let run = try crash(kind, strategy: .flushAll, after: 60)
            XCTAssertNotEqual(run.status, 0, kind)
            try assertRecoveredExactlyOnce(run, count: 60, kind)
            let envelopes = directory.envelopesFolder(demoDefaultDSN)
            XCTAssertEqual(try walkEnvelopes(in: envelopes).map(\.items.count), [1, 1], "\(kind): one log envelope, one span envelope (one trace)")
            let parsed = try OfficialParser.parse(envelopes)
            XCTAssertEqual(parsed.count, 2, kind)
        }
    }

    /// A reporter installed after the buffer that calls the action it replaced (PLCrashReporter, Bugsnag), or
    /// puts it back and raises the signal again (KSCrash, SentryCrash), then the last buffer closed and a
    /// new one made: the handler stays in the reporter's chain, and the new buffer's install must not take
    /// the reporter for what came before ours. It did: handler → reporter → handler → … until the stack ran
    /// out (a SIGSEGV, not the abort). Likewise when the chaining reporter left in between, putting our
    /// handler back: the new install took the handler for its own previous action. (A later attempt
    /// installed ours over the reporter again and broke the loop where it closed: with the restoring
    /// reporter, the signal then came back for ever, and the process hung.)
    func testABufferMadeAgainUnderAReporterCallsEachHandlerOnce() throws {
        let cases: [(Options.Strategy, String, Bool)] = [
            (.flushAll, "chaining", false), (.doubleRotatingBuffer, "chaining", false), (.flushAll, "chaining", true),
            (.flushAll, "restoring", false), (.doubleRotatingBuffer, "restoring", false),
        ]
        for (strategy, reporter, leaves) in cases {
            let folder = try TemporaryDirectory()
            directory.remove()  // setUp's, or the last case's: one folder per case
            directory = folder
            defer { folder.remove() }
            let label = "\(strategy), the \(reporter) reporter \(leaves ? "left" : "stays")"
            let run = try crash("abort", strategy: strategy, ["--\(reporter)-reporter", "--reopen"] + (leaves ? ["--reporter-uninstalls"] : []))
            XCTAssertEqual(run.status, -SIGABRT, "\(label): \(run.errors.suffix(1500))")
            let calls = run.errors.components(separatedBy: "\(reporter) reporter called").count - 1
            XCTAssertEqual(calls, leaves ? 0 : 1, label)
            XCTAssertEqual(terminationFiles(), strategy == .flushAll ? ["detected-termination-0"] : [], label)
            try assertRecoveredExactlyOnce(run, count: 60, label)
        }
    }

    /// A previous handler that puts the default action back and raises the signal again, for a signal sent
    /// to the process (a SIGSEGV by `kill`, a SIGTERM): the process dies of it once our handler returns, and
    /// FlushAll's file stays. (Taken for survived, our handler undid its writes at once: the items lost.)
    func testAPreviousHandlerThatRaisesASentSignalAgainKeepsTheFile() throws {
        for (kind, signal, extra) in [("sent-segv", SIGSEGV, [String]()), ("term", SIGTERM, ["--sigterm"])] {
            let folder = try TemporaryDirectory()
            directory.remove()  // setUp's, or the last case's: one folder per case
            directory = folder
            defer { folder.remove() }
            let run = try crash(kind, strategy: .flushAll, ["--previous-handler"] + extra)
            XCTAssertEqual(run.status, -signal, "\(kind): \(run.errors.suffix(1500))")
            XCTAssertTrue(run.errors.contains("previous handler called"), kind)
            XCTAssertEqual(terminationFiles(), ["detected-termination-0"], kind)
            try assertRecoveredExactlyOnce(run, count: 60, kind)
        }
    }

    /// A reporter installed before the buffer, over a previous handler, that puts back what it saw and raises
    /// the signal again (KSCrash, SentryCrash), for a signal sent to the process: it then dies of that
    /// handler's default action, and FlushAll's file stays. (With the reporter's action, not the default
    /// one, in place, the signal was taken for survived and our writes undone at once: the items lost.)
    func testARestoringReporterBeforeTheBufferKeepsTheFileOfASentSignal() throws {
        let run = try crash("sent-segv", strategy: .flushAll, ["--previous-handler", "--restoring-reporter", "--reporter-first"])
        XCTAssertEqual(run.status, -SIGSEGV, run.errors.suffix(1500).description)
        XCTAssertTrue(run.errors.contains("restoring reporter called"), run.errors)
        XCTAssertTrue(run.errors.contains("previous handler called"), run.errors)
        XCTAssertEqual(terminationFiles(), ["detected-termination-0"])
        try assertRecoveredExactlyOnce(run, count: 60, "a restoring reporter first")
    }

    /// A signal survived under a reporter installed before the buffer that puts back what it saw (the
    /// handler before it) and raises the signal again: ours is re-armed over that handler, and the real
    /// crash later writes FlushAll's items. (Ours was left out, and the items after the survived signal went
    /// with the process.)
    func testASurvivedSignalUnderARestoringReporterReArmsTheHandler() throws {
        let run = try crash("segv", strategy: .flushAll, after: 150, ["--survive-first", "--restoring-reporter", "--reporter-first"])
        XCTAssertEqual(run.status, -SIGSEGV, run.errors.suffix(1500).description)
        XCTAssertTrue(run.errors.contains("previous handler returned"), run.errors)
        XCTAssertFalse(terminationFiles().isEmpty, "the real crash was written")
        try assertRecoveredExactlyOnce(run, count: 300, "a survived signal under a restoring reporter")
    }

    /// The SIGBUS Linux sends for a memory error found in the background (`BUS_MCEERR_AO`, a code above 0 as
    /// a fault's) does not recur at an instruction: it is raised again, and ends the process as the default
    /// action would. It was taken for a fault: the default action put back, the handler returned, and the
    /// process went on. (Without the Swift runtime's backtracer, which, after us, returns from it as from
    /// any fault, with or without this library.)
    func testAMemoryErrorFoundInTheBackgroundStillEndsTheProcess() throws {
        #if !os(Linux)
        throw XCTSkip("BUS_MCEERR_AO is Linux's")
        #else
        let run = try Demo.run(["crash", "--kind", "bus-optional", "--dir", directory.url.path, "--strategy", "flushAll",
                                "--after", "60", "--spans", "--max-envelopes", "100000"], backtrace: false)
        XCTAssertFalse(run.errors.contains("cannot send"), run.errors)
        XCTAssertEqual(run.status, -SIGBUS, run.errors.suffix(1500).description)
        XCTAssertEqual(terminationFiles(), ["detected-termination-0"])
        try assertRecoveredExactlyOnce(run, count: 60, "BUS_MCEERR_AO")
        #endif
    }

    /// A handler installed before the buffer with SA_RESETHAND and a mask is called as the system would call
    /// it: once (then the default action is in place), with its mask and the signal blocked. It ran twice
    /// (the action put back before the call was still itself), with neither blocked.
    func testAPreviousHandlersResetAndMaskAreHonoured() throws {
        let run = try crash("segv", strategy: .flushAll, ["--resetting-handler"])
        XCTAssertEqual(run.status, -SIGSEGV, run.errors.suffix(1500).description)
        let calls = run.errors.split(separator: "\n").filter { $0.hasPrefix("resetting handler called") }
        XCTAssertEqual(calls, ["resetting handler called: SIGUSR1 blocked, the signal blocked"], run.errors.suffix(1500).description)
        XCTAssertEqual(terminationFiles(), ["detected-termination-0"])
        try assertRecoveredExactlyOnce(run, count: 60, "resetting handler")
    }

    func testAHandlerInstalledBeforeTheBufferIsStillCalled() throws {
        let run = try crash("segv", strategy: .flushAll, ["--previous-handler"])
        XCTAssertEqual(run.status, -SIGSEGV)
        XCTAssertTrue(run.errors.contains("previous handler called"), run.errors)
        XCTAssertEqual(terminationFiles(), ["detected-termination-0"])
        try assertRecoveredExactlyOnce(run, count: 60, "previous handler")
    }

    func testTheSwiftRuntimeBacktraceStillAppears() throws {
        let run = try crash("segv")
        XCTAssertEqual(run.status, -SIGSEGV)
        XCTAssertTrue(run.errors.contains("Program crashed: Bad pointer dereference"), run.errors)
        XCTAssertTrue(run.errors.contains("crashed:"), "the crashed thread's frames: \(run.errors)")
    }

    func testTwoBuffersForTwoDSNsBothSaveTheirItems() throws {
        let second = "https://k2@o1.ingest.example.com/2"
        let run = try crash("abort", strategy: .flushAll, ["--second-dsn", second])
        XCTAssertEqual(run.status, -SIGABRT)
        XCTAssertEqual(terminationFiles(), ["detected-termination-0"])
        XCTAssertEqual(terminationFiles(second), ["detected-termination-0"])
        try assertRecoveredExactlyOnce(run, count: 60, "first DSN")
        try assertRecoveredExactlyOnce(run, count: 60, dsn: second, "second DSN")
    }

    func testSIGTERMIsDetectedOnlyWhenAskedAndStillEndsTheProcess() throws {
        let asked = try crash("term", strategy: .flushAll, ["--sigterm"])
        XCTAssertEqual(asked.status, -SIGTERM)
        XCTAssertEqual(terminationFiles(), ["detected-termination-0"])
        try assertRecoveredExactlyOnce(asked, count: 60, "SIGTERM detected")

        let folder = try TemporaryDirectory()
        directory.remove()  // the first half's
        directory = folder
        defer { folder.remove() }
        let unasked = try crash("term", strategy: .flushAll)
        XCTAssertEqual(unasked.status, -SIGTERM)
        XCTAssertEqual(terminationFiles(), [], "not a detected termination by default")

        let folder2 = try TemporaryDirectory()
        directory.remove()
        directory = folder2
        defer { folder2.remove() }
        let list = try crash("term")
        XCTAssertEqual(list.status, -SIGTERM)
        try assertRecoveredExactlyOnce(list, count: 60, "SIGTERM not detected: the mapped list still has everything")
    }

    /// A crash signal the process survives (the previous handler returns): what the handler wrote is
    /// undone and the handler re-armed, so the items are published once by the forward that follows, and
    /// the later, real crash is detected again (FlushAll's items after it would be lost otherwise).
    func testASurvivedSignalUndoesWhatTheHandlerWroteAndReArmsIt() throws {
        for strategy in Options.Strategy.allCases {
            let folder = try TemporaryDirectory()
            directory.remove()  // setUp's, or the last strategy's
            directory = folder
            defer { folder.remove() }
            let run = try crash("segv", strategy: strategy, after: 150, ["--survive-first"])
            XCTAssertEqual(run.status, -SIGSEGV, "\(strategy): \(run.errors.suffix(500))")
            XCTAssertTrue(run.errors.contains("previous handler returned"), "\(strategy): \(run.errors)")
            try assertRecoveredExactlyOnce(run, count: 300, "\(strategy) after a survived signal")
        }
    }

    /// An app's SIGTERM handler, installed before the buffer's, closes the buffer and exits: the buffer's
    /// handler has claimed the halves and is waiting for that handler, so the close must neither wait for
    /// the claims to go nor for the handler to let go of the registration (both hung before); the items
    /// are in the handler's file, and the next start delivers them once.
    /// The app's own SIGTERM handler, called by ours while it holds FlushAll's regions, closes the buffer:
    /// `close()` returns, the handler's file keeps the items (none is counted as lost: 120 were), and the
    /// next start publishes them.
    func testClosingFromThePreviousHandlerDoesNotHang() throws {
        let run = try crash("term", strategy: .flushAll, ["--sigterm", "--previous-closes"])
        XCTAssertEqual(run.status, 0, run.errors)
        XCTAssertTrue(run.errors.contains("previous handler closed the buffers, 0 items counted as lost"), run.errors)
        try assertRecoveredExactlyOnce(run, count: 60, "closed from the previous handler")
    }

    /// The child of a `fork()` shares the parent's mapped lists and folder: its adds are refused and its
    /// crash handler writes nothing, so only the parent's items arrive.
    func testAForkedChildNeitherAddsNorWritesIntoTheParentsFolder() throws {
        try forEachStrategyWithAForkedChild([]) { strategy, child, _ in
            XCTAssertFalse(child.contains { $0.hasPrefix("child hung") }, "\(strategy): \(child)")
            XCTAssertEqual(child.filter { $0.hasPrefix("child status") }.count, 1, "\(strategy): the child ran and ended")
        }
    }

    /// A forked child that lives on, then exits gracefully (`exit(0)`): meanwhile the parent closes its
    /// buffers and opens them again (the child closed its copy of the folder lock's descriptor, which kept
    /// the folder locked while it lived), a buffer the child creates fails clearly (it would take nothing),
    /// and the child's exit does none of the parent's work; every item arrives once.
    func testAForkedChildThatLivesOnNeitherHoldsTheFolderNorWorksAtItsExit() throws {
        try forEachStrategyWithAForkedChild(["--child-exits"]) { strategy, child, run in
            XCTAssertTrue(run.lines.contains("reopened while the child lives: ok"), "\(strategy): \(run.lines.filter { $0.hasPrefix("reopened") })")
            XCTAssertEqual(child.filter { $0.hasPrefix("child init") }, ["child init forkedChild"], "\(strategy): a clear error")
            XCTAssertEqual(child.filter { $0.hasPrefix("child status") || $0.hasPrefix("child hung") }, ["child status 0"],
                           "\(strategy): the child exited by itself, gracefully")
        }
    }

    /// For each strategy, in a folder of its own: the demo adds 60 items, forks a child (`--fork-child` and
    /// `extra`) that adds five logs, then aborts; `check` sees the child's lines and the run. The child's adds
    /// are all refused, the parent dies of SIGABRT, and every item the parent acknowledged is recovered once.
    private func forEachStrategyWithAForkedChild(
        _ extra: [String], check: (Options.Strategy, _ child: [String], Demo.Run) throws -> Void
    ) throws {
        for strategy in Options.Strategy.allCases {
            let folder = try TemporaryDirectory()
            directory.remove()
            directory = folder
            defer { folder.remove() }
            let run = try Demo.run(["crash", "--kind", "abort", "--dir", directory.url.path, "--strategy", strategy.rawValue,
                                    "--after", "60", "--spans", "--max-envelopes", "100000", "--fork-child"] + extra, backtrace: false)
            XCTAssertEqual(run.status, -SIGABRT, "\(strategy): \(run.errors.suffix(500))")
            let child = run.lines.filter { $0.hasPrefix("child ") }
            XCTAssertEqual(child.filter { $0.hasPrefix("child add") }, Array(repeating: "child add false", count: 5), "\(strategy)")
            try check(strategy, child, run)
            var parent = run
            parent.output = run.lines.filter { !$0.hasPrefix("child ") && !$0.hasPrefix("reopened ") }.map { $0 + "\n" }.joined()
            try assertRecoveredExactlyOnce(parent, count: 60, "\(strategy) with a forked child")
        }
    }

    /// A buffer closed and released on one thread while another thread's crash handler holds its
    /// registration (failpoint `crash.handler:hold` pauses the handler): `close()` waits for the handler,
    /// which then writes into the buffer's own folder, never into one that took the descriptor's number.
    func testUnregisteringWhileAnotherThreadIsCrashingWaitsForTheHandler() throws {
        let other = try TemporaryDirectory()
        defer { other.remove() }
        let run = try Demo.run(["crash", "--kind", "thread", "--dir", directory.url.path, "--strategy", "flushAll",
                                "--after", "60", "--spans", "--max-envelopes", "100000", "--close-while-crashing",
                                "--other-dir", other.url.path],
                               failpoint: .crashHandler, action: .hold, held: directory.url.appendingPathComponent("held"),
                               backtrace: false)
        XCTAssertEqual(run.status, -SIGSEGV, run.errors.suffix(800).description)
        let strays = try FileManager.default.contentsOfDirectory(atPath: other.url.path)
        XCTAssertEqual(strays, [], "files written through a reused descriptor")
        try assertRecoveredExactlyOnce(run, count: 60, "closed while crashing")
    }

    /// Two threads crash at once: the second (an abort) reaches the handler after the first (a segv) has
    /// taken it and before it writes anything (failpoint `crash.handler-owned:hold` pauses it there). The
    /// second waits for the first's writes: ending the process at once lost every item FlushAll held.
    func testASecondCrashWaitsForTheThreadThatTookTheHandler() throws {
        let run = try Demo.run(["crash", "--kind", "abort", "--dir", directory.url.path, "--strategy", "flushAll",
                                "--after", "60", "--spans", "--max-envelopes", "100000", "--crash-while-crashing"],
                               failpoint: .crashHandlerOwned, action: .hold, held: directory.url.appendingPathComponent("held"),
                               backtrace: false)
        XCTAssertTrue([-SIGSEGV, -SIGABRT].contains(run.status), "\(run.status): \(run.errors.suffix(800))")
        XCTAssertEqual(terminationFiles(), ["detected-termination-0"])
        try assertRecoveredExactlyOnce(run, count: 60, "two threads crashing")
    }

    /// A buffer made after a crash signal the process survived, before the handler is settled (an abort
    /// is settled a second later, since `abort()` raises it again): the next crash writes its items out
    /// too. The handler rewrote only the buffers it had written the first time, and lost this one's.
    func testABufferMadeAfterASurvivedSignalIsWrittenAtTheNextCrash() throws {
        let second = "https://k2@o1.ingest.example.com/2"
        let run = try crash("segv", strategy: .flushAll, ["--second-dsn", second, "--survive-then-register"])
        XCTAssertEqual(run.status, -SIGSEGV, run.errors.suffix(800).description)
        XCTAssertTrue(run.errors.contains("previous handler returned"), run.errors)
        XCTAssertEqual(run.lines, (0..<120).map { "ack \($0)" }, "every add acknowledged")
        XCTAssertEqual(terminationFiles(second), ["detected-termination-0"], "the later buffer's items written out")
        let recovery = try Demo.run(["recover", "--dir", directory.url.path, "--dsn", second, "--max-envelopes", "100000"])
        XCTAssertEqual(recovery.status, 0, recovery.errors)
        let envelopes = directory.envelopesFolder(second)
        XCTAssertEqual(try logBodies(in: envelopes).sorted(), (60..<120).map { "item \($0)" }.sorted())
    }

    #if os(Linux)
    /// An ignored SIGTERM cannot end the process: it is not hooked even when asked. (An ignored fault
    /// still ends it, and so does `abort()`: those are hooked whatever their action.)
    func testAnIgnoredSIGTERMIsNotHooked() throws {
        var ignore = sigaction(), previous = sigaction()
        ignore.__sigaction_handler.sa_handler = SIG_IGN
        sigaction(SIGTERM, &ignore, &previous)
        defer { sigaction(SIGTERM, &previous, nil) }
        let buffer = try TelemetryBuffer(options: testOptions(directory) { $0.handleSIGTERM = true })
        defer { buffer.close() }
        var current = sigaction()
        sigaction(SIGTERM, nil, &current)
        XCTAssertEqual(unsafeBitCast(current.__sigaction_handler, to: UInt.self), unsafeBitCast(SIG_IGN, to: UInt.self))
    }

    /// The handler is installed while a buffer lives and the previous actions come back exactly.
    func testClosingTheLastBufferRestoresThePreviousActionsExactly() throws {
        func action(_ signal: Int32) -> (handler: UInt, flags: Int32) {
            var current = sigaction()
            sigaction(signal, nil, &current)
            // glibc adds SA_RESTORER (0x04000000, kernel plumbing) to every action it installs.
            return (unsafeBitCast(current.__sigaction_handler, to: UInt.self), current.sa_flags & ~0x0400_0000)
        }
        let signals = [SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGSEGV, SIGTRAP, SIGSYS, SIGTERM]
        let before = signals.map(action)
        let buffer = try TelemetryBuffer(options: testOptions(directory))
        let during = signals.map(action)
        for (index, signal) in signals.enumerated() where signal != SIGTERM {
            XCTAssertNotEqual(during[index].handler, before[index].handler, "signal \(signal) is handled")
        }
        XCTAssertEqual(during.last?.handler, before.last?.handler, "SIGTERM only when asked")
        let other = try TelemetryBuffer(options: testOptions(directory) { $0.dsn = testDSN + "0" })
        buffer.close()
        XCTAssertEqual(signals.map(action).map(\.handler), during.map(\.handler), "still installed for the other buffer")
        other.close()
        let after = signals.map(action)
        XCTAssertEqual(after.map(\.handler), before.map(\.handler))
        XCTAssertEqual(after.map(\.flags), before.map(\.flags))

        let quiet = try TelemetryBuffer(options: testOptions(directory) { $0.crashDetection = false })
        XCTAssertEqual(signals.map(action).map(\.handler), before.map(\.handler), "crashDetection = false installs nothing")
        quiet.close()
    }
    #endif
}
