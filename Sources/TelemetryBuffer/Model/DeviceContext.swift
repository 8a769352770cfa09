import Foundation

/// What the protocol asks logs from mobile and desktop apps to carry about where they run (`os.name`,
/// `os.version`, `device.brand`, `device.model`, `device.family`) and spans to carry (`os.name`), read
/// once per process: the hot path copies them, pre-encoded with the other default attributes.
///
/// On Apple platforms every attribute is sent: the model from `sysctl` (`hw.machine` where it names the
/// device, as on an iPhone, else `hw.model`, as on a Mac; a simulator reports the device it simulates),
/// the family from the model (`iPhone`, `iPad`, `Mac`, `Apple TV`, `Apple Watch`, `Apple Vision`). Mac
/// Catalyst apps report macOS. On Linux there is no device to name: only `os.name` (`Linux`) and
/// `os.version` (the kernel release from `uname`).
enum DeviceContext {
    /// The attributes for every log.
    static let logAttributes: Attributes = {
        var attributes: Attributes = ["os.name": .string(osName)]
        if let version = osVersion { attributes["os.version"] = .string(version) }
        #if canImport(Darwin)
        attributes["device.brand"] = "Apple"
        if let model {
            attributes["device.model"] = .string(model)
            if let family = family(of: model) { attributes["device.family"] = .string(family) }
        }
        #endif
        return attributes
    }()

    /// The attributes for every span.
    static let spanAttributes: Attributes = ["os.name": .string(osName)]

    private static var osName: String {
        #if targetEnvironment(macCatalyst)
        "macOS"
        #elseif os(iOS)
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
        #elseif os(Android)
        "Android"
        #elseif os(Windows)
        "Windows"
        #elseif os(FreeBSD)
        "FreeBSD"
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
    /// The hardware model: `iPhone15,2`, `iPad13,1`, `Mac14,2`, `MacBookPro16,1`… Device identifiers have a
    /// comma; `hw.machine` on a Mac (and for an iOS app on one) is the CPU's name instead.
    private static var model: String? {
        if let simulated = ProcessInfo.processInfo.environment["SIMULATOR_MODEL_IDENTIFIER"] { return simulated }
        if let machine = sysctl("hw.machine"), machine.contains(",") { return machine }
        return sysctl("hw.model")
    }

    /// The family a model identifier belongs to, if it is one of Apple's.
    private static func family(of model: String) -> String? {
        let families = [("iPhone", "iPhone"), ("iPad", "iPad"), ("iPod", "iPod"), ("AppleTV", "Apple TV"),
                        ("Watch", "Apple Watch"), ("RealityDevice", "Apple Vision")]
        if let family = families.first(where: { model.hasPrefix($0.0) }) { return family.1 }
        return model.contains("Mac") ? "Mac" : nil
    }

    private static func sysctl(_ name: String) -> String? {
        var size = 0
        guard sysctlbyname(name, nil, &size, nil, 0) == 0, size > 0 else { return nil }
        var bytes = [UInt8](repeating: 0, count: size)
        guard sysctlbyname(name, &bytes, &size, nil, 0) == 0 else { return nil }
        return String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
    }
    #endif
}
