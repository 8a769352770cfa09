import Foundation

/// What the protocol asks logs from mobile and desktop apps to carry about where they run (`os.name`,
/// `os.version`, `device.brand`, `device.model`, `device.family`) and spans to carry (`os.name`), read
/// once per process: the hot path copies them, pre-encoded with the other default attributes.
///
/// On Apple platforms every attribute is sent: the model from `sysctl` (`hw.machine`, on a Mac `hw.model`;
/// a simulator reports the device it simulates), the family its leading letters (`iPhone`, `iPad`,
/// `Mac`…). On Linux there is no device to name: only `os.name` (`Linux`) and `os.version` (the kernel
/// release from `uname`).
enum DeviceContext {
    /// The attributes for every log.
    static let logAttributes: Attributes = {
        var attributes: Attributes = ["os.name": .string(osName)]
        if let version = osVersion { attributes["os.version"] = .string(version) }
        #if canImport(Darwin)
        attributes["device.brand"] = "Apple"
        if let model {
            attributes["device.model"] = .string(model)
            let family = String(model.prefix { $0.isLetter })
            if !family.isEmpty { attributes["device.family"] = .string(family) }
        }
        #endif
        return attributes
    }()

    /// The attributes for every span.
    static let spanAttributes: Attributes = ["os.name": .string(osName)]

    private static var osName: String {
        #if os(iOS)
        "iOS"
        #elseif os(macOS)
        "macOS"
        #elseif os(tvOS)
        "tvOS"
        #elseif os(watchOS)
        "watchOS"
        #elseif os(visionOS)
        "visionOS"
        #elseif os(Linux)
        "Linux"
        #else
        "unknown"
        #endif
    }

    private static var osVersion: String? {
        #if canImport(Darwin)
        let version = ProcessInfo.processInfo.operatingSystemVersion
        return "\(version.majorVersion).\(version.minorVersion).\(version.patchVersion)"
        #else
        var names = utsname()
        guard uname(&names) == 0 else { return nil }
        return withUnsafeBytes(of: &names.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        #endif
    }

    #if canImport(Darwin)
    /// The hardware model: `iPhone15,2`, `iPad13,1`, `Mac14,2`…
    private static var model: String? {
        if let simulated = ProcessInfo.processInfo.environment["SIMULATOR_MODEL_IDENTIFIER"] { return simulated }
        #if os(macOS)
        let name = "hw.model"
        #else
        let name = "hw.machine"
        #endif
        var size = 0
        guard sysctlbyname(name, nil, &size, nil, 0) == 0, size > 0 else { return nil }
        var bytes = [CChar](repeating: 0, count: size)
        guard sysctlbyname(name, &bytes, &size, nil, 0) == 0 else { return nil }
        return String(cString: bytes)
    }
    #endif
}
