import CTelemetrySignals
import Foundation

/// The FileStreamCache strategy (option 2 of the mobile spec): every `add` appends its framed record to
/// the file `cache` with one `writev` **on the calling thread**.
///
/// The spec forbids this option on Apple and Android main threads (a `write` can block on a busy disk);
/// it suits daemons and background threads. Each item is in the page cache when `add` returns, so it
/// survives the death of the process (not power loss). On the timer or a limit, `cache` is renamed to
/// `flushing`, a fresh `cache` is opened, and `flushing` is published exactly once under its
/// publication marker, then deleted. If `cache` fills while `flushing` is still being published, new
/// items are dropped and counted (with `BatchTally`'s rule for a span's trace). Start-up recovery reads
/// both files. Once an append fails for lack of room (a full disk, a quota, the file size limit), the
/// calling threads write nothing more: their items are refused at once (counted) until a probe in the
/// background, once a second, has seen an append of that size fit.
///
/// `@unchecked Sendable`: its state is guarded by `lock`, and `outOfRoom` (raw memory) is read and written
/// only atomically.
final class FileStreamCache: BufferStrategy, @unchecked Sendable {
    private let folder: BufferFolder
    private let batcher: EnvelopeBatcher
    private let forwarding: ForwardLoop
    private let maxRecordBytes: Int
    private let lock = Lock()
    // Guarded by `lock`.
    private var fd: FileDescriptor
    /// What `cache` holds, by category and trace.
    private var tally = BatchTally()
    /// Record bytes in `cache`.
    private var cacheBytes = 0
    /// `flushing` exists and is not yet published.
    private var pending = false
    /// A failed append's partial record could not be cut off: `cache` ends in bytes that are no record,
    /// and nothing may follow them (every scan of the file ends there).
    private var torn = false
    private var closed = false
    private var ids = ItemIDSequence()
    /// 1 from an append that failed for lack of room until the probe saw one fit: read by `append` before
    /// it takes the lock, so that a full disk costs the calling thread no syscall and no wait.
    private let outOfRoom = UnsafeMutablePointer<UInt64>.allocate(capacity: 1)
    /// What the probe tries to write: the size of the append that did not fit, at most 4 KiB (a larger
    /// item must not keep smaller ones out). Guarded by `lock`.
    private var probeSize = 0
    /// Fires once a second while `outOfRoom`, on a queue of its own. Made last in `init`: a timer source
    /// released without ever being resumed (an `init` that throws) stops the process.
    private let probe: DispatchSourceTimer

    init(folder: BufferFolder, batcher: EnvelopeBatcher, outbox: any Outbox, maxBatchBytes: Int) throws {
        self.folder = folder
        self.batcher = batcher
        forwarding = ForwardLoop(folder: folder, outbox: outbox, diagnostics: batcher.diagnostics)
        maxRecordBytes = maxBatchBytes
        // A link, a FIFO or someone else's file named `flushing` would be replaced by a rotation.
        try Self.checkFlushingIsFree(in: folder)
        fd = try Self.createCache(at: folder.path + "/" + BufferFile.streamCache.name)
        outOfRoom.initialize(to: 0)
        probe = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "io.telemetrybuffer.room-probe", qos: .utility))
        probe.schedule(deadline: .distantFuture)
        probe.setEventHandler { [weak self] in self?.probeRoom() }
        probe.resume()
    }

    /// Throws `ForeignFile` if something not ours has the name `flushing`. (A file of ours there is a
    /// published one whose removal failed: its marker says `captured`, and the rotation replaces it.
    /// Start-up recovery claims, so renames, one that was not.)
    private static func checkFlushingIsFree(in folder: BufferFolder) throws {
        let name = BufferFile.streamFlushing.name
        guard !folder.contains(name) || folder.isOurs(name) else {
            throw FileSystem.ForeignFile(path: folder.path + "/" + name)
        }
    }

    deinit {
        probe.cancel()
        outOfRoom.deallocate()
        fd.close()
    }

    /// Creates a fresh stream file at `path` with its header and returns its descriptor.
    private static func createCache(at path: String) throws -> FileDescriptor {
        let descriptor = try FileSystem.openFile(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND)
        var header = [UInt8](repeating: 0, count: RecordFraming.headerSize)
        header.withUnsafeMutableBytes {
            RecordFraming.writeHeader(kind: .streamCache, createdMicros: RecordFraming.createdNow(),
                                      to: $0.baseAddress!)
        }
        do {
            try FileSystem.writeAll(descriptor, header, path: path)
        } catch {
            descriptor.close()
            throw error
        }
        return descriptor
    }

    /// Appends go to `descriptor` from now on. Caller holds the lock.
    private func use(_ descriptor: FileDescriptor) {
        fd.close()
        fd = descriptor
        tally = BatchTally()
        cacheBytes = 0
        torn = false
    }

    /// `cache` becomes `flushing`; a new `cache` takes the next items. Caller holds the lock.
    ///
    /// The new file is made first, under a temporary name (removed at start if a crash leaves it): if it
    /// cannot be (no descriptor left, a full disk), nothing is renamed and the adds keep going into the
    /// file named `cache`, never into one renamed under them.
    private func rotate() throws {
        // Through the folder, which refuses once released: the names are a later buffer's then.
        let cache = BufferFile.streamCache.name, flushing = BufferFile.streamFlushing.name
        let temporary = "." + cache + ".tmp"
        try Failpoint.streamCacheFails.failIfArmed("open", folder.path + "/" + temporary)
        try Self.checkFlushingIsFree(in: folder)  // planted since the start: not replaced
        let descriptor = try Self.createCache(at: folder.path + "/" + temporary)
        do {
            try folder.rename(cache, to: flushing)
            do {
                try folder.rename(temporary, to: cache)
            } catch {
                try? folder.rename(flushing, to: cache)  // back where the adds' file was
                throw error
            }
        } catch {
            descriptor.close()
            folder.remove(temporary)
            throw error
        }
        pending = true
        use(descriptor)
    }

    func append(_ item: EncodedItem) -> AppendOutcome {
        guard tb_load_acquire_u64(outOfRoom) == 0 else { return .rejected(.internalSDKError) }
        lock.lock()
        defer { lock.unlock() }
        guard !closed, !tally.isCut(item) else { return .rejected(.bufferOverflow) }
        let size = RecordFraming.recordHeaderSize + item.payload.count
        var rotated = false
        // After a partial record that stayed: cut it off now, or go on in a new `cache` (the torn one is
        // published up to it), or refuse while `flushing` still waits.
        if torn, !cutOffTornRecord() {
            guard !pending else { return .rejected(.internalSDKError) }
            do { try rotate() } catch { return .rejected(.internalSDKError) }
            rotated = true
        }
        if cacheBytes + size > maxRecordBytes || !tally.hasRoom(for: item.category, limits: batcher.limits) {
            guard !pending, cacheBytes > 0 else {
                tally.overflowed(item)
                return .rejected(.bufferOverflow)
            }
            do { try rotate() } catch { return .rejected(.internalSDKError) }
            rotated = true
        }
        let id = ids.next()
        let written = withUnsafeTemporaryAllocation(byteCount: RecordFraming.recordHeaderSize, alignment: 8) { header in
            RecordFraming.writeRecordHeader(category: item.category, id: id, payloadCount: item.payload.count,
                                            payloadCRC: item.payloadCRC, to: header.baseAddress!)
            return writeRecord(header: UnsafeRawBufferPointer(header), payload: item.payload)
        }
        if let failure = written {
            // A partial record would end every later scan of the file: cut it off (or before the next append).
            torn = true
            _ = cutOffTornRecord()
            if [ENOSPC, EDQUOT, EFBIG].contains(failure) {
                probeSize = min(size, 4096)
                tb_store_release_u64(outOfRoom, 1)
                probe.schedule(deadline: .now() + 1, repeating: 1, leeway: .milliseconds(100))
            }
            return .rejected(.internalSDKError)
        }
        let wasEmpty = cacheBytes == 0
        cacheBytes += size
        let limitReached = tally.count(item.category, limits: batcher.limits)
        return .accepted(startTimer: wasEmpty, forwardNow: rotated || limitReached)
    }

    /// Truncates `cache` to its records after a partial one; whether it did (then it is not `torn`).
    /// Caller holds the lock.
    private func cutOffTornRecord() -> Bool {
        do {
            let path = folder.path + "/" + BufferFile.streamCache.name
            try Failpoint.streamTruncateFails.failIfArmed("ftruncate", path)
            try fd.truncate(to: RecordFraming.headerSize + cacheBytes, path: path)
        } catch {
            return false
        }
        torn = false
        return true
    }

    /// One `writev` of header and payload, continuing after short writes; the `errno` of a failure, or `nil`.
    private func writeRecord(header: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer) -> Int32? {
        var headerDone = 0, payloadDone = 0
        while headerDone < header.count || payloadDone < payload.count {
            let written: Int
            do {
                written = try SystemCall.call {
                    withUnsafeTemporaryAllocation(of: iovec.self, capacity: 2) { vectors in
                        vectors[0] = iovec(iov_base: UnsafeMutableRawPointer(mutating: header.baseAddress! + headerDone),
                                           iov_len: header.count - headerDone)
                        vectors[1] = iovec(iov_base: UnsafeMutableRawPointer(mutating: payload.baseAddress! + payloadDone),
                                           iov_len: payload.count - payloadDone)
                        return writev(fd.rawValue, vectors.baseAddress, 2)
                    }
                }
            } catch {
                return error.rawValue
            }
            // A write that takes nothing would be tried for ever: no room, as far as the buffer can tell.
            guard written > 0 else { return ENOSPC }
            let fromHeader = min(written, header.count - headerDone)
            headerDone += fromHeader
            payloadDone += written - fromHeader
        }
        return nil
    }

    /// The probe's queue: whether an append of the size that failed fits now (zeros written where the next
    /// record goes, then cut off again). Then the calling threads may append again.
    private func probeRoom() {
        let fits: Bool = lock.withLock {
            guard !closed else { return false }
            // A torn record that cannot be cut off: a new `cache`, as an append would go on in (unless
            // `flushing` still waits: then the next probe tries again).
            if torn, !cutOffTornRecord() {
                guard !pending, (try? rotate()) != nil else { return false }
            }
            let zeros = [UInt8](repeating: 0, count: probeSize)
            let written = (try? SystemCall.call { zeros.withUnsafeBytes { write(fd.rawValue, $0.baseAddress, $0.count) } }) ?? -1
            // Cut off whatever was written, as a torn record is.
            torn = true
            return cutOffTornRecord() && written == zeros.count
        }
        guard fits else { return }
        probe.schedule(deadline: .distantFuture)
        tb_store_release_u64(outOfRoom, 0)
    }

    @discardableResult
    func forward(everything: Bool) -> (any Error)? {
        forwarding.run(everything: everything, claimed: false, due: { dueOnly in
            // `flushing` (then the cache), or the cache: rotated, unless only a due batch goes and it reached
            // no limit (a wake-up for one that a flush forwarded since would forward part of the next batch).
            try lock.withLock { () throws -> Void? in
                guard !pending else { return () }
                guard cacheBytes > 0, !dueOnly || tally.reachedLimit(batcher.limits) else { return nil }
                do { try rotate() } catch {
                    batcher.diagnostics.log(.error, "could not rotate the stream cache: \(error)")
                    throw error
                }
                return ()
            }
        }, name: { BufferFile.streamFlushing.name }, publish: publishFlushing, reset: { lock.withLock { pending = false } })
    }

    private func publishFlushing() throws {
        let name = BufferFile.streamFlushing.name
        // Unreadable is not published: `flushing` stays for the next forward.
        try Failpoint.streamReadFails.failIfArmed("read", folder.path + "/" + name)
        guard let file = try FramedFile.read(folder: folder.path, name: name) else { return }
        // `captured`: an earlier attempt staged the envelopes (since moved), then could not sync them.
        // Staging them again would publish every item twice, and a failed `fsync` is not retried (Linux
        // reports the error once; a second call returns 0 without writing).
        if file.publication.state != .captured {
            // Staged inside: the batches point into the file's bytes.
            try file.withRecords { records in
                let staged = try batcher.stage(batcher.batches(records), in: folder) {
                    try FramedFile.mark($0, name: name, in: folder)
                }
                try Failpoint.syncFails.failIfArmed("fsync", folder.path)
                try staged.sync()
            }
        }
        folder.remove(name)
        try folder.sync()
    }

    func close() {
        lock.withLock { closed = true }
        probe.schedule(deadline: .distantFuture)
        forward(everything: true)
    }

    var isEmpty: Bool { lock.withLock { !pending && cacheBytes == 0 } }

    /// Items in `cache` (not counting a `flushing` file being published).
    var bufferedItems: Int { lock.withLock { tally.items } }

    /// Every item is in `cache` when `add` returns: nothing is left for a crash handler.
    var crashPlan: CrashPlan? { nil }
}
