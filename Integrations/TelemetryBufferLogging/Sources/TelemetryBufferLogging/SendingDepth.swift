import Foundation

/// How many messages the calling thread is sending through a `TelemetryBufferLogHandler` at once: a
/// message logged while one is sent comes from the sending itself (`beforeSendLog`, a metadata provider,
/// the `trace` closure), and one logged while that is sent would recur without end.
enum SendingDepth {
    /// The deepest message sent: one logged while sending a message is, one logged while sending that is not.
    static let limit = 2

    /// A thread-specific word (no allocation, unlike a task-local value bound per message), holding the depth.
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        precondition(pthread_key_create(&key, nil) == 0, "no thread-specific key left")
        return key
    }()

    /// Runs `body` one level deeper, unless the thread is at `limit` already: then not at all.
    static func enter(_ body: () -> Void) {
        let depth = Int(bitPattern: pthread_getspecific(key))
        guard depth < limit else { return }
        pthread_setspecific(key, UnsafeRawPointer(bitPattern: depth + 1))
        defer { pthread_setspecific(key, UnsafeRawPointer(bitPattern: depth)) }
        body()
    }
}
