extension Int {
    /// `self + other`, or `Int.max` / `Int.min` where that overflows: counts read from disk or the network
    /// (an envelope's `item_count`) may be anything, and a count that stops growing beats a trap.
    @inline(__always)
    func saturatingAdding(_ other: Int) -> Int {
        let (sum, overflow) = addingReportingOverflow(other)
        return overflow ? (other > 0 ? .max : .min) : sum
    }
}
