import Logging
import TelemetryBuffer

/// swift-log metadata as log attributes: strings stay strings; integers (any width, as long as the value
/// fits `Int64`), floating-point numbers and booleans given as `stringConvertible` keep their type; a
/// dictionary is flattened with dotted keys (`["http": ["status": 200]]` → `http.status`); an array whose
/// values share one of those types is an array of it (of numbers if integers and numbers mix), any other
/// an array of the values' texts (a dictionary's keys in order).
enum MetadataAttributes {
    static func attributes(_ metadata: Logger.Metadata) -> Attributes {
        var attributes = Attributes()
        add(metadata, to: &attributes)
        return attributes
    }

    static func add(_ metadata: Logger.Metadata, to attributes: inout Attributes, prefix: String = "") {
        for (key, value) in metadata.sorted(by: { $0.key < $1.key }) {
            let name = prefix.isEmpty ? key : prefix + "." + key
            switch value {
            case .dictionary(let nested):
                add(nested, to: &attributes, prefix: name)
            default:
                attributes[name] = attribute(value)
            }
        }
    }

    private static func attribute(_ value: Logger.Metadata.Value) -> AttributeValue {
        switch value {
        case .string(let text):
            return .string(text)
        case .stringConvertible(let convertible):
            switch convertible {
            case let flag as Bool: return .boolean(flag)
            case let number as any BinaryInteger: return integer(number).map { .integer($0) } ?? .string(convertible.description)
            case let number as any BinaryFloatingPoint: return .double(double(number))
            default: return .string(convertible.description)
            }
        case .array(let values):
            return array(values)
        case .dictionary:
            return .string(text(of: value))
        }
    }

    /// An array of the one type its values share (texts, integers that fit `Int64`, numbers, integers among
    /// them, booleans), else of their texts.
    private static func array(_ values: [Logger.Metadata.Value]) -> AttributeValue {
        let scalars = values.map { value -> AttributeValue? in
            switch value {
            case .string, .stringConvertible: attribute(value)
            case .array, .dictionary: nil
            }
        }
        if let texts = each(scalars, { if case .string(let text) = $0 { text } else { nil } }) { return .stringArray(texts) }
        if let numbers = each(scalars, { if case .integer(let number) = $0 { number } else { nil } }) { return .integerArray(numbers) }
        let numbers = each(scalars) { value -> Double? in
            switch value {
            case .double(let number): number
            case .integer(let number): Double(number)
            default: nil
            }
        }
        if let numbers { return .doubleArray(numbers) }  // integers among them too, as numbers
        if let flags = each(scalars, { if case .boolean(let flag) = $0 { flag } else { nil } }) { return .booleanArray(flags) }
        return .stringArray(values.map(text))
    }

    /// `values` each as `element` takes it, if it takes every one.
    private static func each<Element>(_ values: [AttributeValue?], _ element: (AttributeValue) -> Element?) -> [Element]? {
        var elements: [Element] = []
        for value in values {
            guard let value, let taken = element(value) else { return nil }
            elements.append(taken)
        }
        return elements
    }

    /// A value's text, the same every time: a dictionary's keys in order (a `Dictionary`'s own order
    /// changes from one process to the next, so equal metadata would not group in Sentry).
    private static func text(of value: Logger.Metadata.Value) -> String {
        switch value {
        case .string(let text): text
        case .stringConvertible(let convertible): convertible.description
        case .array(let values): "[" + values.map(text).joined(separator: ", ") + "]"
        case .dictionary(let nested):
            "[" + nested.sorted { $0.key < $1.key }.map { "\($0.key): \(text(of: $0.value))" }.joined(separator: ", ") + "]"
        }
    }

    /// Any integer that fits `Int64` (a larger unsigned one goes as its text).
    private static func integer<Number: BinaryInteger>(_ number: Number) -> Int64? { Int64(exactly: number) }

    private static func double<Number: BinaryFloatingPoint>(_ number: Number) -> Double { Double(number) }
}
