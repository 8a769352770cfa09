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
        /// Files open when the device locks stay usable; new ones cannot be created while it is locked.
        case completeUnlessOpen
        /// Unreadable whenever the device is locked. Mapped files would then fault in `add`, so this
        /// requires `Options.Strategy.fileStreamCache` or `.flushAll`, whose writes simply fail (counted).
        case complete
    }
}

/// `TelemetryBuffer.FileProtection`.
public typealias FileProtection = TelemetryBuffer.FileProtection

extension FileSystem {
    /// Gives `folder` and everything in it now the protection class `protection`; files and folders
    /// created in it later take their folder's class. Nothing to do off Apple platforms.
    static func protect(_ folder: URL, _ protection: FileProtection) throws {
        #if os(iOS) || os(tvOS) || os(watchOS) || os(visionOS) || os(macOS)
        let type: FileProtectionType = switch protection {
        case .none: .none
        case .completeUntilFirstUserAuthentication: .completeUntilFirstUserAuthentication
        case .completeUnlessOpen: .completeUnlessOpen
        case .complete: .complete
        }
        let manager = FileManager.default
        try manager.setAttributes([.protectionKey: type], ofItemAtPath: folder.path)
        let contents = manager.enumerator(at: folder, includingPropertiesForKeys: [.isSymbolicLinkKey], options: [.skipsHiddenFiles])
        while let item = contents?.nextObject() as? URL {
            // A link is not followed: its target is not the buffer's.
            guard (try? item.resourceValues(forKeys: [.isSymbolicLinkKey]))?.isSymbolicLink != true else { continue }
            try? manager.setAttributes([.protectionKey: type], ofItemAtPath: item.path)
        }
        #endif
    }
}
