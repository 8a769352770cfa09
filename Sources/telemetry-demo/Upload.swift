import Foundation
import TelemetryBuffer

/// `upload`: drains the DSN's envelope folder to its server, printing each attempt and its outcome.
/// Exit status 0 once the folder is empty; 1 if it is not by `--timeout` seconds or the server refused.
enum Upload {
    static func run(_ arguments: Arguments) throws {
        let directory = URL(fileURLWithPath: try arguments.required("dir"))
        _ = try arguments.required("dsn")
        guard let timeout = Double(arguments.string("timeout") ?? "60"), timeout > 0 else {
            throw DemoError("--timeout must be a number of seconds > 0")
        }
        var options = try options(arguments, directory: directory)
        options.diagnosticHandler = { diagnostic in
            let line = diagnostic.message.hasPrefix("upload") ? "\(diagnostic.message)\n" : "telemetry-demo: \(diagnostic)\n"
            FileHandle.standardOutput.write(Data(line.utf8))
        }
        let buffer = try TelemetryBuffer(options: options)
        let deadline = Date().addingTimeInterval(timeout)
        var stats = buffer.stats()
        while Date() < deadline, !stats.stored.isEmpty {
            if case .stopped = stats.upload { break }
            usleep(20_000)
            stats = buffer.stats()
        }
        buffer.close()
        let left = stats.stored.values.reduce(0) { $0 + $1.envelopes }
        print("upload: \(left) envelopes left; uploader \(stats.upload)")
        print("upload: \(stats.bytesSent) bytes sent; gzip saved \(stats.bytesSavedByGzip)")
        if left > 0 { exit(1) }
    }
}
