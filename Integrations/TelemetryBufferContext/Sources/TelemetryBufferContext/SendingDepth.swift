import Foundation

/// How many items the calling thread is sending through the integrations at once. An item made while one
/// is sent comes from the sending itself (a `beforeSend…` hook, a metadata provider, a `trace` closure),
/// and one made while that is sent would recur without end: a hook that logs, counts or traces each item
/// it sees. The integrations send an item only within `enter(_:)`.
public enum SendingDepth {
    /// The deepest item sent: one made while sending an item is, one made while sending that is not.
    public static let limit = 2

    /// A thread-specific word (no allocation, unlike a task-local value bound per message), holding the depth.
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        precondition(pthread_key_create(&key, nil) == 0, "no thread-specific key left")
        return key
    }()

    /// Runs `body` one level deeper and returns `true`, unless the thread is at `limit` already: then returns
    /// `false` without running it (the caller counts the item it drops, `countDroppedBeforeAdd`).
    @discardableResult
    public static func enter(_ body: () -> Void) -> Bool {
        let depth = Int(bitPattern: pthread_getspecific(key))
        guard depth < limit else { return false }
        pthread_setspecific(key, UnsafeRawPointer(bitPattern: depth + 1))
        defer { pthread_setspecific(key, UnsafeRawPointer(bitPattern: depth)) }
        body()
        return true
    }
}
