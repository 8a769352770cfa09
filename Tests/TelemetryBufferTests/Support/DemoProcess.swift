import Foundation
@testable import TelemetryBuffer

/// The demo's default DSN (kept equal to `demoDSN` in Sources/telemetry-demo/main.swift).
let demoDefaultDSN = "https://a1b2c3d4e5f60718293a4b5c6d7e8f90@o7.ingest.us.sentry.io/4242"

/// The demo as a child process, optionally killed (SIGKILL) after a delay or at a failpoint.
enum Demo {
    struct Run {
        var status: Int32
        var output: String
        var errors: String
        var lines: [String] { output.split(separator: "\n").map(String.init) }
    }

    /// The demo binary, built next to the test bundle.
    static var executable: URL {
        let candidates = [URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()]
            + Bundle.allBundles.map { $0.bundleURL.deletingLastPathComponent() }
        for folder in candidates {
            let binary = folder.appendingPathComponent("telemetry-demo")
            if FileManager.default.isExecutableFile(atPath: binary.path) { return binary }
        }
        return candidates[0].appendingPathComponent("telemetry-demo")
    }

    /// A child that outlived its deadline: it was killed, and this says what it printed.
    struct Timeout: Error, CustomStringConvertible {
        var arguments: [String]
        var output: String
        var errors: String
        var description: String { "\(arguments.joined(separator: " ")) hung; stdout: \(output.suffix(2000)) stderr: \(errors.suffix(2000))" }
    }

    /// Runs the demo (or another `program`); with `killAfter` µs, sends SIGKILL then. With `failpoint`,
    /// arms that step with `action` (a `hold` creates the file `held` names when reached); `failing` arms
    /// a step that fails. `backtrace: false` turns the Swift runtime's crash backtracer off (a second or
    /// so per crash). Status is `-signal` for a signal
    /// death. A child still running after `deadline` seconds is killed and `Timeout` thrown.
    static func run(_ arguments: [String], killAfter: useconds_t? = nil, failpoint: Failpoint? = nil,
                    action: Failpoint.Action = .kill, failing: Failpoint? = nil, held: URL? = nil, backtrace: Bool = true,
                    deadline: TimeInterval = 120, program: URL = executable) throws -> Run {
        let process = Process()
        process.executableURL = program
        // A run lasts a second or so: the IO caches copy the lists every 10 ms (`ioSyncInterval`), as in an app
        // whose batches wait longer than the interval; a batch that fills within 10 ms is forwarded before
        // its first copy and keeps its IO cache in place, unretired, as every batch does with the defaults
        // (`stress(ioSyncMilliseconds:)`). Tests of retirement pace their items (`--pace-us`).
        let opensABuffer = program == executable && ["stress", "recover", "crash"].contains(arguments.first ?? "")
        process.arguments = arguments + (opensABuffer && !arguments.contains("--io-sync-ms") ? ["--io-sync-ms", "10"] : [])
        var environment = ProcessInfo.processInfo.environment
        let armed = [failpoint.map { "\($0.rawValue):\(action.rawValue)" }, failing?.rawValue].compactMap { $0 }
        environment["TELEMETRY_BUFFER_FAILPOINT"] = armed.isEmpty ? nil : armed.joined(separator: ",")
        environment["TELEMETRY_BUFFER_FAILPOINT_HELD"] = held?.path
        if !backtrace { environment["SWIFT_BACKTRACE"] = "enable=no" }
        // libdispatch reports misuse (a "DEPRECATED USE in libdispatch client" line) to syslog; here, where
        // a test reads it.
        environment["LIBDISPATCH_LOG"] = "stderr"
        process.environment = environment
        let output = Pipe(), errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        // Read both pipes while the child runs, so a full pipe never blocks it.
        let collected = Locked((output: Data(), errors: Data()))
        let drained = DispatchGroup()
        for (pipe, isOutput) in [(output, true), (errors, false)] {
            drained.enter()
            DispatchQueue.global().async {
                let data = pipe.fileHandleForReading.readDataToEndOfFile()
                collected.withLock { if isOutput { $0.output = data } else { $0.errors = data } }
                drained.leave()
            }
        }
        let exited = DispatchSemaphore(value: 0)
        process.terminationHandler = { _ in exited.signal() }
        try process.run()
        if let killAfter {
            usleep(killAfter)
            kill(process.processIdentifier, SIGKILL)
        }
        let inTime = exited.wait(timeout: .now() + deadline) == .success
        if !inTime {
            kill(process.processIdentifier, SIGKILL)
            _ = exited.wait(timeout: .now() + 10)
        }
        // A process the child started may hold the pipes open after it is gone (Swift's backtracer, when
        // the process it reads dies under it): the wait for what it printed is bounded too.
        _ = drained.wait(timeout: .now() + 10)
        let data = collected.withLock { $0 }
        let (stdout, stderr) = (String(decoding: data.output, as: UTF8.self), String(decoding: data.errors, as: UTF8.self))
        guard inTime else { throw Timeout(arguments: [program.lastPathComponent] + arguments, output: stdout, errors: stderr) }
        let status = process.terminationReason == .uncaughtSignal ? -process.terminationStatus : process.terminationStatus
        return Run(status: status, output: stdout, errors: stderr)
    }

    static func stress(_ folder: TemporaryDirectory, _ strategy: Options.Strategy, count: Int, spans: Bool, metrics: Bool = false,
                       threads: Int = 1, ioSyncMilliseconds: Int? = nil, paceMicroseconds: Int? = nil,
                       killAfter: useconds_t? = nil, failpoint: Failpoint? = nil) throws -> Run {
        var arguments = ["stress", "--dir", folder.url.path, "--strategy", strategy.rawValue, "--count", String(count),
                         "--max-envelopes", "100000", "--threads", String(threads)]
        if spans { arguments.append("--spans") }
        if metrics { arguments.append("--metrics") }
        if let ioSyncMilliseconds { arguments += ["--io-sync-ms", String(ioSyncMilliseconds)] }
        if let paceMicroseconds { arguments += ["--pace-us", String(paceMicroseconds)] }
        return try run(arguments, killAfter: killAfter, failpoint: failpoint)
    }

    static func recover(_ folder: TemporaryDirectory, _ strategy: Options.Strategy, killAfter: useconds_t? = nil,
                        failpoint: Failpoint? = nil) throws -> Run {
        try run(["recover", "--dir", folder.url.path, "--strategy", strategy.rawValue, "--max-envelopes", "100000"],
                killAfter: killAfter, failpoint: failpoint)
    }
}
