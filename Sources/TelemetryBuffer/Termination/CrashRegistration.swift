import CTelemetrySignals
import Foundation

/// What the crash handler does for one buffer.
struct CrashPlan {
    enum Action {
        /// `fsync` these files of mapped regions (DoubleRotatingBuffer's lists).
        case syncFiles(descriptors: [Int32])
        /// Claim each region and write it verbatim as the file of the same index in `names`, in
        /// `directory`, for start-up recovery (FlushAll); `appending` is the regions' append-under-way word.
        case writeRegions(names: [String], appending: UnsafeMutablePointer<UInt>?)
    }

    var regions: [RecordRegion]
    var directory: String
    var action: Action
}

/// One buffer's entry in the process-wide crash handler (the C target `CTelemetrySignals`).
///
/// Everything the handler needs is prepared here, in advance: an open folder descriptor, the regions'
/// addresses and sizes, and the names of the files to write them to, in memory that lives until
/// `unregister`. The handler is installed while at least one registration lives; when the last one goes,
/// the previous signal actions are restored exactly (unless a reporter was installed over ours: it stays, and
/// ours in its chain).
///
/// `@unchecked Sendable`: set once in `init`; the names' memory (raw) and the regions are only read, by the
/// handler, until `unregister` frees the one and lets go of the other.
final class CrashRegistration: @unchecked Sendable {
    private static let live = Locked(0)
    private let slot: Int32
    private let directoryFD: FileDescriptor
    private let memory: [UnsafeMutableRawPointer]
    private let regions: [RecordRegion]  // kept alive while the handler may read them
    private let registered = Locked(true)

    /// Registers `plan` and installs the handler if needed; throws if the folder cannot be opened or all
    /// slots are taken. The regions (and their files) must stay open while registered.
    init(_ plan: CrashPlan, handleSIGTERM: Bool) throws {
        directoryFD = try FileSystem.openDirectory(URL(fileURLWithPath: plan.directory, isDirectory: true))
        regions = plan.regions
        var memory: [UnsafeMutableRawPointer] = []
        func copy(_ bytes: [UInt8]) -> (UnsafePointer<CChar>, Int) {
            let pointer = UnsafeMutableRawPointer.allocate(byteCount: bytes.count + 1, alignment: 1)
            bytes.withUnsafeBytes { pointer.copyMemory(from: $0.baseAddress!, byteCount: bytes.count) }
            pointer.storeBytes(of: 0, toByteOffset: bytes.count, as: UInt8.self)
            memory.append(pointer)
            return (UnsafePointer(pointer.assumingMemoryBound(to: CChar.self)), bytes.count)
        }

        var target = tb_crash_target()
        target.directory_fd = directoryFD.rawValue
        target.file_fds = (-1, -1)
        let region = { (index: Int) -> (UnsafeMutablePointer<UInt8>?, Int) in
            guard index < plan.regions.count else { return (nil, 0) }
            let region = plan.regions[index]
            return (region.base.assumingMemoryBound(to: UInt8.self), region.size)
        }
        (target.regions.0, target.region_sizes.0) = region(0)
        (target.regions.1, target.region_sizes.1) = region(1)
        switch plan.action {
        case .syncFiles(let descriptors):
            target.mode = TB_CRASH_SYNC_FILES
            target.file_fds = (descriptors.first ?? -1, descriptors.count > 1 ? descriptors[1] : -1)
        case .writeRegions(let names, let appending):
            target.mode = TB_CRASH_WRITE_REGIONS
            let pointers = names.prefix(2).map { copy(Array($0.utf8)).0 }
            target.names.0 = pointers.first
            target.names.1 = pointers.count > 1 ? pointers[1] : nil
            target.appending = appending
        }
        self.memory = memory

        Failpoint.crashHandler.armHandlerPause()
        Failpoint.crashHandlerOwned.armHandlerPause()
        let signals = TB_CRASH_SIGNALS_FATAL | (handleSIGTERM ? TB_CRASH_SIGNALS_TERM : 0)
        let slot: Int32 = Self.live.withLock { live in
            let slot = tb_crash_register(&target)
            guard slot >= 0 else { return slot }
            let status = tb_crash_install(signals)
            if status != 0 {
                tb_crash_unregister(slot)
                return -status - 1
            }
            live += 1
            return slot
        }
        guard slot >= 0 else {
            memory.forEach { $0.deallocate() }
            directoryFD.close()
            if slot == -1 { throw TelemetryBufferError.crashHandlerUnavailable(reason: "all \(TB_CRASH_MAX_TARGETS) slots are taken") }
            throw TelemetryBufferError.crashHandlerUnavailable(reason: "sigaction failed: \(FileSystem.errnoText(-slot - 1))")
        }
        self.slot = slot
    }

    /// Waits while a crash handler that returned from its signal is being settled (a second or so; see
    /// `tb_crash_settle`). Returns whether no handler holds a claim any more: `false` while one writes or
    /// hands the signal on (the process is ending, or the caller runs inside the previous handler), which
    /// is not waited for. Normal code only.
    static func awaitSettled() -> Bool {
        while true {
            switch tb_crash_settle() {
            case 0: return true
            case 1: usleep(10_000)
            default: return false
            }
        }
    }

    /// Removes the entry, waiting for a handler that is reading it on another thread; the last one restores
    /// the previous signal actions. Later calls do nothing.
    func unregister() {
        guard registered.withLock({ value in defer { value = false }; return value }) else { return }
        Self.live.withLock { live in
            tb_crash_unregister(slot)
            live -= 1
            if live == 0 { tb_crash_uninstall() }
        }
    }

    deinit {
        unregister()
        memory.forEach { $0.deallocate() }
        directoryFD.close()
    }
}
