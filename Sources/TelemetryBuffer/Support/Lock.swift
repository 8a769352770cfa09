import Foundation

/// A non-recursive mutex for short critical sections: `os_unfair_lock` on Apple platforms, an adaptive
/// `pthread_mutex_t` with glibc, a plain one elsewhere.
///
/// The lock word lives in an allocation of its own, so its address never moves, on cache lines of its
/// own: threads taking the lock move those lines between cores, and a word another object kept there
/// would move with them (and make every reader of that word miss). The same block holds what the lock
/// guards (`trailing`), from the line after the word's on: threads waiting for the lock read the word's
/// line over and over, and would pull a value kept there away from the thread holding the lock.
///
/// `@unchecked Sendable`: a lock is what makes other state safe to share; its word is raw memory.
final class Lock: @unchecked Sendable {
    #if canImport(Darwin)
    private typealias Word = os_unfair_lock
    #else
    private typealias Word = pthread_mutex_t
    #endif
    private let word: UnsafeMutablePointer<Word>
    /// `trailingBytes` of uninitialized memory after the lock word's line, aligned as asked.
    let trailing: UnsafeMutableRawPointer
    /// Apple's M-series line; x86 fetches its 64-byte lines in adjacent pairs.
    private static let cacheLine = 128
    /// x86's line, the one the word has to itself (on Apple's M-series, word and value share a line; x86
    /// may fetch the two lines as a pair, and the value on the next line still measured 4 % faster with two
    /// threads, run Q).
    private static let wordLine = 64

    /// A lock with room for `trailingBytes` bytes after its word's line, aligned to `trailingAlignment`.
    init(trailingBytes: Int = 0, trailingAlignment: Int = 1) {
        precondition(trailingAlignment > 0 && trailingAlignment & (trailingAlignment - 1) == 0, "alignment must be a power of two")
        let start = max(Self.wordLine, trailingAlignment)
        let offset = (MemoryLayout<Word>.size + start - 1) & ~(start - 1)
        let size = (offset + trailingBytes + Self.cacheLine - 1) & ~(Self.cacheLine - 1)
        let block = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: max(Self.cacheLine, trailingAlignment))
        word = block.bindMemory(to: Word.self, capacity: 1)
        trailing = block + offset
        #if canImport(Darwin)
        word.initialize(to: os_unfair_lock())
        #else
        word.initialize(to: pthread_mutex_t())
        #if canImport(Glibc)
        // Adaptive: a thread that finds the lock taken spins a bounded while before it sleeps. The sections
        // are short (a record's reservation, or its copy of a few hundred bytes), and sleeping on the futex
        // (a syscall to wait, one to wake) cost more than they do: two threads adding at once got 1.0× one
        // thread's rate, 1.5× with this.
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
        UnsafeMutableRawPointer(word).deallocate()
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
/// The value lives in the lock's block, on the line after the lock word's: two threads taking turns move
/// one block between their cores, not two (`Benchmarks/RESULTS.md`, runs P and Q). It is reached through a
/// pointer, so accessing it costs no dynamic exclusivity check (a class's stored `var` would cost two
/// runtime calls per access); the lock already makes the accesses exclusive.
final class Locked<Value> {
    private let lock: Lock
    private let value: UnsafeMutablePointer<Value>

    init(_ value: Value) {
        lock = Lock(trailingBytes: MemoryLayout<Value>.size, trailingAlignment: MemoryLayout<Value>.alignment)
        self.value = lock.trailing.bindMemory(to: Value.self, capacity: 1)
        self.value.initialize(to: value)
    }

    /// (The lock frees the memory after this.)
    deinit { value.deinitialize(count: 1) }

    @inline(__always)
    func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value.pointee)
    }
}

/// `@unchecked Sendable`: the value is reached only through `withLock`.
extension Locked: @unchecked Sendable where Value: Sendable {}
