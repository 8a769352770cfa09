import Foundation

extension TelemetryBuffer {
    /// The data protection class of the buffer's folders and files (``Options/fileProtection``): when they
    /// can be read while the device is locked. It applies on iOS, iPadOS, Mac Catalyst, tvOS, visionOS and
    /// watchOS, and is set on the folders before any file is created in them (and on files an earlier
    /// version left); elsewhere it does nothing.
    public enum FileProtection: String, Sendable, CaseIterable {
        /// No protection.
        case none
        /// Readable from the first unlock after a restart on (the default): a locked device can still take
        /// and send items.
        case completeUntilFirstUserAuthentication
        /// Files can be created while the device is locked and stay usable while open; a closed one cannot
        /// be opened again until the device is unlocked. The DoubleRotatingBuffer reopens its files at each
        /// forward, so this requires `Options.Strategy.fileStreamCache` or `.flushAll`, whose reads and
        /// writes then simply fail while locked (items refused once full, counted) and go on once unlocked.
        case completeUnlessOpen
        /// Unreadable whenever the device is locked. Mapped files would then fault in `add`, so this
        /// requires `Options.Strategy.fileStreamCache` or `.flushAll`, whose writes simply fail (counted).
        case complete
    }
}

/// `TelemetryBuffer.FileProtection`.
public typealias FileProtection = TelemetryBuffer.FileProtection

extension FileSystem {
    /// Gives `item` the protection class `protection`: a folder, whose class the files and folders then
    /// created in it take, or a file. Nothing to do but on iOS, iPadOS, Mac Catalyst, tvOS, visionOS and
    /// watchOS, where data protection applies to an app's files.
    static func protect(_ item: URL, _ protection: FileProtection) throws {
        #if os(iOS) || os(tvOS) || os(watchOS) || os(visionOS)
        let type: FileProtectionType = switch protection {
        case .none: .none
        case .completeUntilFirstUserAuthentication: .completeUntilFirstUserAuthentication
        case .completeUnlessOpen: .completeUnlessOpen
        case .complete: .complete
        }
        try FileManager.default.setAttributes([.protectionKey: type], ofItemAtPath: item.path)
        #endif
    }

    /// Keeps `folder` out of the device's backups (iCloud, a computer's): telemetry has no business there.
    /// Nothing to do off Apple platforms.
    static func excludeFromBackup(_ folder: URL) throws {
        #if canImport(Darwin)
        var values = URLResourceValues()
        values.isExcludedFromBackup = true
        var url = folder
        try url.setResourceValues(values)
        #endif
    }
}

/// The buffer's folder cannot be opened because the device's protected data is not available: it has not
/// been unlocked since it started (or, with `.complete` and `.completeUnlessOpen`, it is locked).
struct ProtectedDataUnavailable: Error, CustomStringConvertible {
    let path: String
    var description: String { "the files in '\(path)' cannot be opened until the device is unlocked" }

    /// Whether `error`, thrown while opening the folder's files, says protected data is unavailable:
    /// where data protection applies, a refusal (`EPERM`, `EACCES`) of files given a class. Elsewhere
    /// only this error itself (tests) says so, so that a folder without permissions still fails at once.
    static func isCause(of error: any Error, protection: FileProtection) -> Bool {
        if error is ProtectedDataUnavailable { return true }
        // Not on Mac Catalyst (`os(iOS)` there too): a Mac app runs after its user logged in, so a refusal
        // is a real one (a sandbox, permissions), which must fail at once rather than wait for an unlock.
        #if (os(iOS) && !targetEnvironment(macCatalyst)) || os(tvOS) || os(watchOS) || os(visionOS)
        guard protection != .none else { return false }
        switch error {
        case let error as TelemetryBufferError where error.code == .fileSystem:
            return error.errno == EPERM || error.errno == EACCES
        case let error as CocoaError:
            return error.code == .fileReadNoPermission || error.code == .fileWriteNoPermission
        default:
            let error = error as NSError
            return error.domain == NSPOSIXErrorDomain && (error.code == Int(EPERM) || error.code == Int(EACCES))
        }
        #else
        return false
        #endif
    }
}
