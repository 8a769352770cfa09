import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension TelemetryBuffer {
    /// One HTTP request of the uploader.
    public struct HTTPRequest: Sendable {
        /// The envelope endpoint.
        public var url: URL
        /// Header fields, in order: send every one (`Content-Encoding: gzip` among them when the body is
        /// compressed, see ``UploadOptions/compressesBodies``).
        public var headers: [(name: String, value: String)]
        /// The body: the envelope as sent.
        public var body: [UInt8]
        /// Seconds the request may take until its answer's head (see ``UploadOptions/requestTimeout``).
        public var timeout: Double
    }
}

extension TelemetryBuffer {
    /// The status and headers of a response.
    public struct HTTPResponse: Sendable {
        /// The status code.
        public var status: Int
        /// Header fields with lowercased names.
        public var headers: [String: String]

        /// A response.
        ///
        /// - Parameters:
        ///   - status: The HTTP status code.
        ///   - headers: The response headers; names are matched without regard to case.
        public init(status: Int, headers: [String: String]) {
            self.status = status
            self.headers = Dictionary(headers.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { first, _ in first })
        }
    }
}

extension TelemetryBuffer {
    /// Sends the uploader's requests. Plug in your own to use another HTTP stack; the default uses URLSession.
    public protocol HTTPClient: Sendable {
        /// Sends `request` and calls `completion` once, with the response, or with an error for a network
        /// failure (timeout, DNS, refused or reset connection) — the uploader retries those. See
        /// <doc:ImplementingATransport> for the implementation requirements.
        ///
        /// - Parameters:
        ///   - request: A POST of one envelope: URL, headers and body.
        ///   - completion: Called exactly once, from any thread.
        func send(_ request: HTTPRequest, completion: @escaping @Sendable (Result<HTTPResponse, any Error>) -> Void)
    }
}

extension TelemetryBuffer {
    /// The default client: URLSession (FoundationNetworking on Linux), no cookies, no caching. It follows no
    /// redirect on any platform (the 3xx is the answer), and answers each request at its response's head,
    /// dropping the body as it comes.
    public final class URLSessionHTTPClient: HTTPClient {
        private let session: URLSession
        private let delegate = SessionDelegate()

        /// A client with an ephemeral session. Each request is cancelled at its own `timeout` (see
        /// ``UploadOptions/requestTimeout``); `timeout` is the session's (on Linux, before a response's head,
        /// FoundationNetworking's only one: whole seconds, rounded up, restarted by every byte). With
        /// `unmeteredOnly`, on Apple platforms the session itself refuses expensive (cellular,
        /// hotspot) and constrained (Low Data Mode) networks: a request there fails as a network error and goes again
        /// later. Where the system reports no network path (watchOS), that is what keeps uploads off them.
        public init(timeout: Double = 30, unmeteredOnly: Bool = false) {
            let configuration = URLSessionConfiguration.ephemeral
            #if canImport(Darwin)
            if unmeteredOnly {
                configuration.allowsExpensiveNetworkAccess = false
                configuration.allowsConstrainedNetworkAccess = false
            }
            #endif
            configuration.httpShouldSetCookies = false
            configuration.urlCache = nil
            // FoundationNetworking does not let a request's own timeout undercut the session's.
            configuration.timeoutIntervalForRequest = Self.systemTimeout(timeout)
            configuration.timeoutIntervalForResource = Self.systemTimeout(timeout)
            configuration.httpCookieStorage = nil
            session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
        }

        deinit { session.finishTasksAndInvalidate() }

        /// The longest timeout a request gets: FoundationNetworking counts it in milliseconds in a 64-bit
        /// integer, and trapped from about 9.2e15 s (at every request, so at every start with an envelope
        /// stored). A day is longer than any request needs.
        static let longestTimeout: Double = 86_400

        /// The timeout to give URLSession: at most `longestTimeout`. FoundationNetworking counts whole
        /// seconds, and timed out at once a request given less than one; it gets the timeout rounded up
        /// (see `send` for the exact one).
        private static func systemTimeout(_ seconds: Double) -> Double {
            #if canImport(FoundationNetworking)
            min(seconds, longestTimeout).rounded(.up)
            #else
            min(seconds, longestTimeout)
            #endif
        }

        /// Sends the request with URLSession.
        public func send(_ request: HTTPRequest, completion: @escaping @Sendable (Result<HTTPResponse, any Error>) -> Void) {
            var urlRequest = URLRequest(url: request.url, timeoutInterval: Self.systemTimeout(request.timeout))
            urlRequest.httpMethod = "POST"
            for header in request.headers { urlRequest.setValue(header.value, forHTTPHeaderField: header.name) }
            urlRequest.httpBody = Data(request.body)
            let task = session.dataTask(with: urlRequest)
            delegate.expect(task) { response, error in
                guard let http = response as? HTTPURLResponse else {
                    return completion(.failure(error ?? URLError(.badServerResponse)))
                }
                // The session refuses redirects, so the 3xx is the answer. Should a system follow one anyway (a
                // captive portal's 302 to its login page), the answer from elsewhere is no answer from Sentry
                // but a network error, tried again later.
                if let answered = http.url, !Redirected.sameEndpoint(answered, request.url) {
                    return completion(.failure(Redirected(to: answered)))
                }
                var headers: [String: String] = [:]
                for (name, value) in http.allHeaderFields { headers["\(name)".lowercased()] = "\(value)" }
                completion(.success(HTTPResponse(status: http.statusCode, headers: headers)))
            }
            task.resume()
            // The whole request within its exact timeout: FoundationNetworking restarts its timeout at every
            // byte it receives and enforces no overall one, so a server dripping its body held the request for
            // as long as it dripped. (Cancelling a finished task does nothing.) There, only once the head was
            // answered: a cancel that meets a redirect while it waits for the delegate's decision traps
            // (`didCompleteRedirectCallback`), so before the head its own timeout, which allows for that,
            // ends the request.
            DispatchQueue.global().asyncAfter(deadline: .now() + min(request.timeout, Self.longestTimeout)) { [weak task, delegate] in
                guard let task else { return }
                #if canImport(FoundationNetworking)
                guard delegate.hasAnswered(task) else { return }
                #endif
                task.cancel()
            }
        }
    }
}

/// The default client's session delegate: it refuses every redirect, and answers each request at its
/// response's head, the status and headers being all the uploader reads; the body is let through unread
/// (a connection that reads it to its end stays open for the next request), until the timeout at most.
///
/// Redirects: so that a request's answer is the one of the envelope endpoint (a 3xx, tried again later),
/// and the auth header goes nowhere else. Followed, Apple's URLSession sends a 307's or 308's envelope to
/// the new address, whose answer looked like no delivery, so the envelope went again and again;
/// FoundationNetworking sends none (a GET for a 302, an empty POST for a 307 or 308), and the endpoint's
/// answer to that, when the redirect led back to it, looked like a delivery: the envelope lost.
///
/// The head: the server has answered once it sent its status (Relay's comes after it took the envelope).
/// Waiting for the body too, a 200 whose body stalled timed out as a network error, and the envelope went
/// again: twice delivered; and a body that never ended filled memory until the timeout.
private final class SessionDelegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    // @unchecked: `handlers` is touched only under `lock`.
    private let lock = NSLock()
    /// What to call with each task's response or error, by task identifier, until it is called once.
    private var handlers: [Int: @Sendable (URLResponse?, (any Error)?) -> Void] = [:]

    /// Calls `handler` once for `task`: with its response's head, or with the error that ended it first.
    func expect(_ task: URLSessionTask, _ handler: @escaping @Sendable (URLResponse?, (any Error)?) -> Void) {
        lock.withLock { handlers[task.taskIdentifier] = handler }
    }

    /// Whether `task`'s handler was called (its head arrived, or it ended).
    func hasAnswered(_ task: URLSessionTask) -> Bool {
        lock.withLock { handlers[task.taskIdentifier] == nil }
    }

    private func take(_ task: URLSessionTask) -> (@Sendable (URLResponse?, (any Error)?) -> Void)? {
        lock.withLock { handlers.removeValue(forKey: task.taskIdentifier) }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
                    newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void) {
        completionHandler(nil)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
                    completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
        let handler = take(dataTask)
        completionHandler(.allow)
        handler?(response, nil)
    }

    /// The body, dropped as it comes.
    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {}

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        // Ended before a head was delivered: an error, or (on some systems) a refused redirect, whose 3xx
        // is then the task's response.
        take(task)?(task.response, error)
    }
}

/// The default client's request ended at another address than it was sent to.
struct Redirected: Error, CustomStringConvertible {
    var to: URL
    var description: String { "redirected to \(to.absoluteString); not an answer from Sentry" }

    /// Whether two URLs name the same endpoint: scheme and host compared without regard to case (a
    /// system may canonicalise them), the port with the scheme's default filled in, and the path as
    /// written with its query (`URL.path` drops a trailing slash: a redirect to the endpoint without it,
    /// which FoundationNetworking follows without the envelope, looked like Sentry's answer).
    static func sameEndpoint(_ first: URL, _ second: URL) -> Bool {
        func key(_ url: URL) -> (String, String, Int?, String, String?) {
            let scheme = url.scheme?.lowercased() ?? ""
            let components = URLComponents(url: url, resolvingAgainstBaseURL: true)
            return (scheme, url.host?.lowercased() ?? "", url.port ?? (scheme == "https" ? 443 : scheme == "http" ? 80 : nil),
                    components?.percentEncodedPath ?? url.path, components?.percentEncodedQuery)
        }
        return key(first) == key(second)
    }
}

/// `TelemetryBuffer.HTTPRequest`: the module and its main class share a name, so the qualified form
/// names the class's member (as needed where another module has a `HTTPRequest` too).
public typealias HTTPRequest = TelemetryBuffer.HTTPRequest

/// `TelemetryBuffer.HTTPResponse`: the module and its main class share a name, so the qualified form
/// names the class's member (as needed where another module has a `HTTPResponse` too).
public typealias HTTPResponse = TelemetryBuffer.HTTPResponse

/// `TelemetryBuffer.HTTPClient`: the module and its main class share a name, so the qualified form
/// names the class's member (as needed where another module has a `HTTPClient` too).
public typealias HTTPClient = TelemetryBuffer.HTTPClient

/// `TelemetryBuffer.URLSessionHTTPClient`: the module and its main class share a name, so the qualified form
/// names the class's member (as needed where another module has a `URLSessionHTTPClient` too).
public typealias URLSessionHTTPClient = TelemetryBuffer.URLSessionHTTPClient
