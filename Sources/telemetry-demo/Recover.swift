import Foundation
import TelemetryBuffer

/// `recover`: opens the buffer (which cleans up what an earlier process left), closes it, and prints a
/// one-line summary of the stored envelopes.
enum Recover {
    static func run(_ arguments: Arguments) throws {
        let directory = URL(fileURLWithPath: try arguments.required("dir"))
        let buffer = try TelemetryBuffer(options: options(arguments, directory: directory))
        buffer.close()
        let envelopes = try StoredEnvelope.list(in: buffer.envelopesDirectory)
        let logs = envelopes.reduce(0) { $0 + $1.count(of: "log") }
        let spans = envelopes.reduce(0) { $0 + $1.count(of: "span") }
        print("recovered: \(envelopes.count) envelopes stored (\(logs) logs, \(spans) spans) in \(buffer.envelopesDirectory.path)")
    }
}
