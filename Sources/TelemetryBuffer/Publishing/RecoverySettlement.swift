import Foundation

/// What start-up recovery published straight from the lists a killed process left, until it is synced:
/// the staged envelopes' files (not synced yet), and the lists and IO caches that keep their items until
/// then. So the first forward after a kill (and the first `flush()`) does not wait for the disk: the sync
/// comes after it on the background queue, or at `close()`, a durable flush or a released buffer's final
/// forward if they come first.
///
/// Until the sync, each list stays claimed with its marker `captured`, moved into a generation whose boot
/// is this one's: a kill before the sync leaves what a kill right after a forward's publication leaves (the
/// next start, in this boot, syncs the envelopes and skips the items), and power loss or a restart leaves the
/// list to be published again from another boot (at least once, never lost), as a forward's publication
/// within its sync period.
final class RecoverySettlement: Sendable {
    private let folder: BufferFolder
    private let envelopes: [UnsyncedFiles]
    /// The published lists with their caches, removed once the envelopes are durable.
    private let spent: [(list: String, cache: String?)]
    /// The claimed boot the lists were moved under: removed if the sync fails, so that the next start takes
    /// their markers for another boot's and publishes their items again rather than trust envelopes that
    /// may never reach the disk.
    private let boot: String

    init(folder: BufferFolder, envelopes: [UnsyncedFiles], spent: [(list: String, cache: String?)], boot: String) {
        self.folder = folder
        self.envelopes = envelopes
        self.spent = spent
        self.boot = boot
    }

    /// Syncs the envelopes (wherever they moved: `outbox` syncs its folder), the buffer folder and so the
    /// lists' markers, then removes each list's cache and the list. Background queue.
    func settle(outbox: any Outbox, diagnostics: Diagnostics) {
        Failpoint.recoveryUnsynced.hit()
        do {
            // One flush of the drive, at the buffer folder's sync (Apple platforms): the rest only hand theirs to it.
            try UnsyncedFiles.sync(envelopes, flushingDrive: false)
            try outbox.syncAdopted(flushingDrive: false)
            try folder.sync()
            for (list, cache) in spent { Recovery.remove(list: list, cache: cache, in: folder) }
            Recovery.removeSpentBoots(folder: folder)
            try folder.sync()
        } catch {
            folder.remove(boot)
            diagnostics.log(.error, "could not sync what recovery published: \(error); \(spent.map(\.list)) keep their items for the next start")
        }
    }
}
