import Foundation

/// Which boot of the machine this process runs in.
///
/// Files in the page cache outlive the process that wrote them but not the machine: a publication whose
/// envelopes are not yet `fsync`ed is safe from a crash, not from power loss. Recovery trusts such a
/// publication only when it was made in the same boot (see `Recovery`).
enum BootSession {
    /// The kernel's ID of this boot (a UUID string), or `nil` where it cannot be read; then no earlier
    /// process counts as the same boot, which costs duplicates after a crash, never items.
    static let current: String? = {
        #if canImport(Darwin)
        // Only reachable by name; a 36-character UUID string.
        var text = [CChar](repeating: 0, count: 64)
        var size = text.count
        guard sysctlbyname("kern.bootsessionuuid", &text, &size, nil, 0) == 0 else { return nil }
        let id = String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        #else
        // A /proc file reports size 0: read what is there.
        guard let fd = try? FileDescriptor.currentDirectory.open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC) else {
            return nil
        }
        defer { fd.close() }
        var bytes = [UInt8](repeating: 0, count: 64)
        guard let count = try? bytes.withUnsafeMutableBytes({ try fd.read(into: $0, path: "boot_id") }) else { return nil }
        guard count > 0, let text = String(validating: bytes[..<count], as: UTF8.self) else { return nil }
        let id = text.filter { !$0.isWhitespace }  // it ends with a newline
        #endif
        return id.isEmpty ? nil : id
    }()
}
