import Foundation
#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Named steps of publishing and recovery where the kill tests stop a process, or make a step fail.
///
/// With `TELEMETRY_BUFFER_FAILPOINT=<name>` in its environment, a process kills itself with SIGKILL the
/// first time it reaches that step (`hit()`), or that step fails each time (`failIfArmed`); without it,
/// each step costs one comparison with `nil`. They are on background paths only, never in `add`.
enum Failpoint: String, CaseIterable, Sendable {
    /// A buffer file (a list, `flushing`, `recovered`) is marked `publishing`; no envelope is staged yet.
    case publishMarked = "publish.marked"
    /// Its envelopes are staged; the marker still says `publishing`.
    case publishStaged = "publish.staged"
    /// The marker says `captured`; the file still holds the items.
    case publishCaptured = "publish.captured"
    /// The file is emptied; the staged envelopes are not moved yet.
    case publishEmptied = "publish.emptied"
    /// A DoubleRotatingBuffer's forward has returned; its envelopes are not synced yet and its IO cache
    /// waits as `awaiting-sync-x`.
    case publishUnsynced = "publish.unsynced"
    /// One staged envelope of several has moved into `envelopes/`.
    case moveOne = "move.one"
    /// Recovery wrote `recovered`; the files it came from are still there.
    case recoveryWritten = "recovery.written"
    /// Recovery removed those files; `recovered` is not published yet (it is published with the
    /// `publish.*` steps).
    case recoveryRemoved = "recovery.removed"

    /// Recovery published a list straight from its file and removed it and its IO cache; another list may
    /// follow (the path taken after a process death, see `Recovery`).
    case recoveryListDone = "recovery.list-done"

    /// The sync of published envelopes fails, as after an `fsync` error: a DoubleRotatingBuffer's
    /// deferred sync, a FileStreamCache's publication after its marker says `captured`.
    case syncFails = "sync.fails"

    private static let armed = ProcessInfo.processInfo.environment["TELEMETRY_BUFFER_FAILPOINT"]

    /// Kills the process here if this failpoint is armed.
    func hit() {
        guard let armed = Self.armed, armed == rawValue else { return }
        kill(getpid(), SIGKILL)
    }

    /// Throws an I/O error (`EIO`) for `path` if this failpoint is armed.
    func failIfArmed(_ operation: String, _ path: String) throws {
        guard let armed = Self.armed, armed == rawValue else { return }
        throw TelemetryBufferError.fileSystem(operation: operation, path: path, errno: EIO)
    }
}
