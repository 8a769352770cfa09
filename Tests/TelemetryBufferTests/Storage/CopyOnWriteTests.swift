import Foundation
import XCTest
@testable import TelemetryBuffer

/// A copy-on-write file system, for real: a btrfs image, loop-mounted (and overlayfs on it). There a store into a mapped
/// page asks for new space however the file was allocated: a full disk answers with SIGBUS in the storing
/// thread (the app's `add`), and a nearly full one can hold it in the kernel (seen here for 120 s in
/// `btrfs_page_mkwrite`, even with `NOCOW` set). So the DoubleRotatingBuffer keeps its lists in memory there.
///
/// Needs root, `mkfs.btrfs` (Debian's btrfs-progs) and a loop device; skips with the reason otherwise.
final class CopyOnWriteTests: XCTestCase {
    /// Runs `stress` on a btrfs with a few MiB free, writing dirty pages back all along (so that a mapped
    /// page stored into again would need new space), then frees the disk and recovers: nothing arrives
    /// twice, and what was acknowledged and did not arrive was counted as lost (held in memory, with no room
    /// on disk for it).
    func testAFullBtrfsNeitherFaultsNorStallsAddAndKeepsEveryAcknowledgedItem() throws {
        let disk = try LoopMountedBtrfs()
        defer { disk.remove() }
        try fill(disk, folder: TemporaryDirectory(in: disk.mountPoint))
    }

    /// The same through overlayfs (Docker's and podman's default), which reports its own type for files
    /// whose pages live on the btrfs below.
    func testAFullBtrfsUnderOverlayfsNeitherFaultsNorStallsAdd() throws {
        let disk = try LoopMountedBtrfs()
        defer { disk.remove() }
        let overlay = try disk.mountOverlay()
        guard let merged = overlay.merged else { throw XCTSkip("cannot mount overlayfs here: \(overlay.errors)") }
        try fill(disk, folder: TemporaryDirectory(in: merged))
    }

    private func fill(_ disk: LoopMountedBtrfs, folder: TemporaryDirectory, file: StaticString = #filePath, line: UInt = #line) throws {
        try disk.fill(leaving: 4 << 20)

        let writingBack = Locked(true)
        let writer = DispatchGroup()
        DispatchQueue.global().async(group: writer) {
            while writingBack.withLock({ $0 }) {
                sync()
                usleep(20_000)
            }
        }
        let stress = try Demo.run(["stress", "--dir", folder.url.path, "--count", "10000", "--spans",
                                   "--max-envelopes", "100000"], deadline: 60)
        writingBack.withLock { $0 = false }
        writer.wait()
        XCTAssertEqual(stress.status, 0, "the stress must survive the full disk: \(stress.errors.suffix(2000))", file: file, line: line)
        XCTAssertTrue(stress.lines.contains { $0.hasPrefix("drop") }, "the disk never filled up", file: file, line: line)
        XCTAssertTrue(stress.errors.contains("keeps its lists in memory"), stress.errors, file: file, line: line)
        let bufferFolder = folder.bufferFolder(demoDefaultDSN)
        let stored = try FileManager.default.contentsOfDirectory(atPath: bufferFolder.path)
        XCTAssertFalse(stored.contains { $0.hasPrefix("crash-safe-list-") }, "no mapped list: \(stored)", file: file, line: line)

        try disk.unfill()
        let recovery = try Demo.run(["recover", "--dir", folder.url.path, "--max-envelopes", "100000"])
        XCTAssertEqual(recovery.status, 0, recovery.errors, file: file, line: line)
        let counted = stress.lines.first { $0.hasPrefix("lost-counted=") }.flatMap { Int($0.dropFirst(13)) } ?? 0
        try assertDelivered(stress, in: folder, spans: true, crashSafe: false, "full btrfs", file: file, line: line)
        let lost = try assertLossesAreTails(stress, in: folder, spans: true, "full btrfs", file: file, line: line)
        XCTAssertLessThanOrEqual(lost.values.reduce(0, +), counted, "every acknowledged item lost was counted", file: file, line: line)
    }

    /// Crashes (real signals) and kills at random moments, three threads adding logs and spans, on a btrfs
    /// and on overlayfs over it: the DoubleRotatingBuffer keeps its lists in memory there by itself; a
    /// crash delivers every acknowledged item exactly once, a kill loses only each thread's last items
    /// (what the IO caches had not copied yet), and nothing arrives twice.
    func testCrashesAndKillsOnBtrfsAndOverlayfsWithListsInMemory() throws {
        let disk = try LoopMountedBtrfs()
        defer { disk.remove() }
        let overlay = try disk.mountOverlay()
        var generator = SystemRandomNumberGenerator()
        let kinds = ["segv", "abort", "bus", "kill", "fatal", "kill"]
        let places = [("btrfs", disk.mountPoint)] + (overlay.merged.map { [("overlayfs", $0)] } ?? [])
        for (place, parent) in places {
            for (run, kind) in kinds.enumerated() {
                let folder = try TemporaryDirectory(in: parent)
                defer { folder.remove() }
                let count = Int.random(in: 1...3000, using: &generator)
                let linger = Int.random(in: 0...3000, using: &generator)
                let label = "\(place) run \(run): \(kind) after \(count) items, \(linger) µs later, three threads"
                let crash = try Demo.run(["crash", "--kind", kind, "--dir", folder.url.path, "--strategy", "doubleRotatingBuffer",
                                          "--after", String(count), "--linger-us", String(linger), "--spans", "--helpers", "2",
                                          "--max-envelopes", "1000000"], backtrace: false)
                XCTAssertTrue(crash.status < 0, "\(label): died with status \(crash.status): \(crash.errors.suffix(500))")
                XCTAssertTrue(crash.errors.contains("keeps its lists in memory"), "\(label): \(crash.errors.suffix(500))")
                let recovery = try Demo.recover(folder, .doubleRotatingBuffer)
                XCTAssertEqual(recovery.status, 0, recovery.errors)
                try assertDelivered(crash, in: folder, spans: true, crashSafe: kind != "kill", threads: 3, label)
                if kind == "kill" { try assertLossesAreTails(crash, in: folder, spans: true, threads: 3, label) }
            }
        }
        if overlay.merged == nil { throw XCTSkip("ran on btrfs only: cannot mount overlayfs here: \(overlay.errors)") }
    }
}

/// A 200 MiB btrfs image in the temporary folder, loop-mounted; `XCTSkip` where that cannot be done.
struct LoopMountedBtrfs {
    let image: URL
    let mountPoint: URL
    private var filler: URL { mountPoint.appendingPathComponent("filler") }

    init() throws {
        #if !os(Linux)
        throw XCTSkip("a loop-mounted btrfs needs Linux")
        #else
        guard let mkfs = ["/usr/sbin/mkfs.btrfs", "/sbin/mkfs.btrfs", "/usr/bin/mkfs.btrfs"]
            .first(where: FileManager.default.isExecutableFile(atPath:)) else {
            throw XCTSkip("mkfs.btrfs not found (Debian: apt-get install btrfs-progs)")
        }
        guard FileManager.default.isExecutableFile(atPath: "/bin/mount") else { throw XCTSkip("/bin/mount not found") }
        guard geteuid() == 0 else { throw XCTSkip("mounting a btrfs image needs root") }
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("tb-btrfs-\(UUID().uuidString)")
        image = base.appendingPathExtension("img")
        mountPoint = base
        try FileManager.default.createDirectory(at: mountPoint, withIntermediateDirectories: true)
        let cleanUp = { [image, mountPoint] in
            try? FileManager.default.removeItem(at: image)
            try? FileManager.default.removeItem(at: mountPoint)
        }
        guard FileManager.default.createFile(atPath: image.path, contents: nil), truncate(image.path, 200 << 20) == 0 else {
            cleanUp()
            throw XCTSkip("cannot create a 200 MiB image in \(image.deletingLastPathComponent().path)")
        }
        let made = try Demo.run(["-q", "-f", image.path], deadline: 60, program: URL(fileURLWithPath: mkfs))
        guard made.status == 0 else {
            cleanUp()
            throw XCTSkip("mkfs.btrfs failed: \(made.errors)")
        }
        let mounted = try Demo.run(["-o", "loop", image.path, mountPoint.path], deadline: 60,
                                   program: URL(fileURLWithPath: "/bin/mount"))
        guard mounted.status == 0 else {
            cleanUp()
            throw XCTSkip("cannot loop-mount a btrfs image here (it needs a loop device): \(mounted.errors)")
        }
        #endif
    }

    /// Writes a file that leaves about `bytes` free.
    func fill(leaving bytes: Int) throws {
        var status = statvfs()
        guard statvfs(mountPoint.path, &status) == 0 else { throw POSIXError(.EIO) }
        let free = Int(status.f_bavail) * Int(status.f_frsize)
        let fd = open(filler.path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        defer { close(fd) }
        let chunk = [UInt8](repeating: 0x5A, count: 1 << 20)
        for _ in 0..<max(0, (free - bytes) >> 20) {
            guard chunk.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) == chunk.count else { break }
        }
        fsync(fd)
    }

    /// Gives the filled space back.
    func unfill() throws {
        try FileManager.default.removeItem(at: filler)
        sync()
    }

    /// Mounts overlayfs (Docker's and podman's default) over folders of this btrfs; returns the merged
    /// folder, or `nil` and what `mount` said. `remove()` unmounts it.
    func mountOverlay() throws -> (merged: URL?, errors: String) {
        let layers = ["lower", "upper", "work", "merged"].map { mountPoint.appendingPathComponent($0) }
        for layer in layers { try FileManager.default.createDirectory(at: layer, withIntermediateDirectories: true) }
        let mounted = try Demo.run(["-t", "overlay", "overlay", "-o",
                                    "lowerdir=\(layers[0].path),upperdir=\(layers[1].path),workdir=\(layers[2].path)",
                                    layers[3].path], deadline: 60, program: URL(fileURLWithPath: "/bin/mount"))
        return (mounted.status == 0 ? layers[3] : nil, mounted.errors)
    }

    func remove() {
        // The overlay first, where one was mounted (umount fails harmlessly where not).
        _ = try? Demo.run([mountPoint.appendingPathComponent("merged").path], deadline: 60, program: URL(fileURLWithPath: "/bin/umount"))
        _ = try? Demo.run([mountPoint.path], deadline: 60, program: URL(fileURLWithPath: "/bin/umount"))
        try? FileManager.default.removeItem(at: mountPoint)
        try? FileManager.default.removeItem(at: image)
    }
}
