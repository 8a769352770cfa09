import Foundation
import CTelemetryDemo
import TelemetryBuffer
#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// `crash`: adds N items like `stress` (printing `ack <seq>`), then dies the way `--kind` says. With
/// `--remove-at M`, it calls `removeAllData()` before item M (printing `removed` once it returned); with
/// `--during-removal` as well, another thread dies `--linger-us` after the removal started instead. With
/// `--helpers H`, H more threads add items all along (thread t of H+1 the items t, t+H+1…; the dying
/// thread is thread 0, its N items numbered so). With `--crash-while-crashing`, another thread crashes
/// first, and this one dies while that one holds the handler (with failpoint `crash.handler-owned:hold`).
/// With `--survive-then-register` and `--second-dsn`, after N items an abort is survived (a previous
/// handler returns), the second DSN's buffer is made then, and N more items go to it alone. With
/// `--reporter before|after`, a `StandInReporter` is installed before or after the buffer and catches the
/// crash first. With `--chaining-reporter`, a reporter that calls the action it replaced is installed
/// after the buffer; with `--reopen` as well, the buffers are closed and made again after it (and with
/// `--reporter-uninstalls`, it puts back what it replaced in between); `--restoring-reporter` installs one
/// that puts back what it replaced and raises the signal again instead; with `--reporter-first`, either is
/// installed before the buffer instead (after `--previous-handler`'s or `--survive-first`'s handler). With
/// `--resetting-handler`, a handler with SA_RESETHAND and a mask (`tb_demo_install_resetting_handler`) is
/// installed before the buffer.
/// With `--survive-first`, a SIGSEGV sent to the process is survived after N items (a previous
/// handler returns) and a flush follows; with `--then-pace-us P` as well, an abort is survived instead
/// (which `abort()` would raise again, so its handler is settled only a second later), no flush follows,
/// and items after it are added P µs apart until N of them were acknowledged (refused ones do not count;
/// it gives up after 30 s).
enum Crash {
    static let kinds = ["segv", "abort", "fatal", "unwrap", "overflow", "index", "stack", "thread", "bus", "bus-optional", "sent-segv", "kill",
                        "term"]

    static func run(_ arguments: Arguments) throws {
        let kind = try arguments.required("kind")
        guard kinds.contains(kind) else { throw DemoError("unknown kind '\(kind)'; use one of \(kinds.joined(separator: "|"))") }
        let directory = URL(fileURLWithPath: arguments.string("dir")
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("telemetry-demo-crash-\(getpid())").path)
        if arguments.flag("previous-handler") { installPreviousHandler() }
        if arguments.flag("resetting-handler") { tb_demo_install_resetting_handler() }
        let registersLate = arguments.flag("survive-then-register")
        if arguments.flag("survive-first") || registersLate { installSurvivingHandler() }
        if arguments.flag("previous-closes") { installClosingHandler() }
        let reporter = arguments.string("reporter")
        guard reporter == nil || reporter == "before" || reporter == "after" else {
            throw DemoError("--reporter takes before or after (the buffer)")
        }
        if reporter == "before" { StandInReporter.install() }
        let signalReporter = arguments.flag("chaining-reporter") || arguments.flag("restoring-reporter")
        let installSignalReporter = {
            if arguments.flag("chaining-reporter") { tb_demo_install_chaining_reporter() } else { tb_demo_install_restoring_reporter() }
        }
        if signalReporter, arguments.flag("reporter-first") { installSignalReporter() }
        var options = try options(arguments, directory: directory)
        options.handleSIGTERM = arguments.flag("sigterm")
        var buffers = [try TelemetryBuffer(options: options)]
        let first = buffers
        let second = arguments.string("second-dsn")
        if registersLate, second == nil { throw DemoError("--survive-then-register needs --second-dsn") }
        if let second, !registersLate {
            options.dsn = second
            buffers.append(try TelemetryBuffer(options: options))
        }
        if reporter == "after" { StandInReporter.install() }
        if signalReporter, !arguments.flag("reporter-first") {
            installSignalReporter()
            if arguments.flag("reopen") {
                // The last buffer closes while the reporter chains to its handler (and, with
                // `--reporter-uninstalls`, the reporter then leaves), and a new one is made.
                buffers.forEach { $0.close() }
                if arguments.flag("reporter-uninstalls") { tb_demo_uninstall_reporter() }
                buffers = try buffers.map { try TelemetryBuffer(options: $0.options) }
            }
        }
        closedOnSIGTERM = buffers
        let count = try arguments.integer("after", default: 100)
        let trace = TraceID.random()
        let survive = arguments.flag("survive-first")
        let removeAt = try arguments.integer("remove-at", default: -1)
        let linger = useconds_t(try arguments.integer("linger-us", default: 0))
        let pace = try arguments.integer("then-pace-us", default: -1)
        let itemPace = useconds_t(try arguments.integer("pace-us", default: 0))
        let items = 0..<count * (survive || registersLate ? 2 : 1)
        // Without a removal to die in, `--during-removal` dies the usual way.
        let diesDuringRemoval = arguments.flag("during-removal") && items.contains(removeAt)
        let threads = try arguments.integer("helpers", default: 0) + 1
        let helped = buffers, spans = arguments.flag("spans"), metrics = arguments.flag("metrics")
        for helper in 1..<threads {
            Thread {
                for item in stride(from: helper, to: Int.max, by: threads) {
                    add(item, to: helped, trace: trace, spans: spans, metrics: metrics)
                }
            }.start()
        }
        var acknowledgedAfter = 0
        for seq in items {
            if seq == removeAt {
                if diesDuringRemoval {
                    Thread {
                        usleep(linger)
                        die(kind)
                    }.start()
                }
                try buffers.forEach { try $0.removeAllData() }
                FileHandle.standardOutput.write(Data("removed\n".utf8))
            }
            if survive, seq == count {
                // A crash signal the process survives (the previous handler returns the first time), then a
                // forward: what the handler wrote must not publish these items a second time.
                if pace < 0 {
                    pthread_kill(pthread_self(), SIGSEGV)
                    buffers.forEach { $0.flush() }
                } else {
                    raise(SIGABRT)
                }
            }
            if survive, seq >= count, pace > 0 { usleep(useconds_t(pace)) }
            if registersLate, let second, seq == count {
                // A crash signal the process survives and the handler does not settle at once (an abort,
                // which `abort()` raises again), then a buffer made before it is settled: the next crash
                // must write it out too. The items from here on go to it alone.
                raise(SIGABRT)
                options.dsn = second
                buffers = [try TelemetryBuffer(options: options)]
            }
            let acknowledged = add(seq * threads, to: buffers, trace: trace, spans: spans, metrics: metrics)
            if survive, seq >= count, acknowledged { acknowledgedAfter += 1 }
            if itemPace > 0 { usleep(itemPace) }
        }
        if survive, pace > 0 {
            // However long the settling takes (a loaded machine, strace): on until N are acknowledged after it.
            var seq = items.upperBound
            let giveUp = Date().addingTimeInterval(30)
            while acknowledgedAfter < count, Date() < giveUp {
                usleep(useconds_t(pace))
                if add(seq * threads, to: buffers, trace: trace, spans: spans, metrics: metrics) { acknowledgedAfter += 1 }
                seq += 1
            }
        }
        if arguments.flag("when-held") { try awaitHeldFailpoint() }
        if arguments.flag("fork-child") { buffers = forkChild(buffers, trace: trace, exits: arguments.flag("child-exits")) }
        if arguments.flag("crash-while-crashing") {
            // Another thread crashes; once it has taken the handler and before it writes (failpoint
            // crash.handler-owned:hold), this one dies too.
            Thread { nullDereference() }.start()
            try awaitHeldFailpoint()
        }
        if arguments.flag("close-while-crashing") {
            // Another thread crashes; while its handler holds this buffer's registration (failpoint
            // crash.handler:hold), close and release the buffer and take its folder descriptor's number.
            Thread { nullDereference() }.start()
            try awaitHeldFailpoint()
            buffers.forEach { $0.close() }
            buffers.removeAll()
            let other = try arguments.required("other-dir")
            _ = open(other, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            sleep(5)
            FileHandle.standardError.write(Data("telemetry-demo: still alive after the handler\n".utf8))
            exit(3)
        }
        if diesDuringRemoval { while true { sleep(1) } }  // the other thread dies
        usleep(linger)
        FileHandle.standardError.write(Data("telemetry-demo: crashing (\(kind)), buffer folder \(directory.path)\n".utf8))
        if reporter != nil { StandInReporter.catchFirst() }
        die(kind)
        withExtendedLifetime((first, buffers)) {}
    }

    /// Adds item `item` (a log, with `spans` a span, with `metrics` a counter `item` with the attribute
    /// `seq`) to each buffer, then prints `ack <item>`, or
    /// `drop <item>` and what was dropped, in `stress`'s form (unbuffered, one `write` per line).
    /// Adds item `item` to every buffer and prints its line; returns whether every add took it.
    @discardableResult
    private static func add(_ item: Int, to buffers: [TelemetryBuffer], trace: TraceID, spans: Bool, metrics: Bool) -> Bool {
        var dropped: [String] = []
        for buffer in buffers {
            if !buffer.add(log: Log(level: .info, body: "item \(item)", traceID: trace)) { dropped.append("log") }
            if spans {
                let now = Date()
                if !buffer.add(span: Span(traceID: trace, spanID: .random(), name: "item \(item)", isSegment: false,
                                          startTimestamp: now, endTimestamp: now)) { dropped.append("span") }
            }
            if metrics, !buffer.add(metric: .counter("item", attributes: ["seq": .integer(Int64(item))], traceID: trace)) {
                dropped.append("metric")
            }
        }
        let line = dropped.isEmpty ? "ack \(item)\n" : "drop \(item) \(dropped.joined(separator: " "))\n"
        FileHandle.standardOutput.write(Data(line.utf8))
        return dropped.isEmpty
    }

    /// Waits until a failpoint armed with `hold` has stopped a background thread at its step (it creates
    /// the file `TELEMETRY_BUFFER_FAILPOINT_HELD` names), so the crash lands while that step is held.
    private static func awaitHeldFailpoint() throws {
        guard let path = ProcessInfo.processInfo.environment["TELEMETRY_BUFFER_FAILPOINT_HELD"] else {
            throw DemoError("--when-held needs TELEMETRY_BUFFER_FAILPOINT_HELD")
        }
        for _ in 0..<2000 where !FileManager.default.fileExists(atPath: path) { usleep(10_000) }
        guard FileManager.default.fileExists(atPath: path) else { throw DemoError("the failpoint was never held") }
    }

    /// The buffers an app's SIGTERM handler closes (`--previous-closes`).
    nonisolated(unsafe) private static var closedOnSIGTERM: [TelemetryBuffer] = []

    /// An app's SIGTERM handler, installed before the buffer's, that closes its buffers and exits: the
    /// buffer's handler calls it with the buffer's regions claimed.
    private static func installClosingHandler() {
        _ = signal(SIGTERM) { _ in
            Crash.closedOnSIGTERM.forEach { $0.close() }
            // The items the buffers count as lost (internal_sdk_error; not their bytes) once closed.
            let lost = Crash.closedOnSIGTERM.flatMap { $0.stats().drops }
                .filter { $0.key.hasPrefix("internal_sdk_error/") && !$0.key.hasSuffix("_byte") }.reduce(0) { $0 + $1.value }
            let message = "previous handler closed the buffers, \(lost) items counted as lost\n"
            _ = message.withCString { write(2, $0, strlen($0)) }
            exit(0)
        }
    }

    /// Whether the surviving handler has let one signal go.
    nonisolated(unsafe) private static var survived: Int32 = 0

    /// A value the optimizer cannot see through (always 0).
    private static let zero = Int(getpid()) < 0 ? 1 : 0

    private static func die(_ kind: String) {
        switch kind {
        case "segv": nullDereference()
        case "abort": abort()
        case "fatal": fatalError("telemetry-demo: fatalError, as asked")
        case "unwrap":
            let missing: Int? = zero == 0 ? nil : 1
            print(missing!)
        case "overflow":
            var value = Int.max - zero
            value += 1
            print(value)
        case "index":
            let values = [1, 2, 3]
            print(values[3 + zero])
        case "stack": print(recurse(0))
        case "thread":
            Thread { nullDereference() }.start()
            while true { sleep(1) }
        case "bus": busError()
        case "bus-optional":
            if tb_demo_machine_check_optional() != 0 { FileHandle.standardError.write(Data("telemetry-demo: cannot send BUS_MCEERR_AO\n".utf8)) }
        case "sent-segv": kill(getpid(), SIGSEGV)
        case "kill": kill(getpid(), SIGKILL)
        case "term": kill(getpid(), SIGTERM)
        default: break
        }
        sleep(5)  // a signal sent to ourselves is delivered before this ends
    }

    private static func nullDereference() {
        UnsafeMutablePointer<Int>(bitPattern: 8 + zero)!.pointee = 42
    }

    /// Unbounded recursion on the calling (main) thread: a stack overflow.
    @inline(never)
    private static func recurse(_ depth: Int) -> Int {
        var frame = (depth, depth, depth, depth, depth, depth, depth, depth)
        withUnsafeMutableBytes(of: &frame) { $0[0] = UInt8(truncatingIfNeeded: depth) }
        return recurse(depth + 1) + frame.0
    }

    /// Touches a mapped page past the end of its file.
    private static func busError() {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("telemetry-demo-bus-\(getpid())").path
        let fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0o600)
        unlink(path)
        guard fd >= 0, let page = mmap(nil, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), page != MAP_FAILED else {
            return FileHandle.standardError.write(Data("telemetry-demo: cannot map a file for SIGBUS\n".utf8))
        }
        page.storeBytes(of: 1, as: UInt8.self)
    }

    /// `fork()`s a child that adds five logs `child <n>` (printing `child add true|false`), then crashes; the
    /// parent waits for it (at most 20 s: then it prints `child hung`, kills it) and prints `child status <status>`.
    /// With `exits`, the child tries to create a buffer of its own (printing `child init ok`, or
    /// `child init forkedChild`, the error it should get), and lives on while the parent closes its buffers
    /// and opens them again (printing `reopened while the child lives: ok` or the error), then exits
    /// gracefully (`exit(0)`, which runs the `atexit` hooks); the parent goes on with the buffers it opened
    /// again.
    private static func forkChild(_ buffers: [TelemetryBuffer], trace: TraceID, exits: Bool) -> [TelemetryBuffer] {
        // Everything the child needs is made before the fork: in the child, Swift code that looks up
        // metadata or a conformance for the first time takes a lock of the runtime, which a thread that held
        // it at the fork (the buffer's background queue) never releases there. The child only calls `add`,
        // which returns before any such work in the child of a fork, and C.
        let logs = (0..<5).map { Log(level: .info, body: "child \($0)", traceID: trace) }
        let lines: [UnsafeMutablePointer<CChar>] = ["child add false\n", "child add true\n"].map { (text: String) in strdup(text)! }
        var ends: [Int32] = [0, 0]
        guard !exits || pipe(&ends) == 0 else { fatalError("pipe: \(errno)") }
        let (readEnd, writeEnd) = (ends[0], ends[1])
        // A buffer the child tries to create (in a folder of its own), and its answers; the error's cast is
        // looked up once here, not first in the child.
        var own = buffers[0].options
        own.cacheDirectory = own.cacheDirectory.appendingPathComponent("child")
        let created: [UnsafeMutablePointer<CChar>] = ["child init ok\n", "child init forkedChild\n", "child init failed otherwise\n"]
            .map { (text: String) in strdup(text)! }
        do { _ = try TelemetryBuffer(options: Options(dsn: "")) } catch { _ = (error as? TelemetryBufferError)?.code == .forkedChild }
        // The child's loops once here (adding nothing): a debug build instantiates their generic iterators'
        // metadata at run time, the first time under a lock of the runtime that another thread may hold at
        // the fork (a child of the CI's once hung so, before its first add).
        for log in logs { for buffer in buffers where buffer.options.dsn.isEmpty && log.body.isEmpty { _ = buffer } }
        let child = tb_demo_fork()
        if child == 0 {
            for log in logs {
                var held = true
                for buffer in buffers where !buffer.add(log: log) { held = false }
                tb_demo_say(lines[held ? 1 : 0])
            }
            guard exits else { tb_demo_fault(); return [] }
            do {
                _ = try TelemetryBuffer(options: own)
                tb_demo_say(created[0])
            } catch {
                tb_demo_say(created[(error as? TelemetryBufferError)?.code == .forkedChild ? 1 : 2])
            }
            close(writeEnd)
            tb_demo_wait_then_exit(readEnd)
        }
        var reopened = buffers
        if exits {
            close(readEnd)
            for buffer in buffers { buffer.close() }
            do {
                reopened = try buffers.map { try TelemetryBuffer(options: $0.options) }
                FileHandle.standardOutput.write(Data("reopened while the child lives: ok\n".utf8))
            } catch {
                FileHandle.standardOutput.write(Data("reopened while the child lives: \(error)\n".utf8))
            }
            close(writeEnd)
        }
        // A child that hangs (a lock another thread held at the fork, in code the child runs) would keep the
        // test's pipes open: after 20 s it is killed, saying where it waited.
        var status: Int32 = 0, waits = 0
        var reaped = waitpid(child, &status, WNOHANG)
        while reaped == 0, waits < 2000 {
            usleep(10_000)
            waits += 1
            reaped = waitpid(child, &status, WNOHANG)
        }
        if reaped == 0 {
            let waiting = (try? String(contentsOfFile: "/proc/\(child)/wchan", encoding: .utf8)) ?? "?"
            kill(child, SIGKILL)
            waitpid(child, &status, 0)
            FileHandle.standardOutput.write(Data("child hung (waiting in \(waiting))\n".utf8))
        }
        FileHandle.standardOutput.write(Data("child status \(status)\n".utf8))
        return reopened
    }

    /// A handler installed before the buffer's that returns the first time (the process survives the
    /// signal), then acts like `installPreviousHandler`'s.
    private static func installSurvivingHandler() {
        for number in [SIGSEGV, SIGABRT, SIGILL, SIGTRAP, SIGBUS, SIGFPE] {
            _ = signal(number) { received in
                if Crash.survived == 0 {
                    Crash.survived = 1
                    let message = "previous handler returned\n"
                    _ = message.withCString { write(2, $0, strlen($0)) }
                    return
                }
                _ = signal(received, SIG_DFL)
                raise(received)
            }
        }
    }

    /// A plain handler installed before the buffer's, as another crash reporter would: it says it ran,
    /// then lets the signal kill the process.
    private static func installPreviousHandler() {
        for number in [SIGSEGV, SIGABRT, SIGILL, SIGTRAP, SIGBUS, SIGFPE, SIGTERM] {
            _ = signal(number) { received in
                let message = "previous handler called\n"
                _ = message.withCString { write(2, $0, strlen($0)) }
                _ = signal(received, SIG_DFL)
                raise(received)
            }
        }
    }
}
