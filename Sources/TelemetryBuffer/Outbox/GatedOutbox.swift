import Foundation

/// The outbox the strategies publish to: it hands staged envelopes to the outbox behind it, except while
/// `discarding` runs (`removeAllData`) or data collection is revoked, when it deletes them instead. So
/// removing everything goes through the same publication as a forward, with its exactly-once
/// bookkeeping, and the items reach neither the envelope folder nor a custom transport.
final class GatedOutbox: Outbox, Sendable {
    private let next: any Outbox
    private let consent: DataCollectionState
    /// How many `discarding` calls run (on the background queue, as every `adopt`; one may nest in another).
    private let discards = Locked(0)

    init(_ next: any Outbox, consent: DataCollectionState) {
        self.next = next
        self.consent = consent
    }

    /// Runs `body` (a forward) with every envelope it publishes deleted. Background queue.
    func discarding(_ body: () -> Void) {
        discards.withLock { $0 += 1 }
        defer { discards.withLock { $0 -= 1 } }
        body()
    }

    func adopt(_ paths: [String]) throws {
        guard discards.withLock({ $0 > 0 }) || !consent.acceptsItems else { return try next.adopt(paths) }
        for path in paths {
            guard unlink(path) == 0 || errno == ENOENT else { throw FileSystem.error("unlink", path) }
        }
    }

    func syncAdopted(flushingDrive: Bool) throws { try next.syncAdopted(flushingDrive: flushingDrive) }

    func syncStored() throws { try next.syncStored() }
}
