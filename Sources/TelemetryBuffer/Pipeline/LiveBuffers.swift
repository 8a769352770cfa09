import Foundation

/// Every live buffer of the process, so that a graceful exit (`exit()`, or returning from `main`, and on
/// macOS an app's termination) forwards what they hold, and on iOS, tvOS, visionOS and watchOS going to the
/// background does (an app's, an app extension's host's), and the first unlock opens the folders of
/// buffers created before it.
enum LiveBuffers {
    /// `@unchecked Sendable`: `buffer` is set once; a weak reference is loaded atomically.
    private final class WeakBuffer: @unchecked Sendable {
        weak var buffer: TelemetryBuffer?
        init(_ buffer: TelemetryBuffer) { self.buffer = buffer }
    }

    private static let buffers = Locked<[ObjectIdentifier: WeakBuffer]>([:])

    /// Final forwards scheduled by buffers that were released without `close()`, by buffer directory: a
    /// graceful exit waits for all of them, a new buffer on a directory for that directory's.
    private static let releasing = Locked<[String: DispatchGroup]>([:])

    /// How long a graceful exit waits for the buffers' forwards, all of them together.
    private static let exitTimeout: TimeInterval = 2

    /// How long the background activity waits for the buffers' forwards, all of them together (iOS gives
    /// about 30 s in all).
    private static let backgroundTimeout: TimeInterval = 20

    #if os(iOS) || os(tvOS) || os(watchOS) || os(visionOS)
    /// What says the app is going to the background, by raw name so that this file imports no UI
    /// framework: a UIKit app's (iOS, tvOS, visionOS, Mac Catalyst), an app extension's (its host app's),
    /// a watchOS app's (watchOS 7 and later). Each is posted only where it applies.
    private static let backgroundNotifications = [
        Notification.Name("UIApplicationDidEnterBackgroundNotification"), .NSExtensionHostDidEnterBackground,
        Notification.Name("WKApplicationDidEnterBackgroundNotification"),
    ]

    /// What says protected data may be available now, for buffers created before the device's first
    /// unlock: UIKit's notification of it, and an app (a UIKit one, a watchOS one) becoming active, which
    /// takes an unlocked device.
    private static let unlockNotifications = [
        Notification.Name("UIApplicationProtectedDataDidBecomeAvailable"),
        Notification.Name("UIApplicationDidBecomeActiveNotification"),
        Notification.Name("WKApplicationDidBecomeActiveNotification"),
    ]
    #endif

    #if canImport(Darwin)
    // A source is not Sendable; this one is set up once, in `installHooks`, and only resumed there.
    nonisolated(unsafe) private static let memoryPressure = DispatchSource.makeMemoryPressureSource(
        eventMask: [.warning, .critical], queue: DispatchQueue(label: "io.telemetrybuffer.memory", qos: .utility))
    #endif

    private static let installHooks: Void = {
        atexit {
            // A forked child's exit: nothing here is its own, and its queues' threads are the parent's.
            guard !TelemetryBuffer.isForkedChild else { return }
            LiveBuffers.flushEach(within: LiveBuffers.exitTimeout)
            LiveBuffers.awaitReleases()
            Diagnostics.drain()
        }
        #if os(iOS) || os(tvOS) || os(watchOS) || os(visionOS)
        for name in backgroundNotifications {
            _ = NotificationCenter.default.addObserver(forName: name, object: nil, queue: nil) { _ in
                LiveBuffers.each { $0.didEnterBackground() }
                // Background time for those forwards: an expiring activity, which app extensions may take
                // too (unlike `beginBackgroundTask`). It lasts while the closure waits for them.
                ProcessInfo.processInfo.performExpiringActivity(withReason: "io.telemetrybuffer.forward") { expired in
                    guard !expired else { return }
                    LiveBuffers.flushEach(within: LiveBuffers.backgroundTimeout)
                }
            }
        }
        for name in unlockNotifications {
            _ = NotificationCenter.default.addObserver(forName: name, object: nil, queue: nil) { _ in
                LiveBuffers.each { $0.protectedDataBecameAvailable() }
            }
        }
        #elseif os(macOS)
        // An AppKit app's termination (the raw name of NSApplication.willTerminateNotification).
        _ = NotificationCenter.default.addObserver(
            forName: Notification.Name("NSApplicationWillTerminateNotification"), object: nil, queue: nil
        ) { _ in LiveBuffers.flushEach(within: LiveBuffers.exitTimeout) }
        #endif
        #if canImport(Darwin)
        // Under memory pressure what is held goes to disk now (the timer keeps going), and memory held
        // unused goes back.
        memoryPressure.setEventHandler { LiveBuffers.each { $0.relieveMemoryPressure() } }
        memoryPressure.resume()
        #endif
    }()

    static func register(_ buffer: TelemetryBuffer) {
        _ = installHooks
        buffers.withLock { $0[ObjectIdentifier(buffer)] = WeakBuffer(buffer) }
    }

    /// Forgets a released buffer and runs its final forward on `queue` without blocking the releasing
    /// thread; a graceful exit still waits for it, and so does a new buffer on the same `directory`.
    static func release(_ id: ObjectIdentifier, directory: String, finalForward: @escaping @Sendable () -> Void,
                        on queue: DispatchQueue) {
        _ = buffers.withLock { $0.removeValue(forKey: id) }
        // One group per DSN folder ever released in this process (a handful), kept for later waits.
        let folderReleases = releasing.withLock { groups in
            if let group = groups[directory] { return group }
            let group = DispatchGroup()
            groups[directory] = group
            return group
        }
        folderReleases.enter()
        queue.async {
            finalForward()
            folderReleases.leave()
        }
    }

    /// Waits, at most as long as a graceful exit does, for the final forwards of buffers on `directory`
    /// released without `close()`: they hold its folder until then.
    static func awaitReleases(of directory: String) {
        guard let group = releasing.withLock({ $0[directory] }) else { return }
        _ = group.wait(timeout: .now() + exitTimeout)
    }

    /// Waits, at most as long as a graceful exit does (or `seconds`: tests on a loaded machine), for the final
    /// forwards of every buffer released without `close()`.
    static func awaitReleases(within seconds: TimeInterval? = nil) {
        let deadline = DispatchTime.now() + (seconds ?? exitTimeout)
        for group in releasing.withLock({ Array($0.values) }) { _ = group.wait(timeout: deadline) }
    }

    /// Flushes every live buffer, then waits for their deferred syncs (the process may be gone before they
    /// run otherwise), all within `seconds` from now (not each in turn). Forwards first: a buffer's sync
    /// must not take the time another needs to store what it holds in memory.
    private static func flushEach(within seconds: TimeInterval) {
        let deadline = Date().addingTimeInterval(seconds)
        for durably in [false, true] {
            each { _ = $0.flush(timeout: max(0, deadline.timeIntervalSinceNow), durably: durably) }
        }
    }

    private static func each(_ body: (TelemetryBuffer) -> Void) {
        for buffer in buffers.withLock({ $0.values.compactMap(\.buffer) }) { body(buffer) }
    }
}
