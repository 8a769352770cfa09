/// The committed records of a buffer's lanes (see `RecordFraming`), read as one run in the order the items
/// arrived.
///
/// Each lane holds its records in the order of their item sequence, which `add` hands out under the
/// lock of the buffer as it reserves their places; so merging the lanes by sequence gives the order of
/// arrival across threads (logs must be sent in the order they were received).
struct RecordLanes {
    /// Each lane's committed records, in lane order.
    var lanes: [UnsafeRawBufferPointer]

    init(_ lanes: [UnsafeRawBufferPointer]) { self.lanes = lanes }

    /// Record bytes in all lanes.
    var count: Int { lanes.reduce(0) { $0 + $1.count } }

    /// Calls `body` for every valid record, lanes merged by item sequence (a lane ends at its first record
    /// that is not valid), and `unknown` with each valid record of a signal this build does not know;
    /// returns the scan summed over the lanes.
    @discardableResult
    func forEachRecord(unknown: (UnsafeRawBufferPointer) -> Void = { _ in },
                       _ body: (RecordFraming.Record) throws -> Void) rethrows -> RecordFraming.Scan {
        if lanes.count == 1 { return try RecordFraming.forEachRecord(in: lanes[0], unknown: unknown, body) }
        var cursors = lanes.map(RecordFraming.Cursor.init)
        var heads = cursors.indices.map { cursors[$0].next(unknown: unknown) }
        while true {
            // Lanes are few (two in a list): the smallest head by a look at each.
            var next: Int?
            for lane in heads.indices {
                guard let head = heads[lane] else { continue }
                if let best = next, heads[best]!.id.sequence <= head.id.sequence { continue }
                next = lane
            }
            guard let lane = next else { break }
            try body(heads[lane]!)
            heads[lane] = cursors[lane].next(unknown: unknown)
        }
        return cursors.reduce(RecordFraming.Scan(validBytes: 0, discardedBytes: 0)) { scan, cursor in
            RecordFraming.Scan(validBytes: scan.validBytes + cursor.scan.validBytes,
                               discardedBytes: scan.discardedBytes + cursor.scan.discardedBytes,
                               unknownRecords: scan.unknownRecords + cursor.scan.unknownRecords)
        }
    }
}
