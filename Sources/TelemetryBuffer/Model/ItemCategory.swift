/// What a stored record holds. The raw value is the category byte of the record framing (`TB_CATEGORY_*`
/// in BufferFormat.h; raw values must be literals, so `FormatAgreementTests` checks them).
enum ItemCategory: UInt8, Sendable, CaseIterable {
    case log = 1
    case span = 2

    /// The `type` of the envelope items that carry it.
    var envelopeItemType: String {
        switch self {
        case .log: "log"
        case .span: "span"
        }
    }

    /// The category of an envelope item's `type`, `nil` for items that are not telemetry (client reports).
    init?(envelopeItemType type: String) {
        guard let category = Self.allCases.first(where: { $0.envelopeItemType == type }) else { return nil }
        self = category
    }

    /// How client reports and rate limits count one item of it.
    var dataCategory: DataCategory {
        switch self {
        case .log: .logItem
        case .span: .span
        }
    }
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
