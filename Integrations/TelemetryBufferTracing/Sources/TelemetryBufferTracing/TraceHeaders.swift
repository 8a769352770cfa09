import Foundation
import TelemetryBuffer

/// The HTTP headers that carry a trace from one process to the next, read and written: Sentry's
/// `sentry-trace` and `baggage` (its `sentry-` members are the dynamic sampling context), and W3C's
/// `traceparent` and `tracestate`.
enum TraceHeaders {
    static let sentryTrace = "sentry-trace"
    static let baggage = "baggage"
    static let traceparent = "traceparent"
    static let tracestate = "tracestate"

    /// `{trace_id}-{span_id}-{1|0}`; without the flag while the decision is deferred.
    static func sentryTrace(_ span: SentrySpanContext) -> String {
        "\(span.traceID)-\(span.spanID)" + (span.sampled.map { $0 ? "-1" : "-0" } ?? "")
    }

    /// `00-{trace_id}-{span_id}-{01|00}` (W3C trace context, version 00; deferred counts as not sampled).
    static func traceparent(_ span: SentrySpanContext) -> String {
        "00-\(span.traceID)-\(span.spanID)-" + (span.sampled == true ? "01" : "00")
    }

    /// The most members and bytes W3C baggage asks a platform to pass on, and the most this tracer reads
    /// (of the `sentry-` members, and of the others) or writes (in all): whole members only, those that
    /// fit in order.
    static let maxBaggageMembers = 64, maxBaggageBytes = 8192

    /// The DSC as `sentry-` members, then the foreign members as they came, as many as fit W3C's limits;
    /// `nil` when there are none.
    static func baggage(_ span: SentrySpanContext) -> String? {
        let sentry = span.dynamicSamplingContext.sorted { $0.key < $1.key }.map { "sentry-\($0.key)=\(encode($0.value))" }
        var members: [String] = [], bytes = 0
        for member in sentry + span.foreignBaggage where members.count < maxBaggageMembers {
            let added = member.utf8.count + (members.isEmpty ? 0 : 1)
            guard bytes + added <= maxBaggageBytes else { continue }
            members.append(member)
            bytes += added
        }
        return members.isEmpty ? nil : members.joined(separator: ",")
    }

    /// A `sentry-trace` header's trace, span and sampling flag (`nil` when it has none); `nil` when malformed.
    static func parseSentryTrace(_ header: String) -> (TraceID, SpanID, Bool?)? {
        let parts = header.trimmingCharacters(in: .whitespaces).split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 2 || parts.count == 3, parts[0].count == 32, parts[1].count == 16,
              isLowercaseHex(parts[0]), isLowercaseHex(parts[1]),
              let trace = TraceID(String(parts[0])), let span = SpanID(String(parts[1])), trace != TraceID(high: 0, low: 0),
              span != SpanID(0)
        else { return nil }
        guard parts.count == 3 else { return (trace, span, nil) }
        switch parts[2] {
        case "1": return (trace, span, true)
        case "0": return (trace, span, false)
        default: return nil
        }
    }

    /// A `traceparent` header's trace, span and sampled flag; `nil` when malformed (or all-zero IDs).
    static func parseTraceparent(_ header: String) -> (TraceID, SpanID, Bool)? {
        let parts = header.trimmingCharacters(in: .whitespaces).split(separator: "-", omittingEmptySubsequences: false)
        // Version 00 has exactly four fields; a later version may add more. Hex is lowercase only.
        guard parts.count == 4 || (parts.count > 4 && parts[0] != "00"), parts[0].count == 2, parts[0] != "ff",
              parts[1].count == 32, parts[2].count == 16, parts[3].count == 2, parts[0...3].allSatisfy(isLowercaseHex),
              let flags = UInt8(parts[3], radix: 16), let trace = TraceID(String(parts[1])), let span = SpanID(String(parts[2])),
              trace != TraceID(high: 0, low: 0), span != SpanID(0)
        else { return nil }
        return (trace, span, flags & 1 == 1)
    }

    /// `true` for digits and `a`…`f` only: W3C's IDs, and Sentry's parsers, take no uppercase.
    private static func isLowercaseHex(_ text: Substring) -> Bool {
        text.utf8.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0) }
    }

    /// A `baggage` header's `sentry-` members (prefix removed, values decoded) and its other members, each
    /// part as much as fits W3C's limits in order (a hostile header cannot make every envelope of the
    /// trace, and every request it makes, carry 64 KiB; nor can other vendors' members ahead of the DSC
    /// crowd it out); what is not `key=value` is no member.
    static func parseBaggage(_ header: String) -> (sentry: [String: String], foreign: [String]) {
        var sentry: [String: String] = [:], foreign: [String] = []
        // Members and bytes taken: [0] of the `sentry-` part, [1] of the others.
        var members = [0, 0], bytes = [0, 0]
        for member in header.split(separator: ",") {
            let trimmed = member.trimmingCharacters(in: .whitespaces)
            let keyValue = trimmed.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false)[0]
            guard let equals = keyValue.firstIndex(of: "="),
                  !keyValue[..<equals].trimmingCharacters(in: .whitespaces).isEmpty else { continue }
            let isSentry = keyValue.hasPrefix("sentry-"), part = isSentry ? 0 : 1
            let added = trimmed.utf8.count + (members[part] == 0 ? 0 : 1)
            // A later, smaller one may fit.
            guard members[part] < maxBaggageMembers, bytes[part] + added <= maxBaggageBytes else { continue }
            members[part] += 1
            bytes[part] += added
            if isSentry {
                let key = keyValue[keyValue.index(keyValue.startIndex, offsetBy: 7)..<equals].trimmingCharacters(in: .whitespaces)
                let value = keyValue[keyValue.index(after: equals)...].trimmingCharacters(in: .whitespaces)
                if !key.isEmpty { sentry[key] = value.removingPercentEncoding ?? value }
            } else {
                foreign.append(trimmed)
            }
        }
        return (sentry, foreign)
    }

    /// A baggage value percent-encoded where W3C baggage does not allow the character as it is.
    private static func encode(_ value: String) -> String {
        value.addingPercentEncoding(withAllowedCharacters: baggageValueCharacters) ?? value
    }

    /// W3C baggage `value` characters: printable ASCII but space, `"`, `,`, `;`, `\` and `%` (encoded).
    private static let baggageValueCharacters: CharacterSet = {
        var allowed = CharacterSet(charactersIn: UnicodeScalar(0x21)...UnicodeScalar(0x7E))
        allowed.remove(charactersIn: "\",;\\%")
        return allowed
    }()
}
