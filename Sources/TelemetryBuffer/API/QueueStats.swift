import Foundation

extension TelemetryBuffer {
    /// What the uploader is doing.
    public enum UploadState: Sendable, Equatable {
        /// No uploader: uploads are off, or a custom transport takes the envelopes.
        case disabled
        /// Nothing to send (or waiting for the next envelope).
        case idle
        /// A request is under way.
        case sending
        /// Waiting after a failed attempt (network error, 3xx, 408, 5xx) until the date.
        case backingOff(until: Date)
        /// Resting after `UploadOptions.maxAttempts` failures until the date.
        case coolingOff(until: Date)
        /// Every stored envelope is of a rate-limited category until the date.
        case rateLimited(until: Date)
        /// Holding what is stored, for the reason given; it waits on disk.
        case held(UploadHold)
        /// Stopped for good in this process.
        case stopped(UploadStop)
    }
}

extension TelemetryBuffer {
    /// Why the uploader stopped.
    public enum UploadStop: Sendable, Equatable {
        /// 401 or 403: the DSN's key is not valid. The buffer shut down and removed every stored file.
        case invalidKey(status: Int)
        /// 404: the project or its ingestion is disabled. The buffer takes no new items; stored files stay.
        case projectDisabled
    }
}

extension TelemetryBuffer {
    /// A snapshot of a buffer's queue: what is stored, what is buffered, what was dropped, and the upload.
    public struct QueueStats: Sendable, Equatable {
        /// Stored envelopes of one kind.
        public struct Stored: Sendable, Equatable {
            /// Envelope files.
            public var envelopes = 0
            /// Their bytes.
            public var bytes = 0
            /// Items in them (logs, spans or metrics).
            public var items = 0
        }

        /// Stored envelopes by kind: `log`, `span`, `trace_metric`, `client_report`.
        public var stored: [String: Stored]
        /// The age of the oldest stored envelope.
        public var oldestEnvelopeAge: TimeInterval?
        /// Items the buffer holds that are not yet envelopes.
        public var bufferedItems: Int
        /// Every drop since the buffer started, by `reason/category` (e.g. `buffer_overflow/log_item`).
        public var drops: [String: Int]
        /// What the uploader is doing.
        public var upload: UploadState
        /// Request body bytes the uploader sent since the buffer started, every attempt counted as sent
        /// (gzip-compressed where that was smaller).
        public var bytesSent = 0
        /// The bytes gzip saved on those requests (what they would have been, less what was sent).
        public var bytesSavedByGzip = 0
    }
}

/// `TelemetryBuffer.UploadState`: the module and its main class share a name, so the qualified form
/// names the class's member (as needed where another module has a `UploadState` too).
public typealias UploadState = TelemetryBuffer.UploadState

/// `TelemetryBuffer.UploadStop`: the module and its main class share a name, so the qualified form
/// names the class's member (as needed where another module has a `UploadStop` too).
public typealias UploadStop = TelemetryBuffer.UploadStop

/// `TelemetryBuffer.QueueStats`: the module and its main class share a name, so the qualified form
/// names the class's member (as needed where another module has a `QueueStats` too).
public typealias QueueStats = TelemetryBuffer.QueueStats
