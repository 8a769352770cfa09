import Logging
import TelemetryBuffer

/// swift-log metadata as log attributes: strings stay strings; integers, floating-point numbers and
/// booleans given as `stringConvertible` keep their type; a dictionary is flattened with dotted keys
/// (`["http": ["status": 200]]` → `http.status`); an array of strings becomes a string array and any
/// other array an array of the values' descriptions.
enum MetadataAttributes {
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
            case let number as Int: return .integer(Int64(number))
            case let number as Int64: return .integer(number)
            case let number as Int32: return .integer(Int64(number))
            case let number as Double: return .double(number)
            case let number as Float: return .double(Double(number))
            default: return .string(convertible.description)
            }
        case .array(let values):
            let texts = values.compactMap { if case .string(let text) = $0 { text } else { nil } }
            return .stringArray(texts.count == values.count ? texts : values.map(\.description))
        case .dictionary(let nested):
            return .string(Logger.Metadata.Value.dictionary(nested).description)
        }
    }
}
