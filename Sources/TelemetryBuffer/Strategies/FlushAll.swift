/// The FlushAll strategy: items wait in memory, pre-serialized as framed records in one contiguous region
/// (two, alternating, so the caller never waits while one is being written out), and become envelopes
/// on the timer, a limit, `flush`, `close` or backgrounding.
///
/// Guarantees: `add` costs an encode and a copy; everything forwarded is durable once `flush` returns.
/// Items still in memory are lost if the process dies before a forward. Each region is a single block
/// of memory so that a crash handler can write it out without allocating.
final class FlushAll: BufferStrategy {
    private let regions: RotatingRegions
    private let batcher: EnvelopeBatcher
    private let transport: any Transport

    init(batcher: EnvelopeBatcher, transport: any Transport, maxBatchBytes: Int) {
        self.batcher = batcher
        self.transport = transport
        regions = RotatingRegions(
            RecordRegion(recordCapacity: maxBatchBytes, kind: .memoryList),
            RecordRegion(recordCapacity: maxBatchBytes, kind: .memoryList),
            maxLogs: batcher.maxLogs, maxSpans: batcher.maxSpans)
    }

    func append(_ item: EncodedItem) -> AppendOutcome { regions.append(item) }

    func forward(everything: Bool) {
        // The region already waiting (or the active one), then, for everything, the one active now.
        for _ in 0..<(everything ? 2 : 1) {
            guard let batch = regions.beginForwarding() else { return }
            send(batcher.batches(batch.records))
            regions.endForwarding()
        }
    }

    func close() {
        regions.close()
        forward(everything: true)
    }

    private func send(_ batches: [EnvelopeBatcher.Batch]) {
        for batch in batches {
            do { try transport.send(batch.parts.envelope) } catch { batcher.dropped(batch, error: error) }
        }
    }

    var isEmpty: Bool { regions.isEmpty }

    var bufferedItems: Int { regions.itemCount }

    /// Both regions, written as envelopes: a crash during a forward may send that batch twice.
    var crashState: (regions: [RecordRegion], asEnvelopes: Bool)? { (regions.all, true) }
}
