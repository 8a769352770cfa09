import Foundation

/// How much a stored envelope matters when space runs out, for both places that evict: `FileTransport`
/// beyond its bounds, and `ForwardingOutbox` beyond the staged envelopes a refusing transport may leave.
/// The lowest rank goes first, the oldest of equals.
enum EvictionRank {
    /// The rank of the envelope file at `path`: that of the highest log level (`trace` 1 … `fatal` 6) of
    /// its items of a signal ranked by level (`SignalDescription.ranksByLevel`: logs), `info`'s for an
    /// envelope of other items (spans, metrics), 0 for one that does not parse; with what its eviction
    /// counts as dropped. `nil` (ranked 0) for one that cannot be read or is larger than `limit`.
    static func of(file path: String, limit: Int) -> (rank: Int, counts: [(DataCategory, Int)]?)? {
        guard let bytes = FileSystem.contents(of: path, limit: limit) else { return nil }
        guard let envelope = try? EnvelopeReader(bytes) else { return (0, nil) }
        let levels = envelope.items.filter { SignalDescription.described(envelopeItemType: $0.type)?.ranksByLevel == true }
            .map { item in bytes.withUnsafeBytes { highestLevel(in: UnsafeRawBufferPointer(rebasing: $0[item.payload])) } }
        return (levels.max() ?? info, envelope.discardCounts())
    }

    /// `Log.Level` names by rank − 1.
    private static let levelNames = ["trace", "debug", "info", "warn", "error", "fatal"].map { Array($0.utf8) }
    private static let info = 3
    private static let levelKey = Array(#""level":""#.utf8)

    /// The highest rank of the `"level":"<name>"` fields in a log item's payload (`info`'s if none). A body
    /// or attribute cannot hold that sequence unescaped (its quotes would be `\"`), and an attribute named
    /// `level` is followed by `{`. Found by their `v` (`memchr`; a rare letter in these payloads) rather
    /// than at every quote: an eviction reads each envelope it ranks, up to 1 MiB of them.
    private static func highestLevel(in payload: UnsafeRawBufferPointer) -> Int {
        let key = levelKey, keyV = 3
        guard let base = payload.baseAddress else { return info }
        var highest = 0
        var next = keyV  // where the next `v` that can be a key's may be
        while next < payload.count, let found = memchr(base + next, Int32(UInt8(ascii: "v")), payload.count - next) {
            let start = base.distance(to: found) - keyV
            next = start + keyV + 1
            guard start + key.count <= payload.count,
                  UnsafeRawBufferPointer(rebasing: payload[start..<start + key.count]).elementsEqual(key) else { continue }
            let nameStart = start + key.count
            guard let quote = memchr(base + nameStart, 0x22, payload.count - nameStart) else { break }
            let name = UnsafeRawBufferPointer(rebasing: payload[nameStart..<base.distance(to: quote)])
            if let index = levelNames.firstIndex(where: { $0.elementsEqual(name) }) { highest = max(highest, index + 1) }
            next = base.distance(to: quote) + 1
        }
        return highest == 0 ? info : highest
    }
}
