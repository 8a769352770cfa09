/// An envelope as the encoder lays it out: `head` (the header line, the item header line and
/// `{"items":[`), the payloads joined by commas, then `]}` LF.
///
/// The payloads stay where they are (a mapped list, a file read at recovery): staging writes the pieces
/// with `writev`, so publishing a full list copies its megabyte once, into the file. The payload
/// pointers are valid only while their storage is; `envelope` joins the pieces for other transports.
struct EnvelopeParts {
    var head: [UInt8]
    var payloads: [UnsafeRawBufferPointer]

    private static let comma: StaticString = ","
    private static let tail: StaticString = "]}\n"

    /// The envelope's size in bytes.
    var byteCount: Int {
        payloads.reduce(head.count + max(0, payloads.count - 1) + Self.tail.utf8CodeUnitCount) { $0 + $1.count }
    }

    /// Calls `body` with every piece, in order. `head` is valid only during the call.
    func withPieces<Result>(_ body: ([UnsafeRawBufferPointer]) throws -> Result) rethrows -> Result {
        try head.withUnsafeBytes { head in
            var pieces = [head]
            pieces.reserveCapacity(2 * payloads.count + 1)
            for (index, payload) in payloads.enumerated() {
                if index > 0 { pieces.append(Self.bytes(Self.comma)) }
                pieces.append(payload)
            }
            pieces.append(Self.bytes(Self.tail))
            return try body(pieces)
        }
    }

    /// The pieces joined.
    var envelope: Envelope {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(byteCount)
        withPieces { pieces in for piece in pieces { bytes.append(contentsOf: piece) } }
        return Envelope(bytes: bytes)
    }

    private static func bytes(_ text: StaticString) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount)
    }
}
