/// Turns stored records into envelopes and hands them to the transport: the one path from a strategy's
/// storage to disk, shared by every strategy (and by start-up recovery).
///
/// Logs keep their order and go `maxLogs` to an envelope; spans are grouped by trace, in order of first
/// appearance, `maxSpans` to an envelope. Pending client-report counts ride in the first envelope.
struct Forwarder: Sendable {
    let encoder: EnvelopeEncoder
    let transport: any Transport
    let reports: ClientReportRecorder
    let diagnostics: Diagnostics
    let maxLogs: Int
    let maxSpans: Int

    /// Forwards the records framed in `records`, leaving out (and counting) spans of `droppedTraces`.
    func forward(_ records: UnsafeRawBufferPointer, droppingTraces droppedTraces: [TraceID] = []) {
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
                if droppedTraces.contains(trace) {
                    return reports.recordDrop(of: .span, bytes: record.payload.count, reason: .bufferOverflow)
                }
                if spans[trace] == nil { traces.append(trace) }
                spans[trace, default: []].append(record.payload)
            }
        }
        if scan.discardedBytes > 0 {
            diagnostics.log(.error, "\(scan.discardedBytes) buffered bytes were not valid records and were skipped")
        }

        var batches: [(envelope: (ClientReport?) -> Envelope, category: ItemCategory, payloads: [UnsafeRawBufferPointer])] = []
        for chunk in logs.chunks(of: maxLogs) {
            batches.append(({ encoder.logs(chunk, report: $0) }, .log, chunk))
        }
        for trace in traces {
            for chunk in spans[trace]!.chunks(of: maxSpans) {
                batches.append(({ encoder.spans(chunk, trace: trace, report: $0) }, .span, chunk))
            }
        }
        var report = reports.take()
        for batch in batches {
            do {
                try transport.send(batch.envelope(report))
                report = nil
            } catch {
                diagnostics.log(.error, "could not store an envelope of \(batch.payloads.count) items: \(error)")
                for payload in batch.payloads {
                    reports.recordDrop(of: batch.category, bytes: payload.count, reason: .internalSDKError)
                }
            }
        }
        if let report { reports.restore(report) }
    }

    /// Stores pending client-report counts on their own, when no envelope is left to carry them (close).
    func forwardPendingReport() {
        guard let report = reports.take() else { return }
        do {
            try transport.send(encoder.clientReport(report))
        } catch {
            reports.restore(report)
            diagnostics.log(.error, "could not store a client report: \(error)")
        }
    }
}

extension Array {
    /// Consecutive slices of at most `size` elements.
    func chunks(of size: Int) -> [[Element]] {
        stride(from: 0, to: count, by: size).map { Array(self[$0..<Swift.min($0 + size, count)]) }
    }
}
