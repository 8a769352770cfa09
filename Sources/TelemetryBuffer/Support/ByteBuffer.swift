/// A growable run of bytes in one manually managed allocation.
///
/// It backs the encoders: it grows only when an item is larger than anything seen before, so after
/// warm-up, writing into it never allocates. Not thread-safe; each owner keeps its own.
final class ByteBuffer {
    private(set) var base: UnsafeMutablePointer<UInt8>
    private(set) var capacity: Int
    /// Number of bytes written.
    var count = 0

    init(capacity: Int) {
        self.capacity = max(capacity, 64)
        base = .allocate(capacity: self.capacity)
    }

    deinit { base.deallocate() }

    /// The written bytes; valid until the next write.
    var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: base, count: count) }

    /// Makes room for `extra` more bytes (called on the rare slow path only).
    @inline(never)
    func grow(toFit extra: Int) {
        var newCapacity = capacity * 2
        while newCapacity < count + extra { newCapacity *= 2 }
        let newBase = UnsafeMutablePointer<UInt8>.allocate(capacity: newCapacity)
        newBase.update(from: base, count: count)
        base.deallocate()
        base = newBase
        capacity = newCapacity
    }

    /// Gives memory back after an unusually large item, so one huge log does not pin megabytes per thread.
    func shrink(to target: Int) {
        guard capacity > target * 4 else { return }
        base.deallocate()
        capacity = target
        base = .allocate(capacity: target)
        count = 0
    }

    /// A copy of the written bytes.
    func toArray() -> [UInt8] { Array(bytes.bindMemory(to: UInt8.self)) }
}
