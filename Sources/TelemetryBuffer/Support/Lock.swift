import Foundation

/// A non-recursive mutex for short critical sections: `os_unfair_lock` on Apple platforms, an adaptive
/// `pthread_mutex_t` with glibc, a plain one elsewhere. The lock word lives in its own allocation so its address never moves.
final class Lock: @unchecked Sendable {
    #if canImport(Darwin)
    private let word: UnsafeMutablePointer<os_unfair_lock>
    #else
    private let word: UnsafeMutablePointer<pthread_mutex_t>
    #endif

    init() {
        word = .allocate(capacity: 1)
        #if canImport(Darwin)
        word.initialize(to: os_unfair_lock())
        #else
        word.initialize(to: pthread_mutex_t())
        #if canImport(Glibc)
        // Adaptive: a thread that finds the lock taken spins a bounded while before it sleeps. The sections
        // are a copy of a few hundred bytes, and sleeping on the futex (a syscall to wait, one to wake)
        // cost more than they do: two threads adding at once got 1.0× one thread's rate, 1.5× with this.
        var attributes = pthread_mutexattr_t()
        pthread_mutexattr_init(&attributes)
        pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_ADAPTIVE_NP))
        pthread_mutex_init(word, &attributes)
        pthread_mutexattr_destroy(&attributes)
        #else
        pthread_mutex_init(word, nil)
        #endif
        #endif
    }

    deinit {
        #if !canImport(Darwin)
        pthread_mutex_destroy(word)
        #endif
        word.deinitialize(count: 1)
        word.deallocate()
    }

    @inline(__always)
    func lock() {
        #if canImport(Darwin)
        os_unfair_lock_lock(word)
        #else
        pthread_mutex_lock(word)
        #endif
    }

    @inline(__always)
    func unlock() {
        #if canImport(Darwin)
        os_unfair_lock_unlock(word)
        #else
        pthread_mutex_unlock(word)
        #endif
    }

    @inline(__always)
    func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock()
        defer { unlock() }
        return try body()
    }
}

/// A value guarded by a `Lock`: `Sendable` when the value is (as `NIOLockedValueBox`), so a non-Sendable
/// value cannot cross threads hidden in one.
///
/// The value lives in its own allocation and is reached through a pointer, so accessing it costs no
/// dynamic exclusivity check (a class's stored `var` would cost two runtime calls per access); the lock
/// already makes the accesses exclusive.
final class Locked<Value> {
    private let lock = Lock()
    private let value: UnsafeMutablePointer<Value>

    init(_ value: Value) {
        self.value = .allocate(capacity: 1)
        self.value.initialize(to: value)
    }

    deinit {
        value.deinitialize(count: 1)
        value.deallocate()
    }

    @inline(__always)
    func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value.pointee)
    }
}

extension Locked: @unchecked Sendable where Value: Sendable {}
