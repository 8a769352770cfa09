import CTelemetrySignals

/// The forward every strategy runs, written once: a strategy supplies only how it takes its due batch,
/// publishes it and resets what held it.
///
/// A forward first settles what a crash handler left after a signal the process survived. Then it
/// publishes at most two batches: the one waiting (or the active one: for everything, or at a limit),
/// then the one active now if it is due as well (two wake-ups merged into one). A batch is published
/// whole or left whole for the next forward; the first failure ends the forward. Last, the staged
/// envelopes move to the transport.
///
/// A crash handler's claim (`CrashInProgress`: it is writing the batch's memory out) stops a step. Once
/// the process is known to have survived the signal, the step runs again. Otherwise the batch stays (the
/// handler's file keeps its items), and the claim is reported once while it stands: refused adds wake
/// the queue again and again meanwhile.
struct ForwardLoop: Sendable {
    let folder: BufferFolder
    let outbox: any Outbox
    let diagnostics: Diagnostics
    /// Whether a claim that stands was reported (until a batch goes through, a forward has nothing to
    /// publish, or another failure comes).
    private let claimReported = Locked(false)

    init(folder: BufferFolder, outbox: any Outbox, diagnostics: Diagnostics) {
        self.folder = folder
        self.outbox = outbox
        self.diagnostics = diagnostics
    }

    /// Runs one forward. Background queue.
    ///
    /// - Parameters:
    ///   - everything: Publish everything held, not only what is due.
    ///   - claimed: Whether a crash handler claims the strategy's memory now: the forward first waits
    ///     until the claim is known to be settled (a second after the signal, in case it recurs), never in
    ///     `add`. Otherwise only the process-wide handler state is settled.
    ///   - due: The next batch to publish (only one that is due if the argument is `true`); `nil` when
    ///     there is none. It throws, having reported why, when the batch cannot be taken.
    ///   - name: What the diagnostics call the batch.
    ///   - publish: Stages the batch's envelopes exactly once under its publication marker (see
    ///     `EnvelopeBatcher.stage`), and makes them as durable as the strategy promises.
    ///   - reset: Empties what held the published batch.
    /// - Returns: The failure that left a batch held, or `nil`.
    func run<Batch>(everything: Bool, claimed: Bool, due: (_ dueOnly: Bool) throws -> Batch?, name: (Batch) -> String,
                    publish: (Batch) throws -> Void, reset: (Batch) throws -> Void) -> (any Error)? {
        if claimed { _ = CrashRegistration.awaitSettled() } else { _ = tb_crash_settle() }
        var failure: (any Error)?
        for _ in 0..<2 {
            let batch: Batch
            do {
                guard let next = try due(!everything) else { break }
                batch = next
            } catch {
                failure = error
                break
            }
            do {
                try Self.settlingClaims { try publish(batch) }
                try Self.settlingClaims { try reset(batch) }
                claimReported.withLock { $0 = false }
            } catch {
                let claim = error is CrashInProgress
                if !claimReported.withLock({ reported in defer { reported = claim }; return reported && claim }) {
                    diagnostics.log(claim ? .warning : .error, claim ? "a crash handler holds \(name(batch)); its files keep the items"
                                                                      : "could not publish \(name(batch)): \(error)")
                }
                failure = error
                break
            }
            Failpoint.publishEmptied.hit()
        }
        if failure == nil { claimReported.withLock { $0 = false } }
        outbox.takeStaged(from: folder, diagnostics: diagnostics)
        return failure
    }

    /// Runs `body`; if the crash handler claimed the batch meanwhile, waits until the process is known to
    /// have survived the signal and runs it again.
    private static func settlingClaims(_ body: () throws -> Void) throws {
        do {
            try body()
        } catch is CrashInProgress {
            guard CrashRegistration.awaitSettled() else { throw CrashInProgress() }
            try body()
        }
    }
}
