import Dispatch

/// A value that only code running on one serial queue touches: the queue's order is its synchronization,
/// with no lock. Debug builds check the queue at every access (`dispatchPrecondition`), so that a touch
/// from anywhere else traps in the tests instead of racing in an app, as swift-nio's `NIOLoopBound` does
/// for an event loop's state.
///
/// `@unchecked Sendable`: the value is reached only through `value`, on `queue` (checked in debug builds).
final class QueueBound<Value>: @unchecked Sendable {
    /// The queue the value belongs to.
    let queue: DispatchQueue
    private var stored: Value

    /// Wraps `value` for code on `queue`; the caller may be anywhere (nothing else can reach it yet).
    init(_ value: Value, queue: DispatchQueue) {
        self.queue = queue
        stored = value
    }

    /// The value; read or written on `queue` only.
    var value: Value {
        get {
            checkQueue()
            return stored
        }
        set {
            checkQueue()
            stored = newValue
        }
    }

    @inline(__always)
    private func checkQueue() {
        #if DEBUG
        dispatchPrecondition(condition: .onQueue(queue))
        #endif
    }
}
