import CTelemetrySignals
import Dispatch
import Foundation

/// The composition root: builds a buffer's collaborators from its options, in dependency order, so that
/// `TelemetryBuffer` itself only holds them and runs the public API. Time comes from `options.clock`.
///
/// What needs no file is built here; what lives in the DSN's folder is a `FolderParts`, built right after
/// (or, when the device's protected data is not available yet, at the first unlock).
struct BufferAssembly: Sendable {
    let options: Options
    let directory: URL
    let limits: RateLimits
    let diagnostics: Diagnostics
    let reports: ClientReportRecorder
    let encoder: ItemEncoder
    /// The user's consent, as it changes.
    let consent: DataCollectionState
    let batcher: EnvelopeBatcher
    let queue: DispatchQueue
    let dsn: DSN

    /// Validates `options` and builds what needs no file.
    init(_ options: Options) throws {
        // Its buffers would take nothing (they cannot tell the child's from those it inherited): a clear error.
        guard !TelemetryBuffer.isForkedChild else { throw TelemetryBufferError.forkedChild }
        try options.validate()
        tb_fork_guard_install()
        self.options = options
        dsn = try DSN(options.dsn)
        diagnostics = Diagnostics(handler: options.diagnosticHandler)
        directory = options.cacheDirectory.appendingPathComponent(SHA1.hex(dsn.string.utf8), isDirectory: true)
        limits = RateLimits(clock: options.clock)
        reports = ClientReportRecorder()
        var defaults: Attributes = [
            "sentry.sdk.name": .string(options.sdkName), "sentry.sdk.version": .string(options.sdkVersion),
        ]
        // An empty one is none (the protocol omits empty common attributes).
        let environment = options.environment.flatMap { $0.isEmpty ? nil : $0 }, release = options.release.flatMap { $0.isEmpty ? nil : $0 }
        if let environment { defaults["sentry.environment"] = .string(environment) }
        if let release { defaults["sentry.release"] = .string(release) }
        // Where the app runs: on logs the OS and the device, on spans the OS (see `DeviceContext`).
        var logDefaults = defaults, spanDefaults = defaults
        for attribute in DeviceContext.logAttributes { logDefaults[attribute.key] = attribute.value }
        for attribute in DeviceContext.spanAttributes { spanDefaults[attribute.key] = attribute.value }
        // Trace metrics: the SDK, the environment and the release (the metrics protocol's defaults).
        encoder = ItemEncoder(logDefaults: logDefaults, spanDefaults: spanDefaults, metricDefaults: defaults)
        consent = DataCollectionState(options.dataCollection)
        let envelopes = EnvelopeEncoder(
            dsn: dsn, sdkName: options.sdkName, sdkVersion: options.sdkVersion,
            sampling: .init(publicKey: dsn.publicKey, sampleRate: options.tracesSampleRate,
                            release: release, environment: environment,
                            organizationID: dsn.organizationID))
        batcher = EnvelopeBatcher(
            encoder: envelopes, reports: reports, diagnostics: diagnostics,
            limits: options.batchLimits, maxBytes: options.maxBatchBytes)
        queue = DispatchQueue(label: "io.telemetrybuffer.\(directory.lastPathComponent.prefix(8))", qos: .utility)
    }
}

/// What a buffer keeps in the DSN's folder: the folder (locked to it), the transport, the strategy, the
/// crash registration and the uploader.
struct FolderParts: Sendable {
    let folder: BufferFolder
    let files: FileTransport?
    /// The default transport's folder (`envelopes/`), which an earlier run may have filled even if this one
    /// has a custom transport.
    let stored: URL
    /// The transport's outbox behind the gate `removeAllData` and a revocation divert.
    let outbox: GatedOutbox
    let strategy: any BufferStrategy
    let crash: CrashRegistration?
    let uploader: Uploader?
    /// Reports the network to the uploader (`nil` without an uploader, or where the system reports nothing).
    let network: (any NetworkMonitor)?
    /// Whether start-up claimed files of earlier processes (or found staged envelopes) for recovery.
    let claimed: Bool
    /// What recovery published and has not synced yet (see `settleRecovery`).
    private let settlement = Locked<RecoverySettlement?>(nil)
    private let assembly: BufferAssembly

    /// Creates and locks the DSN's folder (keeping `lock` if one was taken before), claims what earlier
    /// processes left and creates the transport, the strategy, the crash registration and the uploader.
    /// A failure leaves the folder unlocked, or locked by `lock`.
    init(_ assembly: BufferAssembly, lock: FolderLock? = nil) throws {
        self.assembly = assembly
        let (options, diagnostics, directory) = (assembly.options, assembly.diagnostics, assembly.directory)
        try FileSystem.makeDirectory(options.cacheDirectory)
        let buffers = directory.appendingPathComponent(BufferFolder.name, isDirectory: true)
        stored = directory.appendingPathComponent("envelopes", isDirectory: true)
        // Each folder gets its protection class before anything is created in it (the lock file first),
        // so that every file takes the class; files an earlier version left get it once the lock is ours.
        for created in [directory, buffers, stored] {
            try FileSystem.makeDirectory(created)
            Self.protect(created, options, diagnostics)
        }
        do { try FileSystem.excludeFromBackup(directory) } catch {
            diagnostics.log(.warning, "could not exclude \(directory.path) from backups: \(error)")
        }
        // A buffer on this DSN that was released without `close()` holds the folder until its final forward.
        LiveBuffers.awaitReleases(of: directory.path)
        folder = try BufferFolder(path: buffers.path, lock: lock)
        // The lock file holds nothing: no protection, so that a start while the device is locked can open it
        // whatever class the other files have (with `.complete`, such a start failed on it).
        for name in folder.found where folder.isOurs(name) {
            Self.protect(buffers.appendingPathComponent(name), options, diagnostics, name == FolderLock.name ? FileProtection.none : nil)
        }

        if let custom = options.transport {
            (files, outbox) = (nil, GatedOutbox(ForwardingOutbox(
                transport: custom, maxEnvelopes: options.maxCachedEnvelopes, maxBytes: options.maxCacheBytes,
                reports: assembly.reports, diagnostics: diagnostics), consent: assembly.consent))
        } else {
            let transport = try FileTransport(
                directory: stored,
                maxEnvelopes: options.maxCachedEnvelopes, maxBytes: options.maxCacheBytes, maxAge: options.maxEnvelopeAge,
                clock: options.clock, reports: assembly.reports, diagnostics: diagnostics, tidies: false)
            (files, outbox) = (transport, GatedOutbox(transport, consent: assembly.consent))
        }
        claimed = try Recovery.claim(folder: folder, names: folder.found)
        // Tests stand in for a device whose protected data is not available yet, after the claims.
        guard options.protectedDataAvailable() else { throw ProtectedDataUnavailable(path: directory.path) }
        strategy = try Self.makeStrategy(options, folder: folder, batcher: assembly.batcher, outbox: outbox)
        if options.crashDetection, let plan = strategy.crashPlan {
            crash = try CrashRegistration(plan, handleSIGTERM: options.handleSIGTERM)
        } else {
            crash = nil
        }
        if options.upload, let files {
            uploader = Uploader(
                files: files,
                client: options.httpClient ?? URLSessionHTTPClient(timeout: options.uploadOptions.requestTimeout,
                                                                   unmeteredOnly: options.uploadPolicy == .unmeteredOnly),
                options: options.uploadOptions,
                dsn: assembly.dsn, sdkName: options.sdkName, sdkVersion: options.sdkVersion, limits: assembly.limits,
                reports: assembly.reports, diagnostics: diagnostics, clock: options.clock)
            // Until the consent is read (`startUploads`), nothing starts.
            uploader?.hold(.consent, true)
        } else {
            uploader = nil
        }
        network = uploader == nil ? nil : options.networkMonitor ?? NetworkMonitors.system()
        // The drop counts an earlier buffer could not send go with this one's, from its first request on
        // (last: nothing after this fails, so they are read once).
        assembly.reports.attach(SavedClientReport(folder: folder))
    }

    /// Lets the uploader go: holds it while the consent (read now) or a metered network says so, wakes it
    /// when envelopes are stored and the network comes back, and tells `onStop` when the server refuses
    /// the DSN for good. Call once the parts can be found by `setDataCollection` (a change made after
    /// that reaches the uploader itself).
    func startUploads(onStop: @escaping @Sendable (UploadStop) -> Void) {
        guard let uploader else { return }
        let unmeteredOnly = assembly.options.uploadPolicy == .unmeteredOnly
        // Until the network's first report says otherwise, a metered one is assumed.
        if unmeteredOnly, network != nil { uploader.hold(.meteredNetwork, true) }
        assembly.consent.ifCurrent(.granted) { uploader.hold(.consent, false) }
        uploader.onStop(onStop)
        files?.onStore { [weak uploader] in uploader?.kick() }
        uploader.kick()
        // A network that comes back ends a backoff at once (not every change of a working one: that
        // would keep a failing server from its cool-off); a metered one holds uploads if the policy says so.
        let wasSatisfied = Locked(true)
        network?.start { [weak uploader] path in
            uploader?.hold(.meteredNetwork, unmeteredOnly && path.isMetered)
            let cameBack = wasSatisfied.withLock { was in
                defer { was = path.isSatisfied }
                return !was && path.isSatisfied
            }
            if cameBack { uploader?.resume() }
        }
    }

    /// Gives `item` the options' protection class, or `protection`; a failure is a diagnostic (the item
    /// keeps the class it had).
    private static func protect(_ item: URL, _ options: Options, _ diagnostics: Diagnostics, _ protection: FileProtection? = nil) {
        let protection = protection ?? options.fileProtection
        do { try options.protector(item, protection) } catch {
            diagnostics.log(.warning, "could not give \(item.path) the protection class \(protection): \(error)")
        }
    }

    /// Background queue, before any forward of this process: dates its publications, then runs start-up
    /// recovery (on failure the claimed files stay for the next start). The caller then moves what it staged.
    func recover(into report: Locked<RecoveryReport>) {
        let (diagnostics, batcher) = (assembly.diagnostics, assembly.batcher)
        dispatchPrecondition(condition: .onQueue(assembly.queue))
        // Off the creating thread, one call per file: stored envelopes an earlier version left get the
        // protection class (the folder has it, so new ones take it), and what is expired or beyond the bounds
        // goes (a folder of thousands, after a run with a higher bound, took seconds).
        for name in (try? FileManager.default.contentsOfDirectory(atPath: stored.path)) ?? [] {
            Self.protect(stored.appendingPathComponent(name), assembly.options, diagnostics)
        }
        files?.tidy()
        // Before any forward of this process, which may leave publications recovery must date. If it
        // fails, an older `boot` (or none) dates them: they are then trusted less, never more.
        do { try folder.recordBoot() } catch { diagnostics.log(.error, "could not record the boot: \(error)") }
        if claimed {
            var unsynced: RecoverySettlement?
            // Whatever happens: what recovery published is synced when it moved on, even after a failure.
            defer { settlement.withLock { $0 = unsynced } }
            do {
                let found = try Recovery.run(folder: folder, batcher: batcher, unsynced: &unsynced) {
                    try folder.syncStaged()
                    try outbox.syncStored()
                }
                folder.recoveryDone()
                report.withLock { $0 = found }
                if found.items > 0 || found.envelopes > 0 {
                    diagnostics.log(.info, "recovered \(found.items) items (\(found.duplicates) duplicates skipped) into \(found.envelopes) envelopes")
                }
            } catch {
                diagnostics.log(.error, "start-up recovery failed, the files stay for the next start: \(error)")
            }
        } else {
            folder.recoveryDone()
        }
    }

    /// Background queue, once what recovery staged has moved on: syncs what it published and removes the
    /// lists it came from (once; later calls do nothing). After the first forward, or at `close()`, a
    /// durable flush or a released buffer's final forward if they come first: none of them waits for it
    /// before it must.
    func settleRecovery() {
        dispatchPrecondition(condition: .onQueue(assembly.queue))
        settlement.withLock { settlement in
            defer { settlement = nil }
            return settlement
        }?.settle(outbox: outbox, diagnostics: assembly.diagnostics)
    }

    /// Background queue: saves the drop counts not sent yet for the next buffer on the DSN (see
    /// `SavedClientReport`); with `detaching`, the last save (the folder is about to be given up). A failure is
    /// a diagnostic: what an earlier save wrote stays.
    func saveUnsentDrops(detaching: Bool = false) {
        dispatchPrecondition(condition: .onQueue(assembly.queue))
        do { try assembly.reports.saveUnsent(detaching: detaching) } catch {
            assembly.diagnostics.log(.warning, "could not save the drop counts not sent yet: \(error)")
        }
    }

    /// Background queue, after a forward: saves the drop counts not sent yet, not durably and at most once
    /// per `ioSyncInterval` (see `ClientReportRecorder.saveUnsentAfterForward`), unless requests go out now:
    /// the counts then leave with the next one, which would only remove the file again (with a sync). A
    /// failure is a diagnostic.
    func saveUnsentDropsAfterForward() {
        dispatchPrecondition(condition: .onQueue(assembly.queue))
        if let state = uploader?.state, state == .idle || state == .sending { return }
        do {
            try assembly.reports.saveUnsentAfterForward(now: assembly.options.clock.now(), interval: assembly.options.ioSyncInterval)
        } catch {
            assembly.diagnostics.log(.warning, "could not save the drop counts not sent yet: \(error)")
        }
    }

    /// The strategy `options` ask for, where its files can be made. A file of another kind where one of
    /// its files goes fails with `unusableCacheDirectory`, naming it.
    private static func makeStrategy(_ options: Options, folder: BufferFolder, batcher: EnvelopeBatcher,
                                     outbox: any Outbox) throws -> any BufferStrategy {
        do {
            switch options.strategy {
            case .flushAll:
                return FlushAll(folder: folder, batcher: batcher, outbox: outbox, maxBatchBytes: options.maxBatchBytes)
            case .fileStreamCache:
                return try FileStreamCache(folder: folder, batcher: batcher, outbox: outbox, maxBatchBytes: options.maxBatchBytes)
            case .doubleRotatingBuffer:
                do {
                    return try DoubleRotatingBuffer(folder: folder, batcher: batcher, outbox: outbox,
                                                    maxBatchBytes: options.maxBatchBytes, flushInterval: options.flushInterval,
                                                    ioSyncInterval: options.ioSyncInterval)
                } catch let error as MappedFile.WritesCanFault {
                    // A full copy-on-write disk would raise SIGBUS in `add`: the lists go into memory.
                    batcher.diagnostics.log(.warning, "\(error): the DoubleRotatingBuffer keeps its lists in memory (a kill loses what arrived in the last 100 ms at most)")
                    return try DoubleRotatingBuffer(folder: folder, batcher: batcher, outbox: outbox, maxBatchBytes: options.maxBatchBytes,
                                                    flushInterval: options.flushInterval, ioSyncInterval: options.ioSyncInterval,
                                                    listsInMemory: true)
                }
            }
        } catch let foreign as FileSystem.ForeignFile {
            throw TelemetryBufferError.unusableCacheDirectory(path: folder.path, reason: foreign.description)
        }
    }
}
