extension TelemetryBuffer.TraceID {
    /// A `sample_rand` for this trace, for a dynamic sampling context whose head gave none: a whole number
    /// of millionths in [0, 1) (6 decimals write it exactly), taken from the trace ID's low 64 bits, which are
    /// random in a random trace ID. Every process that derives one for the trace gets the same.
    ///
    /// It agrees with the decision taken for the trace (`sample_rand < sample_rate` ⇔ sampled): below `rate`
    /// if `sampled`, at or above it if not. It lies anywhere in [0, 1) if either is `nil`, if `rate` is not
    /// within 0...1, or if no value could agree (sampled at a rate of 0, or not sampled at 1).
    public func derivedSampleRand(sampled: Bool?, rate: Double?) -> Double {
        Double(derivedSampleRandMillionths(sampled: sampled, rate: rate)) / 1e6
    }

    /// `derivedSampleRand` in millionths.
    func derivedSampleRandMillionths(sampled: Bool?, rate: Double?) -> Int {
        var (lower, upper) = (0, 1_000_000)
        if let sampled, let rate, rate >= 0, rate <= 1 {
            let boundary = Self.sampleRandBoundary(rate)
            (lower, upper) = sampled ? (0, boundary) : (boundary, 1_000_000)
            if lower >= upper { (lower, upper) = (0, 1_000_000) }
        }
        return lower + Int(low % UInt64(upper - lower))
    }

    /// The least k whose k / 10⁶ (the value compared, and the one its 6 decimals parse back to) is not below
    /// `rate` (within 0...1): the product with 10⁶ rounds either way, so the candidates are checked as compared.
    static func sampleRandBoundary(_ rate: Double) -> Int {
        var boundary = Int((rate * 1e6).rounded(.up))
        while boundary > 0, Double(boundary - 1) / 1e6 >= rate { boundary -= 1 }
        while boundary < 1_000_000, Double(boundary) / 1e6 < rate { boundary += 1 }
        return boundary
    }
}
