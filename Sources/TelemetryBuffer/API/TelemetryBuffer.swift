import CTelemetrySignals
import Dispatch
import Foundation

/// Keeps an app's logs, spans and metrics from the moment `add` returns until they are stored as Sentry envelopes.
///
/// ``TelemetryBuffer/add(log:)`` and ``TelemetryBuffer/add(span:)`` may be called from any thread, the main thread
/// included: they encode the item once into JSON, copy it into a place in the strategy reserved under a short lock,
/// and return; they never wait on disk I/O. Everything else (batching, envelopes, files) happens on one serial
/// background queue.
///
/// ```swift
/// let buffer = try TelemetryBuffer(options: Options(dsn: "https://key@o1.ingest.sentry.io/42"))
/// buffer.add(log: Log(level: .info, body: "Checkout finished", traceID: traceID))
/// buffer.flush()   // everything added so far is now an envelope on disk
/// ```
public final class TelemetryBuffer: Sendable {
    /// The version of this library, the default ``Options/sdkVersion``.
    public static let version = "0.1.0"

    /// The options the buffer was created with.
    public let options: Options
    /// The per-DSN folder: `<cacheDirectory>/<SHA-1 of the DSN, 40 hex digits>`.
    public let directory: URL
    /// What start-up recovery found and published. Recovery runs on the background queue (creating the
    /// buffer only claims the old files), so this waits for it to finish.
    /// A buffer created before the device's first unlock recovers once it opens its folder: until then
    /// this returns at once, with nothing found.
    public var recovery: RecoveryReport {
        // In a forked child the queue that recovers is the parent's: nothing there would end the wait.
        if (held?.started != nil || held == nil) && !Self.isForkedChild { recovering.wait() }
        return recovered.withLock { $0 }
    }
    /// The folder the default `FileTransport` stores envelopes in: `<directory>/envelopes`.
    public var envelopesDirectory: URL { directory.appendingPathComponent("envelopes", isDirectory: true) }

    private let encoder: ItemEncoder
    /// The folder's strategy, or, for a buffer created before the device's first unlock, the one that
    /// holds items in memory until the folder opens (`held`), then passes them on.
    private let strategy: any BufferStrategy
    private let reports: ClientReportRecorder
    private let diagnostics: Diagnostics
    private let queue: DispatchQueue
    private let scheduler: FlushScheduler
    /// What lives in the folder: built by `init`, or by the first forward after the unlock (then set
    /// once, on the queue, and never changed).
    private let parts: Locked<FolderParts?>
    /// The strategy while the folder waits for the device's first unlock; `nil` when it opened at once.
    private let held: HeldUntilUnlock?
    /// The strategy in use: `options.strategy`. (Where a mapped list could fault, the DoubleRotatingBuffer
    /// keeps its lists in memory: see ``TelemetryBuffer/listsInMemory``.)
    public var activeStrategy: Options.Strategy { options.strategy }
    /// Whether the DoubleRotatingBuffer keeps its two lists in anonymous memory instead of mapped files, as
    /// where a store into a mapped page may ask the file system for new space (on Linux, any file system
    /// but ext2/3/4, XFS and tmpfs: btrfs, ZFS, F2FS, overlayfs, FUSE…; on Apple platforms, any volume but
    /// a local APFS or HFS+ one): a full disk would raise SIGBUS in `add`, a nearly full btrfs stall it.
    /// `add` still makes no syscall (its copy is made under the lock, as on Apple platforms); a detected
    /// crash still stores every item exactly once (the crash handler writes the lists out, if
    /// ``Options/crashDetection`` is on and the disk has room), but a SIGKILL loses what the IO caches had not
    /// copied yet: what arrived in the last 100 ms at most (or so, the copy taking its time). A
    /// warning diagnostic says so at creation. `false` for the other strategies, and before the first unlock.
    public var listsInMemory: Bool { doubleRotatingBuffer?.listsInMemory ?? false }
    /// The folder's DoubleRotatingBuffer, if that is the strategy and the folder is open.
    var doubleRotatingBuffer: DoubleRotatingBuffer? { opened?.strategy as? DoubleRotatingBuffer }
    /// Rate limits, and the server's refusal of the DSN (401, 403, 404), checked by every add.
    private let limits: RateLimits
    /// Left once start-up recovery is done; `recovered` holds its report.
    private let recovering = DispatchGroup()
    private let recovered = Locked(RecoveryReport())
    private let maxPayloadBytes: Int
    /// `options.minimumLogLevel`'s severity number: one integer comparison per log.
    private let minimumLogSeverity: Int
    /// What the app set for every later item.
    private let scope: Scope
    /// The user's consent: `add` reads it, changes hold the uploader or remove what is stored.
    private let consent: DataCollectionState
    /// The sampling contexts traces' heads froze (`setSamplingContext`), for their envelopes' headers.
    private let traceContexts: TraceSamplingContexts
    private static let onQueue = DispatchSpecificKey<ObjectIdentifier>()

    /// Creates a buffer, its folders and its transport, and starts recovering what an earlier process left.
    ///
    /// Start-up recovery does not hold this up: the buffer files an earlier process left in
    /// `<directory>/telemetry-buffer` are renamed aside (claimed), and the background queue's first task reads them,
    /// deduplicates by item ID and publishes them as envelopes, before any new item is published. See
    /// ``TelemetryBuffer/recovery`` for what was found. The one wait: a buffer on the same DSN released without
    /// ``TelemetryBuffer/close()-1o2jv`` holds the folder until its final forward, which this waits for (at most
    /// 2 s).
    ///
    /// - Parameter options: What the buffer sends where, and how it keeps it; validated here.
    /// - Throws: ``TelemetryBufferError`` for an invalid DSN, an option out of range, an unusable cache
    ///   directory, a buffer folder already in use by another buffer, a file that cannot be created
    ///   (a full disk fails here, never later), or in the child of a `fork()` of a process that created a
    ///   buffer (``TelemetryBufferError/Code/forkedChild``). Not while the device's protected data is unavailable
    ///   (an iPhone not unlocked since it restarted): the buffer then holds items in memory (one batch's
    ///   worth) and opens its folder at the first forward after the unlock. See <doc:ApplePlatforms>.
    public init(options: Options) throws {
        let assembly = try BufferAssembly(options)
        self.options = options
        directory = assembly.directory
        limits = assembly.limits
        diagnostics = assembly.diagnostics
        reports = assembly.reports
        encoder = assembly.encoder
        maxPayloadBytes = options.maxBatchBytes - RecordFraming.recordHeaderSize
        minimumLogSeverity = options.minimumLogLevel.severityNumber
        scope = Scope(encoder: assembly.encoder, sendsUser: options.sendDefaultPii)
        consent = assembly.consent
        traceContexts = assembly.batcher.encoder.traceContexts
        queue = assembly.queue
        let opened: FolderParts?
        do {
            opened = try FolderParts(assembly)
        } catch where ProtectedDataUnavailable.isCause(of: error, protection: options.fileProtection) {
            assembly.diagnostics.log(.warning, "\(error): items wait in memory until then")
            opened = nil
        }
        // Waiting: the folder's lock (its file has no protection class) is kept if it can be taken, so that
        // a second buffer on the DSN still fails at once.
        var lock: FolderLock?
        if opened == nil {
            // A buffer on the DSN released without `close()` holds it until its final forward.
            LiveBuffers.awaitReleases(of: assembly.directory.path)
            do {
                lock = try FolderLock(folder: assembly.directory.appendingPathComponent(BufferFolder.name).path)
            } catch let error as TelemetryBufferError where error.code == .folderInUse {
                throw error
            } catch is TelemetryBufferError {
                // Not to be had yet (the folder cannot be made either): taken when the folder opens.
            }
        }
        parts = Locked(opened)
        held = opened == nil ? HeldUntilUnlock(maxBatchBytes: options.maxBatchBytes, limits: options.batchLimits, reports: assembly.reports) : nil
        strategy = opened?.strategy ?? held!
        scheduler = FlushScheduler(queue: queue, interval: options.flushInterval, clock: options.clock, strategy: strategy) {
            [parts] in parts.withLock { $0 }?.saveUnsentDropsAfterForward()
        }

        queue.setSpecific(key: Self.onQueue, value: ObjectIdentifier(self))
        // Items are accepted from now on.
        if let opened {
            begin(opened)
        } else {
            held?.opens(keeping: lock) { [weak self] lock in
                guard let self else { throw TelemetryBufferError.closed(path: assembly.directory.path) }
                return try openFolder(assembly, lock: lock)
            }
        }
        // After `opens`: an unlock notified from now on finds the way to open the folder.
        LiveBuffers.register(self)
    }

    /// Background queue, for a buffer created before the unlock: builds the folder's parts and begins
    /// with them; throws (reporting why) while they cannot be built.
    private func openFolder(_ assembly: BufferAssembly, lock: FolderLock?) throws -> any BufferStrategy {
        do {
            let opened = try FolderParts(assembly, lock: lock)
            parts.withLock { $0 = opened }
            begin(opened)
            return opened.strategy
        } catch {
            let waiting = ProtectedDataUnavailable.isCause(of: error, protection: options.fileProtection)
            diagnostics.log(waiting ? .info : .error, "the buffer's folder cannot be opened yet, items wait in memory: \(error)")
            throw error
        }
    }

    /// Starts the work of a folder just opened: recovery first on the queue (at once when already on it),
    /// so that what earlier processes left is published before anything of this one; then uploads, and a
    /// removal owed (a revocation, or one asked for while the folder could not be reached).
    private func begin(_ opened: FolderParts) {
        recovering.enter()
        let removes = held?.takeOwedRemoval() == true || consent.current == .revoked
        // The takeover (on the queue) removes at once what recovery publishes: not even a custom transport
        // gets it.
        let removesNow = removes && isOnQueue
        let recover: @Sendable () -> Void = { [queue, recovering, recovered, diagnostics] in
            opened.recover(into: recovered)
            // Before the hand-over: a transport's `send` may read `recovery`.
            recovering.leave()
            if removesNow {
                opened.outbox.discarding { opened.outbox.takeStaged(from: opened.folder, diagnostics: diagnostics) }
            } else {
                opened.outbox.takeStaged(from: opened.folder, diagnostics: diagnostics)
            }
            // After what is queued now (a first `flush()`), which need not wait for the disk.
            queue.async { opened.settleRecovery() }
        }
        if isOnQueue { recover() } else { queue.async(execute: recover) }
        // After recovery, which published what earlier processes left: that goes too. The buffer is kept
        // for it even if the app releases it at once. Held before uploads start.
        if removesNow {
            // The takeover: now, before the held items (added after the removal was asked for) move in.
            do { try removeStoredData(in: opened, strategy: opened.strategy) } catch {
                diagnostics.log(.error, "could not remove everything stored: \(error)")
            }
        }
        // Held before anything can start a request (recovery, on the queue, may store envelopes already).
        if removes && !isOnQueue { removeHoldingUploads(opened.uploader, waits: false) }
        opened.startUploads { [weak self] in self?.serverStopped($0) }
    }

    /// Removes everything stored (`removeStoredData`) with `uploader` held (`.dataRemoval`) until it is done,
    /// so that nothing the removal takes is sent. If `waits` (and not on the background queue, where
    /// waiting would deadlock) it returns once the removal is done, with its failure; else the removal is
    /// queued, and a failure goes to the diagnostics.
    @discardableResult
    private func removeHoldingUploads(_ uploader: Uploader?, waits: Bool) -> (any Error)? {
        uploader?.hold(.dataRemoval, true)
        guard waits, !isOnQueue else {
            queue.async { [self] in
                removeStoredDataReportingFailure()
                uploader?.hold(.dataRemoval, false)
            }
            return nil
        }
        defer { uploader?.hold(.dataRemoval, false) }
        var failure: (any Error)?
        queue.sync {
            do { try removeStoredData() } catch { failure = error }
        }
        return failure
    }

    /// What lives in the folder, once it is open.
    private var opened: FolderParts? { parts.withLock { $0 } }

    deinit {
        // Released in a forked child: its queues' threads and its folder are the parent's. What holds the
        // parent's descriptors is kept (never freed): freed, it would close numbers the child may have
        // given to files of its own since.
        guard !Self.isForkedChild else {
            _ = Unmanaged.passRetained(parts)
            _ = Unmanaged.passRetained(strategy as AnyObject)
            return
        }
        let opened = opened
        opened?.network?.cancel()
        scheduler.cancel()
        // Its pending wake-ups would keep the uploader working for a buffer that is gone.
        opened?.uploader?.stop()
        // Items the app added but never flushed: forward them, keeping the strategy (and its crash
        // registration, which points into it) alive for it. A buffer still waiting for the unlock cannot
        // open its folder any more: what it holds is counted as lost.
        LiveBuffers.release(ObjectIdentifier(self), directory: directory.path, finalForward: { [strategy, opened] in
            // After `close()` (the folder is released) there is nothing left to forward, and the folder
            // may be a new buffer's already.
            guard !Self.isForkedChild, opened?.folder.isReleased != true else { return }
            opened?.settleRecovery()
            strategy.close()
            opened?.crash?.unregister()
            strategy.countUnstored()
            opened?.saveUnsentDrops(detaching: true)
            // Now, not when the last reference goes: a new buffer on this DSN is waiting for the folder.
            opened?.folder.release()
        }, on: queue)
    }

    // MARK: Adding

    /// Buffers a log. Callable from any thread; never waits on disk I/O.
    ///
    /// - Parameter log: The log, encoded to JSON once, here, on the calling thread.
    /// - Returns: `true` once the buffer holds the log; `false` if it was dropped (buffer full while the
    ///   previous batch is still being written, buffer closed, larger than ``Options/maxBatchBytes``, or, with
    ///   FlushAll, while the crash handler holds the buffer's regions). Every drop is counted for a client
    ///   report, as is a log ``Options/beforeSendLog`` drops. Also `false`, not encoded and not counted, for
    ///   a log below ``Options/minimumLogLevel``, and in the child of a `fork()` (whose counts nothing would
    ///   send; counting takes a lock another thread may have held at the fork, forever in the child).
    @discardableResult
    public func add(log: Log) -> Bool {
        guard log.level.severityNumber >= minimumLogSeverity, consent.acceptsItems, tb_in_forked_child() == 0 else { return false }
        guard let hook = options.beforeSendLog else { return submit(log) }
        return screen(log, with: hook, dropped: dropped, then: submit)
    }

    /// Passes `item` through the app's `hook`, then to `submit`; an item the hook drops goes to `dropped`
    /// (to be counted). Every signal's `add` runs it when the app set a hook; without one, `add` calls its
    /// `submit` directly, so that the common path stays a direct call.
    private func screen<Item>(_ item: Item, with hook: @Sendable (Item) -> Item?, dropped: (Item) -> Bool,
                              then submit: (Item) -> Bool) -> Bool {
        guard let kept = hook(item) else { return dropped(item) }
        // The hook may have taken long enough for a revocation to come, or made it itself.
        guard consent.acceptsItems else { return false }
        return submit(kept)
    }

    /// Encodes and stores a log. Written out, as `submit(_ span:)` is: a shared helper taking the encoding
    /// as a closure cost 0.06 µs per log at p50 (LoadDriver rate, alternating runs).
    @inline(__always)
    private func submit(_ log: Log) -> Bool {
        let defaults = scope.defaults
        return EncodingScratch.withCurrent { scratch in
            var writer = JSONWriter(appendingTo: scratch)
            encoder.encode(log, into: &writer, defaults: defaults)
            writer.finish()
            return submit(.log, scratch.bytes, traceID: nil)
        }
    }

    /// Counts a log `beforeSendLog` dropped, with the bytes it would have taken (it takes no sequence
    /// number).
    private func dropped(_ log: Log) -> Bool {
        EncodingScratch.withCurrent { scratch in
            var writer = JSONWriter(appendingTo: scratch)
            encoder.encode(log, into: &writer, numbered: false, defaults: scope.defaults)
            writer.finish()
            reports.recordDrop(of: .log, bytes: scratch.bytes.count, reason: .beforeSend)
            return false
        }
    }

    /// Buffers a finished span. Callable from any thread; never waits on disk I/O.
    ///
    /// - Parameter span: The span, encoded to JSON once, here, on the calling thread.
    /// - Returns: `true` once the buffer holds the span; `false` if it was dropped (see
    ///   ``TelemetryBuffer/add(log:)``; a span dropped on overflow also drops the later spans of its trace in that
    ///   batch; ``Options/beforeSendSpan`` may drop it). Every drop is counted; nothing in the child of a `fork()`.
    @discardableResult
    public func add(span: Span) -> Bool {
        guard consent.acceptsItems, tb_in_forked_child() == 0 else { return false }
        guard let hook = options.beforeSendSpan else { return submit(span) }
        return screen(span, with: hook, dropped: { _ in
            reports.recordDrop(of: .span, bytes: 0, reason: .beforeSend)
            return false
        }, then: submit)
    }

    @inline(__always)
    private func submit(_ span: Span) -> Bool {
        let defaults = scope.defaults
        return EncodingScratch.withCurrent { scratch in
            var writer = JSONWriter(appendingTo: scratch)
            encoder.encode(span, into: &writer, defaults: defaults)
            writer.finish()
            return submit(.span, scratch.bytes, traceID: span.traceID)
        }
    }

    /// Buffers a trace metric (a counter, a gauge, a distribution's sample). Callable from any thread; never
    /// waits on disk I/O.
    ///
    /// - Parameter metric: The metric, encoded to JSON once, here, on the calling thread.
    /// - Returns: `true` once the buffer holds the metric; `false` if it was dropped (for the reasons
    ///   ``TelemetryBuffer/add(log:)`` gives, a value that is NaN or infinite, counted as `invalid`, or
    ///   ``Options/beforeSendMetric``). Every drop is counted, as `trace_metric` with its
    ///   `trace_metric_byte`s; nothing in the child of a `fork()`.
    @discardableResult
    public func add(metric: Metric) -> Bool {
        guard consent.acceptsItems, tb_in_forked_child() == 0 else { return false }
        guard let hook = options.beforeSendMetric else { return submit(metric) }
        return screen(metric, with: hook, dropped: { metric in
            reports.recordDrop(of: .traceMetric, bytes: encodedSize(of: metric), reason: .beforeSend)
            return false
        }, then: submit)
    }

    @inline(__always)
    private func submit(_ metric: Metric) -> Bool {
        guard metric.isFinite else {
            reports.recordDrop(of: .traceMetric, bytes: encodedSize(of: metric), reason: .invalid)
            diagnostics.log(.error, "dropped the metric \(metric.name): its value is not finite")
            return false
        }
        let defaults = scope.defaults
        return EncodingScratch.withCurrent { scratch in
            var writer = JSONWriter(appendingTo: scratch)
            encoder.encode(metric, into: &writer, defaults: defaults)
            writer.finish()
            return submit(.traceMetric, scratch.bytes, traceID: nil)
        }
    }

    /// The bytes a dropped metric would have taken (it takes no sequence number); one whose value is not
    /// finite, as if it were 0, which JSON can carry.
    private func encodedSize(of metric: Metric) -> Int {
        var metric = metric
        if !metric.isFinite { metric.value = .double(0) }
        return EncodingScratch.withCurrent { scratch in
            var writer = JSONWriter(appendingTo: scratch)
            encoder.encode(metric, into: &writer, numbered: false, defaults: scope.defaults)
            writer.finish()
            return scratch.bytes.count
        }
    }

    /// The one way in for every signal: an item encoded into `payload`, checked against the rate limits
    /// and its size, handed to the strategy; every refusal counted. `traceID`: a span's, for whole-trace drops.
    @inline(__always)
    func submit(_ category: ItemCategory, _ payload: UnsafeRawBufferPointer, traceID: TraceID?) -> Bool {
        if let refusal = limits.refusal(for: RateLimits.Category(category)) {
            reports.recordDrop(of: category, bytes: payload.count, reason: refusal)
            return false
        }
        guard payload.count <= maxPayloadBytes else {
            reports.recordDrop(of: category, bytes: payload.count, reason: .invalid)
            diagnostics.log(.error, "dropped a \(category) of \(payload.count) bytes: larger than maxBatchBytes")
            return false
        }
        let item = EncodedItem(
            category: category, payload: payload, payloadCRC: CRC32C.checksum(payload), traceID: traceID)
        switch strategy.append(item) {
        case .accepted(let startTimer, let forwardNow):
            if startTimer || forwardNow { scheduler.notify(startTimer: startTimer, forwardNow: forwardNow) }
            return true
        case .rejected(let reason):
            reports.recordDrop(of: category, bytes: payload.count, reason: reason)
            return false
        case .refusedWhileClaimed:
            reports.recordDrop(of: category, bytes: payload.count, reason: .internalSDKError)
            scheduler.notify(startTimer: false, forwardNow: true)
            return false
        }
    }

    // MARK: Attributes for every item

    /// Adds `value` under `key` to every log, span and metric added from now on (replacing an earlier value of
    /// the key, or the buffer's own default of that key); an item's own attribute of the key still wins.
    /// Any key is sent as set, `user.*` included (``Options/sendDefaultPii`` gates only `setUser`), except
    /// `sentry.timestamp.sequence`, which the buffer numbers; on a span whose field gives the key
    /// (``Span/op``, the segment, the thread) the field wins. Items added before keep what they had. It
    /// builds the pre-encoded attributes anew, under a lock: call it when the value changes, not per
    /// item. While any attribute (or a sent user) is set, each `add` takes that lock briefly to read them.
    public func setAttribute(_ value: AttributeValue, forKey key: String) {
        scope.set(value, forKey: key)
    }

    /// Stops adding the attribute `setAttribute` set under `key` to later items.
    public func removeAttribute(forKey key: String) {
        scope.set(nil, forKey: key)
    }

    /// Names the app's user on every later log, span and metric, as `user.id`, `user.email` and `user.name`
    /// (those not `nil`, replacing an attribute of the same key set with `setAttribute`), if
    /// ``Options/sendDefaultPii`` is on; with it off (the default) this does nothing, as the protocol's
    /// rule for `user.*` on logs asks. All `nil` forgets the user.
    public func setUser(id: String?, email: String? = nil, username: String? = nil) {
        var user = Attributes()
        if let id { user["user.id"] = .string(id) }
        if let email { user["user.email"] = .string(email) }
        if let username { user["user.name"] = .string(username) }
        scope.setUser(user)
    }

    /// Sets the dynamic sampling context that the envelopes of `trace`'s spans carry as their `trace`
    /// header: the one the trace's head froze. A tracer that continues an incoming request passes its
    /// caller's (the `sentry-` members of its `baggage`, without the prefix); one that starts a trace, its
    /// own (with its `sample_rand`). String fields; the `trace_id` is the trace's; a key with `baggage`'s
    /// `sentry-` prefix is taken without it; the DSN's `public_key` goes in if it has none. One of more than
    /// 16 KiB encoded (twice what `baggage` may carry) is not kept, with a diagnostic. Kept in memory for the
    /// latest 1024 traces set (fewer if their contexts take more than 1 MiB); the spans of other traces, and
    /// spans recovered after a restart, carry the buffer's own (the DSN's public key,
    /// ``Options/tracesSampleRate``, the release and the environment, and a `sample_rand` below the rate,
    /// ``TraceID/derivedSampleRand(sampled:rate:)``).
    public func setSamplingContext(_ context: [String: String], forTrace trace: TraceID) {
        guard traceContexts.set(context, for: trace) else {
            return diagnostics.log(.warning, "the sampling context of trace \(trace) takes more than \(TraceSamplingContexts.maxContextBytes) bytes: its spans carry the buffer's own")
        }
    }

    // MARK: Drops outside the buffer

    /// Counts an item of `signal` that an integration dropped before it reached `add`, for a client report
    /// (`internal_sdk_error`, with no bytes: the item was never encoded). The integrations drop an item made
    /// while sending one that was itself made while sending (a hook that logs each log it sees), which would
    /// recur without end. Callable from any thread, from a hook too; takes a short lock. Nothing is counted
    /// while consent is revoked, or in the child of a `fork()`.
    public func countDroppedBeforeAdd(_ signal: Signal) {
        guard consent.acceptsItems, tb_in_forked_child() == 0 else { return }
        reports.recordDrop(of: signal.category, bytes: 0, reason: .internalSDKError)
    }

    // MARK: Consent

    /// The user's consent to collecting telemetry, as last set (``Options/dataCollection`` at start).
    public var dataCollection: DataCollection { consent.current }

    /// Changes the user's consent; it takes effect at once and never waits on disk I/O.
    ///
    /// * `.pending`: items are taken and stored; no request starts once this returns (one already under way
    ///   completes). Stored envelopes count against ``Options/maxCachedEnvelopes`` and ``Options/maxCacheBytes``
    ///   meanwhile.
    /// * `.granted`: uploads start, with what was stored before; after a revocation, once its removal is
    ///   done, so that nothing it removes is sent.
    /// * `.revoked`: `add` refuses every item (returns `false`, not counted as a drop), no request starts, and
    ///   whatever a forward publishes is deleted, never stored or handed to a transport; the background queue then
    ///   removes everything stored, as ``TelemetryBuffer/removeAllData()`` does (a failure is reported to
    ///   ``Options/diagnosticHandler``; setting `.revoked` again retries).
    ///
    /// With a custom ``Options/transport`` the buffer hands envelopes over while `.pending` or `.granted`:
    /// holding them while `.pending` is the transport's part.
    public func setDataCollection(_ value: DataCollection) {
        guard !Self.isForkedChild else { return }
        consent.set(value) { previous in
            // Before the folder opens there is no uploader: it reads the consent when it starts, and a
            // removal is owed at once (what is held goes with it), so that a takeover already queued removes
            // before uploads start.
            let uploader = opened?.uploader
            if value == .revoked, uploader == nil { held?.oweRemoval() }
            if value != .granted { uploader?.hold(.consent, true) }
            // Held until the removal is done, whatever a grant queued before it releases.
            if value == .revoked { removeHoldingUploads(uploader, waits: false) }
            if value == .granted, previous != .granted {
                // Queued behind any removal; a change made meanwhile wins.
                queue.async { [self] in
                    consent.ifCurrent(.granted) { opened?.uploader?.hold(.consent, false) }
                }
            }
        }
    }

    /// Removes everything this buffer stores: the items it holds (forwarded into nothing, through the same
    /// exactly-once publication as a flush), what its files still hold of forwarded items (zeroed or deleted), what
    /// start-up recovery could not publish, and every envelope in ``TelemetryBuffer/envelopesDirectory``. The
    /// deletions are durable when it returns: a crash or power loss after that brings none of it back. Items added on
    /// other threads while it runs may be removed too; the consent does not change.
    ///
    /// It waits for the background queue and the disk (about as long as a ``TelemetryBuffer/flush()-4a48u``); no
    /// request starts from the call on until it returns, but one already under way completes. With a custom
    /// transport, what the default one stored in ``TelemetryBuffer/envelopesDirectory`` in earlier runs goes too;
    /// envelopes the custom transport took are out of its reach. Called on the buffer's own queue (from a custom
    /// transport's `send`), it cannot wait for the forward it interrupts: it is queued behind it and returns at once
    /// (a failure then goes to ``Options/diagnosticHandler``). In the child of a `fork()` it does nothing.
    ///
    /// - Throws: `TelemetryBufferError.closed` after ``TelemetryBuffer/close()-1o2jv``; `.fileSystem` if a file could
    ///   not be removed or synced, or items could not be forwarded (the diagnostics say why): what it names may
    ///   remain. Every step runs even after one fails.
    ///
    /// Before the device's first unlock it drops what the buffer holds in memory and throws
    /// `.fileSystem` with `EPERM`: the folder cannot be reached yet; what it stores is removed once it
    /// opens, before any upload.
    public func removeAllData() throws {
        guard !Self.isForkedChild else { return }
        let uploader = opened?.uploader
        // Before the folder opens: owed at once (what is held goes with it), so that a takeover already queued
        // removes before uploads start.
        if uploader == nil { held?.oweRemoval() }
        if let failure = removeHoldingUploads(uploader, waits: true) { throw failure }
    }

    /// Background queue: `removeAllData()` for a caller that does not wait (a revocation). Nothing to do
    /// once the buffer is closed.
    private func removeStoredDataReportingFailure() {
        do {
            guard opened?.folder.isReleased != true, held?.isClosed != true else { return }
            try removeStoredData()
        } catch {
            // Waiting for the unlock, the removal is owed: it runs when the folder opens.
            diagnostics.log(opened == nil ? .info : .error, "could not remove everything stored: \(error)")
        }
    }

    /// Background queue: forwards everything held into nothing, deletes stored envelopes, clears the
    /// strategy's files and removes leftovers; every step runs, and the first failure is thrown.
    private func removeStoredData() throws {
        dispatchPrecondition(condition: .onQueue(queue))
        if let held, opened == nil {
            guard !held.isClosed else { throw TelemetryBufferError.closed(path: directory.path) }
            // Owed before the takeover, which then removes what the folder holds before uploads start.
            held.oweRemoval()
            held.takeOver()
        }
        guard let opened else {
            // Still waiting for the unlock: what was held went with the owed removal, the folder's contents go
            // once it opens.
            throw TelemetryBufferError.fileSystem(operation: "open", path: directory.path, errno: EPERM)
        }
        guard !opened.folder.isReleased else { throw TelemetryBufferError.closed(path: directory.path) }
        try removeStoredData(in: opened, strategy: strategy)
    }

    /// Forwards what `strategy` holds into nothing, then removes what `opened`'s folder stores.
    private func removeStoredData(in opened: FolderParts, strategy: any BufferStrategy) throws {
        // First, so that no list recovery published stays claimed, to be caught half-removed by a kill.
        opened.settleRecovery()
        let (folder, files, outbox) = (opened.folder, opened.files, opened.outbox)
        var failure: (any Error)?
        func step(_ body: () throws -> Void) {
            do { try body() } catch { failure = failure ?? error }
        }
        var forwardFailure: (any Error)?
        outbox.discarding { forwardFailure = strategy.forward(everything: true) }
        // The strategy's own error where it is one of the API's; else (a crash handler holding a region, a
        // file that is not the buffer's) said as it is, with no errno made up for it.
        step {
            guard let forwardFailure else { return }
            throw forwardFailure as? TelemetryBufferError
                ?? .fileSystem(operation: "publish", path: folder.path, reason: "\(forwardFailure)")
        }
        step {
            if let files { try files.removeAll() } else { try FileTransport.removeAll(in: envelopesDirectory) }
        }
        step { try strategy.scrub() }
        // After a failed forward the strategy still owns what it left (a list's copy, `flushing`).
        if forwardFailure == nil { step { try folder.removeLeftovers() } }
        step { try folder.sync() }
        if let failure { throw failure }
    }

    // MARK: Lifecycle

    /// Ends the uploader's wait after failed attempts (a backoff or the cool-off) and sends now: for apps
    /// that know the network is back (on Apple platforms the buffer sees that itself). The attempts count
    /// from 1 again. A rate limit from the server is waited out all the same, and holds (consent, a
    /// metered network) stay.
    public func resumeUploads() {
        opened?.uploader?.resume()
    }

    /// Forwards everything buffered to the transport and returns once it is stored (on disk with the
    /// default transport: safe from any death of the process; the DoubleRotatingBuffer makes it durable
    /// against power loss off the wait, within ``Options/ioSyncInterval``). Called on the buffer's background
    /// queue (a hook of an add a custom `Transport`'s `send` makes), it cannot wait for itself: the forward
    /// is queued after the one under way, and it returns at once.
    public func flush() {
        guard !Self.isForkedChild else { return }
        // Inside the queue's work (a forward calling a transport's `send`): after it, never within it.
        if isOnQueue {
            queue.async { [scheduler] in scheduler.forwardEverything() }
        } else {
            queue.sync { scheduler.forwardEverything() }
        }
    }

    /// Like ``TelemetryBuffer/flush()-4a48u``, waiting at most `timeout` seconds.
    ///
    /// - Parameter timeout: The longest wait, in seconds (0 or less: do not wait).
    /// - Returns: `true` if the forward finished in time; `false` if it is still running in the background
    ///   (at once on the buffer's background queue, as for `flush()`).
    @discardableResult
    public func flush(timeout: TimeInterval) -> Bool {
        // Inside the queue's work (a forward calling a transport's `send`): after it, never within it.
        guard !isOnQueue else {
            queue.async { [scheduler] in scheduler.forwardEverything() }
            return false
        }
        return flush(timeout: timeout, durably: false)
    }

    /// Like `flush(timeout:)`, with `durably` also waiting, within the same `timeout`, until what the
    /// forward published is durable against power loss (the DoubleRotatingBuffer syncs it a moment later,
    /// off the wait): for a graceful exit and for going to the background, after which the process may be
    /// gone before that sync, and a reboot would take the unsynced copies for live items.
    func flush(timeout: TimeInterval, durably: Bool) -> Bool {
        guard !Self.isForkedChild else { return true }
        let forward: @Sendable () -> Void = { [scheduler, strategy, parts] in
            Self.forwardEverything(scheduler, strategy, parts, durably: durably)
        }
        if isOnQueue {
            // `exit()` called inside the queue's work (a transport's `send`): the process ends, so a forward
            // inside the one under way (which may send its envelope again) rather than losing what memory holds.
            forward()
            return true
        }
        let done = DispatchSemaphore(value: 0)
        queue.async {
            forward()
            done.signal()
        }
        return done.wait(timeout: .now() + max(0, timeout)) == .success
    }

    /// Like ``TelemetryBuffer/flush()-4a48u``, suspending the calling task instead of blocking its thread: for Swift
    /// concurrency, whose threads must not wait on I/O. Returns once everything added before the call is stored.
    public func flush() async {
        guard !Self.isForkedChild else { return }
        // It never blocks, so even a task that runs on the background queue itself cannot deadlock here.
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            queue.async { [scheduler] in
                scheduler.forwardEverything()
                done.resume()
            }
        }
    }

    /// Like ``TelemetryBuffer/close()-1o2jv``, suspending the calling task instead of blocking its thread. The waits
    /// ``TelemetryBuffer/close()-1o2jv`` makes (for a request under way, the forward, pending diagnostics) happen on
    /// a dispatch thread, never on one of Swift concurrency's.
    public func close() async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            DispatchQueue.global(qos: .utility).async {
                self.close()
                done.resume()
            }
        }
    }

    /// Stops the uploader (waiting at most 2 s for a request under way; what is stored is sent by the next buffer on
    /// this DSN), forwards everything like ``TelemetryBuffer/flush()-4a48u``, then rejects every later item (each
    /// rejection counted as `buffer_overflow`) and releases the DSN's folder, so a new buffer may open it. It takes
    /// as long as the forward's disk writes, plus at most 2 s for the request and 2 s for pending diagnostics.
    /// Calling it again does nothing more. Called on the buffer's background queue (see `flush()`), the forward
    /// and the rest are queued after the work under way, and it returns before them.
    public func close() {
        guard !Self.isForkedChild else { return }
        // Inside the queue's work (a forward calling a transport's `send`): after it, never within it.
        if isOnQueue { queue.async { [self] in closing() } } else { closing() }
    }

    /// What `close()` does, on any thread but inside the background queue's work.
    private func closing() {
        // A buffer waiting for the unlock tries once more, so that what it holds is stored; no takeover
        // comes after this one, so the parts read next are the last.
        if let held { onQueue { held.takeOver(); held.seal() } }
        let opened = opened
        // First, so that no request starts for a folder this buffer is about to give up.
        opened?.network?.cancel()
        opened?.uploader?.close()
        onQueue {
            // Closed before: the folder may be a new buffer's by now.
            guard opened?.folder.isReleased != true, held?.isClosed != true else { return }
            opened?.settleRecovery()
            strategy.close()
            opened?.crash?.unregister()
            strategy.countUnstored()
            scheduler.close()
            opened?.saveUnsentDrops(detaching: true)
            opened?.folder.release()
        }
        Diagnostics.drain()
    }

    /// The server refused the DSN for good: refuse later items; for an invalid key also drop what is stored.
    private func serverStopped(_ reason: UploadStop) {
        limits.refuseAll()
        guard case .invalidKey = reason, let opened else { return }
        let (files, folder) = (opened.files, opened.folder)
        queue.async { [self] in
            strategy.close()
            scheduler.close()
            reports.detach()  // nothing more is saved for a key the server refuses (`removeBufferFiles` takes the file)
            for url in files?.storedEnvelopes() ?? [] {
                files?.remove(url, countingAs: .sendError, why: "the DSN's key is invalid")
            }
            folder.removeBufferFiles()
        }
    }

    /// A snapshot of the queue: stored envelopes by kind, the oldest one's age, buffered items, every
    /// drop since start by reason and category, and the upload state. It reads the envelope folder on the
    /// calling thread: call it for diagnostics, not on a hot path.
    public func stats() -> QueueStats {
        let (files, uploader) = (opened?.files, opened?.uploader)
        let (stored, oldest) = files?.summary() ?? ([:], nil)
        let drops = (reports.totals()?.entries ?? []).reduce(into: [String: Int]()) {
            $0["\($1.reason.rawValue)/\($1.category.rawValue)"] = $1.quantity
        }
        let transferred = uploader?.transferred ?? (sent: 0, saved: 0)
        return QueueStats(stored: stored, oldestEnvelopeAge: oldest.map { options.clock.now().timeIntervalSince($0) },
                          bufferedItems: strategy.bufferedItems, drops: drops, upload: uploader?.state ?? .disabled,
                          bytesSent: transferred.sent, bytesSavedByGzip: transferred.saved)
    }

    /// Call when the app moves to the background: forwards everything and makes it durable against power
    /// loss, without blocking the caller; the timer stops with nothing left to forward (a forward that failed,
    /// or items added meanwhile, keep theirs). On platforms with UIKit the buffer also does this by itself.
    public func didEnterBackground() {
        guard !Self.isForkedChild else { return }
        queue.async { [scheduler, strategy, parts] in
            // Durable at once, not at the end of the sync interval: a suspended app may outlast it, and after a
            // reboot recovery would publish the unsynced publications' copies again.
            Self.forwardEverything(scheduler, strategy, parts, durably: true)
        }
    }

    /// Background queue: forwards everything; with `durably`, then waits until what was published (recovery's
    /// publications included) is durable against power loss.
    private static func forwardEverything(_ scheduler: FlushScheduler, _ strategy: any BufferStrategy,
                                          _ parts: Locked<FolderParts?>, durably: Bool) {
        scheduler.forwardEverything()
        guard durably else { return }
        let opened = parts.withLock { $0 }
        opened?.settleRecovery()
        strategy.awaitDurable()
        // The process may end before an upload takes them: an app in the background is often killed there.
        opened?.saveUnsentDrops()
    }

    /// The device's protected data became available (its first unlock): a buffer created before it opens
    /// its folder now, without blocking the caller.
    func protectedDataBecameAvailable() {
        guard let held, held.started == nil, !Self.isForkedChild else { return }
        queue.async { [scheduler] in scheduler.forwardEverything() }
    }

    /// Memory pressure: forwards everything, then gives the memory the strategy holds unused back; without
    /// blocking and without stopping the timer.
    func relieveMemoryPressure() {
        guard !Self.isForkedChild else { return }
        queue.async { [scheduler, strategy] in
            scheduler.forwardEverything()
            strategy.releaseMemory()
        }
    }

    /// Returns once the background queue has done everything queued or rung before the call (for tests
    /// that move a clock by hand: the work it released has then run). A wake-up `add` rang and the
    /// doorbell's thread has not yet passed on is passed on first. Then the same for the uploader's queue.
    func waitForBackgroundWork() {
        scheduler.deliverRung()
        // A wake-up passed on while the last one's handler ran is queued again when that handler returns,
        // behind a block queued meanwhile: the first pass may end before it, the second follows it.
        onQueue {}
        onQueue {}
        opened?.uploader?.waitForQueuedWork()
    }

    /// Runs `body` on the background queue and waits for it (inline when already there). In the child of
    /// a `fork()` it does nothing: the queue's thread is the parent's, and so are the files.
    private func onQueue(_ body: () -> Void) {
        guard !Self.isForkedChild else { return }
        if isOnQueue { body() } else { queue.sync(execute: body) }
    }

    /// Whether this process is the child of a `fork()` (without `exec`) of the one that created the buffer.
    static var isForkedChild: Bool { tb_in_forked_child() != 0 }

    /// Whether the caller runs on this buffer's background queue (so waiting for it would deadlock).
    private var isOnQueue: Bool { DispatchQueue.getSpecific(key: Self.onQueue) == ObjectIdentifier(self) }

    /// Gives the calling thread an alternate signal stack (128 KiB), so that a stack overflow on it can
    /// still run the crash handler. A thread's own stack is what overflows, so without one the handler
    /// cannot run there and the crash goes unseen. A thread that creates a buffer gets one automatically;
    /// call this at the start of other long-lived threads your app creates. A stack of at least 128 KiB
    /// the thread already has is kept; a smaller one is replaced (not freed).
    ///
    /// - Returns: `true` if the thread has an alternate stack of at least 128 KiB afterwards; always `false`
    ///   on watchOS and tvOS, which prohibit alternate signal stacks.
    @discardableResult
    public static func installAlternateSignalStack() -> Bool {
        tb_crash_install_alternate_stack() == 0
    }

    /// Counts of items dropped so far by reason and category, not yet sent in a client report nor, after
    /// `close()`, handed to the saved file for the next buffer (see `SavedClientReport`).
    var pendingDiscards: ClientReport? { reports.peek() }

    /// Where drops are counted, which outlives the buffer until its final forward has run.
    var discards: ClientReportRecorder { reports }
}
