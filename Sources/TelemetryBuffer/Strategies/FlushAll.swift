import CTelemetrySignals

/// The FlushAll strategy: items wait in memory, pre-serialized as framed records in one contiguous region
/// (two, alternating, so the caller never waits while one is being written out), and become envelopes
/// on the timer, a limit, `flush`, `close` or backgrounding.
///
/// A forward publishes a region like DoubleRotatingBuffer publishes a list: its marker goes `publishing`,
/// its envelopes are staged and synced, the marker goes `captured` (the commit point), the region is reset
/// and the envelopes move to the transport. The markers change only by compare-and-swap, and the crash
/// handler claims both regions before it writes them out as `detected-termination-x` files: a forward that
/// has not committed then gives up (its staged envelopes go; recovery publishes the region's items from the
/// handler's file), one that has committed leaves a `captured` marker in that file, so recovery skips
/// the items. Either way each item is stored once.
///
/// Guarantees: `add` costs an encode and a copy; everything forwarded is durable once `flush` returns; a
/// detected crash stores every acknowledged item exactly once. Items still in memory are lost if the
/// process dies without a detected crash (SIGKILL). Each region is a single block of memory so that the
/// handler can write it out without allocating.
final class FlushAll: BufferStrategy {
    private let regions: RotatingRegions
    private let folder: BufferFolder
    private let batcher: EnvelopeBatcher
    private let outbox: any Outbox
    /// The files the crash handler writes the two regions to.
    private let terminationNames: [String]
    /// Whether a claim that stands was reported (until a forward goes through).
    private let claimReported = Locked(false)

    init(folder: BufferFolder, batcher: EnvelopeBatcher, outbox: any Outbox, maxBatchBytes: Int) {
        self.folder = folder
        self.batcher = batcher
        self.outbox = outbox
        terminationNames = folder.terminationNames(2)
        regions = RotatingRegions(
            RecordRegion(recordCapacity: maxBatchBytes, kind: .memoryList),
            RecordRegion(recordCapacity: maxBatchBytes, kind: .memoryList),
            limits: batcher.limits, claimable: true)
    }

    func append(_ item: EncodedItem) -> AppendOutcome { regions.append(item) }

    @discardableResult
    func forward(everything: Bool) -> (any Error)? {
        // After a crash signal the process survived, the handler is settled here (as by DoubleRotatingBuffer):
        // its claims go, and it takes its signals back for buffers made since. Never in `add`, which refuses
        // items while a claim stands and wakes this queue, which waits for the moment (a second after the
        // signal, in case it recurs).
        if regions.all.contains(where: \.isClaimed) { _ = CrashRegistration.awaitSettled() } else { _ = tb_crash_settle() }
        var failure: (any Error)?
        // The region already waiting (or the active one: for everything, or at a limit), then the one active
        // now: for everything, or if it reached a limit too (two batches due at once, when their wake-ups merged).
        for _ in 0..<2 {
            do {
                guard try publishNext(dueOnly: !everything) else { break }
            } catch is CrashInProgress {
                // The crash handler claimed the region. The process ends, and recovery publishes the region from
                // the handler's file; or it survives the signal, the claim goes, and the region is published now.
                guard CrashRegistration.awaitSettled() else {
                    // Once: refused adds wake this queue again and again while the claim stands.
                    if !claimReported.withLock({ reported in defer { reported = true }; return reported }) {
                        batcher.diagnostics.log(.warning, "a crash handler holds this buffer's items; its files keep them")
                    }
                    failure = CrashInProgress()
                    break
                }
                do {
                    guard try publishNext(dueOnly: !everything) else { break }
                } catch {
                    batcher.diagnostics.log(.error, "could not publish a batch: \(error)")
                    failure = error
                    break
                }
            } catch {
                batcher.diagnostics.log(.error, "could not publish a batch: \(error)")
                failure = error
                break
            }
        }
        outbox.takeStaged(from: folder, diagnostics: batcher.diagnostics)
        if failure == nil { claimReported.withLock { $0 = false } }
        return failure
    }

    /// Publishes the pending region (or the active one, swapped, unless `dueOnly` and it is below its
    /// limits); `false` when there is none to publish.
    private func publishNext(dueOnly: Bool) throws -> Bool {
        guard let batch = regions.beginForwarding(dueOnly: dueOnly) else { return false }
        let region = regions.region(batch.index)
        // `captured`: staged by an earlier forward that the handler stopped before the reset.
        if region.publication.state != .captured {
            try batcher.stage(batcher.batches(batch.records), in: folder) { try region.mark($0) }.sync()
        }
        try regions.endForwarding()
        Failpoint.publishEmptied.hit()
        return true
    }

    func close() {
        regions.close()
        forward(everything: true)
    }

    /// What is still held goes with the process: counted, but for a region the crash handler claimed and
    /// wrote out, whose file keeps the items (the registration's removal kept it) for the next start. A
    /// claim settled since `close()` (the process survived the signal, and the handler undid its files)
    /// lets those items go out now.
    func countUnstored() {
        if regions.all.contains(where: { !$0.isClaimed && $0.recordBytes > 0 }) { forward(everything: true) }
        regions.forEachHeldRecord(skippingRegion: { regions.all[$0].isClaimed && folder.isOurs(terminationNames[$0]) }) {
            batcher.reports.recordDrop(of: $0.category, bytes: $0.payload.count, reason: .internalSDKError)
        }
    }

    /// The regions' pages past their records (up to 2 × `maxBatchBytes` of heap once a batch filled them).
    func releaseMemory() { regions.releaseUnusedPages() }

    var isEmpty: Bool { regions.isEmpty }

    var bufferedItems: Int { regions.itemCount }

    var crashPlan: CrashPlan? {
        CrashPlan(regions: regions.all, directory: folder.path,
                  action: .writeRegions(names: terminationNames, appending: regions.appending))
    }
}
