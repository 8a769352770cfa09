import Foundation

extension TelemetryBuffer {
    /// A parsed Sentry DSN: `{scheme}://{public_key}[:{secret}]@{host}[:{port}]{path}/{project_id}`.
    public struct DSN: Sendable, Hashable, CustomStringConvertible {
        /// The DSN exactly as given, secret key included; it is what the per-DSN folder name is hashed from.
        public let string: String
        /// `http` or `https`.
        public let scheme: String
        /// The public key (`sentry_key`).
        public let publicKey: String
        /// The deprecated secret key, if the DSN has one; never required.
        public let secretKey: String?
        /// The host, without port.
        public let host: String
        /// The port, if given.
        public let port: Int?
        /// The path before the project ID, without a trailing slash (usually empty).
        public let path: String
        /// The project ID.
        public let projectID: String
        /// The envelope endpoint: `{scheme}://{host}[:{port}]{path}/api/{project_id}/envelope/`.
        public let envelopeEndpoint: URL

        /// Parses a DSN.
        ///
        /// - Parameter string: `{scheme}://{public key}[:{secret}]@{host}[:{port}]{path}/{project id}`.
        /// - Throws: `TelemetryBufferError.invalidDSN` saying which part is wrong (the secret redacted): also
        ///   for whitespace or a control character anywhere (a trailing line break), a port outside 1…65535,
        ///   or a path holding `?`, `#`, whitespace or a control character, even percent-encoded.
        public init(_ string: String) throws {
            func fail(_ reason: String) -> TelemetryBufferError { .invalidDSN(Self.redacted(string), reason: reason) }
            guard !string.isEmpty else { throw fail("it is empty") }
            // A line break or space at its end (from an environment variable) made the project ID `1\n`:
            // every request went to the wrong endpoint, and the buffer stopped as for a disabled project.
            guard !string.unicodeScalars.contains(where: Self.isWhitespaceOrControl) else {
                throw fail("it contains whitespace or a control character (a line break from an environment variable?)")
            }
            guard let components = URLComponents(string: string) else { throw fail("it is not a URL") }
            guard let scheme = components.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
                throw fail("the scheme must be http or https")
            }
            guard let publicKey = components.user, !publicKey.isEmpty else {
                throw fail("the public key (the part before '@') is missing")
            }
            guard Self.fitsAuthHeader(publicKey), components.password.map(Self.fitsAuthHeader) ?? true else {
                throw fail("the keys must not contain control characters, whitespace or commas")
            }
            // From `URL`: `URLComponents.host` runs ICU's IDNA conversion, whose first use makes 1.2 MiB of
            // ICU data resident on Linux, for every buffer. `URL` leaves an IPv6 address without its
            // brackets, which the authority needs back.
            guard let bare = URL(string: string)?.host, !bare.isEmpty else { throw fail("the host is missing") }
            let host = bare.contains(":") ? "[\(bare)]" : bare
            guard components.query == nil, components.fragment == nil else {
                throw fail("it must not have a query or fragment")
            }
            if let port = components.port, !(1...65_535).contains(port) { throw fail("the port must be from 1 to 65535") }
            // The path comes back percent-decoded, and goes into the endpoint as it is: a `%3F` became its query.
            guard !components.path.unicodeScalars.contains(where: { $0 == "?" || $0 == "#" || Self.isWhitespaceOrControl($0) }) else {
                throw fail("the path must not hold a ?, #, whitespace or control character, even percent-encoded")
            }
            var segments = components.path.split(separator: "/", omittingEmptySubsequences: false)
            if segments.last == "" { segments.removeLast() }
            guard let project = segments.last, !project.isEmpty, segments.count >= 2 else {
                throw fail("the project ID (the last path component) is missing")
            }
            self.string = string
            self.scheme = scheme
            self.publicKey = publicKey
            self.secretKey = components.password.flatMap { $0.isEmpty ? nil : $0 }
            self.host = host
            self.port = components.port
            self.path = segments.dropLast().joined(separator: "/")
            self.projectID = String(project)
            // The parts come back percent-decoded, so one can be valid in the DSN and not in a new URL
            // (`exa%20mple.com`).
            let authority = port.map { "\(host):\($0)" } ?? host
            guard let endpoint = URL(string: "\(scheme)://\(authority)\(path)/api/\(projectID)/envelope/") else {
                throw fail("its host or path does not form a valid envelope URL")
            }
            envelopeEndpoint = endpoint
        }

        /// Whether `text` can be a value in the `X-Sentry-Auth` header: no control characters, whitespace or
        /// commas. With one the header would be corrupt, or, with a line break, dropped whole by URLSession on
        /// Linux, so every request would go without credentials.
        static func fitsAuthHeader(_ text: String) -> Bool {
            text.unicodeScalars.allSatisfy {
                $0.properties.generalCategory != .control && !$0.properties.isWhitespace && $0 != ","
            }
        }

        private static func isWhitespaceOrControl(_ scalar: Unicode.Scalar) -> Bool {
            scalar.properties.isWhitespace || scalar.properties.generalCategory == .control
        }

        /// The organisation ID encoded in SaaS hosts such as `o7.ingest.us.sentry.io`, for the sampling context.
        public var organizationID: String? {
            guard host.first == "o", let dot = host.firstIndex(of: ".") else { return nil }
            let digits = host[host.index(after: host.startIndex)..<dot]
            return !digits.isEmpty && digits.allSatisfy(\.isASCII) && digits.allSatisfy(\.isNumber)
                ? String(digits) : nil
        }

        /// The DSN as given, with the secret key (if any) replaced by `***`: descriptions end up in logs.
        public var description: String { Self.redacted(string) }

        /// `text` with whatever follows a `:` in its user part (the secret key) replaced by `***`.
        static func redacted(_ text: String) -> String {
            guard let scheme = text.range(of: "://") else { return text }
            let authorityEnd = text[scheme.upperBound...].firstIndex(of: "/") ?? text.endIndex
            guard let at = text[scheme.upperBound..<authorityEnd].lastIndex(of: "@"),
                  let colon = text[scheme.upperBound..<at].firstIndex(of: ":")
            else { return text }
            return String(text[..<text.index(after: colon)]) + "***" + String(text[at...])
        }
    }
}

/// `TelemetryBuffer.DSN`: the module and its main class share a name, so the qualified form
/// names the class's member (as needed where another module has a `DSN` too).
public typealias DSN = TelemetryBuffer.DSN
