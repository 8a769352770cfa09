import Logging
import TelemetryBuffer

/// swift-log metadata as log attributes: strings stay strings; integers (any width, as long as the value
/// fits `Int64`), floating-point numbers and booleans given as `stringConvertible` keep their type; a dictionary is flattened with dotted keys
/// (`["http": ["status": 200]]` → `http.status`); an array of strings becomes a string array and any
/// other array an array of the values' descriptions.
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
            let texts = values.compactMap { if case .string(let text) = $0 { text } else { nil } }
            return .stringArray(texts.count == values.count ? texts : values.map(\.description))
        case .dictionary(let nested):
            return .string(Logger.Metadata.Value.dictionary(nested).description)
        }
    }

    /// Any integer that fits `Int64` (a larger unsigned one goes as its text).
    private static func integer<Number: BinaryInteger>(_ number: Number) -> Int64? { Int64(exactly: number) }

    private static func double<Number: BinaryFloatingPoint>(_ number: Number) -> Double { Double(number) }
}
