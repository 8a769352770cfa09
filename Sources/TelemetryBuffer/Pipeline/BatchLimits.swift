/// The most items of each signal one envelope (and one batch) may hold, from the options, and each
/// signal's cap (`SignalDescription.queueCap`), keyed by category byte so that they travel as one value.
/// In line: read under the regions' lock on every add, it costs no heap line of its own, nor a lookup of
/// a description.
struct BatchLimits: Sendable {
    private var limits: (Int32, Int32, Int32, Int32) = (.max, .max, .max, .max)
    private var caps: (Int32, Int32, Int32, Int32) = (.max, .max, .max, .max)

    /// The limits and caps of every signal known now, as `options` set them.
    init(_ options: TelemetryBuffer.Options) {
        for signal in SignalDescription.all {
            Self.store(Int32(clamping: signal.batchLimit(options)), in: &limits, for: signal.category)
            Self.store(Int32(clamping: signal.queueCap ?? .max), in: &caps, for: signal.category)
        }
    }

    /// The most items of `category` an envelope holds (`Int32.max` for a signal not known at creation).
    subscript(_ category: ItemCategory) -> Int {
        @inline(__always) get { Self.load(limits, for: category) }
    }

    /// The most items of `category` a batch holds, whatever its limit.
    @inline(__always)
    func cap(_ category: ItemCategory) -> Int { Self.load(caps, for: category) }

    /// Category bytes 1...`BatchTally.maxSignals` take slots 0...3.
    @inline(__always)
    private static func load(_ values: (Int32, Int32, Int32, Int32), for category: ItemCategory) -> Int {
        withUnsafeBytes(of: values) { Int($0.load(fromByteOffset: (Int(category.rawValue) - 1) * 4, as: Int32.self)) }
    }

    private static func store(_ value: Int32, in values: inout (Int32, Int32, Int32, Int32), for category: ItemCategory) {
        withUnsafeMutableBytes(of: &values) { $0.storeBytes(of: value, toByteOffset: (Int(category.rawValue) - 1) * 4, as: Int32.self) }
    }
}
