import Dispatch
#if canImport(Network) && !os(watchOS)
import Network
#endif

/// What the uploader needs to know of the network: whether there is a route, and whether it is metered.
struct NetworkPath: Sendable, Equatable {
    var isSatisfied: Bool
    /// Expensive (cellular, a personal hotspot) or constrained (Low Data Mode).
    var isMetered: Bool
}

/// Reports the network path as it changes. The system's on Apple platforms but watchOS (`NWPathMonitor`);
/// none on watchOS and Linux; tests inject their own.
protocol NetworkMonitor: Sendable {
    /// Starts reporting: `update` is called with the current path, then with every change.
    func start(_ update: @escaping @Sendable (NetworkPath) -> Void)
    /// Stops reporting.
    func cancel()
}

enum NetworkMonitors {
    /// The system's monitor, where there is one.
    static func system() -> (any NetworkMonitor)? {
        #if canImport(Network) && !os(watchOS)
        return SystemNetworkMonitor()
        #else
        return nil
        #endif
    }
}

#if canImport(Network) && !os(watchOS)
/// `NWPathMonitor`, reporting on a queue of its own. Not on watchOS, where since watchOS 9 it reports no
/// usable path to most apps (Apple's TN3135).
///
/// `@unchecked Sendable`: `NWPathMonitor` is thread-safe but not marked `Sendable`.
final class SystemNetworkMonitor: NetworkMonitor, @unchecked Sendable {
    private let monitor = NWPathMonitor()

    func start(_ update: @escaping @Sendable (NetworkPath) -> Void) {
        monitor.pathUpdateHandler = { path in
            update(NetworkPath(isSatisfied: path.status == .satisfied, isMetered: path.isExpensive || path.isConstrained))
        }
        monitor.start(queue: DispatchQueue(label: "io.telemetrybuffer.network", qos: .utility))
    }

    func cancel() { monitor.cancel() }
}
#endif
