/// One Sentry envelope, exactly as it is stored: header line, items, single LFs, no `sent_at`
/// (the uploader adds it at transmission).
public struct Envelope: Sendable, Hashable {
    /// The envelope's bytes.
    public let bytes: [UInt8]

    /// Wraps envelope bytes produced by this library.
    init(bytes: [UInt8]) { self.bytes = bytes }
}
