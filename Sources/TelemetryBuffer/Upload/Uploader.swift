import Dispatch
import Foundation

/// Drains the envelope folder to Sentry: oldest first, one request at a time, `pacing` apart. The only
/// owner of retries in the library.
///
/// | response | action |
/// |---|---|
/// | 2xx | delete the envelope; the attempt counter restarts |
/// | network error, 3xx, 408, 5xx | keep it; back off `backoffBase × 2^(n-1)` + jitter; after `maxAttempts`, cool off, then again |
/// | 429 | delete it, uncounted (Relay counted it); its categories wait out the rate limit |
/// | 400, 413, other 4xx | delete it, count its items as `send_error`, go on |
/// | 401, 403 | stop; the buffer shuts down and removes every stored file |
/// | 404 | stop; the buffer takes no new items; stored files stay |
///
/// Every response's `X-Sentry-Rate-Limits` (or a 429's `Retry-After`) updates the rate limits. Each request
/// gets `sent_at` in its envelope header (the file never holds it) and the pending client report as an
/// extra item; the report's counts are reset only when Sentry accepts the envelope. An envelope that
/// cannot be read or parsed is deleted and counted (`internal_sdk_error`), never retried; one older than
/// `maxEnvelopeAge` is deleted and counted (`cache_overflow`) when the uploader reaches it, so an envelope
/// the server keeps failing holds the queue no longer than that. Bodies of 1 KiB
/// or more go gzip-compressed. Holds (consent, a removal, a metered network) stop new requests without
/// dropping anything; `resume()` ends a backoff or cool-off early.
final class Uploader: Sendable {
    private let queue = DispatchQueue(label: "io.telemetrybuffer.upload", qos: .utility)
    private let files: FileTransport
    private let client: any HTTPClient
    private let options: UploadOptions
    private let endpoint: URL
    private let headers: [(name: String, value: String)]
    private let limits: RateLimits
    private let reports: ClientReportRecorder
    private let diagnostics: Diagnostics
    private let clock: any Clock
    private let stopped = Locked<(@Sendable (UploadStop) -> Void)?>(nil)
    private let closed = Locked(false)
    /// Entered while a request is under way.
    private let requests = DispatchGroup()
    /// The state, read by `stats` from any thread; written on `queue`, and by `close()`.
    private let current = Locked(UploadState.idle)
    /// Request body bytes sent, and the bytes gzip saved on them.
    private let volume = Locked((sent: 0, saved: 0))
    /// What only `queue` touches: the failures in a row; which scheduled wake-up is the latest (an earlier
    /// one that fires later does nothing); whether it is the pacing after a sent envelope, which a new
    /// envelope does not cut short.
    private let onQueue: QueueBound<(failures: Int, wake: Int, pacingPending: Bool)>
    /// While any is held, no request starts. Changed from any thread; read where a request would start.
    /// `dataRemoval` is counted (removals may overlap), the others are on or off.
    private let holds = Locked<[UploadHold: Int]>([:])

    init(files: FileTransport, client: any HTTPClient, options: UploadOptions, dsn: DSN, sdkName: String,
         sdkVersion: String, limits: RateLimits, reports: ClientReportRecorder, diagnostics: Diagnostics,
         clock: any Clock = SystemClock()) {
        self.files = files
        onQueue = QueueBound((failures: 0, wake: 0, pacingPending: false), queue: queue)
        self.clock = clock
        self.client = client
        self.options = options
        self.limits = limits
        self.reports = reports
        self.diagnostics = diagnostics
        endpoint = dsn.envelopeEndpoint
        var auth = "Sentry sentry_version=7, sentry_client=\(sdkName)/\(sdkVersion), sentry_key=\(dsn.publicKey)"
        if let secret = dsn.secretKey { auth += ", sentry_secret=\(secret)" }
        headers = [("X-Sentry-Auth", auth), ("Content-Type", "application/x-sentry-envelope"),
                   ("User-Agent", "\(sdkName)/\(sdkVersion)")]
    }

    var state: UploadState { current.withLock { $0 } }

    /// Request body bytes sent so far (every attempt, as sent), and the bytes gzip saved on them.
    var transferred: (sent: Int, saved: Int) { volume.withLock { $0 } }

    /// Sets what to call when the server refuses the DSN for good.
    func onStop(_ body: @escaping @Sendable (UploadStop) -> Void) { stopped.withLock { $0 = body } }

    /// Holds uploads for `reason`, or ends that hold (each `dataRemoval` hold is ended by its own
    /// release, the others by any); never waits. Once a hold returns, no request starts
    /// until every hold has ended (one already under way completes). A wait for a backoff, a cool-off or a
    /// rate limit goes on meanwhile; the last release sends what is stored now, unless such a wait is
    /// still running.
    func hold(_ reason: UploadHold, _ on: Bool) {
        holds.withLock { holds in
            let count = reason == .dataRemoval ? holds[reason, default: 0] + (on ? 1 : -1) : (on ? 1 : 0)
            holds[reason] = count > 0 ? count : nil
        }
        queue.async { [self] in
            guard !closed.withLock({ $0 }) else { return }
            switch (state, held) {
            case (.idle, let reason?), (.held, let reason?):
                set(.held(reason))
            case (.held, nil):
                set(.idle)
                schedule(after: 0)
            default:
                break  // sending: its answer decides; waiting: the wake-up checks the holds
            }
        }
    }

    /// What holds uploads, the weightiest first; `nil` when nothing does.
    private var held: UploadHold? {
        let holds = holds.withLock { $0 }
        return [.consent, .dataRemoval, .meteredNetwork].first { holds[$0] != nil }
    }

    /// Ends a backoff or cool-off wait and sends now (the network is back, or the app knows better): the
    /// attempts count from 1 again. A rate limit from the server is waited out all the same.
    func resume() {
        queue.async { [self] in
            switch state {
            case .backingOff, .coolingOff:
                onQueue.value.failures = 0
                set(.idle)
                schedule(after: 0)
            default:
                break
            }
        }
    }

    /// Returns once the uploader has done what was queued before the call (for tests).
    func waitForQueuedWork() { queue.sync {} }

    /// Starts draining now unless the uploader is waiting out a failure or the pacing after a sent
    /// envelope, is held, or has stopped (a rate-limit wait is cut short: the new envelope may be of
    /// another category).
    func kick() {
        queue.async { [self] in
            switch current.withLock({ $0 }) {
            case .idle where !onQueue.value.pacingPending, .rateLimited: schedule(after: 0)
            default: break
            }
        }
    }

    /// Sends the next envelope after `seconds`, replacing any wake-up scheduled before (which is not
    /// cancelled, only ignored; it holds the uploader weakly).
    private func schedule(after seconds: Double) {
        onQueue.value.wake &+= 1
        onQueue.value.pacingPending = false
        let token = onQueue.value.wake
        clock.after(seconds, on: queue) { [weak self] in
            guard let self, token == self.onQueue.value.wake else { return }
            self.onQueue.value.pacingPending = false
            self.sendNext()
        }
    }

    /// The longest a rate-limit wait is scheduled ahead (then the uploader looks again): a wait that never
    /// came (a limit of 1e20 s) kept its timer, and the uploader, for good, one per envelope stored.
    private static let longestRateLimitWait = 3600.0

    private func set(_ state: UploadState) { current.withLock { $0 = state } }

    /// Stops for good without a reason from the server: no request starts after this call.
    func stop() { closed.withLock { $0 = true } }

    /// Stops like `stop()` and waits at most `requestWait` seconds for a request under way. If its response
    /// comes later, only its file is removed (acknowledged, or answered 429) or kept (for the next start,
    /// which may send it again: at least once); nothing else is done for a closed buffer.
    func close(requestWait: Double = 2) {
        stop()
        let deadline = DispatchTime.now() + requestWait
        // A `sendNext` that checked `closed` just before has started its request once the queue gets here.
        let passed = DispatchSemaphore(value: 0)
        queue.async { passed.signal() }
        _ = passed.wait(timeout: deadline)
        _ = requests.wait(timeout: deadline)
        set(.disabled)
    }

    /// Sends the oldest envelope whose categories are not rate-limited.
    private func sendNext() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !closed.withLock({ $0 }) else { return }
        if case .stopped = state { return }
        if let held { return set(.held(held)) }
        let now = clock.now()
        var limitedUntil: Date?
        for url in files.storedEnvelopes() where !files.removeIfExpired(url) {
            let bytes: [UInt8]
            do {
                guard let read = try FileSystem.readFile(url.path, prefix: 0, limit: FileSystem.maxEnvelopeBytes, length: { _ in .max })
                else { continue }
                bytes = read
            } catch is FileSystem.TooLarge {
                files.remove(url, countingAs: .internalSDKError, why: "larger than any envelope of the buffer")
                continue
            } catch {
                continue
            }
            guard let envelope = try? EnvelopeReader(bytes) else {
                files.remove(url, countingAs: .internalSDKError, why: "not a valid envelope")
                continue
            }
            // An item that is not telemetry (a client report) waits for a limit on everything.
            let categories = envelope.items.map { item in
                SignalDescription.described(envelopeItemType: item.type).map { RateLimits.Category($0.category) } ?? .all
            }
            if let until = categories.compactMap({ limits.limitedUntil($0, now: now) }).max() {
                limitedUntil = min(limitedUntil ?? until, until)
                continue
            }
            return send(url, bytes, categories: categories, now: now)
        }
        if let limitedUntil {
            set(.rateLimited(until: limitedUntil))
            schedule(after: min(limitedUntil.timeIntervalSince(now), Self.longestRateLimitWait))
        } else {
            set(.idle)
        }
    }

    private func send(_ url: URL, _ bytes: [UInt8], categories: [RateLimits.Category], now: Date) {
        // Checked and entered under the holds' lock: a hold that returned before this point stops the
        // request, one that comes later finds it under way.
        let free = holds.withLock { holds in
            guard holds.isEmpty else { return false }
            requests.enter()
            return true
        }
        guard free else { return sendNext() }
        // Marked before the request: an eviction from now on spares it, and one since it was read took it.
        guard files.beginUpload(url) else {
            requests.leave()
            return sendNext()
        }
        set(.sending)
        let report = reports.take()
        var request = HTTPRequest(url: endpoint, headers: headers, body: Self.body(bytes, sentAt: now, report: report),
                                  timeout: options.requestTimeout)
        let size = request.body.count
        if options.compressesBodies, let compressed = Gzip.compress(request.body) {
            request.body = compressed
            request.headers.append(("Content-Encoding", "gzip"))
        }
        volume.withLock { $0.sent += request.body.count; $0.saved += size - request.body.count }
        // The queue does not wait for the response: `close()` waits for a request under way only so long.
        // The first answer counts: the client's, or after `requestTimeout` and a grace the watchdog's (a
        // client that never calls back would hold the uploader for good; one that calls back twice would
        // leave the request group twice). The grace is the timeout again, at most 5 s: a client honours
        // the timeout well within it, and a short timeout is not stretched many times over.
        let answered = Locked(false)
        let answer: @Sendable (Result<HTTPResponse, any Error>) -> Void = { [self] outcome in
            guard answered.withLock({ done in defer { done = true }; return !done }) else { return }
            queue.async {
                self.finish(url, categories: categories, report: report, outcome)
                self.requests.leave()
            }
        }
        client.send(request, completion: answer)
        let grace = min(options.requestTimeout, 5)
        queue.asyncAfter(deadline: .now() + options.requestTimeout + grace) { answer(.failure(NoAnswer())) }
    }

    /// The HTTP client did not answer within `requestTimeout` and a grace.
    private struct NoAnswer: Error, CustomStringConvertible {
        var description: String { "the HTTP client did not answer in time" }
    }

    /// What a response (or a network error) means for the envelope `url`; after `close()`, only what
    /// concerns the file and the counts is done, and the state stays `disabled`.
    private func finish(_ url: URL, categories: [RateLimits.Category], report: ClientReport?,
                        _ outcome: Result<HTTPResponse, any Error>) {
        dispatchPrecondition(condition: .onQueue(queue))
        // Once a delivered envelope is removed, not before: an eviction in between would count it dropped.
        defer { files.endUpload() }
        if closed.withLock({ $0 }) {
            // Closed meanwhile: the folder may be another buffer's by now, so no stop, no callbacks.
            guard case .success(let response) = outcome, (200..<300).contains(response.status) || response.status == 429 else {
                if let report { reports.restore(report) }
                return set(.disabled)
            }
            files.remove(url)
            if response.status == 429, let report { reports.restore(report) }
            return set(.disabled)
        }
        let name = url.lastPathComponent
        switch outcome {
        case .failure(let error):
            // A redirect is worth a warning: a DSN behind a permanent one never delivers.
            diagnostics.log(error is Redirected ? .warning : .info, "upload: \(name) → network error: \(error)")
            retryLater(report)
        case .success(let response):
            // A redirect the client did not follow is worth a warning too (the default client refuses them);
            // a 413 an error, as the protocol asks: the envelope was too large for the server, and is lost.
            let level: Diagnostic.Level = response.status == 413 ? .error : (300..<400).contains(response.status) ? .warning : .info
            diagnostics.log(level, "upload: \(name) → \(response.status)")
            limits.update(status: response.status, rateLimits: response.headers["x-sentry-rate-limits"],
                          retryAfter: response.headers["retry-after"], now: clock.now())
            switch response.status {
            case 200..<300:
                files.remove(url)
                onQueue.value.failures = 0
                next()
            case 300..<400, 408, 500..<600:
                // A 3xx: a redirect (a captive portal, say) the client did not follow, not an answer from Sentry.
                retryLater(report)
            case 429:
                // Final, as every answer is (the protocol): Relay counted its items as rate-limited, so it goes
                // without a report of ours, and is not sent again once the limit ends, which would bill the
                // next quota period for them. The counts it carried go with the next request.
                restore(report)
                files.remove(url)
                onQueue.value.failures = 0
                limits.holdAfter429(categories, retryAfter: response.headers["retry-after"], now: clock.now())
                next()
            case 401, 403:
                if let report { reports.restore(report) }  // not saved: the folder is emptied
                stop(.invalidKey(status: response.status))
            case 404:
                restore(report)
                stop(.projectDisabled)
            default:
                // Not saved: the next envelope goes within the pacing and carries them (a save would cost a
                // drive flush per envelope while a backlog is rejected).
                if let report { reports.restore(report) }
                files.remove(url, countingAs: .sendError, why: "the server answered \(response.status)")
                onQueue.value.failures = 0
                next()
            }
        }
    }

    private func next() {
        dispatchPrecondition(condition: .onQueue(queue))
        set(.idle)
        schedule(after: pacing)
        onQueue.value.pacingPending = true
    }

    /// `options.pacing`, spaced out ten times (and to at least 1 s) while the device is in Low Power Mode.
    private var pacing: Double {
        LowPowerMode.isEnabled ? max(options.pacing * 10, 1) : options.pacing
    }

    /// Puts back the counts a request that failed carried, and, as the uploader now waits (a backoff, a
    /// rate limit, a disabled project), saves what is pending for the next start at once (see
    /// `ClientReportRecorder.saveUnsentAfterFailedRequest`).
    private func restore(_ report: ClientReport?) {
        dispatchPrecondition(condition: .onQueue(queue))
        if let report { reports.restore(report) }
        do { try reports.saveUnsentAfterFailedRequest() } catch {
            diagnostics.log(.warning, "upload: could not save the drop counts not sent yet: \(error)")
        }
    }

    private func retryLater(_ report: ClientReport?) {
        dispatchPrecondition(condition: .onQueue(queue))
        restore(report)
        onQueue.value.failures += 1
        let wait = options.wait(afterFailure: onQueue.value.failures, jitter: Double.random(in: 0..<1))
        let until = clock.now().addingTimeInterval(wait.seconds)
        if wait.coolOff { onQueue.value.failures = 0 }
        set(wait.coolOff ? .coolingOff(until: until) : .backingOff(until: until))
        schedule(after: wait.seconds)
    }

    private func stop(_ reason: UploadStop) {
        // The owner refuses later items first: once the state says stopped, no add is taken any more.
        stopped.withLock { $0 }?(reason)
        set(.stopped(reason))
        diagnostics.log(.error, "upload stopped: \(reason)")
    }

    /// The request body: the stored envelope with `sent_at` added to its header line, its items byte for
    /// byte, and the client report appended as one more item.
    static func body(_ stored: [UInt8], sentAt: Date, report: ClientReport?) -> [UInt8] {
        let headerEnd = stored.firstIndex(of: 0x0A) ?? stored.count
        var body = [UInt8]()
        body.reserveCapacity(stored.count + 512)
        let closing = stored[..<headerEnd].lastIndex(of: 0x7D) ?? headerEnd
        body += stored[..<closing]
        // After a member, a comma; in an empty header (`{}`, valid), none.
        let empty = stored[..<closing].last { $0 != 0x20 && $0 != 0x09 } == 0x7B
        body += Array(((empty ? "" : ",") + "\"sent_at\":\"\(rfc3339(sentAt))\"").utf8)
        body += stored[closing...]
        if let report {
            if body.last != 0x0A { body.append(0x0A) }
            let buffer = ByteBuffer(capacity: 256)
            var writer = JSONWriter(appendingTo: buffer)
            EnvelopeEncoder.clientReportItem(report, into: &writer)
            writer.finish()
            body += buffer.toArray()
        }
        return body
    }

    /// `2026-01-01T10:00:05.000Z`.
    static func rfc3339(_ date: Date) -> String {
        let format = DateFormatter()
        format.locale = Locale(identifier: "en_US_POSIX")
        format.timeZone = TimeZone(identifier: "UTC")
        format.dateFormat = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"
        return format.string(from: date)
    }
}
