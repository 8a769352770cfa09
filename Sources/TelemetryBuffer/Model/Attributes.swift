extension TelemetryBuffer {
    /// An ordered set of attributes: keys are unique, and they are encoded in insertion order, so the
    /// bytes of an item are reproducible.
    ///
    /// Lookups are linear, which is the fastest choice for the handful of attributes an item carries.
    public struct Attributes: Sendable, Hashable, Sequence, ExpressibleByDictionaryLiteral {
        /// One attribute.
        public struct Element: Sendable, Hashable {
            /// The attribute's key, e.g. `http.response.status_code`.
            public var key: String
            /// The attribute's typed value.
            public var value: AttributeValue
        }

        private var elements: [Element]

        /// No attributes.
        public init() { elements = [] }

        /// Attributes in literal order; a repeated key keeps its last value.
        public init(dictionaryLiteral pairs: (String, AttributeValue)...) {
            elements = []
            elements.reserveCapacity(pairs.count)
            for (key, value) in pairs { self[key] = value }
        }

        /// The value for `key`; setting `nil` removes it, setting a new key appends it.
        public subscript(key: String) -> AttributeValue? {
            get { elements.first { $0.key == key }?.value }
            set {
                if let index = elements.firstIndex(where: { $0.key == key }) {
                    if let newValue { elements[index].value = newValue } else { elements.remove(at: index) }
                } else if let newValue {
                    elements.append(Element(key: key, value: newValue))
                }
            }
        }

        /// Whether `key` is present.
        public func contains(_ key: String) -> Bool {
            // Lengths first: O(1) for native strings, and most keys differ in length.
            let length = key.utf8.count
            return elements.contains { $0.key.utf8.count == length && $0.key == key }
        }

        /// The number of attributes.
        public var count: Int { elements.count }

        /// Whether there are no attributes.
        public var isEmpty: Bool { elements.isEmpty }

        /// Iterates in insertion order.
        public func makeIterator() -> IndexingIterator<[Element]> { elements.makeIterator() }

        /// The attributes in order, read in place (the encoder's loop: no iterator over a copy of the array).
        @inline(__always)
        func withElements<Result>(_ body: (UnsafeBufferPointer<Element>) -> Result) -> Result {
            elements.withUnsafeBufferPointer(body)
        }
    }
}

/// `TelemetryBuffer.Attributes`: the module and its main class share a name, so the qualified form
/// names the class's member (as needed where another module has a `Attributes` too).
public typealias Attributes = TelemetryBuffer.Attributes
