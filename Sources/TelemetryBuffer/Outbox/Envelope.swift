extension TelemetryBuffer {
    /// One Sentry envelope, exactly as it is stored: header line, items, single LFs, no `sent_at`
    /// (the uploader adds it at transmission).
    public struct Envelope: Sendable, Hashable {
        /// The envelope's bytes.
        public let bytes: [UInt8]

        /// Wraps envelope bytes produced by this library.
        init(bytes: [UInt8]) { self.bytes = bytes }
    }
}

/// `TelemetryBuffer.Envelope`: the module and its main class share a name, so the qualified form
/// names the class's member (as needed where another module has a `Envelope` too).
public typealias Envelope = TelemetryBuffer.Envelope
