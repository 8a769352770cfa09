import Foundation
import TelemetryBuffer

/// The DSN of the demo's examples (a fake key; nothing is sent in this version).
let demoDSN = "https://a1b2c3d4e5f60718293a4b5c6d7e8f90@o7.ingest.us.sentry.io/4242"

func options(_ arguments: Arguments, directory: URL) throws -> Options {
    var options = Options(dsn: arguments.string("dsn") ?? demoDSN)
    options.cacheDirectory = directory
    // Only the upload command sends anything; the demo DSN's host is not a real project.
    options.upload = arguments.command == "upload"
    options.strategy = try arguments.strategy()
    options.maxCachedEnvelopes = try arguments.integer("max-envelopes", default: options.maxCachedEnvelopes)
    // The tests' runs last a second or so: with an interval of milliseconds the IO caches copy the lists
    // while they run, as they do in an app whose batches wait longer than the interval.
    let ioSyncMilliseconds = try arguments.integer("io-sync-ms", default: Int(options.ioSyncInterval * 1000))
    options.ioSyncInterval = Double(ioSyncMilliseconds) / 1000
    // A raised cap lifts the byte quota too: a test that counts every item must see no eviction.
    if arguments.string("max-envelopes") != nil { options.maxCacheBytes = .max }
    options.environment = "demo"
    options.release = "telemetry-demo@\(TelemetryBuffer.version)"
    options.diagnosticHandler = { FileHandle.standardError.write(Data("telemetry-demo: \($0)\n".utf8)) }
    return options
}

do {
    let arguments = try Arguments(Array(CommandLine.arguments.dropFirst()))
    if arguments.flag("help") {
        print(Arguments.usage)
        exit(0)
    }
    switch arguments.command {
    case "tour": try Tour.run()
    case "stress": try Stress.run(arguments)
    case "recover": try Recover.run(arguments)
    case "inspect": try Inspect.run(arguments)
    case "crash": try Crash.run(arguments)
    case "upload": try Upload.run(arguments)
    default: throw DemoError("unknown command '\(arguments.command)'\n\(Arguments.usage)")
    }
} catch let error as DemoError {
    FileHandle.standardError.write(Data("telemetry-demo: \(error)\n".utf8))
    exit(2)
} catch {
    FileHandle.standardError.write(Data("telemetry-demo: \(error)\n".utf8))
    exit(1)
}
