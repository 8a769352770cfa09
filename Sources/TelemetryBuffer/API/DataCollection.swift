import CTelemetrySignals

extension TelemetryBuffer {
    /// The user's consent to collecting telemetry, as ``Options/dataCollection`` at start and
    /// ``TelemetryBuffer/setDataCollection(_:)`` at run time.
    ///
    /// The buffer does not remember it between runs: the app keeps the user's answer and passes it at every
    /// start.
    public enum DataCollection: String, Sendable, CaseIterable {
        /// Not decided yet: items are taken and stored as envelopes, and nothing is uploaded.
        case pending
        /// Items are taken, stored and uploaded, including what was stored while `pending`.
        case granted
        /// No item is taken (`add` returns `false`, not counted as a drop), and everything stored is removed:
        /// the buffer's lists, its files and the envelope folder.
        case revoked
    }
}

/// `TelemetryBuffer.DataCollection`.
public typealias DataCollection = TelemetryBuffer.DataCollection

/// A buffer's current `DataCollection`: one word `add` reads without a lock, written under a lock so that
/// concurrent changes are applied in one order.
///
/// `@unchecked Sendable`: the word is read and written only atomically (writes under the lock).
final class DataCollectionState: @unchecked Sendable {
    private let lock = Lock()
    private let word = UnsafeMutablePointer<UInt64>.allocate(capacity: 1)

    init(_ initial: DataCollection) { word.initialize(to: Self.code(initial)) }

    deinit { word.deallocate() }

    /// Whether `add` takes items: anything but `revoked`.
    @inline(__always)
    var acceptsItems: Bool { tb_load_acquire_u64(word) != Self.code(.revoked) }

    var current: DataCollection { Self.value(tb_load_acquire_u64(word)) }

    /// Sets `value` and runs `body` with the value before, under the lock (so that the work two changes
    /// start is queued in the order of the changes).
    func set(_ value: DataCollection, _ body: (_ previous: DataCollection) -> Void) {
        lock.withLock {
            let previous = current
            tb_store_release_u64(word, Self.code(value))
            body(previous)
        }
    }

    /// Runs `body` under the lock if the consent is `value` then (so no change comes in between).
    func ifCurrent(_ value: DataCollection, _ body: () -> Void) {
        lock.withLock {
            if current == value { body() }
        }
    }

    private static func code(_ value: DataCollection) -> UInt64 {
        switch value {
        case .pending: 0
        case .granted: 1
        case .revoked: 2
        }
    }

    private static func value(_ code: UInt64) -> DataCollection {
        switch code {
        case 0: .pending
        case 1: .granted
        default: .revoked
        }
    }
}
