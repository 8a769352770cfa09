extension TelemetryBuffer {
    /// On which networks the uploader sends (``Options/uploadPolicy``). Whatever it is, nothing is dropped
    /// for it: envelopes wait on disk, within ``Options/maxCachedEnvelopes`` and ``Options/maxCacheBytes``.
    public enum UploadPolicy: String, Sendable, CaseIterable {
        /// On any network.
        case always
        /// Only on a network that is neither expensive (cellular, a personal hotspot) nor constrained (Low
        /// Data Mode), as the system reports it. Where it reports nothing (Linux), every network counts as
        /// unmetered.
        case unmeteredOnly
    }

    /// Why the uploader holds what is stored (`UploadState.held`).
    public enum UploadHold: Sendable, Hashable {
        /// Data collection is `pending` or `revoked` (see `DataCollection`).
        case consent
        /// `removeAllData()` is running.
        case dataRemoval
        /// `UploadPolicy.unmeteredOnly`, and the network is metered.
        case meteredNetwork
    }
}

/// `TelemetryBuffer.UploadPolicy`.
public typealias UploadPolicy = TelemetryBuffer.UploadPolicy
/// `TelemetryBuffer.UploadHold`.
public typealias UploadHold = TelemetryBuffer.UploadHold
