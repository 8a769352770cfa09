import Floor
import Foundation
import TelemetryBuffer

// What package-benchmark's harness cannot show: the tail of `add` under sustained load at the default
// limits (every wake-up and forward included, p99.9 too), the resident memory one buffer adds, and
// threads that add for the whole measurement. Each run is a process of its own, so what one scenario
// loaded or touched is not in the next one's figures. `ratios.sh` runs every scenario.
//
//   LoadDriver rate <strategy> <logs per second> <adds>    per-call times at a paced rate
//   LoadDriver backtoback <adds> <rounds>                 per-call times, adds back to back, and the floor
//   LoadDriver memory <strategy> [warm]                    resident set before and after
//   LoadDriver threads <threads> <pairs> [logs]            one thread against <threads>, rounds alternating
//   LoadDriver first <count>                               a batch's first add, and its floor
//   LoadDriver saturate <threads> <seconds>                as fast as possible, at the default limits
//   LoadDriver battery <logs per second> <seconds>         a steady app's wake-ups and bytes written
//   LoadDriver startup <count>                             creating a buffer: empty folder, after a clean close, after a kill

/// The typical log of the benchmarks: an 80-character body with a quote, five attributes.
func makeLog() -> Log { Log(
    level: .info, body: #"Checkout "express" finished for order 7341 after 3 retries; cart had 12 items."#,
    traceID: TraceID(high: 0x4F2B_8E1C_9A7D_43E6, low: 0xB0C5_D1E2_F3A4_B5C6), spanID: SpanID(0x9C1D_2E3F_4A5B_6C7D),
    timestamp: Date(timeIntervalSince1970: 1_767_261_600.125),
    attributes: ["http.route": "/checkout", "http.status_code": 200, "duration.ms": 412.75, "cache.hit": true, "user.tier": "gold"]) }
let typicalLog = makeLog()

/// Monotonic nanoseconds.
@inline(__always)
func now() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
}

/// A buffer with the library's defaults (limits, intervals; `IO_SYNC_MS` sets `ioSyncInterval`), in a fresh
/// folder, uploads off. With nothing draining the folder, both cache quotas are lifted: past them every
/// forward would also evict an envelope (read, parse and delete one more file), which a buffer that uploads
/// does not do at a steady state.
func makeBuffer(_ strategy: Options.Strategy, name: String = "") -> TelemetryBuffer {
    let folder = URL(fileURLWithPath: ProcessInfo.processInfo.environment["LOAD_DIRECTORY"] ?? NSTemporaryDirectory())
        .appendingPathComponent("tb-load-\(getpid())\(name)")
    // LOAD_DSN: upload to that server (sink.py), as an app online does; otherwise every envelope stays.
    let server = ProcessInfo.processInfo.environment["LOAD_DSN"]
    var options = Options(dsn: server ?? "https://key@o1.ingest.example.com/1")
    options.cacheDirectory = folder
    options.strategy = strategy
    options.upload = server != nil
    // LOAD_QUOTAS=default: the default quotas, as an app offline past them (each envelope stored evicts one).
    if ProcessInfo.processInfo.environment["LOAD_QUOTAS"] != "default" {
        options.maxCachedEnvelopes = 1_000_000
        options.maxCacheBytes = 1 << 40
    }
    // IO_SYNC_MS: another `ioSyncInterval` (with `flushInterval`, the power-loss window), to see what it costs a battery.
    if let milliseconds = ProcessInfo.processInfo.environment["IO_SYNC_MS"].flatMap(Double.init) {
        options.ioSyncInterval = milliseconds / 1000
    }
    return try! TelemetryBuffer(options: options)
}

/// The resident set, in KiB: total, anonymous, file-backed and shared memory from /proc/self/status, and
/// from /proc/self/smaps the dirty pages (private and shared: what a phone counts, a mapped list's written
/// pages among them until the kernel writes them back) and the clean ones (code, read files). Dirty pages
/// are split by where they are: the buffer's own files (`tb-load-` folders: the mapped lists), anonymous
/// memory (heap, threads' stacks and malloc arenas) and other files (in the first run after a build, the
/// driver's own binary: its pages stay dirty in the page cache until written back, and appear here).
typealias Resident = (total: Int, anon: Int, file: Int, shmem: Int, dirty: Int, clean: Int,
                      dirtyLists: Int, dirtyAnonymous: Int, dirtyOthers: Int)
func residentKiB() -> Resident {
    func read(_ path: String) -> String {
        String(decoding: FileHandle(forReadingAtPath: path)?.readDataToEndOfFile() ?? Data(), as: UTF8.self)
    }
    let status = read("/proc/self/status").split(separator: "\n")
    func field(_ name: String) -> Int {
        guard let line = status.first(where: { $0.hasPrefix(name + ":") }) else { return 0 }
        return Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "0") ?? 0
    }
    var (clean, lists, anonymous, others) = (0, 0, 0, 0)
    var mapping = ""
    for line in read("/proc/self/smaps").split(separator: "\n") {
        let words = line.split(separator: " ", omittingEmptySubsequences: true)
        guard let first = words.first else { continue }
        if first.contains("-"), first.allSatisfy({ $0.isHexDigit || $0 == "-" }) {
            mapping = words.count > 5 ? String(words[5]) : ""
            continue
        }
        let kiB = words.count > 1 ? Int(words[1]) ?? 0 : 0
        switch first {
        case "Private_Clean:", "Shared_Clean:": clean += kiB
        case "Private_Dirty:", "Shared_Dirty:":
            if mapping.contains("/tb-load-") { lists += kiB }
            else if mapping.hasPrefix("/") { others += kiB }
            else { anonymous += kiB }
        default: break
        }
    }
    return (field("VmRSS"), field("RssAnon"), field("RssFile"), field("RssShmem"), lists + anonymous + others, clean,
            lists, anonymous, others)
}

func percentile(_ sorted: [UInt32], _ fraction: Double) -> UInt32 {
    sorted[min(sorted.count - 1, Int((Double(sorted.count) * fraction).rounded(.down)))]
}

func strategy(_ name: String) -> Options.Strategy {
    guard let strategy = Options.Strategy(rawValue: name) else { fatalError("no strategy \(name)") }
    return strategy
}

/// Adds `count` logs at `rate` per second (each started at its deadline, busy-waiting in between), timing
/// every call; prints the percentiles and the refusals (a forward that cannot keep up shows as refusals).
func rate(_ strategy: Options.Strategy, perSecond rate: Double, count: Int) {
    let buffer = makeBuffer(strategy)
    _ = buffer.recovery
    var times = [UInt32](repeating: 0, count: count)
    var refused = 0
    let spacing = UInt64(1e9 / rate)
    let start = now()
    for index in 0..<count {
        let deadline = start + UInt64(index) * spacing
        while now() < deadline {}
        let before = now()
        let accepted = buffer.add(log: typicalLog)
        times[index] = UInt32(clamping: now() - before)
        if !accepted { refused += 1 }
    }
    let elapsed = Double(now() - start) / 1e9
    buffer.close()
    times.sort()
    let micro = { (value: UInt32) in String(format: "%.2f", Double(value) / 1000) }
    print("rate \(strategy.rawValue) \(rate)/s adds \(count) in \(String(format: "%.2f", elapsed)) s: " +
          "p50 \(micro(percentile(times, 0.5))) µs, p90 \(micro(percentile(times, 0.9))) µs, " +
          "p99 \(micro(percentile(times, 0.99))) µs, p99.9 \(micro(percentile(times, 0.999))) µs, " +
          "max \(micro(times.last ?? 0)) µs, over 2 µs \(times.count - (times.firstIndex { $0 > 2000 } ?? times.count)), refused \(refused)")
}

/// Adds back to back, as an app that logs in bursts does, each call timed: `rounds` rounds of `adds`
/// `add(log:)` calls on one DoubleRotatingBuffer (defaults), alternating with rounds of the floor in the
/// same process (the log hand-encoded and copied into a mapped page under a mutex), so that the machine's
/// drift falls on both. The forwards run on the other core while the caller adds; refused adds (both lists
/// full, a cheap return) are timed too, and the accepted ones apart.
func backToBack(adds: Int, rounds: Int) {
    let buffer = makeBuffer(.doubleRotatingBuffer)
    _ = buffer.recovery
    let folder = URL(fileURLWithPath: ProcessInfo.processInfo.environment["LOAD_DIRECTORY"] ?? NSTemporaryDirectory())
        .appendingPathComponent("tb-load-\(getpid())-floor")
    try! FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
    let sink = MappedSink(path: folder.appendingPathComponent("mapped").path)
    var library = [UInt32](), accepted = [UInt32](), floor = [UInt32]()
    library.reserveCapacity(adds * rounds)
    accepted.reserveCapacity(adds * rounds)
    floor.reserveCapacity(adds * rounds)
    for _ in 0..<rounds {
        for _ in 0..<adds {
            let before = now()
            sink.handEncodeAndCopy(typicalLog)
            floor.append(UInt32(clamping: now() - before))
        }
        for _ in 0..<adds {
            let before = now()
            let kept = buffer.add(log: typicalLog)
            let time = UInt32(clamping: now() - before)
            library.append(time)
            if kept { accepted.append(time) }
        }
    }
    buffer.close()
    library.sort()
    accepted.sort()
    floor.sort()
    func figures(_ times: [UInt32]) -> String {
        guard !times.isEmpty else { return "none" }
        let micro = { (fraction: Double) in String(format: "%.2f", Double(percentile(times, fraction)) / 1000) }
        return "p50 \(micro(0.5)) µs, p99 \(micro(0.99)) µs, p99.9 \(micro(0.999)) µs, max \(micro(1))"
    }
    let ratio = { (times: [UInt32], fraction: Double) in
        times.isEmpty ? 0 : Double(percentile(times, fraction)) / Double(max(1, percentile(floor, fraction)))
    }
    print("back to back, \(rounds) rounds of \(adds): add(log:) \(figures(library)) µs; the \(accepted.count) accepted " +
          "\(figures(accepted)) µs; floor \(figures(floor)) µs; add ÷ floor: p50 " +
          String(format: "%.2f×, p99 %.2f×, p99.9 %.2f×; accepted ÷ floor: p99 %.2f×", ratio(library, 0.5), ratio(library, 0.99),
                 ratio(library, 0.999), ratio(accepted, 0.99)))
}

/// Resident set before creating a buffer, after, after 100,000 adds at 50,000 per second, and after a
/// flush. `warm`: first use Foundation and Dispatch as any app does before it creates a buffer (the
/// environment, the caches folder, a file, dates, a queue), so that the shared library pages those touch
/// are not counted as the buffer's; what that use itself added is printed too.
func memory(_ strategy: Options.Strategy, warm: Bool) {
    let initial = residentKiB()
    if warm {
        _ = ProcessInfo.processInfo.environment["HOME"]
        let folder = FileManager.default.urls(for: .cachesDirectory, in: .userDomainMask).first!
            .appendingPathComponent("tb-load-\(getpid())-warm")
        try! FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        try! Data("warm".utf8).write(to: folder.appendingPathComponent("file"), options: .atomic)
        try! FileManager.default.removeItem(at: folder)
        _ = Date().timeIntervalSince1970
        let done = DispatchSemaphore(value: 0)
        DispatchQueue(label: "warm").asyncAfter(deadline: .now() + .milliseconds(1)) { done.signal() }
        done.wait()
    }
    let before = residentKiB()
    let buffer = makeBuffer(strategy)
    _ = buffer.recovery
    let created = residentKiB()
    let start = now()
    for index in 0..<100_000 {
        while now() < start + UInt64(index) * 20_000 {}
        buffer.add(log: typicalLog)
    }
    let added = residentKiB()
    buffer.flush()
    let flushed = residentKiB()
    // What the kernel's periodic writeback (dirty pages older than 30 s) makes of the lists' written pages:
    // clean, still mapped. `sync()` starts it now.
    sync()
    let written = residentKiB()
    func line(_ label: String, _ value: Resident) -> String {
        "\(label) \(value.total) KiB (anon \(value.anon), file \(value.file), shmem \(value.shmem)), " +
        "+\(value.total - before.total) KiB, dirty +\(value.dirty - before.dirty) KiB " +
        "(lists +\(value.dirtyLists - before.dirtyLists), anonymous +\(value.dirtyAnonymous - before.dirtyAnonymous), " +
        "other files +\(value.dirtyOthers - before.dirtyOthers)), clean +\(value.clean - before.clean) KiB"
    }
    let warmUp = warm ? " (the warm-up +\(before.total - initial.total) KiB)" : ""
    print("memory \(strategy.rawValue)\(warm ? " (warm)" : ""): before \(before.total) KiB (anon \(before.anon), file \(before.file), " +
          "dirty \(before.dirty), clean \(before.clean))\(warmUp); " +
          line("created", created) + "; " + line("100,000 adds", added) + "; " + line("flushed", flushed) + "; " + line("written back", written))
    withExtendedLifetime(buffer) {}
}

/// The typical span of the benchmarks, built anew.
func makeSpan() -> Span {
    Span(traceID: typicalLog.traceID, spanID: SpanID(0x0A1B_2C3D_4E5F_6A7B), parentSpanID: SpanID(0x9C1D_2E3F_4A5B_6C7D),
         name: "GET /cart", status: .ok, isSegment: false,
         startTimestamp: Date(timeIntervalSince1970: 1_767_261_599.9), endTimestamp: Date(timeIntervalSince1970: 1_767_261_600.35),
         attributes: ["sentry.op": "http.client", "http.response.status_code": 200, "server.address": "api.example.com"])
}
let typicalSpan = makeSpan()

/// One thread's rate against `threads` threads' on one buffer, in rounds that alternate in one process (one
/// thread, then all of them), so that the VM's drift, 20 % and more within minutes, falls on both sides of
/// each ratio. The threads live for the whole run. In a round, they meet (a late wake-up is not counted), the
/// last one to arrive sets a start time 5 µs ahead, and each adds from it until the same end time: 150 µs
/// of spans, or 25 µs of typical logs (`WINDOW_US` sets another), 8 spans or 4 logs between reads of the
/// clock, at most a batch's worth per buffer (1,000 spans, 100 logs: no forward or wake-up runs while they
/// add; the batch's first item is added and the batch flushed before each round). A round's rate is its adds
/// over the time from the first thread's start to the last one's end: the rate in all while every thread
/// adds for the whole window. Prints both rates, the median of the per-pair ratios with its spread and the
/// share of pairs at 1.5× or above, the threads' median start skew and how many stopped at the cap.
/// With SEPARATE=1 each thread adds to a buffer of its own: the machine's floor for the scaling. With
/// HANDOFF=1 as well, each add is followed by a turn of one lock all threads share (glibc's adaptive mutex,
/// as the library's `Lock`) that bumps a counter: the floor of any design that takes one lock per add,
/// whatever it does under it.
func threads(_ count: Int, pairs: Int, logs: Bool) {
    let environment = ProcessInfo.processInfo.environment
    let separate = environment["SEPARATE"] != nil
    let handoff = separate && environment["HANDOFF"] != nil
    let window = UInt64(environment["WINDOW_US"].flatMap { Int($0) } ?? (logs ? 25 : 150)) * 1000
    let step = logs ? 4 : 8
    let shared = Handoff()
    /// The threads of a round and how many have arrived, its start time (set by the last thread to arrive),
    /// each thread's cap, and what the threads report.
    final class Round: @unchecked Sendable {
        let lock = NSLock()
        var active = 0
        var arrived = 0
        var go: UInt64 = 0
        var cap = 0
        var starts: [UInt64] = []
        var ends: [UInt64] = []
        var added: [Int] = []

        /// `go` once it is set, polled with `try()`: a thread that waited on the lock would sleep on it and
        /// start late.
        func start() -> UInt64 {
            while true {
                guard lock.try() else { continue }
                defer { lock.unlock() }
                if go != 0 { return go }
            }
        }
    }
    let one = makeBuffer(.doubleRotatingBuffer)
    let buffers = (0..<count).map { separate ? makeBuffer(.doubleRotatingBuffer, name: "-\($0)") : one }
    let batch = logs ? 96 : 960
    let round = Round()
    let starts = (0..<count).map { _ in DispatchSemaphore(value: 0) }
    let done = DispatchGroup()
    for thread in 0..<count {
        Thread {
            // An item of the thread's own, as an app's threads build theirs: one shared by both threads would
            // have them contend on its reference counts.
            let span = makeSpan(), log = makeLog()
            let target = buffers[thread]
            while true {
                starts[thread].wait()
                let cap = round.lock.withLock {
                    round.arrived += 1
                    if round.arrived == round.active { round.go = now() + 5_000 }
                    return round.cap
                }
                let go = round.start(), until = go + window
                var start = now()
                while start < go { start = now() }
                var added = 0, end = start
                repeat {
                    if logs {
                        for _ in 0..<step {
                            target.add(log: log)
                            if handoff { shared.turn() }
                        }
                    } else {
                        for _ in 0..<step {
                            target.add(span: span)
                            if handoff { shared.turn() }
                        }
                    }
                    added += step
                    end = now()
                } while added < cap && end < until
                round.lock.withLock {
                    round.starts.append(start)
                    round.ends.append(end)
                    round.added.append(added)
                }
                done.leave()
            }
        }.start()
    }
    var skew: [Double] = [], capped = 0
    /// Runs one round with the first `active` threads; returns its rate in all.
    func run(_ active: Int) -> Double {
        // The batch's first add wakes the background queue, which then starts the IO cache: done before the
        // round, so those threads do not take the cores from the adding ones.
        for buffer in separate ? buffers : [one] {
            buffer.flush()
            if logs { buffer.add(log: typicalLog) } else { buffer.add(span: typicalSpan) }
        }
        usleep(2000)
        // Whole steps only, so that a round never passes its batch.
        let cap = (separate ? batch : batch / active) / step * step
        round.lock.withLock {
            (round.starts, round.ends, round.added) = ([], [], [])
            (round.active, round.arrived, round.go, round.cap) = (active, 0, 0, cap)
        }
        for thread in 0..<active { done.enter(); starts[thread].signal() }
        done.wait()
        return round.lock.withLock {
            if active > 1 { skew.append(Double(round.starts.max()! - round.starts.min()!)) }
            capped += round.added.filter { $0 >= cap }.count
            return Double(round.added.reduce(0, +)) / (Double(round.ends.max()! - round.starts.min()!) / 1e9)
        }
    }
    var alone: [Double] = [], together: [Double] = [], ratios: [Double] = []
    for _ in 0..<pairs {
        alone.append(run(1))
        together.append(run(count))
        ratios.append(together.last! / alone.last!)
    }
    let median = { (values: [Double]) in values.sorted()[values.count / 2] }
    let sorted = ratios.sorted()
    print("threads 1 and \(count), \(pairs) pairs of \(window / 1000) µs rounds of \(logs ? "logs" : "spans"): " +
          "\(Int(median(alone))) and \(Int(median(together))) adds/s in all; \(count) threads ÷ one " +
          String(format: "%.2f× (median of pairs; quartiles %.2f–%.2f; %.0f %% of pairs ≥ 1.5×)",
                 median(ratios), sorted[pairs / 4], sorted[pairs * 3 / 4], 100 * Double(ratios.filter { $0 >= 1.5 }.count) / Double(pairs)) +
          ", starts \(skew.isEmpty ? 0 : Int(median(skew))) ns apart, \(capped) stopped at the cap")
}

/// One lock all threads share and the counter it guards, in a block of their own: the counter on the
/// line after the mutex's, as the library's `Lock` keeps its value.
final class Handoff: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let counter: UnsafeMutablePointer<Int>

    init() {
        let block = UnsafeMutableRawPointer.allocate(byteCount: 128, alignment: 128)
        mutex = block.bindMemory(to: pthread_mutex_t.self, capacity: 1)
        counter = (block + 64).bindMemory(to: Int.self, capacity: 1)
        counter.initialize(to: 0)
        var attributes = pthread_mutexattr_t()
        pthread_mutexattr_init(&attributes)
        #if canImport(Glibc)
        pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_ADAPTIVE_NP))
        #endif
        pthread_mutex_init(mutex, &attributes)
        pthread_mutexattr_destroy(&attributes)
    }

    @inline(never)
    func turn() {
        pthread_mutex_lock(mutex)
        counter.pointee &+= 1
        pthread_mutex_unlock(mutex)
    }
}

/// `threads` threads add logs as fast as they can for `seconds` at the default limits: the sustained rate
/// the forwards allow, the calls (refusals included) the lock lets through, the envelopes written and the
/// bytes written to the disk per item accepted (run it under `strace -f -c` for the syncs per envelope).
/// `LOAD_QUOTAS=default` keeps the default cache quotas: an app offline past them, each envelope stored
/// evicting one.
func saturate(_ count: Int, seconds: Double) {
    /// Shared by the threads: the end time, set before they start, and a cache line per thread for its counts.
    struct Race: @unchecked Sendable {
        let end = UnsafeMutablePointer<UInt64>.allocate(capacity: 1)
        let counts: UnsafeMutablePointer<Int>
        init(threads: Int) { counts = .allocate(capacity: threads * 16) }
    }
    let buffer = makeBuffer(.doubleRotatingBuffer)
    _ = buffer.recovery
    let race = Race(threads: count)
    let ready = DispatchGroup()
    let go = DispatchSemaphore(value: 0)
    let done = DispatchGroup()
    for thread in 0..<count {
        ready.enter()
        done.enter()
        Thread {
            var made = 0, kept = 0
            ready.leave()
            go.wait()
            while now() < race.end.pointee {
                for _ in 0..<64 {
                    made += 1
                    if buffer.add(log: typicalLog) { kept += 1 }
                }
            }
            race.counts[thread * 16] = made
            race.counts[thread * 16 + 1] = kept
            done.leave()
        }.start()
    }
    ready.wait()
    sync()
    let bytes = writtenBytes()
    race.end.pointee = now() + UInt64(seconds * 1e9)
    for _ in 0..<count { go.signal() }
    done.wait()
    buffer.close()
    // What the run wrote reaches the disk now (the kernel's writeback would, later).
    sync()
    let written = writtenBytes() - bytes
    let envelopes = (try? FileManager.default.contentsOfDirectory(atPath: buffer.envelopesDirectory.path).count) ?? 0
    let (logs, logBytes) = logsWritten(to: buffer)
    let calls = (0..<count).reduce(0) { $0 + race.counts[$1 * 16] }
    let accepted = (0..<count).reduce(0) { $0 + race.counts[$1 * 16 + 1] }
    print("saturate \(count) threads for \(seconds) s: \(Int(Double(calls) / seconds)) calls/s, " +
          "\(Int(Double(accepted) / seconds)) accepted/s in all; \(envelopes) envelopes, " +
          // Per item accepted: with the default quotas most are evicted, and the folder keeps only the last ones.
          String(format: "bytes written %.0f per item = %.2f× its JSON", Double(written) / Double(max(1, accepted)),
                 Double(written) / Double(max(1, accepted)) / (Double(logBytes) / Double(max(1, logs)))))
}

/// `count` times: a flush, then the add that starts the next batch (it wakes the background queue); then
/// the same after an add that started the batch already; then the floor, signalling a semaphore a parked
/// thread waits on (one futex wake), after the same flush. Prints each one's per-call percentiles.
func firstAdds(_ count: Int) {
    let buffer = makeBuffer(.doubleRotatingBuffer)
    let parked = DispatchSemaphore(value: 0)
    Thread { while true { parked.wait() } }.start()
    for mode in ["first add of a batch", "second add of a batch", "floor, waking a parked thread"] {
        var times: [UInt32] = []
        for _ in 0..<count {
            buffer.add(log: typicalLog)
            buffer.flush()
            if mode.hasPrefix("second") { buffer.add(log: typicalLog) }
            let start = now()
            if mode.hasPrefix("floor") { parked.signal() } else { buffer.add(log: typicalLog) }
            times.append(UInt32(now() - start))
        }
        times.sort()
        let micros = { (fraction: Double) in String(format: "%.2f µs", Double(percentile(times, fraction)) / 1000) }
        print("\(mode) after a flush, \(count) times: p50 \(micros(0.5)), p90 \(micros(0.9)), p99 \(micros(0.99))")
    }
}

/// Bytes this process has the disk write, from /proc/self/io: `write_bytes`, which the kernel counts as
/// pages are dirtied, less `cancelled_write_bytes`, the dirty pages of files deleted or truncated before
/// their writeback (an envelope sent and deleted before any sync). Measured after a `sync()`: what was
/// dirtied has reached the disk.
func writtenBytes() -> Int {
    guard let io = try? String(contentsOfFile: "/proc/self/io", encoding: .utf8) else { return 0 }
    func field(_ name: String) -> Int {
        let line = io.split(separator: "\n").first { $0.hasPrefix(name + ":") }
        return line.flatMap { Int($0.split(separator: " ").last ?? "") } ?? 0
    }
    return field("write_bytes") - field("cancelled_write_bytes")
}

/// Voluntary context switches of every thread of the process, ended ones included.
func voluntarySwitches() -> Int {
    var usage = rusage()
    #if os(Linux)
    getrusage(RUSAGE_SELF.rawValue, &usage)
    #else
    getrusage(RUSAGE_SELF, &usage)
    #endif
    return usage.ru_nvcsw
}

/// The logs in `buffer`'s envelopes and their JSON bytes: each log item's payload is `{"items":[…]}`, logs
/// joined by commas.
func logsWritten(to buffer: TelemetryBuffer) -> (logs: Int, bytes: Int) {
    var logBytes = 0, logs = 0
    for name in (try? FileManager.default.contentsOfDirectory(atPath: buffer.envelopesDirectory.path)) ?? [] {
        guard let data = FileManager.default.contents(atPath: buffer.envelopesDirectory.appendingPathComponent(name).path) else { continue }
        let lines = data.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        var index = 1
        while index + 1 < lines.count {
            if let header = try? JSONSerialization.jsonObject(with: Data(lines[index])) as? [String: Any],
               header["type"] as? String == "log", let items = header["item_count"] as? Int, let length = header["length"] as? Int {
                logs += items
                logBytes += length - 12 - (items - 1)
            }
            index += 2
        }
    }
    return (logs, logBytes)
}

/// A steady app (the issue's battery scenario): `rate` typical logs a second for `seconds` (rate 0: one log
/// at the start), each added at its deadline by a caller asleep in between; DoubleRotatingBuffer, defaults.
/// Prints, over that window: wake-ups (the process's voluntary context switches less the caller's own
/// sleeps) and the bytes written to the disk (less what the page cache still holds: the window ends with
/// the disk's dirty data written back, `sync`), over the logs' JSON bytes. Run it under
/// `strace -f -c -e trace=fsync,fdatasync` for the syncs (ratios.sh does); the buffer's creation and close
/// are outside the window, not outside strace's count: less a run with rate 0.
func battery(perSecond rate: Double, seconds: Double) {
    let buffer = makeBuffer(.doubleRotatingBuffer)
    // What creating the buffer started (recovery off the creating thread) is done before the window.
    buffer.flush()
    sync()
    let switches = voluntarySwitches(), bytes = writtenBytes(), start = now()
    let count = rate > 0 ? Int((rate * seconds).rounded()) : 1
    var sleeps = 0
    func sleep(until deadline: UInt64) {
        let current = now()
        guard deadline > current else { return }
        var time = timespec(tv_sec: Int((deadline - current) / 1_000_000_000), tv_nsec: Int((deadline - current) % 1_000_000_000))
        nanosleep(&time, nil)
        sleeps += 1
    }
    for index in 0..<count {
        sleep(until: start + UInt64(Double(index) / max(rate, 1) * 1e9))
        buffer.add(log: typicalLog)
    }
    sleep(until: start + UInt64(seconds * 1e9))
    let wakeUps = voluntarySwitches() - switches - sleeps
    // With BATTERY_THREADS set: each live thread's voluntary switches since it started, by name.
    if ProcessInfo.processInfo.environment["BATTERY_THREADS"] != nil {
        for task in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? [] {
            let name = (try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8)) ?? "?"
            let status = (try? String(contentsOfFile: "/proc/self/task/\(task)/status", encoding: .utf8)) ?? ""
            let line = status.split(separator: "\n").first { $0.hasPrefix("voluntary_ctxt_switches") } ?? ""
            print("  thread \(task) \(name.trimmingCharacters(in: .whitespacesAndNewlines)): \(line.split(separator: "\t").last ?? "")")
        }
    }
    // What the buffer wrote in the window reaches the disk now (the kernel's writeback would, later).
    sync()
    let written = writtenBytes() - bytes
    buffer.close()
    let (logs, logBytes) = logsWritten(to: buffer)
    let head = String(format: "battery %g logs/s for %g s: %d logs, wake-ups %.1f/s, bytes written %d", rate, seconds, count,
                      Double(wakeUps) / seconds, written)
    guard logs > 0 else {
        // Online, the envelopes went to the server: the bytes per log, for the offline run's JSON size.
        return print(head + String(format: " = %.0f per log, envelopes sent", Double(written) / Double(max(1, count))))
    }
    let perLog = Double(logBytes) / Double(logs)
    print(head + String(format: " = %.2f× the logs' JSON (%.0f bytes each)", Double(written) / (Double(count) * perLog), perLog))
}

/// `count` times each: creating a buffer (DoubleRotatingBuffer, defaults) on an empty folder, and on the
/// folder a process left when it was killed holding 150 items (a copy of one made once, by a child that
/// kills itself), then the first `flush()` after that kill (recovery's publication); and, at most 5 times, on
/// a folder holding `LOAD_STORED` (5,000) envelopes against a bound of 30, and the first `flush()` after that
/// start. Prints the per-call percentiles.
func startup(_ count: Int) {
    let parent = URL(fileURLWithPath: ProcessInfo.processInfo.environment["LOAD_DIRECTORY"] ?? NSTemporaryDirectory())
    let killed = parent.appendingPathComponent("tb-load-\(getpid())-killed")
    let child = Process()
    child.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
    child.arguments = ["leave", killed.path]
    try! child.run()
    child.waitUntilExit()
    var empty: [UInt32] = [], afterClose: [UInt32] = [], afterKill: [UInt32] = [], firstFlush: [UInt32] = []
    var recovered: Int?
    for run in 0..<count {
        var options = Options(dsn: "https://key@o1.ingest.example.com/1")
        options.upload = false
        options.cacheDirectory = parent.appendingPathComponent("tb-load-\(getpid())-empty-\(run)")
        var start = now()
        var buffer = try! TelemetryBuffer(options: options)
        empty.append(UInt32(now() - start))
        buffer.close()
        start = now()
        buffer = try! TelemetryBuffer(options: options)
        afterClose.append(UInt32(now() - start))
        buffer.close()
        options.cacheDirectory = parent.appendingPathComponent("tb-load-\(getpid())-after-kill-\(run)")
        try! FileManager.default.copyItem(at: killed, to: options.cacheDirectory)
        start = now()
        buffer = try! TelemetryBuffer(options: options)
        afterKill.append(UInt32(now() - start))
        start = now()
        buffer.flush()
        firstFlush.append(UInt32(now() - start))
        // Every copy holds the same: 150 items, or fewer where the child's first forward (at 100 logs) got
        // far enough before the kill that recovery skips what it published.
        recovered = recovered ?? buffer.recovery.items
        precondition(buffer.recovery.items == recovered && recovered! > 0,
                     "a copy recovered \(buffer.recovery.items) items, the first \(recovered!)")
        buffer.close()
    }
    // A folder holding far more envelopes than its bound (an app that lowered `maxCachedEnvelopes`, or
    // `LOAD_STORED` of them from a run with a higher one): what is beyond the bound goes, on the background queue.
    let storedCount = Int(ProcessInfo.processInfo.environment["LOAD_STORED"] ?? "") ?? 5000
    let overfull = parent.appendingPathComponent("tb-load-\(getpid())-overfull")
    var template = Options(dsn: "https://key@o1.ingest.example.com/1")
    template.upload = false
    template.cacheDirectory = overfull
    let made = try! TelemetryBuffer(options: template)
    made.close()
    let micros = UInt64(Date().timeIntervalSince1970 * 1_000_000)
    let envelope = Data("{}\n{\"type\":\"log\",\"item_count\":1,\"content_type\":\"application/vnd.sentry.items.log+json\",\"length\":40}\n{\"items\":[{\"level\":\"info\",\"body\":\"x\"}]}\n".utf8)
    for index in 0..<storedCount {
        let name = String(format: "%016llu-%06d-%08x.envelope", micros + UInt64(index), index % 1_000_000, index)
        FileManager.default.createFile(atPath: made.envelopesDirectory.appendingPathComponent(name).path, contents: envelope)
    }
    var overfullStart: [UInt32] = [], overfullFlush: [UInt32] = []
    for run in 0..<min(count, 5) {
        var options = template
        options.cacheDirectory = parent.appendingPathComponent("tb-load-\(getpid())-overfull-\(run)")
        try! FileManager.default.copyItem(at: overfull, to: options.cacheDirectory)
        let start = now()
        let buffer = try! TelemetryBuffer(options: options)
        overfullStart.append(UInt32(now() - start))
        // Waits for what the start left to the background queue.
        let flushed = now()
        buffer.flush()
        overfullFlush.append(UInt32(now() - flushed))
        buffer.close()
    }
    for (name, times) in [("empty folder", empty), ("after a clean close", afterClose), ("after a kill", afterKill), ("first flush() after a kill", firstFlush),
                          ("\(storedCount) envelopes stored, bound 30", overfullStart),
                          ("first flush() after that start", overfullFlush)] {
        let sorted = times.sorted()
        let millis = { (fraction: Double) in String(format: "%.2f ms", Double(percentile(sorted, fraction)) / 1e6) }
        print("startup, \(name), \(count) times: p50 \(millis(0.5)), p90 \(millis(0.9)), max \(millis(1))")
    }
    print("startup, each recovery published \(recovered ?? 0) of the 150 items the killed child added")
}

/// The child of `startup`: 150 items in a buffer in `folder`, then SIGKILL.
func leave(_ folder: String) -> Never {
    var options = Options(dsn: "https://key@o1.ingest.example.com/1")
    options.upload = false
    options.cacheDirectory = URL(fileURLWithPath: folder)
    let buffer = try! TelemetryBuffer(options: options)
    for _ in 0..<150 { buffer.add(log: typicalLog) }
    withExtendedLifetime(buffer) { kill(getpid(), SIGKILL) }
    fatalError("not killed")
}

let arguments = CommandLine.arguments.dropFirst()
switch arguments.first {
case "rate":
    let values = Array(arguments.dropFirst())
    rate(strategy(values[0]), perSecond: Double(values[1])!, count: Int(values[2])!)
case "backtoback":
    let values = Array(arguments.dropFirst())
    backToBack(adds: Int(values[0])!, rounds: Int(values[1])!)
case "memory":
    let values = Array(arguments.dropFirst())
    memory(strategy(values[0]), warm: values.dropFirst().first == "warm")
case "threads":
    let values = Array(arguments.dropFirst())
    threads(Int(values[0])!, pairs: Int(values[1])!, logs: values.dropFirst(2).first == "logs")
case "first":
    firstAdds(Int(arguments.dropFirst().first!)!)
case "saturate":
    let values = Array(arguments.dropFirst())
    saturate(Int(values[0])!, seconds: Double(values[1])!)
case "startup":
    startup(Int(arguments.dropFirst().first!)!)
case "leave":
    leave(arguments.dropFirst().first!)
case "battery":
    let values = Array(arguments.dropFirst())
    battery(perSecond: Double(values[0])!, seconds: Double(values[1])!)
default:
    print("usage: LoadDriver rate <strategy> <logs/s> <adds> | backtoback <adds> <rounds> | memory <strategy> [warm] | threads <n> <pairs> [logs] | first <count> | saturate <n> <seconds> | battery <logs/s> <seconds> | startup <count>")
    exit(2)
}
// The folders this run made go into the benchmarks' trash, not deleted (see `trash` in the benchmarks):
// `empty-trash.sh` deletes them before the next run.
let parent = URL(fileURLWithPath: ProcessInfo.processInfo.environment["LOAD_DIRECTORY"] ?? NSTemporaryDirectory())
let trash = FileManager.default.temporaryDirectory.appendingPathComponent("tb-bench-trash")
try? FileManager.default.createDirectory(at: trash, withIntermediateDirectories: true)
for name in (try? FileManager.default.contentsOfDirectory(atPath: parent.path)) ?? [] where name.hasPrefix("tb-load-\(getpid())") {
    rename(parent.appendingPathComponent(name).path, trash.appendingPathComponent(name).path)
}
