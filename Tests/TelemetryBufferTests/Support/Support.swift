import Foundation
import XCTest
@testable import TelemetryBuffer

let testDSN = "https://a1b2c3d4e5f60718293a4b5c6d7e8f90@o7.ingest.us.sentry.io/4242"

/// A fresh folder under the system's temporary directory, removed by `remove()`.
struct TemporaryDirectory {
    let url: URL

    init(in parent: URL = FileManager.default.temporaryDirectory) throws {
        url = parent.appendingPathComponent("tb-tests-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    /// The folder of a buffer on `dsn` in this cache directory: `<SHA-1 of the DSN>` (not created here).
    func dsnFolder(_ dsn: String = testDSN) -> URL { TemporaryDirectory.dsnFolder(in: url, dsn) }

    /// The folder of a buffer on `dsn` in the cache directory `cache`.
    static func dsnFolder(in cache: URL, _ dsn: String) -> URL { cache.appendingPathComponent(SHA1.hex(dsn.utf8), isDirectory: true) }

    /// Where a buffer on `dsn` keeps its own files: `<SHA-1 of the DSN>/telemetry-buffer` (not created here).
    func bufferFolder(_ dsn: String = testDSN) -> URL { dsnFolder(dsn).appendingPathComponent(BufferFolder.name, isDirectory: true) }

    /// Where the default transport of a buffer on `dsn` stores envelopes: `<SHA-1 of the DSN>/envelopes`.
    func envelopesFolder(_ dsn: String = testDSN) -> URL { dsnFolder(dsn).appendingPathComponent("envelopes", isDirectory: true) }

    /// Creates `bufferFolder(dsn)`, for a test to plant files in; returns its path.
    func makeBufferFolder(dsn: String = testDSN) throws -> String {
        let path = bufferFolder(dsn).path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    /// Removes the folder once every buffer released without `close()` has finished its final forward:
    /// one still writing would make the removal fail part-way (leaving the folder), and its crash
    /// handlers, still installed, would leak into the next test.
    func remove() {
        LiveBuffers.awaitReleases(within: 60)
        try? FileManager.default.removeItem(at: url)
    }
}

/// How many randomized runs a torture test makes: `quick` by default, so that a plain `swift test` stays
/// quick, or what the environment `variable` says, at least 1 (`.ci/run` sets the full counts; the
/// Testing article lists both).
func tortureCount(_ variable: String, quick: Int) -> Int {
    max(1, Int(ProcessInfo.processInfo.environment[variable] ?? "") ?? quick)
}

/// Options for a test buffer in `directory`; a long interval unless the test is about the timer.
func testOptions(_ directory: TemporaryDirectory, _ configure: (inout Options) -> Void = { _ in }) -> Options {
    var options = Options(dsn: testDSN)
    options.cacheDirectory = directory.url
    options.flushInterval = 30
    options.upload = false  // only the upload tests send, to their own server on 127.0.0.1
    configure(&options)
    return options
}

/// An envelope read back by a strict byte walk written independently of the library's reader:
/// a header line, then for each item a header line with `length`, exactly that many payload bytes and
/// exactly one LF; nothing after the last LF; no CR anywhere in a header.
struct WalkedEnvelope {
    struct Item {
        var header: [String: Any]
        var payload: [UInt8]
        var type: String { header["type"] as? String ?? "" }
        var json: [String: Any] { (try? JSONSerialization.jsonObject(with: Data(payload))) as? [String: Any] ?? [:] }
        /// The `items` array of a log or span container.
        var elements: [[String: Any]] { json["items"] as? [[String: Any]] ?? [] }
    }

    var name: String
    var header: [String: Any]
    var items: [Item]
    var bytes: [UInt8]

    init(_ bytes: [UInt8], name: String = "") throws {
        self.bytes = bytes
        self.name = name
        var offset = 0
        func headerLine() throws -> [String: Any] {
            guard let end = bytes[offset...].firstIndex(of: 0x0A) else { throw WalkError("header line without LF at \(offset)") }
            let line = Array(bytes[offset..<end])
            guard !line.contains(0x0D) else { throw WalkError("CR in a header line at \(offset)") }
            guard let object = try JSONSerialization.jsonObject(with: Data(line)) as? [String: Any] else {
                throw WalkError("header at \(offset) is not an object")
            }
            offset = end + 1
            return object
        }
        header = try headerLine()
        items = []
        while offset < bytes.count {
            let itemHeader = try headerLine()
            guard let length = itemHeader["length"] as? Int else { throw WalkError("item without length") }
            guard offset + length < bytes.count else { throw WalkError("payload of \(length) bytes overruns the envelope") }
            let payload = Array(bytes[offset..<offset + length])
            offset += length
            guard bytes[offset] == 0x0A else { throw WalkError("payload not followed by exactly one LF") }
            offset += 1
            items.append(Item(header: itemHeader, payload: payload))
        }
        guard offset == bytes.count else { throw WalkError("bytes after the last item") }
    }

    /// Every log or span object in the envelope.
    var elements: [[String: Any]] { items.flatMap(\.elements) }

    /// The discarded_events of the client report, as reason/category → quantity.
    var discards: [String: Int] {
        var counts: [String: Int] = [:]
        for item in items where item.type == "client_report" {
            for event in item.json["discarded_events"] as? [[String: Any]] ?? [] {
                counts["\(event["reason"]!)/\(event["category"]!)", default: 0] += event["quantity"] as? Int ?? 0
            }
        }
        return counts
    }
}

struct WalkError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Appends a record per body to `region`'s `lane`, each a log encoded without defaults (IDs `nonce` with
/// `sequences`, or `start`, `start + 1`…), and commits it.
func appendLogs(_ bodies: [String], to region: RecordRegion, nonce: UInt64 = 1, from start: UInt64 = 0,
                lane: Int = 0, sequences: [UInt64]? = nil) {
    for (index, body) in bodies.enumerated() {
        let scratch = ByteBuffer(capacity: body.utf8.count + 512)
        var writer = JSONWriter(appendingTo: scratch)
        ItemEncoder(logDefaults: [:], spanDefaults: [:]).encode(Log.test(body), into: &writer)
        writer.finish()
        let id = ItemID(nonce: nonce, sequence: sequences?[index] ?? start + UInt64(index))
        let offset = region.committedRecordBytes(lane: lane)
        region.write(category: .log, id: id, payload: scratch.bytes, payloadCRC: CRC32C.checksum(scratch.bytes), lane: lane, at: offset)
        region.commit(lane: lane, from: offset, to: offset + RecordFraming.recordHeaderSize + scratch.bytes.count)
    }
}

/// Plants `files` copies of published lists (`awaiting-sync-N`, about 1 MiB each: 800 logs of `body(file,
/// index)`, one lifetime's consecutive IDs) in `folder`, as a process whose syncs failed leaves them;
/// returns the bodies in order.
func plantPublishedCopies(in folder: String, files: Int, body: (Int, Int) -> String) throws -> [String] {
    var planted: [String] = []
    for file in 0..<files {
        let copy = AsyncIOCache(path: folder + "/awaiting-sync-\(file)")
        let published = RecordRegion(recordCapacity: 1 << 20, kind: .memoryList)
        let bodies = (0..<800).map { body(file, $0) }
        appendLogs(bodies, to: published, from: UInt64(file * 800))
        try copy.catchUp(with: published)
        planted += bodies
    }
    return planted
}

/// Every envelope in a folder, oldest first, each checked by the strict walk. One removed between the
/// listing and its reading (an uploader sent it meanwhile) is not there.
func walkEnvelopes(in folder: URL) throws -> [WalkedEnvelope] {
    let names = ((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? [])
        .filter { $0.hasSuffix(".envelope") }.sorted()
    return try names.compactMap { name in
        guard let data = FileManager.default.contents(atPath: folder.appendingPathComponent(name).path) else { return nil }
        return try WalkedEnvelope(Array(data), name: name)
    }
}

/// The log bodies in a folder's envelopes, in file order.
func logBodies(in folder: URL) throws -> [String] {
    try walkEnvelopes(in: folder).flatMap { envelope in
        envelope.items.filter { $0.type == "log" }.flatMap(\.elements).compactMap { $0["body"] as? String }
    }
}

/// Flushes `buffer`, then returns every stored item's attributes (as JSON values), by log body or span name.
func storedAttributes(_ buffer: TelemetryBuffer) throws -> [String: [String: [String: Any]]] {
    buffer.flush()
    var result: [String: [String: [String: Any]]] = [:]
    for element in try walkEnvelopes(in: buffer.envelopesDirectory).flatMap(\.elements) {
        let name = try XCTUnwrap(element["body"] as? String ?? element["name"] as? String)
        result[name] = try XCTUnwrap(element["attributes"] as? [String: [String: Any]])
    }
    return result
}

/// Waits (up to a generous bound, never asserting a duration) until `condition` holds.
func eventually(_ condition: () throws -> Bool, file: StaticString = #filePath, line: UInt = #line) rethrows {
    let deadline = Date().addingTimeInterval(20)
    while try !condition() {
        guard Date() < deadline else { return XCTFail("condition never became true", file: file, line: line) }
        usleep(5_000)
    }
}

/// A transport that stores with a `FileTransport` but holds its first `send` until `open()`:
/// it keeps the background queue busy so a test can fill the other region.
final class GatedTransport: Transport, @unchecked Sendable {
    let inner: FileTransport
    private let gate = DispatchSemaphore(value: 0)
    private let entered = DispatchSemaphore(value: 0)
    private let firstCall = Locked(true)

    init(directory: URL) throws { inner = try FileTransport(directory: directory, maxEnvelopes: 1000) }

    func send(_ envelope: Envelope) throws {
        if firstCall.withLock({ first in defer { first = false }; return first }) {
            entered.signal()
            gate.wait()
        }
        try inner.send(envelope)
    }

    /// Returns once the first `send` is waiting at the gate.
    func waitUntilHeld() { entered.wait() }

    func open() { gate.signal() }
}

extension Log {
    static func test(_ body: String, trace: TraceID = TraceID(high: 1, low: 2), attributes: Attributes = [:]) -> Log {
        Log(level: .info, body: body, traceID: trace, timestamp: Date(timeIntervalSince1970: 1_767_261_600),
            attributes: attributes)
    }
}

extension Span {
    static func test(_ name: String, trace: TraceID, id: UInt64 = UInt64.random(in: 1 ... .max)) -> Span {
        Span(traceID: trace, spanID: SpanID(id), name: name, isSegment: false,
             startTimestamp: Date(timeIntervalSince1970: 1_767_261_599.5),
             endTimestamp: Date(timeIntervalSince1970: 1_767_261_600))
    }
}

extension BatchLimits {
    /// Every signal's limit `limit` (and its cap, as its description says).
    static func every(_ limit: Int) -> BatchLimits {
        var options = TelemetryBuffer.Options(dsn: testDSN)
        (options.maxLogsPerBatch, options.maxSpansPerBatch, options.maxMetricsPerBatch) = (limit, limit, limit)
        return BatchLimits(options)
    }
}
