import Foundation
#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A stand-in for a crash reporter that catches Mach exceptions on Apple platforms (sentry-cocoa's
/// SentryCrash, older KSCrash): it saves the fatal signals' actions at its install, and at a crash it runs
/// before any signal handler (here: just before the demo dies) and puts back the actions it saved, then
/// lets the signal through. Whatever was installed after it is gone by the time the signal arrives.
enum StandInReporter {
    private static let signals = [SIGSEGV, SIGABRT, SIGBUS, SIGILL, SIGTRAP, SIGFPE]

    /// The actions at install, by signal (set once, before any crash).
    nonisolated(unsafe) private static var saved: [(Int32, sigaction)] = []

    /// Saves the actions in place now.
    static func install() {
        saved = signals.map { number in
            var action = sigaction()
            sigaction(number, nil, &action)
            return (number, action)
        }
    }

    /// The crash reaches the reporter first: it puts back the actions it saved, and says so.
    static func catchFirst() {
        for (number, action) in saved {
            var restored = action
            sigaction(number, &restored, nil)
        }
        FileHandle.standardError.write(Data("stand-in reporter restored the actions it saw at its install\n".utf8))
    }
}
