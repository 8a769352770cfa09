import CTelemetrySignals

/// What the app sets for every later item of a buffer (`setAttribute`, `setUser`), and the pre-encoded
/// default set built from it.
///
/// Updates are rare: they take the lock and build a new `ItemEncoder.DefaultSet` whole. `add` reads one
/// word while nothing was ever set, and after that takes the lock for the current set only (no encoding).
final class Scope: @unchecked Sendable {
    private struct State {
        var attributes = Attributes()
        var user = Attributes()
        var defaults: ItemEncoder.DefaultSet?
    }

    private let state = Locked(State())
    /// 1 once something was set: until then `add` takes no lock here.
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

    /// The default set for the next item; `nil` while nothing was set (the encoder's own then).
    @inline(__always)
    var defaults: ItemEncoder.DefaultSet? {
        guard tb_load_acquire_u64(used) != 0 else { return nil }
        return state.withLock { $0.defaults }
    }

    /// Sets (or with `nil` removes) one attribute.
    func set(_ value: AttributeValue?, forKey key: String) {
        update { $0.attributes[key] = value }
    }

    /// Replaces the user.
    func setUser(_ user: Attributes) {
        update { $0.user = user }
    }

    private func update(_ change: (inout State) -> Void) {
        state.withLock { state in
            change(&state)
            var all = state.attributes
            if sendsUser { for attribute in state.user { all[attribute.key] = attribute.value } }
            state.defaults = encoder.defaults(adding: all)
        }
        tb_store_release_u64(used, 1)
    }
}
