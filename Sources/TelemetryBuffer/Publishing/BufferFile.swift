/// Every file a buffer keeps in its `telemetry-buffer/` folder, by role: the one registry of their names.
/// A name that does not parse as one of these is not the buffer's and is left alone.
enum BufferFile: Hashable, Sendable {
    /// `crash-safe-list-N` (N = 1, 2): a DoubleRotatingBuffer list, mapped.
    case crashSafeList(Int)
    /// `async-io-cache-N`: the copy of list N written on the IO queue.
    case asyncIOCache(Int)
    /// `cache`: FileStreamCache's file the adds write to.
    case streamCache
    /// `flushing`: FileStreamCache's previous `cache`, being published.
    case streamFlushing
    /// `recovered`, then `recovered-N` (N ≥ 1): what start-up recovery gathered, being published, in parts
    /// no larger than a framed file is read back at (`FileSystem.maxFramedFileBytes`).
    case recovered(Int)
    /// `kept`, then `kept-N` (N ≥ 1): records of signals this build does not know (a later version's), which
    /// recovery keeps for that version rather than publish or drop, in parts no larger than a framed file
    /// is read back at.
    case kept(Int)
    /// `detected-termination-N`: a region FlushAll's crash handler wrote out.
    case detectedTermination(Int)
    /// `envelope-N` (N < 2^32): an envelope staged under a publication marker.
    case stagedEnvelope(UInt64)
    /// `awaiting-sync-N`: a retired IO cache, kept until its list's envelopes are synced.
    case awaitingSync(Int)
    /// `spare-N`: an emptied IO cache, kept to take the next one's place.
    case spare(Int)
    /// `boot`: the boot the files of this buffer's process were written in.
    case boot
    /// `client-report`: drop counts a buffer could not send, for the next one (see `SavedClientReport`).
    case clientReport
    /// `recovering-G-<name>`: a file of an earlier process, claimed by start-up recovery `G` (< 2^31).
    indirect case claimed(generation: Int, BufferFile)

    /// The file's name in the folder.
    var name: String {
        switch self {
        case .crashSafeList(let number): "crash-safe-list-\(number)"
        case .asyncIOCache(let number): "async-io-cache-\(number)"
        case .streamCache: "cache"
        case .streamFlushing: "flushing"
        case .recovered(let part): part == 0 ? "recovered" : "recovered-\(part)"
        case .detectedTermination(let number): "detected-termination-\(number)"
        case .stagedEnvelope(let index): "envelope-\(index)"
        case .awaitingSync(let number): "awaiting-sync-\(number)"
        case .spare(let number): "spare-\(number)"
        case .boot: "boot"
        case .clientReport: "client-report"
        case .kept(let part): part == 0 ? "kept" : "kept-\(part)"
        case .claimed(let generation, let original): "recovering-\(generation)-\(original.name)"
        }
    }

    /// The role of a file named `name`, or `nil` for a name the buffer never writes (numbers past
    /// `largestNumber` included).
    init?(name: String) {
        func number(after prefix: String) -> Int? {
            guard name.hasPrefix(prefix), let number = Int(name.dropFirst(prefix.count)),
                  (0...Self.largestNumber).contains(number) else { return nil }
            return number
        }
        switch name {
        case "cache": self = .streamCache
        case "flushing": self = .streamFlushing
        case "recovered": self = .recovered(0)
        case "boot": self = .boot
        case "client-report": self = .clientReport
        case "kept": self = .kept(0)
        default:
            if let number = number(after: "crash-safe-list-") { self = .crashSafeList(number) }
            else if let number = number(after: "async-io-cache-") { self = .asyncIOCache(number) }
            else if let number = number(after: "detected-termination-") { self = .detectedTermination(number) }
            else if let number = number(after: "awaiting-sync-") { self = .awaitingSync(number) }
            else if let number = number(after: "spare-") { self = .spare(number) }
            else if let part = number(after: "recovered-") { self = .recovered(part) }
            else if let part = number(after: "kept-") { self = .kept(part) }
            else if name.hasPrefix("envelope-"), let index = UInt32(name.dropFirst("envelope-".count)) {
                self = .stagedEnvelope(UInt64(index))
            } else if name.hasPrefix("recovering-") {
                let rest = name.dropFirst("recovering-".count)
                guard let dash = rest.firstIndex(of: "-"), let generation = Int32(rest[..<dash]),
                      let original = BufferFile(name: String(rest[rest.index(after: dash)...]))
                else { return nil }
                self = .claimed(generation: Int(generation), original)
            } else {
                return nil
            }
        }
        // Only the spelling the buffer writes ("crash-safe-list-+1" is someone else's file).
        guard self.name == name else { return nil }
    }

    /// The largest number a numbered file's name may carry (`spare-N`, `detected-termination-N`, …): past
    /// it, a name is not the buffer's. (One planted near `Int.max` trapped when the next number was taken.)
    static let largestNumber = 1 << 30

    /// `count` numbers no name in `taken` carries: those after the largest, or, where they would pass
    /// `largestNumber` (a name written past it would read back as a stranger's), the smallest free ones.
    static func freshNumbers(_ count: Int, taken: Set<Int>) -> [Int] {
        let first = (taken.max() ?? -1) + 1
        if first + count - 1 <= largestNumber { return Array(first..<first + count) }
        return Array((0...largestNumber).lazy.filter { !taken.contains($0) }.prefix(count))
    }

    /// The index of a staged envelope.
    var stagedIndex: UInt64? {
        if case .stagedEnvelope(let index) = self { index } else { nil }
    }

    /// The generation and original role of a claimed file.
    var claim: (generation: Int, original: BufferFile)? {
        if case .claimed(let generation, let original) = self { (generation, original) } else { nil }
    }

    /// Whether it holds records that start-up recovery claims and reads.
    var holdsRecords: Bool {
        switch self {
        case .crashSafeList, .asyncIOCache, .streamCache, .streamFlushing, .recovered, .detectedTermination,
             .awaitingSync, .kept:
            true
        case .stagedEnvelope, .spare, .boot, .clientReport, .claimed:
            false
        }
    }
}
