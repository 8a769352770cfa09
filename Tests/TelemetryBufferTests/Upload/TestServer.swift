import Foundation
@testable import TelemetryBuffer
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A minimal HTTP/1.1 server on 127.0.0.1 for the upload tests: it records every request and answers
/// as the test's script says. A thread per connection; `Connection: close` on every answer.
final class TestServer: @unchecked Sendable {
    struct Request: Sendable {
        var method: String
        var path: String
        var headers: [String: String]
        /// The body, decompressed if it came with `Content-Encoding: gzip`.
        var body: [UInt8]
        /// The body's length as it came over the wire.
        var wireBytes = 0
        /// Whether the whole body was read: a request is recorded once its head is, body still empty.
        var isComplete = false
    }

    enum Answer: Sendable {
        /// A response with no body.
        case respond(Int, headers: [String: String] = [:], after: Double = 0)
        /// A 200 once the test signals `gate` (or after a minute: a test that forgot must not hang).
        case respondWhenOpened(DispatchSemaphore)
        /// Reset the connection (RST) after reading half of the body.
        case resetMidBody
        /// Answer nothing, and close after `seconds`.
        case hang(seconds: Double)
        /// A 200 whose body never ends: a byte every `interval` seconds for at most `seconds`, until the
        /// client goes away.
        case drip(interval: Double, seconds: Double)
    }

    /// A script that gives `answers` in order, then `last` to every later request.
    static func sequence(_ answers: [Answer], then last: Answer = .respond(200)) -> @Sendable (Request, Int) -> Answer {
        { _, index in index < answers.count ? answers[index] : last }
    }

    private(set) var port: UInt16 = 0
    let requests = Locked([Request]())
    /// What was wrong with requests, as `check` found it.
    let violations = Locked([String]())
    /// Checks each complete request; returns a problem, or `nil`.
    var check: @Sendable (Request) -> String? = { _ in nil }
    private let script: @Sendable (Request, Int) -> Answer
    private var listener: Int32 = -1
    private let done = DispatchSemaphore(value: 0)

    /// Starts listening on `port` (0: any free port) and answering with `script(request, index)`.
    init(port: UInt16 = 0, script: @escaping @Sendable (Request, Int) -> Answer = { _, _ in .respond(200) }) throws {
        self.script = script
        try start(port: port)
    }

    private func start(port requested: UInt16) throws {
        listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var yes: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = requested.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(listener, 16) == 0 else { throw WalkError("cannot listen on 127.0.0.1:\(requested): \(errno)") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        port = UInt16(bigEndian: address.sin_port)
        let listening = listener
        Thread { [self] in
            while true {
                let connection = accept(listening, nil, nil)
                if connection < 0 { break }
                Thread { [self] in serve(connection) }.start()
            }
            done.signal()
        }.start()
    }

    /// Stops listening; connections are refused until `restart()`.
    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
        done.wait()
    }

    /// Listens again on the same port.
    func restart() throws { try start(port: port) }

    private func serve(_ connection: Int32) {
        defer { close(connection) }
        guard var request = readHead(connection) else { return }
        let index = requests.withLock { requests in
            requests.append(request)
            return requests.count - 1
        }
        let length = Int(request.headers["content-length"] ?? "0") ?? 0
        // Scripts that reset decide by index alone: ask before reading the body.
        if case .resetMidBody = script(request, index) {
            _ = readBody(connection, &request, upTo: length / 2)
            var option = linger(l_onoff: 1, l_linger: 0)
            setsockopt(connection, SOL_SOCKET, SO_LINGER, &option, socklen_t(MemoryLayout<linger>.size))
            return
        }
        guard readBody(connection, &request, upTo: length) else { return }
        request.wireBytes = request.body.count
        if request.headers["content-encoding"] == "gzip" {
            if let plain = Self.gunzip(request.body) { request.body = plain } else {
                violations.withLock { $0.append("request \(index): a body that gzip cannot decompress") }
            }
        }
        request.isComplete = true
        requests.withLock { $0[index] = request }
        if let problem = check(request) { violations.withLock { $0.append("request \(index): \(problem)") } }
        switch script(request, index) {
        case .respond(let status, let headers, let delay):
            if delay > 0 { usleep(useconds_t(delay * 1_000_000)) }
            var text = "HTTP/1.1 \(status) Scripted\r\nContent-Length: 0\r\nConnection: close\r\n"
            for (name, value) in headers { text += "\(name): \(value)\r\n" }
            write(connection, text + "\r\n")
        case .respondWhenOpened(let gate):
            _ = gate.wait(timeout: .now() + 60)
            write(connection, "HTTP/1.1 200 Scripted\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        case .resetMidBody:
            break
        case .hang(let seconds):
            usleep(useconds_t(seconds * 1_000_000))
        case .drip(let interval, let seconds):
            write(connection, "HTTP/1.1 200 Scripted\r\nContent-Length: 1000000\r\nConnection: close\r\n\r\n")
            for _ in 0..<Int(seconds / interval) {
                usleep(useconds_t(interval * 1_000_000))
                guard send(connection, "x", 1, Int32(MSG_NOSIGNAL)) == 1 else { break }
            }
        }
    }

    /// `bytes` decompressed by the system's `gzip` (not the library's zlib: an independent check), or
    /// `nil` if it fails. Bounded by a deadline.
    static func gunzip(_ bytes: [UInt8]) -> [UInt8]? {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/gzip")
        process.arguments = ["-dc"]
        let input = Pipe(), output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return nil }
        let collected = Locked(Data())
        let drained = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            collected.withLock { $0 = output.fileHandleForReading.readDataToEndOfFile() }
            drained.signal()
        }
        input.fileHandleForWriting.write(Data(bytes))
        try? input.fileHandleForWriting.close()
        guard drained.wait(timeout: .now() + 20) == .success else {
            process.terminate()
            return nil
        }
        process.waitUntilExit()
        return process.terminationStatus == 0 ? Array(collected.withLock { $0 }) : nil
    }

    private func write(_ connection: Int32, _ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// Bytes read past the head of each connection's request, kept for `readBody`.
    private let pending = Locked([Int32: [UInt8]]())

    /// Reads the head, up to the blank line; the body comes with `readBody`.
    private func readHead(_ connection: Int32) -> Request? {
        var data = [UInt8]()
        let separator: [UInt8] = [13, 10, 13, 10]
        var headEnd: Int?
        while headEnd == nil {
            guard let chunk = receive(connection) else { return nil }
            data += chunk
            headEnd = data.indices.dropLast(3).first { data[$0..<$0 + 4].elementsEqual(separator) }
        }
        let head = String(decoding: data[..<headEnd!], as: UTF8.self).components(separatedBy: "\r\n")
        let requestLine = head[0].split(separator: " ")
        var headers: [String: String] = [:]
        for line in head.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        if headers["expect"]?.lowercased() == "100-continue" { write(connection, "HTTP/1.1 100 Continue\r\n\r\n") }
        return Request(method: String(requestLine.first ?? ""), path: String(requestLine.dropFirst().first ?? ""),
                       headers: headers, body: Array(data[(headEnd! + 4)...]))
    }

    /// Reads the body until it holds `count` bytes; `false` if the connection ended first.
    private func readBody(_ connection: Int32, _ request: inout Request, upTo count: Int) -> Bool {
        while request.body.count < count {
            guard let chunk = receive(connection) else { return false }
            request.body += chunk
        }
        return true
    }

    private func receive(_ connection: Int32) -> [UInt8]? {
        var chunk = [UInt8](repeating: 0, count: 65536)
        let count = chunk.withUnsafeMutableBytes { recv(connection, $0.baseAddress, $0.count, 0) }
        return count > 0 ? Array(chunk[0..<count]) : nil
    }
}

extension TestServer {
    /// The DSN of project 42 on this server.
    var dsn: String { "http://publickey@127.0.0.1:\(port)/42" }
}

/// Options for a buffer in `directory` that uploads to `server`: room for every envelope, the uploader
/// paced in milliseconds.
func uploadingOptions(_ directory: TemporaryDirectory, to server: TestServer,
                      _ configure: (inout Options) -> Void = { _ in }) -> Options {
    testOptions(directory) {
        $0.dsn = server.dsn
        $0.upload = true
        $0.maxCachedEnvelopes = 1000
        $0.uploadOptions.pacing = 0.001
        configure(&$0)
    }
}
