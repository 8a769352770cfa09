import Foundation

extension TelemetryBuffer {
    /// How a `TelemetryBuffer` batches and stores. Every limit is checked when the buffer is created.
    public struct Options: Sendable {
        /// How the buffer keeps items between `add` and the envelope on disk.
        public enum Strategy: String, Sendable, CaseIterable {
            /// Items stay in memory, pre-serialized in one contiguous region, and are written as envelopes on
            /// flush. A detected crash stores them exactly once (the crash handler writes them out, the next
            /// start publishes them); a death nothing detects (SIGKILL) loses what was not yet forwarded.
            case flushAll
            /// Each item is appended to the file `cache` with a `write` on the calling thread; survives the
            /// death of the process. The spec forbids it on Apple and Android main threads.
            case fileStreamCache
            /// Each item is copied into a memory-mapped crash-safe list (survives any death of the process,
            /// `kill -9` included) and mirrored to a file in the background (`fdatasync`ed every
            /// `ioSyncInterval` while items arrive, against power loss). The default.
            case doubleRotatingBuffer
        }

        /// The Sentry DSN, `https://<public key>@<host>/<project id>`.
        public var dsn: String
        /// The folder the buffer keeps its files in; one subfolder per DSN (SHA-1 of the DSN, 40 hex digits).
        public var cacheDirectory: URL = Options.defaultCacheDirectory
        /// The buffering strategy.
        public var strategy: Strategy = .doubleRotatingBuffer
        /// Seconds from the first buffered item to the forward of everything; in (0, 30]. Counted from when
        /// the background queue takes note of that item: work that holds the queue then (a custom transport's
        /// `send`, start-up recovery, a removal) delays the forward by as long.
        public var flushInterval: TimeInterval = 5
        /// Logs below this level are refused at once by ``TelemetryBuffer/add(log:)`` (it returns `false`), before any
        /// encoding, and are not counted as dropped: they are configuration, not loss. Default `.trace`
        /// (every log).
        public var minimumLogLevel: Log.Level = .trace
        /// Logs that trigger a forward, and the most per envelope; 1...100.
        public var maxLogsPerBatch = 100
        /// Spans that trigger a forward, and the most per envelope; 1...1000.
        public var maxSpansPerBatch = 1000
        /// Trace metrics that trigger a forward, and the most per envelope; 1...100.
        public var maxMetricsPerBatch = 100
        /// Buffered bytes (framed) that trigger a forward; also bounds every envelope's item payload;
        /// 4 KiB...1 MiB. A single item larger than this is rejected.
        public var maxBatchBytes = 1 << 20
        /// How often the DoubleRotatingBuffer's background copy is written and `fdatasync`ed while new items arrive,
        /// and how long published envelopes wait for their sync, taken together (a phone pays for each; one sent
        /// meanwhile needs none); five times as long in Low Power Mode. With ``Options/flushInterval``, the
        /// window of items a power loss can take (10 s by default, 30 s in Low Power Mode). A batch whose
        /// forward comes first (a ``Options/flushInterval`` not well above this, as by default) is not copied
        /// while forwards succeed: its envelopes' sync makes it durable, within this of its publication. (A
        /// SIGKILL takes none: the mapped lists hold them; with ``TelemetryBuffer/listsInMemory``, the copy is
        /// written at least every 100 ms, the window a SIGKILL can take.) In [0.001, 10] seconds; default 5 (at
        /// a steady 20 logs a second, under a third of the wake-ups and a quarter of the syncs of 1 s). Lower it
        /// where power loss is likely.
        public var ioSyncInterval: TimeInterval = 5
        /// Envelopes kept on disk; storing one more evicts the least important: the lowest highest log
        /// level (a span envelope counts as `info`), the oldest of those (`cache_overflow`). The envelope
        /// under upload is neither counted nor evicted, even if a more important one goes instead. At least 1.
        public var maxCachedEnvelopes = 30
        /// Bytes of envelopes kept on disk; storing more evicts, like ``Options/maxCachedEnvelopes``, the least
        /// important first (`cache_overflow`). At least ``Options/maxBatchBytes``: an envelope holds up to that.
        public var maxCacheBytes = 10 << 20
        /// Envelopes older than this (or dated further ahead: the clock was wrong, or went back) are removed
        /// (`cache_overflow`) when a buffer starts, and when the uploader reaches them: one the server keeps
        /// failing (a 5xx for it alone) holds the queue no longer. A clock before 2025, now or when an envelope
        /// was stored, is one not set yet (a device without a real-time clock, at boot): it ages nothing.
        /// More than 0.
        public var maxEnvelopeAge: TimeInterval = 7 * 24 * 3600
        /// The SDK name, sent in envelope headers and as the `sentry.sdk.name` attribute.
        public var sdkName = "sentry.swift.telemetry-buffer"
        /// The SDK version, sent in envelope headers and as the `sentry.sdk.version` attribute.
        public var sdkVersion = TelemetryBuffer.version
        /// Added to every item as `sentry.environment` and to span envelopes' sampling context (an empty one is
        /// none). At most 64 characters, Sentry's limit.
        public var environment: String?
        /// Added to every item as `sentry.release` and to span envelopes' sampling context (an empty one is none).
        /// At most 200 characters, Sentry's limit.
        public var release: String?
        /// The trace sample rate the app samples with, sent as `sample_rate` of span envelopes' sampling
        /// context (every span that reaches the buffer was sampled), with a `sample_rand` below it derived from
        /// the trace ID; in (0, 1].
        public var tracesSampleRate = 1.0
        /// Whether a crash (SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGSEGV, SIGTRAP, SIGSYS) makes the process-wide
        /// handler save this buffer's items before the signal goes on to the handlers installed before it:
        /// FlushAll's memory is written out, DoubleRotatingBuffer's mapped lists are synced. A signal the
        /// process ignores is not hooked.
        public var crashDetection = true
        /// Whether SIGTERM counts as a detected termination too (items saved, then the previous action,
        /// by default the process ends). Off by default: many apps handle SIGTERM themselves (outside signal
        /// context, such as with a `DispatchSource`, if they call the buffer: see <doc:CrashDetection>).
        public var handleSIGTERM = false
        /// Whether stored envelopes are sent to the DSN's server (with the default transport). Turn it off to
        /// keep envelopes on disk only.
        public var upload = true
        /// Pacing, backoff, cool-off and timeout of the uploader.
        public var uploadOptions = UploadOptions()
        /// The data protection class of the buffer's folders and files on Apple platforms (see
        /// `FileProtection`); `.complete` and `.completeUnlessOpen` require `fileStreamCache` or `flushAll`.
        /// Ignored elsewhere.
        public var fileProtection: FileProtection = .completeUntilFirstUserAuthentication
        /// On which networks the uploader sends: `.always` (the default), or `.unmeteredOnly`, which waits
        /// while the network is expensive or constrained (Low Data Mode), as Apple platforms report it.
        public var uploadPolicy: UploadPolicy = .always
        /// The HTTP client of the uploader; `nil` uses URLSession.
        public var httpClient: (any HTTPClient)?
        /// Where envelopes go; `nil` (the default) stores them with a `FileTransport` in `<DSN folder>/envelopes`,
        /// which the uploader drains. A transport set here (a `FileTransport` of your own included) takes
        /// envelopes as they are made, and no uploader runs.
        public var transport: (any Transport)?
        /// Receives the buffer's own diagnostics (drops, I/O failures), asynchronously and in order, on a serial
        /// queue of the library's own (one for every buffer of the process): it may call any method of any buffer,
        /// ``TelemetryBuffer/flush()-4a48u`` and ``TelemetryBuffer/close()-1o2jv`` included.
        /// ``TelemetryBuffer/close()-1o2jv`` and a graceful exit wait (at most 2 s) for the diagnostics reported
        /// before them.
        public var diagnosticHandler: (@Sendable (Diagnostic) -> Void)?

        /// Whether `setUser` sends the user (`user.id`, `user.email`, `user.name`): personal data, off by
        /// default (the protocol sends `user.*` on logs only with it). Attributes set with
        /// `setAttribute`, and an item's own, are sent whatever their key.
        public var sendDefaultPii = false
        /// The user's consent at start (see `DataCollection`; change it with
        /// ``TelemetryBuffer/setDataCollection(_:)``): `.granted` (the default) uploads, `.pending` stores without
        /// uploading, `.revoked` takes nothing and removes what earlier runs stored (after start-up recovery). The
        /// buffer does not remember it: pass the user's answer at every start.
        public var dataCollection: DataCollection = .granted
        /// Sees each log ``TelemetryBuffer/add(log:)`` takes (at or above ``Options/minimumLogLevel``) before it is
        /// encoded, and returns it, changed or not, or `nil` to drop it (counted as `before_send`). It runs on the
        /// thread that called `add`, so keep it short. It may call `add` (an add of its own, passed through the hook
        /// again), ``TelemetryBuffer/flush()-4a48u`` and ``TelemetryBuffer/close()-1o2jv``; an add made on the
        /// buffer's background queue (from a custom `Transport`'s `send`) runs the hook there, where those two
        /// cannot wait for the forward under way: they queue their work after it and return at once.
        ///
        /// Unlike the protocol's pipeline, the buffer's own attributes (SDK, OS, device, sequence) are
        /// added after the hook, pre-encoded: it does not see them, and it replaces one by setting an
        /// attribute of the same key. A templated message's parameters are attributes: a hook that
        /// scrubs the body must scrub them too.
        public var beforeSendLog: (@Sendable (Log) -> Log?)?
        /// The same for spans, before ``TelemetryBuffer/add(span:)`` encodes them (dropped spans count as
        /// `before_send`).
        public var beforeSendSpan: (@Sendable (Span) -> Span?)?
        /// The same for trace metrics, before ``TelemetryBuffer/add(metric:)`` encodes them (dropped metrics count as
        /// `before_send`, with their bytes).
        public var beforeSendMetric: (@Sendable (Metric) -> Metric?)?

        /// The time background work runs on (internal: tests move a clock by hand instead of sleeping).
        var clock: any Clock = SystemClock()
        /// The network path's reports (internal: tests inject them); `nil` takes the system's, where there is one.
        var networkMonitor: (any NetworkMonitor)?
        /// Gives a folder or file its protection class (internal: tests watch the calls, which do nothing
        /// off Apple platforms).
        var protector: @Sendable (URL, FileProtection) throws -> Void = { try FileSystem.protect($0, $1) }
        /// Each signal's limit per envelope and batch, as the options set them.
        var batchLimits: BatchLimits { BatchLimits(self) }

        /// Whether the device's protected data is available (internal: tests stand in for a device not
        /// unlocked since it started; on the device, the file system's refusal says so).
        var protectedDataAvailable: @Sendable () -> Bool = { true }

        /// Options with every default and the given DSN.
        public init(dsn: String) { self.dsn = dsn }

        /// On Apple platforms `Application Support/<bundle identifier>/io.telemetrybuffer`: not Caches, which
        /// the system purges under disk pressure while the app is not running (exactly when a crash left items
        /// to recover), and in the app's own folder, which on a Mac without a sandbox every app of the user
        /// would otherwise share (the per-DSN folders are kept out of backups). On tvOS, where an app may
        /// write nothing outside Caches, and elsewhere, the caches folder plus `io.telemetrybuffer` (on Linux
        /// `$XDG_CACHE_HOME` or `~/.cache`).
        public static var defaultCacheDirectory: URL {
            #if canImport(Darwin) && !os(tvOS)
            let support = FileManager.default.urls(for: .applicationSupportDirectory, in: .userDomainMask).first
                ?? FileManager.default.temporaryDirectory
            return support.appendingPathComponent(Bundle.main.bundleIdentifier ?? "io.telemetrybuffer", isDirectory: true)
                .appendingPathComponent("io.telemetrybuffer", isDirectory: true)
            #else
            let caches = FileManager.default.urls(for: .cachesDirectory, in: .userDomainMask).first
                ?? FileManager.default.temporaryDirectory
            return caches.appendingPathComponent("io.telemetrybuffer", isDirectory: true)
            #endif
        }

        /// Throws `TelemetryBufferError.invalidOption` for the first limit out of range.
        func validate() throws {
            func check(_ valid: Bool, _ name: String, _ reason: @autoclosure () -> String) throws {
                // The reason is formatted only for a value that fails: `validate` runs at every start.
                if !valid { throw TelemetryBufferError.invalidOption(name: name, reason: reason()) }
            }
            try check(flushInterval > 0 && flushInterval <= 30, "flushInterval",
                      "must be more than 0 and at most 30 seconds (the protocol maximum), not \(flushInterval)")
            try check((1...100).contains(maxLogsPerBatch), "maxLogsPerBatch",
                      "must be 1...100 (the protocol maximum), not \(maxLogsPerBatch)")
            try check((1...1000).contains(maxSpansPerBatch), "maxSpansPerBatch",
                      "must be 1...1000 (the protocol maximum), not \(maxSpansPerBatch)")
            try check((1...100).contains(maxMetricsPerBatch), "maxMetricsPerBatch",
                      "must be 1...100 (the protocol maximum), not \(maxMetricsPerBatch)")
            try check((4096...(1 << 20)).contains(maxBatchBytes), "maxBatchBytes",
                      "must be 4096...1048576 (1 MiB, the protocol's item limit), not \(maxBatchBytes)")
            try check(ioSyncInterval >= 0.001 && ioSyncInterval <= 10, "ioSyncInterval",
                      "must be 0.001...10 seconds, not \(ioSyncInterval)")
            try check(maxCachedEnvelopes >= 1, "maxCachedEnvelopes", "must be at least 1, not \(maxCachedEnvelopes)")
            try check(maxCacheBytes >= maxBatchBytes, "maxCacheBytes",
                      "must be at least maxBatchBytes (\(maxBatchBytes)), not \(maxCacheBytes)")
            try check(fileProtection != .complete || strategy != .doubleRotatingBuffer, "fileProtection",
                      "complete makes the mapped lists unreadable while the device is locked: use fileStreamCache or flushAll, or completeUntilFirstUserAuthentication")
            try check(fileProtection != .completeUnlessOpen || strategy != .doubleRotatingBuffer, "fileProtection",
                      "completeUnlessOpen keeps closed files unreadable while the device is locked, and the doubleRotatingBuffer reopens its files at each forward: use fileStreamCache or flushAll, or completeUntilFirstUserAuthentication")
            try check(maxEnvelopeAge > 0, "maxEnvelopeAge", "must be more than 0 seconds, not \(maxEnvelopeAge)")
            try check(tracesSampleRate > 0 && tracesSampleRate <= 1, "tracesSampleRate",
                      "must be more than 0 and at most 1, not \(tracesSampleRate)")
            // Sentry's own limits; they also keep every envelope's header small (a release of megabytes made
            // span envelopes larger than any the uploader sends).
            try check((release?.count ?? 0) <= 200, "release", "must be at most 200 characters (Sentry's limit)")
            try check((environment?.count ?? 0) <= 64, "environment", "must be at most 64 characters (Sentry's limit)")
            try check(!sdkName.isEmpty, "sdkName", "must not be empty")
            try check(sdkName.count <= 200 && sdkVersion.count <= 200, sdkName.count > 200 ? "sdkName" : "sdkVersion",
                      "must be at most 200 characters")
            try check(!sdkVersion.isEmpty, "sdkVersion", "must not be empty")
            for (name, value) in [("sdkName", sdkName), ("sdkVersion", sdkVersion)] {
                try check(DSN.fitsAuthHeader(value), name,
                          "must not contain control characters, whitespace or commas (it goes into X-Sentry-Auth)")
            }
            // NaN fails every comparison, so each check also refuses it.
            let upload = uploadOptions
            try check(upload.pacing >= 0 && upload.pacing.isFinite, "uploadOptions.pacing",
                      "must be 0 or more seconds, not \(upload.pacing)")
            try check(upload.backoffBase > 0 && upload.backoffBase.isFinite, "uploadOptions.backoffBase",
                      "must be more than 0 seconds, not \(upload.backoffBase)")
            try check(upload.maxAttempts >= 1, "uploadOptions.maxAttempts", "must be at least 1, not \(upload.maxAttempts)")
            try check(upload.coolOff >= 0 && upload.coolOff.isFinite, "uploadOptions.coolOff",
                      "must be 0 or more seconds, not \(upload.coolOff)")
            try check(upload.requestTimeout > 0 && upload.requestTimeout.isFinite, "uploadOptions.requestTimeout",
                      "must be more than 0 seconds, not \(upload.requestTimeout)")
        }
    }
}

/// `TelemetryBuffer.Options`: the module and its main class share a name, so the qualified form
/// names the class's member (as needed where another module has a `Options` too).
public typealias Options = TelemetryBuffer.Options
