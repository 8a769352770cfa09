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

    /// The DSC as `sentry-` members, then the foreign members as they came; `nil` when there are none.
    static func baggage(_ span: SentrySpanContext) -> String? {
        let sentry = span.dynamicSamplingContext.sorted { $0.key < $1.key }.map { "sentry-\($0.key)=\(encode($0.value))" }
        let members = sentry + span.foreignBaggage
        return members.isEmpty ? nil : members.joined(separator: ",")
    }

    /// A `sentry-trace` header's trace, span and sampling flag (`nil` when it has none); `nil` when malformed.
    static func parseSentryTrace(_ header: String) -> (TraceID, SpanID, Bool?)? {
        let parts = header.trimmingCharacters(in: .whitespaces).split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 2 || parts.count == 3, parts[0].count == 32, parts[1].count == 16,
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
        // Version 00 has exactly four fields; a later version may add more.
        guard parts.count == 4 || (parts.count > 4 && parts[0] != "00"), parts[0].count == 2, parts[0] != "ff",
              parts[0].allSatisfy(\.isHexDigit), parts[1].count == 32, parts[2].count == 16,
              parts[3].count == 2, parts[3].allSatisfy(\.isHexDigit), let flags = UInt8(parts[3], radix: 16),
              let trace = TraceID(String(parts[1])), let span = SpanID(String(parts[2])),
              trace != TraceID(high: 0, low: 0), span != SpanID(0)
        else { return nil }
        return (trace, span, flags & 1 == 1)
    }

    /// A `baggage` header's `sentry-` members (prefix removed, values decoded) and its other members.
    static func parseBaggage(_ header: String) -> (sentry: [String: String], foreign: [String]) {
        var sentry: [String: String] = [:], foreign: [String] = []
        for member in header.split(separator: ",") {
            let trimmed = member.trimmingCharacters(in: .whitespaces)
            guard !trimmed.isEmpty else { continue }
            let keyValue = trimmed.split(separator: ";", maxSplits: 1)[0]
            if keyValue.hasPrefix("sentry-"), let equals = keyValue.firstIndex(of: "=") {
                let key = keyValue[keyValue.index(keyValue.startIndex, offsetBy: 7)..<equals].trimmingCharacters(in: .whitespaces)
                let value = keyValue[keyValue.index(after: equals)...].trimmingCharacters(in: .whitespaces)
                sentry[String(key)] = value.removingPercentEncoding ?? value
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
