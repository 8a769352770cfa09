import Foundation

/// Whether the device is in Low Power Mode (Apple platforms: iOS 9+, macOS 12+, watchOS 9+), when the
/// buffer spaces out what costs battery: uploads and the IO caches' syncs. Never elsewhere.
enum LowPowerMode {
    static var isEnabled: Bool {
        #if canImport(Darwin)
        if #available(macOS 12.0, watchOS 9.0, *) { return ProcessInfo.processInfo.isLowPowerModeEnabled }
        #endif
        return false
    }
}
