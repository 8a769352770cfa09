import CTelemetrySignals
import Foundation

/// The DoubleRotatingBuffer strategy (the default): two crash-safe lists in `MAP_SHARED` files, each
/// mirrored by an async IO cache.
///
/// * `add` copies the framed record into the active list's mapping: the item survives the death of the
///   process from that moment, SIGKILL included. No syscall (unless its commit waits for another
///   thread's earlier record while that thread is not running, see `RecordRegion.commit`).
/// * A serial IO queue copies what the active list committed into its `async-io-cache-N` with one `write`
///   per lane and `fdatasync`s it every `ioSyncInterval` (five times that in Low Power Mode) while new
///   items arrive: the guard against power loss. A run that finds nothing new stops the timer; the next
///   item starts it again (`RotatingRegions.idleCopy`), so a buffer whose items wait for their batch does
///   not wake. Unless its first run surely comes before the batch's forward (`copyComesFirst`; not with the
///   default intervals), a batch does not start it while forwards succeed: its publication's sync guards
///   it instead.
/// * Forward (timer, limits, flush, close, background): the full list is published exactly once: its
///   header is marked `publishing` with the staged envelope range, the envelopes are written as
///   `envelope-x`, the marker turns `captured`, the IO cache is renamed `awaiting-sync-x` (an empty
///   `spare-x`, or a new file, takes its place) unless it copied nothing of the list, the list is reset,
///   and the envelopes move into `envelopes/`. The forward returns there: the envelopes are safe from the
///   death of the process. A sync queue then `fsync`s them (their writes started together first, see
///   `UnsyncedFiles`) and both folders, and empties `awaiting-sync-x`, which kept what the IO cache had
///   copied of their items durable against power loss until then, into a spare: `ioSyncInterval` after
///   the publication, taking every publication since, and leaving out envelopes already sent (sooner when
///   retired caches, envelope bytes, publications or envelopes pass `maxUnsynced`'s bounds).
///   The other list keeps taking items meanwhile; if it fills first, new items are dropped and counted
///   (`buffer_overflow`), the caller never waits.
///
/// Where a store into a mapped page may ask the file system for new space (btrfs, ZFS, overlayfs, FUSE,
/// network volumes: see `MappedFile`), the lists are in **anonymous memory** instead, as Sentry's spec
/// describes the strategy (`listsInMemory`): `add` still copies into memory without a syscall, the IO
/// caches are written as above but at least every 100 ms (they are then what a SIGKILL leaves), and on
/// a detected crash the handler claims both lists and writes them out as `detected-termination-x` (as
/// FlushAll's regions), so recovery reads the caches and those files and deduplicates by item ID. Exactly once across detected crashes at any moment; across SIGKILL,
/// everything but what arrived in the last 100 ms at most (the caches' copy), never a duplicate: before
/// a list's envelopes are staged its cache is brought up to date, so a staged envelope a kill left
/// behind holds only items the cache holds too, and recovery drops it for them.
///
/// `@unchecked Sendable` (its lists are raw memory), because: records' places in the lists are reserved
/// under `regions`' lock and written after it (see `RotatingRegions`); the background queue reads a list
/// only while pending, once its commits are in; the caches and the IO timer state are touched only on
/// `io`; `retired` and `unretired` only on the background queue.
final class DoubleRotatingBuffer: BufferStrategy, @unchecked Sendable {
    private let folder: BufferFolder
    private let lists: [RecordRegion]
    /// Whether the lists are in anonymous memory (see above) rather than mapped files.
    let listsInMemory: Bool
    /// The files the crash handler writes lists in memory to.
    private let terminationNames: [String]
    private let caches: [AsyncIOCache]
    private let regions: RotatingRegions
    private let batcher: EnvelopeBatcher
    private let outbox: any Outbox
    private let forwarding: ForwardLoop
    private let io: DispatchQueue
    /// Syncs published envelopes off the forward's wait.
    private let syncs: DispatchQueue
    /// What the sync queue has to do: publications not synced yet (their envelopes and their lists'
    /// retired IO caches), and the emptied copies, kept to take an IO cache's place at the next
    /// retirement: a new file per forward would create and free an inode each time (see
    /// `AsyncIOCache.retire`).
    private struct Unsynced {
        var envelopes: [UnsyncedFiles] = []
        var copies: [String] = []
        var spares: [String] = []
        /// The sync queued for a moment to come (`forward`), by number: a sync that runs before it takes its
        /// publications, and it then finds itself superseded and does nothing.
        var scheduled: UInt64?
        /// The number the last scheduled sync took.
        var lastScheduled: UInt64 = 0
        /// Syncs of publications so far (a battery pays for each).
        var rounds = 0
        /// Envelope files those syncs synced (each written to the disk, and on Linux a drive flush).
        var syncedFiles = 0
    }
    private let unsynced: Locked<Unsynced>
    /// A forward that leaves more retired IO caches than this waiting (each a copy of up to a list, on disk),
    /// more than this many lists' worth of envelope bytes (`maxBatchBytes` each), more than
    /// `maxUnsyncedPublications` publications or more than `UnsyncedFiles.maxWaiting` envelopes (each an open
    /// descriptor) has them synced at once rather than at the end of the interval; one that leaves more
    /// than twice as many waits for their sync, so that the copies, the disk's backlog and the open files
    /// stay bounded when forwards outpace the disk.
    private static let maxUnsynced = 4
    /// Publications without copies are bounded more loosely: a busy app's round takes the whole interval's
    /// (a phone pays a drive flush per folder for each round), yet an app that flushes after every add
    /// does not hold a descriptor open per add until the interval ends.
    private static let maxUnsyncedPublications = 16
    /// What waits for the next sync round, by what `maxUnsynced` bounds.
    private struct Backlog {
        var copies: Int
        var bytes: Int
        var publications: Int
        var files: Int
        /// `maxBatchBytes`: what a list holds.
        var listBytes: Int

        /// Whether any of it is past `factor` times its bound.
        func exceeds(_ factor: Int) -> Bool {
            copies > factor * maxUnsynced || bytes > factor * maxUnsynced * listBytes
                || publications > factor * maxUnsyncedPublications || files > factor * UnsyncedFiles.maxWaiting
        }
    }
    /// What publishing a list makes: its envelopes, not yet synced, and the name its retired IO cache got
    /// (none when the cache had copied nothing of the list).
    private typealias Published = (envelopes: UnsyncedFiles, copy: String?)
    /// Names the next retired IO cache, `awaiting-sync-x`, and later its spare, `spare-x`; `nil` until the
    /// first publication, which looks for the spares earlier processes left (off the creating thread), and
    /// whenever the folder must say which number is free.
    private var retired: Int?
    /// Whether the first publication has looked for spares earlier processes left.
    private var sparesFound = false
    /// The list whose envelopes are staged (its marker says `captured`) but whose IO cache could not be
    /// retired, with what its publication made: the next forward retries only the retirement, since
    /// staging the list again would publish its items twice. Background queue only.
    private var unretired: (index: Int, published: Published)?
    /// Runs the IO caches' copy (`mirror`) on `io`, one wake-up each time (see `QueueTimer`); armed while
    /// items arrive. Set once, at the end of `init` (its work holds `self` weakly).
    private var ioTimer: QueueTimer!
    /// `Options.flushInterval`: a batch's forward is due within it.
    private let flushInterval: Double
    /// Whether the last forward failed (a list it could not publish stays pending, and is copied then: see
    /// `copyFailedList`): the batches that arrive meanwhile are copied too, whatever the intervals.
    private let forwardFailed = Locked(false)
    /// `Options.ioSyncInterval`.
    private let ioSyncInterval: Double
    /// Set by `close()`: a run of the IO timer under way then copies nothing more. Touched only on `io`.
    private var ioClosed = false
    /// When the IO caches were last synced. Touched only on `io`.
    private var cachesSynced = DispatchTime.now()

    /// Maps the lists, or with `listsInMemory` keeps them in anonymous memory. Mapping throws
    /// `MappedFile.WritesCanFault` where a store into a mapped page may ask for new space.
    init(folder: BufferFolder, batcher: EnvelopeBatcher, outbox: any Outbox, maxBatchBytes: Int,
         flushInterval: Double, ioSyncInterval: Double, listsInMemory: Bool = false) throws {
        self.folder = folder
        self.batcher = batcher
        self.outbox = outbox
        forwarding = ForwardLoop(folder: folder, outbox: outbox, diagnostics: batcher.diagnostics)
        self.listsInMemory = listsInMemory
        terminationNames = listsInMemory ? folder.terminationNames(2) : []
        lists = try (1...2).map { number in
            if listsInMemory { return RecordRegion(recordCapacity: maxBatchBytes, kind: .memoryList) }
            let lanes = RecordRegion.listLanes
            return RecordRegion(mapping: try MappedFile(path: folder.path + "/" + BufferFile.crashSafeList(number).name,
                                                        size: RecordRegion.mappingSize(recordCapacity: maxBatchBytes, lanes: lanes)),
                                kind: .crashSafeList, recordCapacity: maxBatchBytes, lanes: lanes)
        }
        // Created by their first use, on `io`; a file not ours in their place fails the start now, as one in a list's does.
        let cacheNames = (1...2).map { BufferFile.asyncIOCache($0).name }
        for name in cacheNames where folder.contains(name) && !folder.isOurs(name) {
            throw FileSystem.ForeignFile(path: folder.path + "/" + name)
        }
        caches = cacheNames.map { AsyncIOCache(path: folder.path + "/" + $0) }
        unsynced = Locked(Unsynced())
        regions = RotatingRegions(lists[0], lists[1], limits: batcher.limits, claimable: listsInMemory)
        io = DispatchQueue(label: "io.telemetrybuffer.io-cache", qos: .utility)
        syncs = DispatchQueue(label: "io.telemetrybuffer.envelope-sync", qos: .utility)
        self.flushInterval = flushInterval
        self.ioSyncInterval = ioSyncInterval
        ioTimer = QueueTimer(name: "io.telemetrybuffer.io-cache", queue: io) { [weak self] in self?.mirror() }
    }

    deinit { ioTimer.end() }

    func append(_ item: EncodedItem) -> AppendOutcome { regions.append(item) }

    /// Starts the IO cache's copying for the batch unless it runs (from the background queue, not from `add`),
    /// or unless the batch's forward comes first: its publication's sync then makes the items durable, and
    /// a copy would write them once more (and wake for it). Lists in memory are always copied: their copy
    /// is also what a SIGKILL leaves; and so is every batch while forwards fail, since theirs may not come.
    func batchStarted() {
        guard listsInMemory || copyComesFirst || forwardFailed.withLock({ $0 }) else { return }
        ioTimer.setUnlessArmed(at: .now() + .microseconds(Int((copyPeriod * 1_000_000).rounded())), leeway: copyPeriod / 10)
    }

    /// Seconds between two syncs of the IO caches, and from a publication to its sync round: `ioSyncInterval`,
    /// five times that in Low Power Mode.
    private var syncPeriod: Double { ioSyncInterval * (LowPowerMode.isEnabled ? 5 : 1) }

    /// Whether a batch's first copy comes before its forward, whatever the timers' leeway (the copy a tenth of
    /// its period late at most, the forward `FlushScheduler.earliness` early).
    private var copyComesFirst: Bool { copyPeriod * 1.1 < flushInterval - FlushScheduler.earliness(flushInterval) }

    /// Seconds between two runs of the IO timer: the sync period; for lists in memory at most 100 ms, since
    /// their caches are what a SIGKILL leaves (they are written each run, synced each sync period).
    private var copyPeriod: Double { listsInMemory ? min(syncPeriod, 0.1) : syncPeriod }

    /// IO queue: the next run, `copyPeriod` after `start`. A tenth of the period as leeway, so that the system
    /// may wake for it together with other work (Apple platforms).
    private func scheduleMirror(after start: DispatchTime) {
        ioTimer.set(at: start + .microseconds(Int((copyPeriod * 1_000_000).rounded())), leeway: copyPeriod / 10)
    }

    /// IO queue: copies the active list's new records into its cache, and makes them durable every sync
    /// period; stops the timer once a run finds nothing new and the cache holds every record reserved in
    /// the list (synced first; the next item starts it again). Lists in memory: the other list too, while
    /// it waits to be published (its last records would otherwise be in no file until the forward starts),
    /// but not once its cache is retired (the fresh cache would take the published records); the timer
    /// runs until it is published. A change of Low Power Mode takes effect at the next run.
    private func mirror() {
        dispatchPrecondition(condition: .onQueue(io))
        guard !ioClosed else { return }
        mirrors += 1
        // The next run's period counts from this one's start: a slow sync does not stretch it.
        let start = DispatchTime.now()
        let (index, otherPending) = regions.activeAndPending
        do {
            // The older list first: a kill or a failure in between then loses only newer items.
            var wrote = false
            if listsInMemory, otherPending, !retiredUnreset.contains(index ^ 1) {
                wrote = try caches[index ^ 1].catchUp(with: lists[index ^ 1])
            }
            wrote = try caches[index].catchUp(with: lists[index]) || wrote
            let idle = !wrote && !(listsInMemory && otherPending) && regions.idleCopy(of: index, copied: caches[index].mirroredBytes)
            // Due within half a run: a run that comes a little early still syncs.
            let now = DispatchTime.now()
            if idle || now.uptimeNanoseconds + UInt64(copyPeriod * 5e8) >= cachesSynced.uptimeNanoseconds + UInt64(syncPeriod * 1e9) {
                try caches[index ^ 1].sync { try folder.sync() }
                try caches[index].sync { try folder.sync() }
                cachesSynced = now
            }
            mirrorFailed = false
            if !idle { scheduleMirror(after: start) }
        } catch {
            scheduleMirror(after: start)
            // Once per run of failures (a full disk fails every interval).
            guard !mirrorFailed else { return }
            mirrorFailed = true
            batcher.diagnostics.log(.warning, listsInMemory
                ? "async IO cache: \(error); until it works again, a kill loses the items it lacks"
                : "async IO cache: \(error); the crash-safe list still holds the items")
        }
    }

    /// How many times the IO timer fired (a battery costs each): touched only on `io`, read by `mirrorRuns`.
    private var mirrors = 0
    /// How many times the IO timer fired.
    var mirrorRuns: Int { io.sync { mirrors } }

    /// Runs the IO timer's copy now (tests: a list whose cache holds its records, as when its batch waits
    /// longer than the interval).
    func copyNow() { io.sync { mirror() } }

    /// Background queue, after a failed forward: copies the mapped list left pending into its IO cache and
    /// syncs it, since its forward may not come soon (the IO timer copies only the active list). Here, on
    /// the queue that resets lists, no reset can overtake the copy. Not a cache its retirement moved away
    /// (the retry starts an empty one in its place); lists in memory are copied by every run anyway. A
    /// failure here (a full disk fails the forward and this alike) is not logged again: the forward's is.
    private func copyFailedList() {
        guard !listsInMemory else { return }
        let (active, otherPending) = regions.activeAndPending
        guard otherPending else { return }
        let pending = active ^ 1
        io.sync {
            guard !ioClosed, !caches[pending].moved else { return }
            _ = try? caches[pending].catchUp(with: lists[pending])
            try? caches[pending].sync { try folder.sync() }
        }
    }

    /// Whether the last copy into an IO cache failed. Touched only on `io`.
    private var mirrorFailed = false
    /// Lists in memory whose cache a publication retired and that are not reset yet. Touched only on `io`.
    private var retiredUnreset: Set<Int> = []

    @discardableResult
    func forward(everything: Bool) -> (any Error)? {
        // After a crash signal the process survived, the handler is settled here at the latest. Mapped lists
        // it never claims (only the process-wide handler state is settled); lists in memory it claims, and
        // then `add` refuses items and wakes this queue, which waits for the moment (as FlushAll's forward).
        // A list in memory the crash handler claimed: before the commit, the publication gave up (the
        // handler's file holds the items); after it, only the reset did. Either is retried once the process
        // is known to have survived the signal; else the handler's file keeps the list. A list that fails
        // keeps its items and stays pending; the next forward tries again (only the retirement, if its
        // envelopes are staged).
        var published: [Published] = []
        let failure = forwarding.run(everything: everything, claimed: lists.contains(where: \.isClaimed),
                                     due: { regions.beginForwarding(dueOnly: $0) },
                                     name: { BufferFile.crashSafeList($0.index + 1).name },
                                     publish: { published.append(try publish(list: $0.index, records: $0.records)) },
                                     reset: { batch in
            try regions.endForwarding()
            if listsInMemory { io.async { [index = batch.index] in self.retiredUnreset.remove(index) } }
        })
        forwardFailed.withLock { $0 = failure != nil }
        if failure != nil {
            copyFailedList()
            batchStarted()
        }
        guard !published.isEmpty else { return failure }
        // A publication's sync comes a sync period (`ioSyncInterval`, 5× in Low Power Mode) after it, and takes
        // every publication since: a phone pays for each round, and an envelope sent meanwhile needs no sync
        // (their copies keep what they hold durable meanwhile; the rest is exposed to power loss until then,
        // as `Options.ioSyncInterval` says). Envelopes deleted since the last publication (sent, evicted) are
        // closed now, and count toward no bound: under this lock, where no round has taken their sets (whose
        // locks a round holds through its `fsync`s).
        let (backlog, round) = unsynced.withLock { unsynced -> (Backlog, (number: UInt64, at: DispatchTime)?) in
            for files in unsynced.envelopes { files.closeDeleted() }
            unsynced.envelopes += published.map(\.envelopes)
            unsynced.copies += published.compactMap(\.copy)
            let backlog = Backlog(copies: unsynced.copies.count, bytes: unsynced.envelopes.reduce(0) { $0 + $1.bytes },
                                  publications: unsynced.envelopes.count, files: unsynced.envelopes.reduce(0) { $0 + $1.count },
                                  listBytes: batcher.maxBytes)
            guard unsynced.scheduled == nil else { return (backlog, nil) }
            unsynced.lastScheduled &+= 1
            unsynced.scheduled = unsynced.lastScheduled
            let period = DispatchTimeInterval.microseconds(Int((syncPeriod * 1_000_000).rounded()))
            return (backlog, (unsynced.lastScheduled, .now() + period))
        }
        if backlog.exceeds(2) {
            syncs.sync { syncPublished() }
        } else if backlog.exceeds(1) {
            syncs.async { self.syncPublished() }
        } else if let round {
            // Weak: `close()`, which every buffer's end reaches, syncs what is left.
            syncs.asyncAfter(deadline: max(round.at, .now())) { [weak self] in self?.syncPublished(round: round.number) }
        }
        return failure
    }

    /// Sync queue: makes every published envelope durable, then empties the copies that kept their
    /// items and keeps them as spares. A `round` queued for later does nothing once a sync ran before it.
    private func syncPublished(round: UInt64? = nil) {
        dispatchPrecondition(condition: .onQueue(syncs))
        let (envelopes, copies) = unsynced.withLock { unsynced -> ([UnsyncedFiles], [String]) in
            if let round, unsynced.scheduled != round { return ([], []) }
            defer { (unsynced.envelopes, unsynced.copies, unsynced.scheduled) = ([], [], nil) }
            return (unsynced.envelopes, unsynced.copies)
        }
        guard !envelopes.isEmpty || !copies.isEmpty else { return }
        unsynced.withLock { unsynced in
            unsynced.rounds += 1
        }
        Failpoint.publishUnsynced.hit()
        do {
            try Failpoint.syncFails.failIfArmed("fsync", folder.path)
            // One flush of the drive, at the last sync (Apple platforms, where a phone pays most for it): the
            // envelopes and their folder are only handed to the drive before it.
            let synced = try UnsyncedFiles.sync(envelopes, flushingDrive: false)
            unsynced.withLock { $0.syncedFiles += synced }
            try outbox.syncAdopted(flushingDrive: false)
            try folder.sync()  // the staged envelopes gone and the IO caches' new names (`awaiting-sync-x`)
            for copy in copies {
                guard case .awaitingSync(let number) = BufferFile(name: copy) else { continue }
                let spare = BufferFile.spare(number).name
                try folder.empty(copy)
                try folder.rename(copy, to: spare)
                unsynced.withLock { $0.spares.append(spare) }
            }
        } catch {
            // The failed bytes may never reach the disk, and Linux reports a writeback error once: a later
            // `fsync`, this process's or recovery's, returns 0 without writing them. So the copies stay, and
            // `boot` goes: recovery then takes this process's unsynced publications for another boot's and
            // publishes what their copies hold again (at least once) instead of dropping it.
            folder.remove(BufferFile.boot.name)
            batcher.diagnostics.log(.error, "could not sync published envelopes: \(error); "
                + (copies.isEmpty ? "no copy keeps their items (their batches were forwarded before the IO caches copied them)"
                                  : "\(copies) keep what they copied of their items for the next start"))
        }
    }

    /// Stages the list's envelopes under its publication marker, then retires its IO cache as their
    /// power-loss copy; returns both, for the sync. After a failed retirement it only retries that. A list
    /// in memory is first copied into its cache whole (a write, no sync): the items of the staged
    /// envelopes are then all in a file before any envelope is.
    private func publish(list index: Int, records: RecordLanes) throws -> Published {
        let published: Published
        if let unretired, unretired.index == index {
            published = unretired.published
        } else {
            if listsInMemory { try io.sync { _ = try caches[index].catchUp(with: lists[index]) } }
            let envelopes = try batcher.stage(batcher.batches(records), in: folder) { try lists[index].mark($0) }
            // A cache that copied nothing of the list (its batch was forwarded before its first copy) keeps
            // nothing for power loss: it stays in place, empty, for the list's next items. (A pending mapped
            // list is copied only by a failed forward, on this queue, so no copy of it starts after this look;
            // a list in memory was just copied whole.)
            published = (envelopes, io.sync { caches[index].isEmpty } ? nil : nextCopyName())
        }
        guard let copy = published.copy else {
            unretired = nil
            return published
        }
        let spare = unsynced.withLock { $0.spares.popLast() }
        do {
            try io.sync {
                try caches[index].retire(as: folder.path + "/" + copy, reusing: spare.map { folder.path + "/" + $0 })
                if listsInMemory { retiredUnreset.insert(index) }
            }
        } catch {
            // Kept for another try only while it is still a regular file of ours: one swapped for a link or a
            // FIFO since would fail every retirement after.
            if let spare, folder.isOurs(spare) {
                unsynced.withLock { $0.spares.append(spare) }
            }
            // No file says a list in memory was published (its marker is in memory), and its cache, still in
            // place, holds its items as live: its envelopes stay staged until the retirement is done, so that
            // a kill meanwhile leaves them for recovery to drop in favour of the cache, never both.
            if listsInMemory, !io.sync(execute: { caches[index].moved }) { folder.withhold(lists[index].publication.envelopes) }
            unretired = (index, published)
            throw error
        }
        if listsInMemory { folder.release(lists[index].publication.envelopes) }
        unretired = nil
        return published
    }

    /// `awaiting-sync-x` for the next retired IO cache; the first call looks for the spares earlier
    /// processes left.
    private func nextCopyName() -> String {
        if let number = retired {
            retired = number < BufferFile.largestNumber ? number + 1 : nil
            return BufferFile.awaitingSync(number).name
        }
        let names = (try? folder.names()) ?? []
        if !sparesFound {
            // Only regular files of ours are spares; a number any entry holds (a link, a directory) is never
            // chosen, since renaming onto it would fail every time.
            let spares = names.filter { name in
                if case .spare = BufferFile(name: name) { folder.isOurs(name) } else { false }
            }
            unsynced.withLock { $0.spares += spares }
            sparesFound = true
        }
        let taken = Set(names.compactMap { name -> Int? in
            switch BufferFile(name: name) {
            case .spare(let number)?, .awaitingSync(let number)?: number
            default: nil
            }
        })
        let number = BufferFile.freshNumbers(1, taken: taken)[0]
        // The next one follows unless this one is a free number below others in use (the names reached
        // `largestNumber`): then the folder says again which is free.
        retired = number > (taken.max() ?? -1) && number < BufferFile.largestNumber ? number + 1 : nil
        return BufferFile.awaitingSync(number).name
    }

    /// How many times publications were synced.
    var publicationSyncs: Int { unsynced.withLock { $0.rounds } }

    /// How many envelope files those syncs synced (not those deleted before their round).
    var syncedEnvelopeFiles: Int { unsynced.withLock { $0.syncedFiles } }

    /// Returns once the syncs queued so far have run (not those that wait for their moment).
    func drainQueuedSyncs() { syncs.sync {} }

    /// Syncs what was published now, rather than at the sync to come (`syncPublished`).
    func awaitDurable() { syncs.sync { syncPublished() } }

    /// Forwards both lists and syncs them.
    func close() {
        regions.close()
        forward(everything: true)
        syncs.sync { syncPublished() }
        io.sync {
            ioClosed = true
            ioTimer.clear()
        }
    }

    /// Waits for the sync that empties the retired IO caches and makes those truncations durable (an
    /// emptied copy becomes a spare, then an IO cache again: the spares and the caches are synced), then
    /// zeroes the lists past their records (a forward leaves the published items' bytes there) and writes
    /// them to disk.
    func scrub() throws {
        syncs.sync { syncPublished() }
        try io.sync { for cache in caches { try cache.syncFile() } }
        try folder.sync(unsynced.withLock { $0.spares })
        regions.zeroUnused()
        for list in lists { try list.sync() }
    }

    /// Lists in memory that `close()` could not publish: what their caches can still take stays for the
    /// next start; if they cannot (a full disk), what is held goes with the process, counted, but for a
    /// list the crash handler claimed and wrote out, whose file keeps it.
    func countUnstored() {
        guard listsInMemory, !regions.isEmpty else { return }
        let copied: Bool = io.sync {
            do {
                let active = regions.activeIndex
                for index in [active ^ 1, active] { _ = try caches[index].catchUp(with: lists[index]) }
                return true
            } catch {
                return false
            }
        }
        guard !copied else { return }
        regions.forEachHeldRecord(skippingRegion: { lists[$0].isClaimed && folder.isOurs(terminationNames[$0]) }) {
            batcher.reports.recordDrop(of: $0.category, bytes: $0.payload.count, reason: .internalSDKError)
        }
    }

    /// Lists in memory: the pages past their records (up to 2 × `maxBatchBytes` of heap once filled).
    func releaseMemory() { if listsInMemory { regions.releaseUnusedPages() } }

    var isEmpty: Bool { regions.isEmpty }

    var bufferedItems: Int { regions.itemCount }

    /// The mapped lists hold every acknowledged item through any death of the process, whatever a forward
    /// on another thread is doing meanwhile: a crash is then what a SIGKILL is, and recovery publishes
    /// the lists exactly once. So the handler writes no copies (a copy could be overtaken by a forward that
    /// publishes the same items); it only syncs the lists' files, against power loss right after the crash.
    /// Lists in memory it claims and writes out, as FlushAll's regions.
    var crashPlan: CrashPlan? {
        guard !listsInMemory else {
            return CrashPlan(regions: lists, directory: folder.path,
                             action: .writeRegions(names: terminationNames, appending: regions.appending))
        }
        return CrashPlan(regions: lists, directory: folder.path, action: .syncFiles(descriptors: lists.compactMap(\.fileDescriptor?.rawValue)))
    }
}
