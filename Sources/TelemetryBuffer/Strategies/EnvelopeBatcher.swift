/// Turns framed records into envelopes: the one path from any strategy's storage (and start-up recovery)
/// to the transport.
///
/// Logs keep their order and go `maxLogs` to an envelope; spans are grouped by trace, in order of first
/// appearance, `maxSpans` to an envelope. Pending client-report counts ride in the first envelope.
struct EnvelopeBatcher: Sendable {
    /// One envelope and what it carries, so a failure to store it can be counted.
    struct Batch {
        var envelope: Envelope
        var category: ItemCategory
        var itemBytes: [Int]
        /// The client report it carries, to restore if it cannot be stored.
        var report: ClientReport?
    }

    let encoder: EnvelopeEncoder
    let reports: ClientReportRecorder
    let diagnostics: Diagnostics
    let maxLogs: Int
    let maxSpans: Int

    /// The envelopes for the records framed in `records`.
    func batches(_ records: UnsafeRawBufferPointer) -> [Batch] {
        var logs: [UnsafeRawBufferPointer] = []
        var traces: [TraceID] = []
        var spans: [TraceID: [UnsafeRawBufferPointer]] = [:]
        let scan = RecordFraming.forEachRecord(in: records) { record in
            switch record.category {
            case .log:
                logs.append(record.payload)
            case .span:
                guard let trace = ItemEncoder.traceID(ofSpan: record.payload) else {
                    return reports.record(.internalSDKError, .span)
                }
                if spans[trace] == nil { traces.append(trace) }
                spans[trace, default: []].append(record.payload)
            }
        }
        if scan.discardedBytes > 0 {
            diagnostics.log(.error, "\(scan.discardedBytes) buffered bytes were not valid records and were skipped")
        }

        var report = reports.take()
        var batches: [Batch] = []
        func add(_ category: ItemCategory, _ payloads: [UnsafeRawBufferPointer], _ build: (ClientReport?) -> Envelope) {
            batches.append(Batch(envelope: build(report), category: category, itemBytes: payloads.map(\.count), report: report))
            report = nil
        }
        for chunk in logs.chunks(of: maxLogs) {
            add(.log, chunk) { encoder.logs(chunk, report: $0) }
        }
        for trace in traces {
            for chunk in spans[trace]!.chunks(of: maxSpans) {
                add(.span, chunk) { encoder.spans(chunk, trace: trace, report: $0) }
            }
        }
        if let report { reports.restore(report) }
        return batches
    }

    /// Stages batches exactly once for the buffer file `mark` writes the publication marker of: the
    /// marker goes `publishing` with the reserved `envelope-x` range, the envelopes are staged, the
    /// marker goes `captured`. If staging fails, the staged envelopes are removed, the marker is cleared
    /// and the reports are put back before the error is rethrown.
    func stage(_ batches: [Batch], in folder: BufferFolder,
               marking mark: (RecordFraming.Publication) throws -> Void) throws {
        guard !batches.isEmpty else { return }
        var marker = folder.reserve(batches.count)
        try mark(marker)
        Failpoint.publishMarked.hit()
        do {
            try folder.stage(batches.map(\.envelope), as: marker)
        } catch {
            folder.removeStaged(marker)
            try? mark(.idle)
            batches.compactMap(\.report).forEach(reports.restore)
            throw error
        }
        Failpoint.publishStaged.hit()
        marker.state = .captured
        try mark(marker)
        Failpoint.publishCaptured.hit()
    }

    /// Counts the items of batches that could not be stored, and puts their report back.
    func dropped(_ batches: some Sequence<Batch>, error: any Error) {
        for batch in batches {
            diagnostics.log(.error, "could not store an envelope of \(batch.itemBytes.count) items: \(error)")
            for bytes in batch.itemBytes { reports.recordDrop(of: batch.category, bytes: bytes, reason: .internalSDKError) }
            if let report = batch.report { reports.restore(report) }
        }
    }

    /// An envelope holding only the pending client report, if there is one (for `close`).
    func pendingReport() -> Batch? {
        guard let report = reports.take() else { return nil }
        return Batch(envelope: encoder.clientReport(report), category: .log, itemBytes: [], report: report)
    }
}

extension Array {
    /// Consecutive slices of at most `size` elements.
    func chunks(of size: Int) -> [[Element]] {
        stride(from: 0, to: count, by: size).map { Array(self[$0..<Swift.min($0 + size, count)]) }
    }
}
