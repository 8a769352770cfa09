import Foundation
import TelemetryBuffer

/// `recover`: opens the buffer (which runs start-up recovery), closes it, and prints a one-line summary.
enum Recover {
    static func run(_ arguments: Arguments) throws {
        let directory = URL(fileURLWithPath: try arguments.required("dir"))
        let buffer = try TelemetryBuffer(options: options(arguments, directory: directory))
        buffer.close()
        let found = buffer.recovery
        let envelopes = try StoredEnvelope.list(in: buffer.envelopesDirectory)
        let logs = envelopes.reduce(0) { $0 + $1.count(of: "log") }
        let spans = envelopes.reduce(0) { $0 + $1.count(of: "span") }
        print("recovered \(found.items) items (\(found.duplicates) duplicates skipped, \(found.discardedBytes) bytes discarded) "
              + "from \(found.files.count) files; \(envelopes.count) envelopes stored (\(logs) logs, \(spans) spans)")
    }
}
