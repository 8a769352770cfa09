#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// One reusable encoding buffer per thread, so that threads encode in parallel without allocating and the
/// buffer's lock is held only for the copy. Thread-specific data is a plain memory read, not a syscall.
enum EncodingScratch {
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        let status = pthread_key_create(&key) { pointer in
            // The thread is exiting: drop its buffer.
            Unmanaged<ByteBuffer>.fromOpaque((pointer as UnsafeMutableRawPointer?)!).release()
        }
        precondition(status == 0, "pthread_key_create failed: \(status)")
        return key
    }()

    /// Bytes kept per thread between items; a larger item grows the buffer once, then it shrinks back.
    static let retainedCapacity = 16 * 1024

    /// The calling thread's buffer, emptied.
    @inline(__always)
    static func current() -> ByteBuffer {
        if let pointer = pthread_getspecific(key) {
            let buffer = Unmanaged<ByteBuffer>.fromOpaque(pointer).takeUnretainedValue()
            buffer.shrink(to: retainedCapacity)
            buffer.count = 0
            return buffer
        }
        let buffer = ByteBuffer(capacity: retainedCapacity)
        pthread_setspecific(key, Unmanaged.passRetained(buffer).toOpaque())
        return buffer
    }
}
