import Foundation

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
    /// Where each lane's records lie: lists trust their header's lanes and committed lengths, streamed
    /// files (one lane) their size.
    var records: [Range<Int>]

    /// Reads `name` in `folder`; `nil` if it does not exist or is not this version's (a link, a FIFO, another
    /// user's file, one larger than `FileSystem.maxFramedFileBytes`, one a later format version wrote: an
    /// app run again at an older version leaves that for the newer one), and throws if it exists but cannot
    /// be read (its items are then not to be taken as gone). A file with no valid header has no records. A
    /// list is read up to the end of its last lane with records: the rest of its fixed size is stale or
    /// zeros, and a list left by a clean exit holds nothing but its header.
    static func read(folder: String, name: String) throws -> FramedFile? {
        do {
            guard let bytes = try FileSystem.readFile(folder + "/" + name, prefix: RecordFraming.maxHeaderSize,
                                                      limit: FileSystem.maxFramedFileBytes, length: usefulLength),
                  !bytes.withUnsafeBytes(RecordFraming.isNewer(header:))
            else { return nil }
            return FramedFile(name: name, bytes: bytes)
        } catch is FileSystem.ForeignFile {
            return nil  // not the buffer's: left alone
        } catch is FileSystem.TooLarge {
            return nil  // larger than any the buffer writes: not the buffer's either
        }
    }

    /// The publication marker in the header of `name`, reading nothing else; `nil` for a file that is
    /// missing, not the buffer's or without a valid header. A later format version's file has one too: every
    /// version keeps the marker where it is (`BufferFormat.h`), so that an older one, which sets the file
    /// aside, can leave its publication alone. Throws if it exists but cannot be read.
    static func marker(folder: String, name: String) throws -> RecordFraming.Publication? {
        let header: [UInt8]?
        do {
            header = try FileSystem.readFile(folder + "/" + name, prefix: RecordFraming.headerSize,
                                             limit: FileSystem.maxFramedFileBytes, length: { _ in 0 })
        } catch is FileSystem.ForeignFile {
            return nil
        } catch is FileSystem.TooLarge {
            return nil
        }
        guard let header, header.count == RecordFraming.headerSize else { return nil }
        return header.withUnsafeBytes { raw in
            RecordFraming.kind(ofHeader: raw) == nil && !RecordFraming.isNewer(header: raw) ? nil : RecordFraming.Publication(header: raw)
        }
    }

    private init(name: String, bytes: [UInt8]) {
        self.name = name
        self.bytes = bytes
        let header = bytes.withUnsafeBytes { raw in
            RecordFraming.kind(ofHeader: raw).flatMap { kind in
                Self.isList(kind) ? RecordFraming.laneRecords(ofHeader: raw, available: raw.count).map { (kind, $0) }
                    : (kind, [RecordFraming.headerSize..<max(RecordFraming.headerSize, raw.count)])
            }
        }
        guard let header else {
            kind = nil
            created = 0
            publication = .idle
            records = []
            return
        }
        (kind, records) = header
        (created, publication) = bytes.withUnsafeBytes { raw in
            (UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: RecordFraming.createdOffset, as: UInt64.self)), RecordFraming.Publication(header: raw))
        }
    }

    /// Whether files of `kind` have a fixed size and say in their header how much of it holds records.
    private static func isList(_ kind: RecordFraming.Kind) -> Bool { kind == .crashSafeList || kind == .memoryList }

    /// How many bytes of a file that starts with `header` (up to `maxHeaderSize` bytes of it) are worth
    /// reading: a list's header and its lanes' committed records (an empty lane, however far it starts,
    /// adds nothing), any other file whole.
    private static func usefulLength(header: UnsafeRawBufferPointer) -> Int {
        guard let kind = RecordFraming.kind(ofHeader: header), isList(kind) else { return .max }
        // A corrupt length, up to UInt64.max, reads the file to its end; so does a lane table that does not
        // add up, which is then counted whole as discarded, as any header that does not read.
        guard let lanes = RecordFraming.laneRecords(ofHeader: header, available: .max) else { return .max }
        return lanes.filter { !$0.isEmpty }.map(\.upperBound).max() ?? lanes[0].lowerBound
    }

    /// Calls `body` with the records of each lane, read to the file's end at most.
    func withRecords<T>(_ body: (RecordLanes) throws -> T) rethrows -> T {
        try bytes.withUnsafeBytes { raw in try body(RecordLanes(records.map { UnsafeRawBufferPointer(rebasing: raw[$0]) })) }
    }

    /// Writes a complete framed file atomically and durably.
    static func write(records: [UInt8], kind: RecordFraming.Kind, name: String, in folder: BufferFolder) throws {
        var bytes = [UInt8](repeating: 0, count: RecordFraming.headerSize)
        bytes.withUnsafeMutableBytes {
            RecordFraming.writeHeader(
                kind: kind, createdMicros: RecordFraming.createdNow(), to: $0.baseAddress!)
        }
        try folder.writeAtomically(bytes + records, name: name)
    }

    /// Overwrites the publication marker of `name` in place.
    static func mark(_ publication: RecordFraming.Publication, name: String, in folder: BufferFolder) throws {
        guard !folder.isReleased else { throw TelemetryBufferError.folderInUse(path: folder.path) }
        let path = folder.path + "/" + name
        let fd = try FileSystem.openFile(path, O_WRONLY)
        defer { fd.close() }
        try publication.bytes.withUnsafeBytes { try fd.write($0, at: RecordFraming.publicationOffset, path: path) }
    }
}
