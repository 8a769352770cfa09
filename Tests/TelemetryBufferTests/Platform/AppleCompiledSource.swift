/// The code of a Swift or C source file that an Apple platform may compile: comments and string literals
/// blanked out, and the branches of `#if` / `#ifdef` that only Linux (or another non-Apple system) compiles
/// left out. A condition it cannot decide (a CPU, a build flag, one Apple platform or another) counts as
/// possibly true, so that nothing an Apple build may contain is missed.
struct AppleCompiledSource {
    let code: String
    /// Every word (a run of letters, digits and `_`) in the code.
    private let words: Set<String>

    init(_ text: String) {
        var kept: [Substring] = []
        // Per open `#if`: whether the current branch may be compiled, whether an earlier branch surely was,
        // and whether the enclosing code may be compiled at all.
        var stack: [(active: Bool, taken: Bool, outer: Bool)] = []
        var active: Bool { stack.last.map(\.active) ?? true }
        for line in Self.blankingCommentsAndStrings(text).split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.drop { $0 == " " || $0 == "\t" }
            let (directive, condition) = Self.directive(trimmed)
            switch directive {
            case "#if", "#ifdef", "#ifndef":
                let truth = Self.evaluate(directive == "#if" ? condition
                    : (directive == "#ifndef" ? "!" : "") + "defined(\(condition))")
                stack.append((active && truth != false, truth == true, active))
            case "#elseif", "#elif":
                guard let top = stack.popLast() else { continue }
                let truth = Self.evaluate(condition)
                stack.append((top.outer && !top.taken && truth != false, top.taken || truth == true, top.outer))
            case "#else":
                guard let top = stack.popLast() else { continue }
                stack.append((top.outer && !top.taken, true, top.outer))
            case "#endif":
                _ = stack.popLast()
            default:
                if active { kept.append(line) }
            }
        }
        code = kept.joined(separator: "\n")
        words = Set(code.split { !($0.isLetter || $0.isNumber || $0 == "_") }.map(String.init))
    }

    /// Whether `name` occurs in the code as a whole word.
    func mentions(_ name: String) -> Bool { words.contains(name) }

    /// The directive a line starts with (`#if`, `#elseif`, `#elif`, `#else`, `#endif`, `#ifdef`, `#ifndef`)
    /// and the rest of the line, or ("", "") when it starts with none.
    private static func directive(_ line: Substring) -> (String, String) {
        guard line.hasPrefix("#") else { return ("", "") }
        let word = line.prefix { !$0.isWhitespace && $0 != "(" && $0 != "!" }
        guard ["#if", "#elseif", "#elif", "#else", "#endif", "#ifdef", "#ifndef"].contains(String(word)) else { return ("", "") }
        return (String(word), String(line.dropFirst(word.count)).trimmingCharacters(in: .whitespaces))
    }

    /// Whether an Apple platform's build takes `condition`: `true` surely, `false` surely not, `nil` when
    /// it depends on more than the platform being Apple's.
    static func evaluate(_ condition: String) -> Bool? {
        var parser = ConditionParser(condition)
        return parser.expression()
    }

    /// The text with every comment, string literal and C character literal replaced by spaces (line
    /// breaks kept, so that directives stay on lines of their own).
    static func blankingCommentsAndStrings(_ text: String) -> String {
        enum State { case code, lineComment, blockComment, string, multilineString, character }
        let (newline, quote, apostrophe, slash, star, backslash): (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
            (0x0A, 0x22, 0x27, 0x2F, 0x2A, 0x5C)
        var state = State.code
        let bytes = Array(text.utf8)
        var output = bytes
        var index = 0
        func at(_ first: UInt8, _ second: UInt8, _ third: UInt8? = nil) -> Bool {
            guard index + 1 < bytes.count, bytes[index] == first, bytes[index + 1] == second else { return false }
            guard let third else { return true }
            return index + 2 < bytes.count && bytes[index + 2] == third
        }
        while index < bytes.count {
            let byte = bytes[index]
            var width = 1
            switch state {
            case .code:
                if at(slash, slash) { state = .lineComment; width = 2 }
                else if at(slash, star) { state = .blockComment; width = 2 }
                else if at(quote, quote, quote) { state = .multilineString; width = 3 }
                else if byte == quote { state = .string }
                else if byte == apostrophe { state = .character }
                else { index += 1; continue }
            case .lineComment:
                if byte == newline { state = .code }
            case .blockComment:
                if at(star, slash) { state = .code; width = 2 }
            case .string, .character:
                if byte == backslash { width = 2 }
                else if byte == (state == .string ? quote : apostrophe) || byte == newline { state = .code }
            case .multilineString:
                if byte == backslash { width = 2 }
                else if at(quote, quote, quote) { state = .code; width = 3 }
            }
            for offset in index..<min(index + width, bytes.count) where bytes[offset] != newline { output[offset] = 0x20 }
            index += width
        }
        return String(decoding: output, as: UTF8.self)
    }
}

/// A recursive-descent reader of `#if` conditions (`!`, `&&`, `||`, parentheses, `os(…)`, `canImport(…)`,
/// `defined(…)`, `targetEnvironment(…)`, bare names), in three-valued logic.
private struct ConditionParser {
    private let characters: [Character]
    private var index = 0

    init(_ text: String) { characters = Array(text) }

    mutating func expression() -> Bool? {
        var value = conjunction()
        while skip("||") { value = Self.or(value, conjunction()) }
        return value
    }

    private mutating func conjunction() -> Bool? {
        var value = unary()
        while skip("&&") { value = Self.and(value, unary()) }
        return value
    }

    private mutating func unary() -> Bool? {
        if skip("!") { return unary().map(!) }
        if skip("(") {
            let value = expression()
            _ = skip(")")
            return value
        }
        let name = word()
        guard skip("(") else { return Self.atom(name, nil) }
        var argument = ""
        var depth = 0
        while index < characters.count, depth > 0 || characters[index] != ")" {
            if characters[index] == "(" { depth += 1 }
            if characters[index] == ")" { depth -= 1 }
            argument.append(characters[index])
            index += 1
        }
        _ = skip(")")
        return Self.atom(name, argument.trimmingCharacters(in: .whitespaces))
    }

    private static func atom(_ name: String, _ argument: String?) -> Bool? {
        let notApple: Set<String> = ["Linux", "Windows", "Android", "WASI", "FreeBSD", "OpenBSD", "Glibc", "Musl", "WinSDK",
                                     "__linux__", "__linux", "linux", "_WIN32", "__ANDROID__", "__FreeBSD__"]
        let apple: Set<String> = ["Darwin", "__APPLE__", "macOS", "iOS", "tvOS", "watchOS", "visionOS", "UIKit", "AppKit",
                                  "Foundation", "Dispatch", "Network", "WatchKit", "MetricKit"]
        switch name {
        case "os", "canImport", "defined":
            guard let argument else { return nil }
            if notApple.contains(argument) { return false }
            if apple.contains(argument) { return name == "os" ? nil : true }
            return nil
        case "true": return true
        case "false": return false
        default:
            if argument == nil, notApple.contains(name) { return false }
            if argument == nil, name == "__APPLE__" { return true }
            return nil
        }
    }

    private static func and(_ left: Bool?, _ right: Bool?) -> Bool? {
        if left == false || right == false { return false }
        return left == true && right == true ? true : nil
    }

    private static func or(_ left: Bool?, _ right: Bool?) -> Bool? {
        if left == true || right == true { return true }
        return left == false && right == false ? false : nil
    }

    private mutating func word() -> String {
        skipSpaces()
        var name = ""
        while index < characters.count, characters[index].isLetter || characters[index].isNumber || characters[index] == "_" {
            name.append(characters[index])
            index += 1
        }
        return name
    }

    private mutating func skip(_ token: String) -> Bool {
        skipSpaces()
        let token = Array(token)
        guard index + token.count <= characters.count, Array(characters[index..<index + token.count]) == token else { return false }
        index += token.count
        return true
    }

    private mutating func skipSpaces() {
        while index < characters.count, characters[index].isWhitespace { index += 1 }
    }
}
