/// Where finished envelopes go. The default is `FileTransport`, which stores them durably for the uploader.
///
/// A buffer calls `send` from its one background queue, one envelope at a time, never from the thread
/// that called `add`. Plug in your own to route envelopes elsewhere.
public protocol Transport: Sendable {
    /// Takes one envelope. Return only once it is safe (stored durably or delivered); throw if it could not
    /// be, and the buffer counts its items as dropped (`internal_sdk_error`).
    func send(_ envelope: Envelope) throws
}
