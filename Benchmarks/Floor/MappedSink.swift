import Foundation
import TelemetryBuffer
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A page-aligned `MAP_SHARED` file and a mutex: the copy every baseline ends with, and the floor.
public final class MappedSink: @unchecked Sendable {
    /// The JSONEncoder baseline's encoder, reused.
    public let encoder = JSONEncoder()
    private let capacity = 1 << 20
    private let base: UnsafeMutableRawPointer
    private var offset = 0
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let scratch = UnsafeMutablePointer<UInt8>.allocate(capacity: 64 * 1024)

    /// Maps a new file of 1 MiB at `path`.
    public init(path: String) {
        let fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0o600)
        precondition(fd >= 0 && ftruncate(fd, off_t(capacity)) == 0)
        base = mmap(nil, capacity, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
        close(fd)
        pthread_mutex_init(mutex, nil)
    }

    /// Lock, memcpy, unlock.
    public func copy(_ data: Data) {
        data.withUnsafeBytes { copy($0) }
    }

    private func copy(_ bytes: UnsafeRawBufferPointer) {
        pthread_mutex_lock(mutex)
        if offset + bytes.count > capacity { offset = 0 }
        (base + offset).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        offset += bytes.count
        pthread_mutex_unlock(mutex)
    }

    /// The floor: the log's JSON written by the most direct code that writes it correctly (each string's
    /// bytes in one pass, escaping `"`, `\` and control characters; digits one at a time; no allocation),
    /// then the same lock + copy. Not library code, and it leaves out what the library adds: the default
    /// attributes, the span ID, the record's framing and CRC, item IDs and batch limits.
    public func handEncodeAndCopy(_ log: Log) {
        var out = FloorWriter(base: scratch)
        let micros = UInt64(log.timestamp.timeIntervalSince1970 * 1_000_000)
        out.put("{\"timestamp\":")
        out.put(micros / 1_000_000)
        out.put(".")
        out.put(micros % 1_000_000, digits: 6)
        out.put(",\"trace_id\":\"")
        out.hex(log.traceID.high)
        out.hex(log.traceID.low)
        out.put("\",\"level\":\"info\",\"severity_number\":9,\"body\":")
        out.quoted(log.body)
        out.put(",\"attributes\":{")
        var first = true
        for attribute in log.attributes {
            if !first { out.put(",") }
            first = false
            out.quoted(attribute.key)
            out.put(":{\"value\":")
            switch attribute.value {
            case .string(let value):
                out.quoted(value)
                out.put(",\"type\":\"string\"}")
            case .integer(let value):
                out.put(UInt64(value))
                out.put(",\"type\":\"integer\"}")
            case .double(let value):
                out.put(value)
                out.put(",\"type\":\"double\"}")
            case .boolean(let value):
                out.put(value ? "true" : "false")
                out.put(",\"type\":\"boolean\"}")
            default:
                out.put("null}")
            }
        }
        out.put("}}")
        copy(UnsafeRawBufferPointer(start: scratch, count: out.count))
    }
}

/// The floor's writer: plain stores into a buffer large enough for the log.
private struct FloorWriter {
    let base: UnsafeMutablePointer<UInt8>
    var count = 0

    mutating func put(_ text: StaticString) {
        (base + count).update(from: text.utf8Start, count: text.utf8CodeUnitCount)
        count += text.utf8CodeUnitCount
    }

    mutating func quoted(_ string: String) {
        base[count] = 0x22
        count += 1
        for byte in string.utf8 {
            switch byte {
            case 0x22, 0x5C:
                base[count] = 0x5C
                base[count + 1] = byte
                count += 2
            case ..<0x20:
                put("\\u00")
                hexDigit(byte >> 4)
                hexDigit(byte & 0xF)
            default:
                base[count] = byte
                count += 1
            }
        }
        base[count] = 0x22
        count += 1
    }

    mutating func put(_ value: UInt64) {
        var digits = 1
        var rest = value
        while rest >= 10 { rest /= 10; digits += 1 }
        put(value, digits: digits)
    }

    /// The last `digits` decimal digits of `value`, zero-padded.
    mutating func put(_ value: UInt64, digits: Int) {
        var rest = value
        for index in stride(from: count + digits - 1, through: count, by: -1) {
            base[index] = UInt8(rest % 10) + 0x30
            rest /= 10
        }
        count += digits
    }

    /// A double with at most nine fraction digits as integer part, point and fraction; others (not in the
    /// benchmark's log) through `description`.
    mutating func put(_ value: Double) {
        var scale: UInt64 = 1
        while scale < 1_000_000_000, (value * Double(scale)).rounded() != value * Double(scale) { scale *= 10 }
        guard value >= 0, value < 1e9, (value * Double(scale)).rounded() == value * Double(scale) else {
            var text = value.description
            text.withUTF8 { bytes in
                (base + count).update(from: bytes.baseAddress!, count: bytes.count)
                count += bytes.count
            }
            return
        }
        let scaled = UInt64(value * Double(scale))
        put(scaled / scale)
        put(".")
        var fraction = scaled % scale
        var power = scale / 10
        if power == 0 { return put("0") }
        while power > 0 {
            base[count] = UInt8(fraction / power) + 0x30
            count += 1
            fraction %= power
            power /= 10
        }
    }

    mutating func hex(_ value: UInt64) {
        for shift in stride(from: 60, through: 0, by: -4) { hexDigit(UInt8((value >> UInt64(shift)) & 0xF)) }
    }

    private mutating func hexDigit(_ nibble: UInt8) {
        base[count] = nibble < 10 ? nibble + 0x30 : nibble + 0x57
        count += 1
    }
}
