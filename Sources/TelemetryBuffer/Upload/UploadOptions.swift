extension TelemetryBuffer {
    /// How the uploader paces and retries. Every number is configurable (tests use milliseconds).
    public struct UploadOptions: Sendable, Equatable {
        /// Seconds between two sends while draining the folder.
        public var pacing: Double = 0.1
        /// The first backoff: after the n-th failed attempt the uploader waits `backoffBase × 2^(n-1)` (at
        /// most the cool-off) plus a jitter uniform in [0, that), up to ``UploadOptions/maxAttempts``.
        public var backoffBase: Double = 3
        /// Failed attempts before the cool-off.
        public var maxAttempts = 5
        /// Seconds of rest after ``UploadOptions/maxAttempts`` failures (at least `backoffBase`: a shorter
        /// one would retry a failing server at once); then the same cycle starts again.
        public var coolOff: Double = 30 * 60
        /// Seconds a request may take until its answer's status and headers, which are the answer (the
        /// default client drops the body as it comes, and cancels the request then; on Linux, before the
        /// head, FoundationNetworking's own timeout applies: this, rounded up to whole seconds, and
        /// restarted by every byte; longer than a day, a day); one an `HTTPClient` has not answered as long
        /// again later (at most 5 s later) counts as a network error.
        public var requestTimeout: Double = 30
        /// Whether bodies of 1 KiB or more are sent gzip-compressed (`Content-Encoding: gzip`, with the
        /// system's zlib where there is one). A custom `HTTPClient` must then send every header it is given.
        public var compressesBodies = true

        /// The defaults: 0.1 s pacing; backoff 3 s × 2^(n-1) with jitter; 5 attempts; 30 min cool-off; 30 s timeout.
        public init() {}

        /// How long to wait after the `failures`-th consecutive failure (1-based), given a uniform random
        /// `jitter` in [0, 1); and whether that wait is the cool-off (after which attempts count from 1 again).
        func wait(afterFailure failures: Int, jitter: Double) -> (seconds: Double, coolOff: Bool) {
            let rest = max(coolOff, backoffBase)
            guard failures < maxAttempts else { return (rest, true) }
            let delay = min(backoffBase * Double(1 << min(max(failures - 1, 0), 30)), rest)
            return (delay + delay * jitter, false)
        }
    }
}

/// `TelemetryBuffer.UploadOptions`: the module and its main class share a name, so the qualified form
/// names the class's member (as needed where another module has a `UploadOptions` too).
public typealias UploadOptions = TelemetryBuffer.UploadOptions
