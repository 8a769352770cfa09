import CTelemetrySignals

/// gzip for request bodies, through the system's zlib loaded at run time (`tb_gzip`): no package
/// dependency, and a system without zlib sends bodies as they are.
enum Gzip {
    /// Bodies below this many bytes go as they are: the gzip header and trailer (18 bytes) and the
    /// server's work would eat most of what a small body saves.
    static let threshold = 1024

    /// `bytes` as one gzip member, or `nil` when zlib is missing, the body is below `threshold`, or the
    /// result would not be smaller.
    static func compress(_ bytes: [UInt8]) -> [UInt8]? {
        guard bytes.count >= threshold, !Failpoint.zlibMissing.isArmed else { return nil }
        var output = [UInt8](repeating: 0, count: bytes.count)
        let written = bytes.withUnsafeBufferPointer { input in
            output.withUnsafeMutableBufferPointer { tb_gzip(input.baseAddress, input.count, $0.baseAddress, $0.count) }
        }
        guard written > 0, written < bytes.count else { return nil }
        output.removeLast(output.count - written)
        return output
    }
}
