import Foundation

/// What the device says of its power and heat, for device-aware sampling; `nil` where the platform
/// reports nothing (Linux, Windows, and Low Power Mode before macOS 12).
enum DeviceState {
    static var isLowPowerModeEnabled: Bool? {
        #if canImport(Darwin)
        if #available(macOS 12, iOS 9, tvOS 9, watchOS 2, *) { return ProcessInfo.processInfo.isLowPowerModeEnabled }
        return nil
        #else
        return nil
        #endif
    }

    static var thermalState: String? {
        #if canImport(Darwin)
        switch ProcessInfo.processInfo.thermalState {
        case .nominal: return "nominal"
        case .fair: return "fair"
        case .serious: return "serious"
        case .critical: return "critical"
        @unknown default: return nil
        }
        #else
        return nil
        #endif
    }
}
