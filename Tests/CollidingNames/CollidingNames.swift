// Names another library an app imports may also use (swift-distributed-tracing has a `Span`,
// AsyncHTTPClient an `HTTPClient`): the qualification test imports this module beside TelemetryBuffer.

/// A span of some other tracing library.
public protocol Span {}

/// A log of some other library.
public struct Log {}

/// Options of some other library.
public struct Options {
    public init() {}
}

/// A transport of some other library.
public protocol Transport {}

/// An HTTP client of some other library.
public struct HTTPClient {}

/// An envelope of some other library.
public struct Envelope {}
