import Foundation

/// Drop counts a buffer could not send, kept in its folder (`client-report`) for the next buffer on the DSN.
///
/// Counts live in memory (`ClientReportRecorder`) and leave only with a request the server accepts: a
/// buffer that closes offline, without uploads or with a custom transport, or an app killed after going to
/// the background, would lose every count not yet sent. So they are saved when a buffer closes or is
/// released, and when it forwards everything durably (the app moving to the background, a graceful exit),
/// and read back by the next buffer's start; after a forward too while no request goes out, at most once
/// per `ioSyncInterval`, and after a failed request before the uploader waits, both not synced, so that a
/// crash or a kill loses less. The file holds a client report item's payload, written atomically (never on
/// the adding thread, never per drop).
struct SavedClientReport: Sendable {
    let folder: BufferFolder

    private static let name = BufferFile.clientReport.name
    /// Far more than the report of every reason and category: a larger file is not read (it is taken for
    /// a damaged one).
    private static let maxBytes = 64 << 10

    /// The entries saved; `[]` for a file of ours that is too large or damaged, `nil` for none or a file
    /// that is not a regular file of ours. An entry whose reason or category this version does not know, or
    /// whose quantity is not a whole positive number, is skipped (taken counts then add up saturating).
    /// Throws if a file is there but cannot be read now (no descriptor left, an I/O error): that is no
    /// damaged file.
    func read() throws -> [ClientReport.Entry]? {
        let bytes: [UInt8]
        do {
            guard let read = try FileSystem.readFile(folder.path + "/" + Self.name, prefix: 0, limit: Self.maxBytes, length: { _ in .max })
            else { return nil }
            bytes = read
        } catch is FileSystem.ForeignFile {
            return nil
        } catch is FileSystem.TooLarge {
            return []
        }
        guard let payload = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any],
              let events = payload["discarded_events"] as? [Any]
        else { return [] }
        var entries: [ClientReport.Entry] = []
        for case let event as [String: Any] in events {
            guard let reason = (event["reason"] as? String).flatMap(DiscardReason.init(rawValue:)),
                  let category = (event["category"] as? String).flatMap(DataCategory.init(rawValue:)),
                  let quantity = event["quantity"] as? Int, quantity > 0
            else { continue }
            entries.append(.init(reason: reason, category: category, quantity: quantity))
        }
        return entries
    }

    /// Whether a file of ours holds saved counts (damaged or not).
    var isPresent: Bool { folder.isOurs(Self.name) }

    /// Replaces what is saved by `report`, or removes it for `nil`; without `durably`, safe from the death
    /// of the process, not from power loss. A file of that name that is not ours is left alone, and nothing
    /// saved.
    func save(_ report: ClientReport?, durably: Bool = true) throws {
        guard let report else { return try remove() }
        if folder.contains(Self.name), !isPresent { throw FileSystem.ForeignFile(path: folder.path + "/" + Self.name) }
        try folder.writeAtomically(EnvelopeEncoder.clientReportPayload(report), name: Self.name, durably: durably)
        try Failpoint.reportFileFails.failIfArmed("fsync", folder.path)
    }

    /// Removes what is saved, durably (power loss must not bring back counts a request then delivered),
    /// before its counts leave in a request. A file of that name that is not ours holds none of them: it
    /// is left alone.
    func remove() throws {
        if isPresent, !folder.remove(Self.name) { throw FileSystem.error("unlink", folder.path + "/" + Self.name) }
        try Failpoint.reportFileFails.failIfArmed("fsync", folder.path)
        try folder.sync()
    }
}
