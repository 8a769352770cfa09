/// Which signal (kind of telemetry) an item is: the category byte its record carries in the framing
/// (`TB_CATEGORY_*` in BufferFormat.h, which `FormatAgreementTests` holds these to). A plain byte, so that
/// `add` hands it on for nothing; everything else about the signal is its `signal`, described once.
///
/// One read from a record (`init?(rawValue:)`, which checks) or named below has a description; one made
/// for a tally's slot (`init(byte:)`) may not, and is used only to index.
struct ItemCategory: Hashable, Sendable, CustomStringConvertible {
    let rawValue: UInt8

    static let log = ItemCategory(byte: 1)
    static let span = ItemCategory(byte: 2)
    static let traceMetric = ItemCategory(byte: 3)

    /// The signal of category byte `rawValue`; `nil` for one this build does not know (a later build's).
    init?(rawValue: UInt8) {
        guard SignalDescription.isKnown(rawValue) else { return nil }
        self.init(byte: rawValue)
    }

    /// For descriptions: `byte` (1 to `BatchTally.maxSignals`) becomes known when its description is.
    init(byte: UInt8) {
        assert((1...UInt8(BatchTally.maxSignals)).contains(byte), "category byte \(byte) has no slot")
        rawValue = byte
    }

    /// The signal's description.
    var signal: SignalDescription { SignalDescription.described(rawValue)! }

    /// Its envelope item type, for diagnostics.
    var description: String { signal.envelopeItemType }
}

/// A 16-byte item ID: a random per-buffer nonce and a sequence number.
///
/// It lives in the record framing, never in the JSON, and is what start-up recovery dedupes on. The
/// nonce keeps IDs of different buffer lifetimes apart; the sequence makes IDs of one lifetime unique
/// without a random draw (and without a syscall) per item, and records their order of arrival.
struct ItemID: Hashable, Sendable {
    var nonce: UInt64
    var sequence: UInt64
}

/// The item IDs of one buffer lifetime, in order of arrival.
struct ItemIDSequence {
    private let nonce = UInt64.random(in: .min ... .max)
    private var sequence: UInt64 = 0

    @inline(__always)
    mutating func next() -> ItemID {
        defer { sequence &+= 1 }
        return ItemID(nonce: nonce, sequence: sequence)
    }
}
