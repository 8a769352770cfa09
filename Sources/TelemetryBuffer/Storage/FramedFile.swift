import Foundation
#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A buffer file read back whole: a crash-safe list, an IO cache, a stream cache, a recovered file or a
/// detected-termination file. All share `RecordFraming`.
struct FramedFile {
    /// The file's name in its folder.
    var name: String
    var kind: RecordFraming.Kind?
    var created: UInt64
    var publication: RecordFraming.Publication
    /// Header and records as read.
    var bytes: [UInt8]
    /// Where the records start and end: lists trust their committed length, streamed files their size.
    var records: Range<Int>

    /// Reads `name` in `folder`; `nil` if it does not exist. A file with no valid header has no records.
    init?(folder: String, name: String) {
        guard let bytes = FileSystem.contents(of: folder + "/" + name) else { return nil }
        self.name = name
        self.bytes = bytes
        let header = bytes.withUnsafeBytes { RecordFraming.kind(ofHeader: $0) }
        kind = header
        guard header != nil else {
            created = 0
            publication = .idle
            records = 0..<0
            return
        }
        (created, publication, records) = bytes.withUnsafeBytes { raw in
            let created = UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
            let publication = RecordFraming.Publication(header: raw)
            var end = raw.count
            if header == .crashSafeList || header == .memoryList {
                end = min(raw.count, RecordFraming.headerSize + Int(clamping: RecordFraming.committedLength(ofHeader: raw)))
            }
            return (created, publication, RecordFraming.headerSize..<max(RecordFraming.headerSize, end))
        }
    }

    /// Calls `body` with the longest valid prefix of the records; returns the scan.
    func withRecords<T>(_ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T {
        try bytes.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[records])) }
    }

    /// Writes a complete framed file atomically and durably.
    static func write(records: [UInt8], kind: RecordFraming.Kind, name: String, in folder: BufferFolder) throws {
        var bytes = [UInt8](repeating: 0, count: RecordFraming.headerSize)
        bytes.withUnsafeMutableBytes {
            RecordFraming.writeHeader(
                kind: kind, createdMicros: UInt64(Date().timeIntervalSince1970 * 1_000_000), to: $0.baseAddress!)
        }
        try folder.writeAtomically(bytes + records, name: name)
    }

    /// Overwrites the publication marker of `name` in place.
    static func mark(_ publication: RecordFraming.Publication, name: String, in folder: BufferFolder) throws {
        let path = folder.path + "/" + name
        let fd = open(path, O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { throw FileSystem.error("open", path) }
        defer { close(fd) }
        let written = publication.bytes.withUnsafeBytes {
            pwrite(fd, $0.baseAddress, $0.count, off_t(RecordFraming.publicationOffset))
        }
        guard written == RecordFraming.Publication.idle.bytes.count else { throw FileSystem.error("pwrite", path) }
    }
}
