extension TelemetryBuffer {
    /// What start-up recovery found in the buffer folder and turned into envelopes.
    public struct RecoveryReport: Sendable, Equatable {
        /// Items recovered from buffer files, each published once.
        public var items = 0
        /// Copies of those items found in more than one file (a list and its IO cache), not published again.
        public var duplicates = 0
        /// Envelopes staged for `envelopes/`, including any an interrupted flush or recovery left.
        public var envelopes = 0
        /// Bytes of buffer files that were not valid records (a torn tail, a file without a header), skipped.
        public var discardedBytes = 0
        /// Items of a signal this version does not know (a later version wrote them, and the app runs an
        /// older one again): neither published nor taken for damage, but kept in the file `kept` for a
        /// version that knows them.
        public var keptForALaterVersion = 0
        /// The buffer files read.
        public var files: [String] = []
        /// Claimed files that are not the buffer's after all (a link, a FIFO, another user's file, one larger
        /// than any the buffer writes), or that a later version of it wrote: left where they are, under their
        /// claimed names.
        public var setAside: [String] = []
    }
}

/// `TelemetryBuffer.RecoveryReport`: the module and its main class share a name, so the qualified form
/// names the class's member (as needed where another module has a `RecoveryReport` too).
public typealias RecoveryReport = TelemetryBuffer.RecoveryReport
