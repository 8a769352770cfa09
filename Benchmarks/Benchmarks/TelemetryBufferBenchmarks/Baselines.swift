import Floor
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

/// The flush's floor: the least an atomic, durable publication of 1 MiB costs on this disk. The bytes,
/// already in touched memory, go to a new file with one `write`, `fsync`, a `rename` into the published
/// folder and an `fsync` of that folder. Not library code: it leaves out batching, the list's marker and
/// emptying the IO cache. Its files stay until the benchmark ends, as the flush benchmark's envelopes do.
final class DurablePublicationFloor: @unchecked Sendable {
    private let staging: Int32
    private let published: Int32
    private let bytes = [UInt8](repeating: 0x61, count: 1 << 20)
    private var counter = 0

    init() {
        let folder = temporaryFolder("publication-floor")
        try! FileManager.default.createDirectory(at: folder.appendingPathComponent("published"), withIntermediateDirectories: true)
        staging = open(folder.path, O_RDONLY | O_DIRECTORY)
        published = open(folder.appendingPathComponent("published").path, O_RDONLY | O_DIRECTORY)
        precondition(staging >= 0 && published >= 0)
    }

    func publish() {
        counter += 1
        let name = "envelope-\(counter)"
        let fd = openat(staging, name, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        precondition(fd >= 0)
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress!, $0.count) }
        precondition(written == bytes.count && fsync(fd) == 0)
        close(fd)
        precondition(renameat(staging, name, published, name) == 0 && fsync(published) == 0)
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
            let lists = source.appendingPathComponent(folderName(dsn)).appendingPathComponent("telemetry-buffer")
            // The IO cache is created by its first copy of the list, `ioSyncInterval` (5 s) after the first item
            // (before the forward: `makeBuffer` sets a 30 s `flushInterval`).
            let cache = lists.appendingPathComponent("async-io-cache-1").path
            let deadline = Date().addingTimeInterval(30)
            while ((try? FileManager.default.attributesOfItem(atPath: cache))?[.size] as? Int ?? 0) <= 32 {
                precondition(Date() < deadline, "the IO cache never copied the list")
                usleep(20_000)
            }
            usleep(100_000)  // its second lane's write, if any
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
        defer { discard(probe) }
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
