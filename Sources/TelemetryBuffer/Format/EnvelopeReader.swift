import Foundation

/// A strict reader of envelope framing: every item header is one JSON object on one line, every payload
/// is exactly `length` bytes followed by one LF or the end, and nothing follows the last item.
///
/// The library uses it to account for envelopes it evicts and to inspect its folders; it does not
/// interpret payloads.
struct EnvelopeReader {
    /// An envelope that is not well-formed, with the byte offset where reading stopped.
    struct Malformed: Error, CustomStringConvertible {
        var offset: Int
        var reason: String
        var description: String { "malformed envelope at byte \(offset): \(reason)" }
    }

    /// One item: its type, its `item_count` and where its payload lies.
    struct Item {
        var type: String
        var itemCount: Int?
        var payload: Range<Int>
    }

    /// The items in order (the headers are checked to be JSON objects, not kept).
    var items: [Item]

    init(_ bytes: [UInt8]) throws {
        var offset = 0
        func line() throws -> [String: Any] {
            let end = bytes[offset...].firstIndex(of: 0x0A) ?? bytes.count
            let object = try JSONSerialization.jsonObject(with: Data(bytes[offset..<end]))
            guard let fields = object as? [String: Any] else {
                throw Malformed(offset: offset, reason: "a header is not a JSON object")
            }
            offset = min(end + 1, bytes.count)
            return fields
        }
        do { _ = try line() } catch let error as Malformed { throw error } catch {
            throw Malformed(offset: 0, reason: "the envelope header is not JSON")
        }
        items = []
        while offset < bytes.count {
            let start = offset
            let fields: [String: Any]
            do { fields = try line() } catch let error as Malformed { throw error } catch {
                throw Malformed(offset: start, reason: "an item header is not JSON")
            }
            guard let type = fields["type"] as? String else {
                throw Malformed(offset: start, reason: "an item header has no type")
            }
            guard let length = fields["length"] as? Int, length >= 0 else {
                throw Malformed(offset: start, reason: "an item header has no length")
            }
            guard length <= bytes.count - offset else {
                throw Malformed(offset: offset, reason: "the payload is shorter than its length \(length)")
            }
            let payload = offset..<offset + length
            offset += length
            if offset < bytes.count {
                guard bytes[offset] == 0x0A else {
                    throw Malformed(offset: offset, reason: "a payload is not followed by LF")
                }
                offset += 1
            }
            items.append(Item(type: type, itemCount: fields["item_count"] as? Int, payload: payload))
        }
    }

    /// The log and span objects in an envelope's bytes, found as the encoder writes them, without trusting
    /// its headers: each starts after `{"items":[` or `},{"` and ends at the next `},{"` or `}]}` (none of
    /// which can occur inside a JSON string, whose quotes are escaped). Damaged bytes spoil only the
    /// objects they touch (and a span's `links` split that span); the others are found whole.
    static func elements(in bytes: [UInt8]) -> [ArraySlice<UInt8>] {
        // Every pattern begins with `{` or `}`: only those bytes are looked at closely.
        let opening = Array(#"{"items":["#.utf8), boundary = Array(#"},{""#.utf8), closing = Array("}]}".utf8)
        var ranges: [ClosedRange<Int>] = []
        bytes.withUnsafeBufferPointer { buffer in
            func at(_ index: Int, _ pattern: [UInt8]) -> Bool {
                guard index + pattern.count <= buffer.count else { return false }
                for offset in 1..<pattern.count where buffer[index + offset] != pattern[offset] { return false }
                return true
            }
            var start = -1
            var index = 0
            while index < buffer.count {
                let byte = buffer[index]
                if byte == UInt8(ascii: "{"), at(index, opening) {
                    start = index + opening.count
                    index += opening.count
                } else if byte == UInt8(ascii: "}"), start >= 0, at(index, boundary) {
                    ranges.append(start...index)
                    start = index + 2
                    index += boundary.count
                } else if byte == UInt8(ascii: "}"), start >= 0, at(index, closing) {
                    ranges.append(start...index)
                    start = -1
                    index += closing.count
                } else {
                    index += 1
                }
            }
        }
        return ranges.map { bytes[$0] }
    }

    /// What a file that is not a well-formed envelope still says of its items, as a client report would
    /// count them. An envelope of this library carries one item of telemetry, its header on the second
    /// line: the first line among the first 8 that is an item header naming a signal counts its
    /// `item_count` (1 if absent; at most 1000, more than any envelope of ours holds) and, for a signal
    /// billed by size, the bytes that follow it (at most its `length`). A file that names no signal counts
    /// nothing: it holds no telemetry this library knows of. The work is bounded whatever the file holds.
    static func salvagedCounts(_ bytes: [UInt8]) -> [(DataCategory, Int)] {
        var start = 0
        for _ in 0..<8 where start < bytes.count {
            let end = bytes[start...].firstIndex(of: 0x0A) ?? bytes.count
            defer { start = end + 1 }
            // Item headers are short JSON objects; a payload line is not parsed.
            guard bytes[start] == UInt8(ascii: "{"), end - start <= 1024,
                  let header = try? JSONSerialization.jsonObject(with: Data(bytes[start..<end])) as? [String: Any],
                  let type = header["type"] as? String, let signal = SignalDescription.described(envelopeItemType: type)
            else { continue }
            var counts = [(signal.dataCategory, min(max((header["item_count"] as? Int) ?? 1, 0), 1000))]
            if let bytesCategory = signal.byteCategory {
                counts.append((bytesCategory, min(max((header["length"] as? Int) ?? 0, 0), max(0, bytes.count - end - 1))))
            }
            return counts
        }
        return []
    }

    /// What discarding the envelope file at `path` drops: what it holds, or what its first bytes name if it
    /// cannot be parsed (or is larger than any of ours); `nil` if it cannot be read (it is gone).
    static func discardCounts(ofFile path: String) -> [(DataCategory, Int)]? {
        guard let bytes = try? FileSystem.readFile(path, prefix: FileSystem.maxEnvelopeBytes, length: { _ in 0 }) else { return nil }
        return (try? EnvelopeReader(bytes))?.discardCounts() ?? salvagedCounts(bytes)
    }

    /// Items of telemetry the envelope carries by data category, as a client report would count them.
    func discardCounts() -> [(DataCategory, Int)] {
        var counts: [(DataCategory, Int)] = []
        for item in items {
            guard let signal = SignalDescription.described(envelopeItemType: item.type) else { continue }
            counts.append((signal.dataCategory, item.itemCount ?? 1))
            if let bytes = signal.byteCategory { counts.append((bytes, item.payload.count)) }
        }
        return counts
    }
}
