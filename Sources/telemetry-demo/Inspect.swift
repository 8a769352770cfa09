import Foundation

/// `inspect`: lists every DSN folder under --dir with its envelopes and buffer files.
enum Inspect {
    static func run(_ arguments: Arguments) throws {
        let root = URL(fileURLWithPath: try arguments.required("dir"))
        let folders = (try? FileManager.default.contentsOfDirectory(atPath: root.path))?.sorted() ?? []
        var found = false
        for folder in folders where folder.count == 40 {
            found = true
            print("DSN folder \(folder)")
            let envelopes = try StoredEnvelope.list(in: root.appendingPathComponent(folder).appendingPathComponent("envelopes"))
            print("  envelopes/ (\(envelopes.count))")
            for envelope in envelopes { print("    " + envelope.summary) }
            let bufferFolder = root.appendingPathComponent(folder).appendingPathComponent("telemetry-buffer")
            let files = (try? FileManager.default.contentsOfDirectory(atPath: bufferFolder.path))?.sorted() ?? []
            print("  telemetry-buffer/ (\(files.count))")
            for file in files {
                let size = (try? FileManager.default.attributesOfItem(atPath: bufferFolder.appendingPathComponent(file).path))?[.size] as? Int ?? 0
                print("    \(file)  \(size) bytes")
            }
        }
        if !found { print("no DSN folders in \(root.path)") }
    }
}
