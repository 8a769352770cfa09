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
    private let forwarding: ForwardLoop
    /// The files the crash handler writes the two regions to.
    private let terminationNames: [String]

    init(folder: BufferFolder, batcher: EnvelopeBatcher, outbox: any Outbox, maxBatchBytes: Int) {
        self.folder = folder
        self.batcher = batcher
        forwarding = ForwardLoop(folder: folder, outbox: outbox, diagnostics: batcher.diagnostics)
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
        // items while a claim stands and wakes this queue.
        forwarding.run(everything: everything, claimed: regions.all.contains(where: \.isClaimed),
                       due: { regions.beginForwarding(dueOnly: $0) }, name: { _ in "a batch" }, publish: { batch in
            let region = regions.region(batch.index)
            // `captured`: staged by an earlier forward that the handler stopped before the reset.
            guard region.publication.state != .captured else { return }
            try batcher.stage(batcher.batches(batch.records), in: folder) { try region.mark($0) }.sync()
        }, reset: { _ in try regions.endForwarding() })
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
