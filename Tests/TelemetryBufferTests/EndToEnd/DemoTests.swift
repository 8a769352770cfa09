import Foundation
import XCTest
@testable import TelemetryBuffer

/// The `telemetry-demo` executable, run as a real child process.
final class DemoTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory.remove() }

    private var envelopes: URL { directory.envelopesFolder(demoDefaultDSN) }

    func testStressAcknowledgesEveryItemAndDeliversEachExactlyOnce() throws {
        let run = try Demo.run(["stress", "--dir", directory.url.path, "--count", "500", "--spans"])
        XCTAssertEqual(run.status, 0, run.errors)
        XCTAssertEqual(run.lines, (0..<500).map { "ack \($0)" })
        let walked = try walkEnvelopes(in: envelopes)
        XCTAssertEqual(try logBodies(in: envelopes), (0..<500).map { "item \($0)" })
        let spanNames = walked.flatMap { $0.items.filter { $0.type == "span" }.flatMap(\.elements) }
            .compactMap { $0["name"] as? String }
        XCTAssertEqual(spanNames.sorted(), (0..<500).map { "item \($0)" }.sorted())
    }

    func testTheOfficialParserAcceptsEveryDemoEnvelope() throws {
        try OfficialParser.require()
        let run = try Demo.run(["stress", "--dir", directory.url.path, "--count", "500", "--spans", "--metrics"])
        XCTAssertEqual(run.status, 0, run.errors)
        let walked = try walkEnvelopes(in: envelopes)
        XCTAssertFalse(walked.isEmpty)
        let summaries = try OfficialParser.parse(envelopes)
        XCTAssertEqual(summaries.count, walked.count, "the official parser read every demo envelope")
        let metricItems = summaries.values.flatMap { ($0["items"] as? [[String: Any]] ?? []).filter { $0["type"] as? String == "trace_metric" } }
        XCTAssertEqual(metricItems.compactMap { $0["elements"] as? Int }.reduce(0, +), 500, "every metric, read by the official parser")
        XCTAssertTrue(metricItems.allSatisfy { ($0["item_count"] as? Int) == ($0["elements"] as? Int) })
    }

    func testAGracefulExitWithoutCloseStillStoresEverything() throws {
        let run = try Demo.run(["stress", "--dir", directory.url.path, "--count", "250", "--no-close"])
        XCTAssertEqual(run.status, 0, run.errors)
        XCTAssertEqual(run.lines.count, 250)
        XCTAssertEqual(try logBodies(in: envelopes), (0..<250).map { "item \($0)" })
    }

    func testRecoverAndInspectDescribeTheFolder() throws {
        XCTAssertEqual(try Demo.run(["stress", "--dir", directory.url.path, "--count", "30"]).status, 0)
        let recover = try Demo.run(["recover", "--dir", directory.url.path])
        XCTAssertEqual(recover.status, 0, recover.errors)
        XCTAssertEqual(recover.lines.count, 1)
        XCTAssertTrue(recover.lines[0].contains("(30 logs, 0 spans)"), recover.lines[0])
        XCTAssertTrue(recover.lines[0].hasPrefix("recovered 0 items"), recover.lines[0])
        let inspect = try Demo.run(["inspect", "--dir", directory.url.path])
        XCTAssertEqual(inspect.status, 0, inspect.errors)
        XCTAssertTrue(inspect.lines.contains("DSN folder \(SHA1.hex(demoDefaultDSN.utf8))"), inspect.output)
        XCTAssertTrue(inspect.lines.contains { $0.contains(".envelope") && $0.contains("log ×30") }, inspect.output)
    }

    /// Each strategy delivers every item, and libdispatch finds nothing to complain of. (FlushScheduler's
    /// keep-alive timer had no event handler: at every start libdispatch logged a deprecated use, through
    /// `openlog` and a syslog socket, on the creating thread.)
    func testEveryStrategyDeliversEveryAcknowledgedItem() throws {
        for strategy in Options.Strategy.allCases {
            let folder = try TemporaryDirectory()
            defer { folder.remove() }
            let run = try Demo.run(["stress", "--dir", folder.url.path, "--strategy", strategy.rawValue, "--count", "300", "--spans", "--metrics"])
            XCTAssertEqual(run.status, 0, run.errors)
            XCTAssertFalse(run.errors.contains("libdispatch"), "\(strategy): \(run.errors)")
            XCTAssertEqual(run.lines, (0..<300).map { "ack \($0)" })
            let envelopes = folder.envelopesFolder(demoDefaultDSN)
            XCTAssertEqual(try logBodies(in: envelopes), (0..<300).map { "item \($0)" }, strategy.rawValue)
        }
    }

    /// A system clock set before 1970 (a device whose clock was reset, at boot), under libfaketime: every
    /// strategy takes and delivers every item, and a recovery in a process with a right clock publishes each
    /// once. The creation times in file headers (unsigned µs since 1970) trapped on converting a negative
    /// time: every start of the IO cache and of the stream cache.
    func testAClockBefore1970LosesNothing() throws {
        guard let faketime = ["/usr/bin/faketime", "/bin/faketime"].first(where: FileManager.default.isExecutableFile(atPath:)) else {
            throw XCTSkip("needs faketime (Debian: apt-get install faketime)")
        }
        for strategy in Options.Strategy.allCases {
            directory.remove()
            directory = try TemporaryDirectory()
            // The wall clock only: a device's monotonic clock does not go back with it.
            let stress = try Demo.run(["FAKETIME_DONT_FAKE_MONOTONIC=1", faketime, "1969-12-31 12:00:00", Demo.executable.path, "stress",
                                       "--dir", directory.url.path, "--strategy", strategy.rawValue, "--count", "300", "--spans", "--metrics",
                                       "--io-sync-ms", "10", "--pace-us", "200", "--max-envelopes", "100000"],
                                      program: URL(fileURLWithPath: "/usr/bin/env"))
            XCTAssertEqual(stress.status, 0, "\(strategy): \(stress.errors.suffix(1500))")
            let recovery = try Demo.recover(directory, strategy)
            XCTAssertEqual(recovery.status, 0, recovery.errors)
            try assertDelivered(stress, in: directory, spans: true, metrics: true, crashSafe: true, "\(strategy), clock at 1969")
        }
    }

    func testASecondProcessOnTheSameFolderFailsClearly() throws {
        var options = Options(dsn: demoDefaultDSN)
        options.cacheDirectory = directory.url
        options.upload = false
        let holder = try TelemetryBuffer(options: options)
        let run = try Demo.run(["stress", "--dir", directory.url.path, "--count", "1"])
        XCTAssertEqual(run.status, 1)
        XCTAssertTrue(run.errors.contains("another TelemetryBuffer"), run.errors)
        holder.close()
    }

    func testBadArgumentsFailClearly() throws {
        let unknown = try Demo.run(["stress", "--dir", directory.url.path, "--strategy", "nope"])
        XCTAssertEqual(unknown.status, 2)
        XCTAssertTrue(unknown.errors.contains("unknown strategy"), unknown.errors)
        XCTAssertEqual(try Demo.run(["stress"]).status, 2, "--dir is required")
        let dsn = try Demo.run(["stress", "--dir", directory.url.path, "--dsn", "not-a-dsn"])
        XCTAssertEqual(dsn.status, 1)
        XCTAssertTrue(dsn.errors.contains("invalid DSN"), dsn.errors)
    }

    func testTheTourRuns() throws {
        let tour = try Demo.run([])
        XCTAssertEqual(tour.status, 0, tour.errors)
        XCTAssertTrue(tour.output.contains("span ×2"), tour.output)
        XCTAssertTrue(tour.output.contains("add → false"), tour.output)
        XCTAssertTrue(tour.output.contains("died (signal \(SIGSEGV))"), tour.output)
        XCTAssertTrue(tour.output.contains("all 40 delivered once"), tour.output)
    }
}
