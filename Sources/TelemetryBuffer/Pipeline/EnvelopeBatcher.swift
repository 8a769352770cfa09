/// Turns framed records into envelopes: the one path from any strategy's storage (and start-up recovery)
/// to the transport.
///
/// Each signal's items go as its description says (`SignalDescription.grouping`): logs keep their order, any
/// traces in one envelope; spans are grouped by trace, in order of first appearance, one trace per
/// envelope. At most a signal's limit (`limits`) goes to an envelope, and no envelope's payloads pass
/// `maxBytes` together (a buffer's batch never does, but recovery publishes up to 8 MiB at once: its
/// envelopes went past what the uploader and the protocol take). Signals go in the order of their first
/// item. (Client reports ride at upload time, see `Uploader`.)
struct EnvelopeBatcher: Sendable {
    /// One envelope. Its payloads point into the records it was made from.
    struct Batch {
        var parts: EnvelopeParts
    }

    let encoder: EnvelopeEncoder
    let reports: ClientReportRecorder
    let diagnostics: Diagnostics
    let limits: BatchLimits
    let maxBytes: Int

    /// The envelopes for the records framed in `records`, in order of arrival.
    func batches(_ records: RecordLanes) -> [Batch] {
        // Each signal's payloads, in order of arrival: one group for a signal of any traces, one per trace
        // (in order of first appearance) for a signal of one trace per envelope.
        struct Group {
            var category: ItemCategory
            var trace: TraceID?
            var payloads: [UnsafeRawBufferPointer] = []
        }
        var groups: [Group] = []
        var traced: [TraceID: Int] = [:]
        var lastTraced: (prefix: UnsafeRawBufferPointer, group: Int)?
        // By category byte (1...`BatchTally.maxSignals`): a slot per signal, where a dictionary hashed the
        // category three times per record. The groupings are looked up once, not per record.
        var groupings = [SignalDescription.Grouping?](repeating: nil, count: BatchTally.maxSignals + 1)
        for signal in SignalDescription.all { groupings[Int(signal.category.rawValue)] = signal.grouping }
        var open = [Int?](repeating: nil, count: BatchTally.maxSignals + 1)
        let scan = records.forEachRecord { record in
            let slot = Int(record.category.rawValue)
            switch groupings[slot] ?? record.category.signal.grouping {
            case .anyTraces:
                let group = open[slot] ?? { groups.append(Group(category: record.category)); return groups.count - 1 }()
                open[slot] = group
                groups[group].payloads.append(record.payload)
            case .oneTracePerEnvelope:
                // Items of one trace tend to come in runs: the same leading bytes as the last one's mean the
                // same trace, without parsing it again.
                if let last = lastTraced, record.payload.starts(with: last.prefix), groups[last.group].category == record.category {
                    return groups[last.group].payloads.append(record.payload)
                }
                guard let trace = ItemEncoder.traceID(ofSpan: record.payload) else {
                    return reports.recordDrop(of: record.category, bytes: record.payload.count, reason: .internalSDKError)
                }
                let group = traced[trace] ?? { groups.append(Group(category: record.category, trace: trace)); return groups.count - 1 }()
                traced[trace] = group
                groups[group].payloads.append(record.payload)
                lastTraced = (UnsafeRawBufferPointer(rebasing: record.payload.prefix(ItemEncoder.spanTracePrefixLength)), group)
            }
        }
        if scan.discardedBytes > 0 {
            diagnostics.log(.error, "\(scan.discardedBytes) buffered bytes were not valid records and were skipped")
        }
        return groups.flatMap { group in
            group.payloads.chunks(of: limits[group.category], bytes: maxBytes).map { chunk in
                Batch(parts: encoder.envelope(chunk, of: group.category, trace: group.trace))
            }
        }
    }

    /// Stages batches exactly once for the buffer file `mark` writes the publication marker of: the
    /// marker goes `publishing` with the reserved `envelope-x` range, the envelopes are staged, the
    /// marker goes `captured`. The envelopes are not yet synced: `captured` proves them complete only
    /// within this boot (see `Recovery`), and the caller must `sync()` them before it drops the last
    /// durable copy of the items. If staging fails, the envelopes it created are removed and the marker
    /// is cleared before the error is rethrown; if the marker cannot say `captured`, they are removed.
    func stage(_ batches: [Batch], in folder: BufferFolder,
               marking mark: (RecordFraming.Publication) throws -> Void) throws -> UnsyncedFiles {
        guard !batches.isEmpty else { return UnsyncedFiles(in: folder) }
        var marker = try folder.reserve(batches.count)
        try mark(marker)
        Failpoint.publishMarked.hit()
        let staged: UnsyncedFiles
        do {
            staged = try folder.stage(batches.map(\.parts), as: marker)
        } catch {
            // `stage` removed what it created; anything else in the range is not this publication's.
            try? mark(.idle)
            throw error
        }
        Failpoint.publishStaged.hit()
        marker.state = .captured
        do {
            try mark(marker)
        } catch {
            // Not committed (a crash handler claimed the buffer, or the marker could not be written): the
            // items are still the buffer's, so these envelopes must not be moved.
            folder.removeStaged(marker)
            throw error
        }
        Failpoint.publishCaptured.hit()
        return staged
    }
}

extension Array where Element == UnsafeRawBufferPointer {
    /// Consecutive runs of at most `size` payloads whose container item, `{"items":[p1,p2,…]}`, takes at
    /// most `bytes` bytes (a payload larger than that alone).
    func chunks(of size: Int, bytes: Int) -> [[Element]] {
        // The container's 12 bytes around the payloads, and a comma between two.
        let budget = bytes - 11
        var chunks: [[Element]] = [], chunk: [Element] = [], used = 0
        for payload in self {
            if !chunk.isEmpty, chunk.count == size || used + payload.count + 1 > budget {
                chunks.append(chunk)
                (chunk, used) = ([], 0)
            }
            chunk.append(payload)
            used += payload.count + 1
        }
        if !chunk.isEmpty { chunks.append(chunk) }
        return chunks
    }
}
