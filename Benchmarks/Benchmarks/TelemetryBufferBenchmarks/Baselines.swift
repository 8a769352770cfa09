import Foundation
import GRDB
import TelemetryBuffer
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The log as a Codable value, for the JSONEncoder baseline: the same JSON shape as the library writes.
struct CodableLog: Encodable {
    struct Attribute: Encodable {
        var value: Value
        var type: String
    }

    enum Value: Encodable {
        case string(String), integer(Int64), double(Double), boolean(Bool)

        func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            switch self {
            case .string(let value): try container.encode(value)
            case .integer(let value): try container.encode(value)
            case .double(let value): try container.encode(value)
            case .boolean(let value): try container.encode(value)
            }
        }
    }

    var timestamp: Double
    var trace_id: String
    var span_id: String?
    var level: String
    var severity_number: Int
    var body: String
    var attributes: [String: Attribute]

    init(_ log: Log) {
        timestamp = log.timestamp.timeIntervalSince1970
        trace_id = log.traceID.description
        span_id = log.spanID?.description
        level = log.level.rawValue
        severity_number = log.severityNumber
        body = log.body
        attributes = [:]
        for attribute in log.attributes {
            switch attribute.value {
            case .string(let value): attributes[attribute.key] = Attribute(value: .string(value), type: "string")
            case .integer(let value): attributes[attribute.key] = Attribute(value: .integer(value), type: "integer")
            case .double(let value): attributes[attribute.key] = Attribute(value: .double(value), type: "double")
            case .boolean(let value): attributes[attribute.key] = Attribute(value: .boolean(value), type: "boolean")
            default: break
            }
        }
    }
}

/// A page-aligned `MAP_SHARED` file and a mutex: the copy every baseline ends with, and the floor.
final class MappedSink: @unchecked Sendable {
    let encoder = JSONEncoder()
    private let capacity = 1 << 20
    private let base: UnsafeMutableRawPointer
    private var offset = 0
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let scratch = UnsafeMutablePointer<UInt8>.allocate(capacity: 64 * 1024)

    init() {
        let path = temporaryFolder("sink").appendingPathComponent("mapped").path
        let fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0o600)
        precondition(fd >= 0 && ftruncate(fd, off_t(capacity)) == 0)
        base = mmap(nil, capacity, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
        close(fd)
        pthread_mutex_init(mutex, nil)
    }

    /// Lock, memcpy, unlock.
    func copy(_ data: Data) {
        data.withUnsafeBytes { copy($0) }
    }

    private func copy(_ bytes: UnsafeRawBufferPointer) {
        pthread_mutex_lock(mutex)
        if offset + bytes.count > capacity { offset = 0 }
        (base + offset).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        offset += bytes.count
        pthread_mutex_unlock(mutex)
    }

    /// The floor: the same JSON written by the simplest code that could (no allocation; escaping only
    /// `"` and `\`; integers and doubles' shortest text), then the same copy. Not library code.
    func handEncodeAndCopy(_ log: Log) {
        var count = 0
        func put(_ text: StaticString) {
            scratch.advanced(by: count).update(from: text.utf8Start, count: text.utf8CodeUnitCount)
            count += text.utf8CodeUnitCount
        }
        func put(_ string: String) {
            var string = string
            string.withUTF8 { bytes in
                for byte in bytes {
                    if byte == 0x22 || byte == 0x5C { scratch[count] = 0x5C; count += 1 }
                    scratch[count] = byte
                    count += 1
                }
            }
        }
        func put(_ value: UInt64) {
            var digits = 1, rest = value
            while rest >= 10 { rest /= 10; digits += 1 }
            var remaining = value
            for index in stride(from: count + digits - 1, through: count, by: -1) {
                scratch[index] = UInt8(remaining % 10) + 0x30
                remaining /= 10
            }
            count += digits
        }
        func hex(_ value: UInt64) {
            for shift in stride(from: 60, through: 0, by: -4) {
                let nibble = UInt8((value >> UInt64(shift)) & 0xF)
                scratch[count] = nibble < 10 ? nibble + 0x30 : nibble + 0x57
                count += 1
            }
        }
        let micros = UInt64(log.timestamp.timeIntervalSince1970 * 1_000_000)
        put("{\"timestamp\":")
        put(micros / 1_000_000)
        put(".")
        put(micros % 1_000_000)
        put(",\"trace_id\":\"")
        hex(log.traceID.high)
        hex(log.traceID.low)
        put("\",\"level\":\"info\",\"severity_number\":9,\"body\":\"")
        put(log.body)
        put("\",\"attributes\":{")
        var first = true
        for attribute in log.attributes {
            if !first { put(",") }
            first = false
            put("\"")
            put(attribute.key)
            put("\":{\"value\":")
            switch attribute.value {
            case .string(let value):
                put("\"")
                put(value)
                put("\",\"type\":\"string\"}")
            case .integer(let value):
                put(UInt64(value))
                put(",\"type\":\"integer\"}")
            case .double(let value):
                var text = value.description
                text.withUTF8 { bytes in
                    scratch.advanced(by: count).update(from: bytes.baseAddress!, count: bytes.count)
                    count += bytes.count
                }
                put(",\"type\":\"double\"}")
            case .boolean(let value):
                if value { put("true") } else { put("false") }
                put(",\"type\":\"boolean\"}")
            default:
                put("null}")
            }
        }
        put("}}")
        copy(UnsafeRawBufferPointer(start: scratch, count: count))
    }
}

/// A SQLite-backed persistent queue: one INSERT of the item's JSON per event (GRDB).
final class SQLiteQueue: @unchecked Sendable {
    enum Mode: String, CaseIterable {
        case walNormal = "WAL synchronous=NORMAL"
        case rollbackFull = "rollback synchronous=FULL"
    }

    private let queue: DatabaseQueue
    private let json: String

    init(_ mode: Mode) {
        var configuration = Configuration()
        configuration.prepareDatabase { db in
            switch mode {
            case .walNormal: try db.execute(sql: "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL")
            case .rollbackFull: try db.execute(sql: "PRAGMA journal_mode=DELETE; PRAGMA synchronous=FULL")
            }
        }
        let path = temporaryFolder("sqlite-\(mode == .walNormal ? "wal" : "full")").appendingPathComponent("queue.sqlite").path
        queue = try! DatabaseQueue(path: path, configuration: configuration)
        try! queue.write { try $0.execute(sql: "CREATE TABLE events (id INTEGER PRIMARY KEY, payload TEXT NOT NULL)") }
        json = String(decoding: try! JSONEncoder().encode(CodableLog(typicalLog)), as: UTF8.self)
    }

    func insert() {
        try! queue.write { try $0.execute(sql: "INSERT INTO events (payload) VALUES (?)", arguments: [json]) }
    }
}

/// Two full crash-safe lists and their IO caches, made once with the public API: two live buffers
/// (two DSNs, so the items differ) each fill their first list just short of 1 MiB, and their files are
/// copied while the buffers are alive.
final class RecoveryTemplate: @unchecked Sendable {
    let folder = temporaryFolder("recovery-template")
    let dsn = "https://key@o1.ingest.example.com/2"
    var dsnFolderName: String { folderName(dsn) }
    let files = ["crash-safe-list-1", "async-io-cache-1", "crash-safe-list-2", "async-io-cache-2"]
    private(set) var items = 0

    init() {
        for number in 1...2 {
            let source = temporaryFolder("recovery-source-\(number)")
            let dsn = "https://key@o1.ingest.example.com/\(20 + number)"
            let buffer = makeBuffer(.doubleRotatingBuffer, folder: source, dsn: dsn)
            for _ in 0..<990 where buffer.add(span: largeSpan) { items += 1 }
            usleep(300_000)  // the IO cache copies the list within its 100 ms window
            let lists = source.appendingPathComponent(folderName(dsn)).appendingPathComponent("telemetry-buffer")
            try! FileManager.default.copyItem(at: lists.appendingPathComponent("crash-safe-list-1"),
                                              to: folder.appendingPathComponent("crash-safe-list-\(number)"))
            try! FileManager.default.copyItem(at: lists.appendingPathComponent("async-io-cache-1"),
                                              to: folder.appendingPathComponent("async-io-cache-\(number)"))
            buffer.close()
        }
    }

    private func folderName(_ dsn: String) -> String {
        // The buffer names the folder after the SHA-1 of the DSN; ask a buffer instead of recomputing it.
        let probe = temporaryFolder("probe")
        defer { try? FileManager.default.removeItem(at: probe) }
        let buffer = makeBuffer(.flushAll, folder: probe, dsn: dsn)
        defer { buffer.close() }
        return buffer.directory.lastPathComponent
    }
}

/// A span of about 1 KB: 990 of them fill a 1 MiB list.
let largeSpan: Span = {
    var span = typicalSpan
    span.attributes["padding"] = .string(String(repeating: "p", count: 400))
    return span
}()
