import Foundation

/// An envelope file read back for display: its items' types, counts and sizes.
struct StoredEnvelope {
    struct Item {
        var type: String
        var count: Int
        var bytes: Int
    }

    var name: String
    var bytes: Int
    var items: [Item]

    /// The envelopes in `folder`, oldest first.
    static func list(in folder: URL) throws -> [StoredEnvelope] {
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? [])
            .filter { $0.hasSuffix(".envelope") }.sorted()
        return try names.map { try StoredEnvelope(url: folder.appendingPathComponent($0)) }
    }

    init(url: URL) throws {
        let data = try Data(contentsOf: url)
        name = url.lastPathComponent
        bytes = data.count
        items = []
        // Walk the framing: header line, then item header line + `length` payload bytes + LF.
        var offset = (data.firstIndex(of: 0x0A) ?? data.count - 1) + 1
        while offset < data.count {
            let end = data[offset...].firstIndex(of: 0x0A) ?? data.count
            let header = try JSONSerialization.jsonObject(with: data[offset..<end]) as? [String: Any] ?? [:]
            let length = header["length"] as? Int ?? 0
            items.append(Item(type: header["type"] as? String ?? "?", count: header["item_count"] as? Int ?? 1, bytes: length))
            offset = end + 1 + length + 1
        }
    }

    func count(of type: String) -> Int { items.filter { $0.type == type }.reduce(0) { $0 + $1.count } }

    var summary: String {
        let parts = items.map { "\($0.type) ×\($0.count) (\($0.bytes) B)" }.joined(separator: ", ")
        return "\(name)  \(bytes) bytes: \(parts)"
    }
}
