import Foundation
import TelemetryBuffer

/// The demo's hand-parsed command line: `telemetry-demo [command] [--flag value | --switch]…`.
struct Arguments {
    var command: String
    private var values: [String: String] = [:]
    private var switches: Set<String> = []

    static let usage = """
        usage: telemetry-demo                      a short tour in a temporary folder
               telemetry-demo stress  --dir D [--dsn DSN] [--strategy S] [--count N] [--spans] [--metrics] [--no-close]
                                      [--exit-holding] [--max-envelopes N] [--exhaust-descriptors] [--remove-at N]
                                      [--threads T] [--pace-us N] [--io-sync-ms N]
               telemetry-demo recover --dir D [--dsn DSN] [--strategy S] [--max-envelopes N] [--io-sync-ms N]
               telemetry-demo inspect --dir D
               telemetry-demo upload  --dir D --dsn DSN [--timeout S]
               telemetry-demo crash   --kind K [--dir D] [--strategy S] [--after N] [--spans] [--metrics]
                                      [--previous-handler] [--second-dsn DSN] [--sigterm] [--linger-us N]
                                      [--when-held] [--survive-first [--then-pace-us N]] [--fork-child [--child-exits]] [--previous-closes]
                                      [--close-while-crashing --other-dir D] [--remove-at N [--during-removal]]
                                      [--helpers H] [--crash-while-crashing] [--survive-then-register]
                                      [--reporter before|after] [--chaining-reporter|--restoring-reporter [--reporter-first | --reopen [--reporter-uninstalls]]]
                                      [--resetting-handler] [--io-sync-ms N] [--pace-us N]
        crash kinds: segv abort fatal unwrap overflow index stack thread bus bus-optional sent-segv kill term
        strategies: flushAll | fileStreamCache | doubleRotatingBuffer
        """

    init(_ arguments: [String]) throws {
        var rest = arguments[...]
        command = rest.first.map { $0.hasPrefix("--") ? "tour" : $0 } ?? "tour"
        if rest.first == command { rest = rest.dropFirst() }
        while let argument = rest.popFirst() {
            guard argument.hasPrefix("--") else { throw DemoError("unexpected argument '\(argument)'") }
            let name = String(argument.dropFirst(2))
            if ["spans", "metrics", "no-close", "help", "previous-handler", "sigterm", "when-held", "survive-first", "fork-child", "child-exits", "close-while-crashing", "crash-while-crashing", "survive-then-register", "previous-closes", "exhaust-descriptors", "during-removal", "exit-holding", "chaining-reporter", "restoring-reporter", "reporter-first", "reopen", "reporter-uninstalls",
                "resetting-handler"].contains(name) {
                switches.insert(name)
            } else if let value = rest.popFirst() {
                values[name] = value
            } else {
                throw DemoError("--\(name) needs a value")
            }
        }
    }

    func flag(_ name: String) -> Bool { switches.contains(name) }

    func string(_ name: String) -> String? { values[name] }

    func required(_ name: String) throws -> String {
        guard let value = values[name] else { throw DemoError("\(command) needs --\(name)") }
        return value
    }

    func integer(_ name: String, default fallback: Int) throws -> Int {
        guard let text = values[name] else { return fallback }
        guard let value = Int(text), value >= 0 else { throw DemoError("--\(name) must be a whole number ≥ 0") }
        return value
    }

    func strategy() throws -> Options.Strategy {
        guard let name = values["strategy"] else { return Options(dsn: "").strategy }
        guard let strategy = Options.Strategy(rawValue: name) else {
            throw DemoError("unknown strategy '\(name)'; use flushAll, fileStreamCache or doubleRotatingBuffer")
        }
        return strategy
    }
}

/// A usage or input error: printed on stderr, exit status 2.
struct DemoError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
