import CTelemetrySignals
import Foundation

/// Named steps of publishing and recovery where the kill and crash tests stop a process, or make a step fail.
///
/// In debug builds only (`TELEMETRY_BUFFER_FAILPOINTS`, see Package.swift),
/// `TELEMETRY_BUFFER_FAILPOINT=<name>[:<action>][,<name>[:<action>]…]` arms steps. The first time a thread
/// reaches one (`hit()`) the process is killed with SIGKILL (no action, or `kill`), the thread crashes with a real
/// null-pointer write (`segv`: the crash handler runs in the middle of the step), or the thread stops there
/// for good after creating the file named by `TELEMETRY_BUFFER_FAILPOINT_HELD` (`hold`: another thread
/// can crash while the step is held), or the thread goes on after half a second (`pause`: a slow step, every
/// time it is reached). `failIfArmed` makes its step fail each time instead. Without the
/// variable, each step costs one check of an empty dictionary. They are on background paths, and in
/// `add` only after a failed write (FileStreamCache), never on its way to success.
enum Failpoint: String, CaseIterable, Sendable {
    /// A buffer file (a list, `flushing`, `recovered`) is marked `publishing`; no envelope is staged yet.
    case publishMarked = "publish.marked"
    /// Its envelopes are staged; the marker still says `publishing`.
    case publishStaged = "publish.staged"
    /// The marker says `captured`; the file still holds the items.
    case publishCaptured = "publish.captured"
    /// The file is emptied; the staged envelopes are not moved yet.
    case publishEmptied = "publish.emptied"
    /// A DoubleRotatingBuffer's forward has returned; its envelopes are not synced yet and its IO cache, if it
    /// copied any of the list, waits as `awaiting-sync-x`.
    case publishUnsynced = "publish.unsynced"
    /// One staged envelope of several has moved into `envelopes/`.
    case moveOne = "move.one"
    /// Recovery wrote `recovered` (and its further parts); the files it came from are still there.
    case recoveryWritten = "recovery.written"
    /// Recovery removed those files; `recovered` is not published yet (it is published with the
    /// `publish.*` steps).
    case recoveryRemoved = "recovery.removed"
    /// Recovery published one part of what it gathered; the next may follow (all are removed after the last).
    case recoveryPartDone = "recovery.part-done"
    /// Start-up claimed the files an earlier process left (renamed them for this generation); nothing is
    /// read yet.
    case recoveryClaimed = "recovery.claimed"

    /// Recovery published a list straight from its file (or removed it, when empty or already published);
    /// another list may follow (the path taken after a process death, see `Recovery`).
    case recoveryListDone = "recovery.list-done"

    /// Recovery moved a list it is about to publish from its file (and the list's cache) into a generation
    /// of its own; the list's new marker is not written yet.
    case recoveryListMoved = "recovery.list-moved"

    /// Recovery published the lists a killed process left and their envelopes moved on; the envelopes are
    /// not synced yet, and the lists and their caches stay until they are (see `RecoverySettlement`).
    case recoveryUnsynced = "recovery.unsynced"

    /// Start-up recovery fails at once (as when a claimed file cannot be read): its files stay claimed.
    case recoveryFails = "recovery.fails"

    /// Recovery cannot remove a list it published (as when `unlink` fails with an I/O error): the list
    /// stays, claimed, for the next start (`failIfArmed` only).
    case recoveryKeepsFiles = "recovery.keeps-files"

    /// The crash handler has taken a buffer's registration (and claimed its regions) and not read them yet. Only `hold`, and it is a
    /// pause: the handler creates the held file, waits 500 ms, then goes on (armed when a buffer registers).
    case crashHandler = "crash.handler"

    /// The crash handler has been taken by a crashing thread, which has not begun to write (another
    /// thread crashing now must wait for it). Only `hold`, a pause as `crashHandler`'s.
    case crashHandlerOwned = "crash.handler-owned"

    /// Every file system is taken for one whose mapped pages may need new space (btrfs, overlayfs): the
    /// DoubleRotatingBuffer keeps its lists in memory (a condition, whatever the action).
    case mappingFaults = "mapping.faults"

    /// FileStreamCache cannot create the next `cache` when it rotates (as with no descriptor left).
    case streamCacheFails = "stream.cache-fails"

    /// FileStreamCache cannot cut a partial record off `cache` after a failed append (as `ftruncate`
    /// failing with an I/O error on a network or FUSE file system).
    case streamTruncateFails = "stream.truncate-fails"

    /// FileStreamCache cannot read `flushing` (as with no descriptor left or an I/O error).
    case streamReadFails = "stream.read-fails"

    /// The sync of published envelopes fails, as after an `fsync` error: a DoubleRotatingBuffer's
    /// deferred sync, a FileStreamCache's publication after its marker says `captured`.
    case syncFails = "sync.fails"

    /// Starting the writeback of published envelopes before their sync fails, as `sync_file_range` does with
    /// the error of a write the file system gave up on (which the `fsync` after it may then not report).
    case writebackFails = "sync.writeback-fails"

    /// A change to the file of saved drop counts fails once made (a save after its rename, a removal after
    /// its unlink), as when the folder's sync fails.
    case reportFileFails = "report.file-fails"

    /// The system's zlib is missing (as on a system without it): request bodies go uncompressed.
    case zlibMissing = "zlib.missing"

    /// Retiring a DoubleRotatingBuffer's IO cache fails before it is moved (as when its new name is taken).
    case retireFails = "retire.fails"

    /// Retiring an IO cache fails after it was moved, before an empty file took its place (a full disk).
    case retireRestartFails = "retire.restart-fails"

    /// What an armed step does when reached.
    enum Action: String, Sendable {
        case kill, segv, hold, pause
    }

    #if TELEMETRY_BUFFER_FAILPOINTS
    private static let armedSteps: [String: Action] = {
        let value = ProcessInfo.processInfo.environment["TELEMETRY_BUFFER_FAILPOINT"] ?? ""
        return value.split(separator: ",").reduce(into: [:]) { armed, step in
            let parts = step.split(separator: ":", maxSplits: 1).map(String.init)
            armed[parts[0]] = parts.count > 1 ? Action(rawValue: parts[1]) ?? .kill : .kill
        }
    }()
    #else
    /// Release builds: never armed, whatever the environment says.
    private static let armedSteps: [String: Action] = [:]
    #endif

    /// What this step does when reached, if armed.
    private var armed: Action? { Self.armedSteps.isEmpty ? nil : Self.armedSteps[rawValue] }

    #if TELEMETRY_BUFFER_FAILPOINTS
    /// Steps a test in this process armed to fail its next `times` passes (`failIfArmed` only).
    private static let failing = Locked<[Failpoint: Int]>([:])

    /// Makes the next `times` passes of this step fail, in this process (tests that need no child).
    func failNext(_ times: Int = 1) { Self.failing.withLock { $0[self] = times } }

    /// Whether a test armed this step in-process, counting the pass.
    private func takeInProcessFailure() -> Bool {
        Self.failing.withLock { failing in
            guard let left = failing[self], left > 0 else { return false }
            failing[self] = left - 1
            return true
        }
    }
    #else
    private func takeInProcessFailure() -> Bool { false }
    #endif

    /// Kills, crashes or holds the calling thread here if this failpoint is armed (see the type's doc).
    func hit() {
        guard let action = armed else { return }
        switch action {
        case .kill:
            kill(getpid(), SIGKILL)
        case .segv:
            // A real fault on this thread, not a signal sent to the process.
            UnsafeMutablePointer<Int>(bitPattern: Int(getpid() < 0 ? 16 : 8))!.pointee = 42
        case .hold:
            #if TELEMETRY_BUFFER_FAILPOINTS
            if let path = ProcessInfo.processInfo.environment["TELEMETRY_BUFFER_FAILPOINT_HELD"] {
                close(open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600))
            }
            #endif
            while true { sleep(60) }
        case .pause:
            usleep(500_000)
        }
    }

    /// Arms the crash handler's pause if this failpoint (`crashHandler` or `crashHandlerOwned`) is armed
    /// with `hold`.
    func armHandlerPause() {
        #if TELEMETRY_BUFFER_FAILPOINTS
        guard armed == .hold, let path = ProcessInfo.processInfo.environment["TELEMETRY_BUFFER_FAILPOINT_HELD"] else { return }
        // Never freed: the handler may read it at any time (a copy per registration, in tests only).
        tb_crash_test_pause(strdup(path), 500, self == .crashHandlerOwned ? 1 : 0)
        #endif
    }

    /// Whether this failpoint is armed (for a step that is skipped rather than failed).
    var isArmed: Bool { armed != nil }

    /// Throws an I/O error (`EIO`) for `path` if this failpoint is armed (in the environment, or in-process
    /// by `failNext`).
    func failIfArmed(_ operation: String, _ path: String) throws {
        guard armed != nil || takeInProcessFailure() else { return }
        throw TelemetryBufferError.fileSystem(operation: operation, path: path, errno: EIO)
    }
}
