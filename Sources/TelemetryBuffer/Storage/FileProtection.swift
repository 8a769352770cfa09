import Foundation

extension TelemetryBuffer {
    /// The data protection class of the buffer's files on Apple platforms (`Options.fileProtection`): when
    /// they can be read while the device is locked. Elsewhere it does nothing.
    public enum FileProtection: String, Sendable, CaseIterable {
        /// No protection.
        case none
        /// Readable from the first unlock after a restart on (the default): a locked device can still take
        /// and send items.
        case completeUntilFirstUserAuthentication
        /// Files can be created while the device is locked and stay usable while open; a closed one cannot
        /// be opened again until the device is unlocked.
        case completeUnlessOpen
        /// Unreadable whenever the device is locked. Mapped files would then fault in `add`, so this
        /// requires `Options.Strategy.fileStreamCache` or `.flushAll`, whose writes simply fail (counted).
        case complete
    }
}

/// `TelemetryBuffer.FileProtection`.
public typealias FileProtection = TelemetryBuffer.FileProtection

extension FileSystem {
    /// Gives the folder `folder` the protection class `protection`, which files and folders created in it
    /// take (files already there keep theirs). A volume without data protection, or a folder that is
    /// missing, is left as it is. Nothing to do off Apple platforms.
    static func protect(_ folder: URL, _ protection: FileProtection) {
        #if os(iOS) || os(tvOS) || os(watchOS) || os(visionOS) || os(macOS)
        let type: FileProtectionType = switch protection {
        case .none: .none
        case .completeUntilFirstUserAuthentication: .completeUntilFirstUserAuthentication
        case .completeUnlessOpen: .completeUnlessOpen
        case .complete: .complete
        }
        try? FileManager.default.setAttributes([.protectionKey: type], ofItemAtPath: folder.path)
        #endif
    }
}
