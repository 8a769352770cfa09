extension TelemetryBuffer {
    /// Where finished envelopes go. The default is `FileTransport`, which stores them durably for the uploader.
    ///
    /// A buffer calls `send` from its one background queue, one envelope at a time, never from the thread
    /// that called `add`. Plug in your own to route envelopes elsewhere.
    public protocol Transport: Sendable {
        /// Takes one envelope. Return only once it is safe (stored durably or delivered); throw if it could not
        /// be: the envelope stays staged in the buffer's folder and is offered again, before any later one, at
        /// the next forward and the next start. At most ``Options/maxCachedEnvelopes`` (and
        /// ``Options/maxCacheBytes``) wait so; beyond, the least important are deleted (the lowest highest
        /// log level, the oldest of those, as ``FileTransport`` evicts), counted as `cache_overflow`. See
        /// <doc:ImplementingATransport> for the implementation requirements.
        ///
        /// - Parameter envelope: A complete envelope in Sentry's format.
        func send(_ envelope: Envelope) throws
    }
}

/// `TelemetryBuffer.Transport`: the module and its main class share a name, so the qualified form
/// names the class's member (as needed where another module has a `Transport` too).
public typealias Transport = TelemetryBuffer.Transport
