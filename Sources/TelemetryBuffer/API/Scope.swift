import CTelemetrySignals

/// What the app sets for every later item of a buffer (`setAttribute`, `setUser`), and the pre-encoded
/// default set built from it.
///
/// Updates are rare: they take the lock and build a new `ItemEncoder.DefaultSet` whole. `add` reads one
/// word while nothing is set, and otherwise takes the lock for the current set only (no encoding).
///
/// `@unchecked Sendable`: `used` is a raw word, read and written only atomically (and, for writes, under
/// the lock, so its value follows the order of the updates); everything else is behind the lock.
final class Scope: @unchecked Sendable {
    private struct State {
        var attributes = Attributes()
        var user = Attributes()
        var defaults: ItemEncoder.DefaultSet?
    }

    private let state = Locked(State())
    /// 1 while something is set: otherwise `add` takes no lock here.
    private let used = UnsafeMutablePointer<UInt64>.allocate(capacity: 1)
    private let encoder: ItemEncoder
    private let sendsUser: Bool

    /// A scope for `encoder`'s items; `user.*` attributes are sent only if `sendsUser` (`sendDefaultPii`).
    init(encoder: ItemEncoder, sendsUser: Bool) {
        self.encoder = encoder
        self.sendsUser = sendsUser
        used.initialize(to: 0)
    }

    deinit { used.deallocate() }

    /// The default set for the next item; `nil` while nothing is set (the encoder's own then), and in the
    /// child of a `fork()`, which must not take a lock a parent's thread may have held.
    @inline(__always)
    var defaults: ItemEncoder.DefaultSet? {
        guard tb_load_acquire_u64(used) != 0, tb_in_forked_child() == 0 else { return nil }
        return state.withLock { $0.defaults }
    }

    /// Sets (or with `nil` removes) one attribute.
    func set(_ value: AttributeValue?, forKey key: String) {
        update { $0.attributes[key] = value }
    }

    /// Replaces the user (nothing to do when the user is not sent).
    func setUser(_ user: Attributes) {
        guard sendsUser else { return }
        update { $0.user = user }
    }

    private func update(_ change: (inout State) -> Void) {
        state.withLock { state in
            change(&state)
            var all = state.attributes
            for attribute in state.user { all[attribute.key] = attribute.value }
            state.defaults = all.isEmpty ? nil : encoder.defaults(adding: all)
            // Under the lock: of two updates, the later one's word stands.
            tb_store_release_u64(used, state.defaults == nil ? 0 : 1)
        }
    }
}
