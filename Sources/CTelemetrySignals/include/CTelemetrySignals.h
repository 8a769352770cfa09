#ifndef C_TELEMETRY_SIGNALS_H
#define C_TELEMETRY_SIGNALS_H

#include <stddef.h>
#include <stdint.h>

// What Swift cannot do itself: the atomics a crash handler reads lists with (Swift has none for iOS 13),
// the async-signal-safe crash handler, CRC-32C with the CPU's instruction, and the 16-byte vector scan
// of JSON strings.

/// Publishes `value` (a committed length) after every earlier store to the record bytes.
static inline void tb_store_release_u64(uint64_t *address, uint64_t value) {
    __atomic_store_n(address, value, __ATOMIC_RELEASE);
}

/// Reads a committed length; every record byte before it is visible afterwards.
static inline uint64_t tb_load_acquire_u64(const uint64_t *address) {
    return __atomic_load_n(address, __ATOMIC_ACQUIRE);
}

enum {
    /// Buffers the handler can serve at once (one per DSN).
    TB_CRASH_MAX_TARGETS = 8,
    /// Room for a file name, terminating NUL included.
    TB_CRASH_NAME_SIZE = 64,
    /// Bytes of the alternate signal stack installed per thread (at least 64 KiB).
    TB_CRASH_ALTERNATE_STACK_SIZE = 128 * 1024,
};

/// What the handler writes for a buffer.
typedef enum tb_crash_mode {
    /// Each region, header and committed records, verbatim into a file named `names[i]`.
    TB_CRASH_WRITE_REGIONS = 1,
    /// The regions' records as complete Sentry envelopes (one per `max_logs` logs, one per trace).
    TB_CRASH_WRITE_ENVELOPES = 2,
} tb_crash_mode;

/// A buffer's crash-relevant state, prepared in advance. The memory it points to must stay valid
/// until `tb_crash_unregister`.
typedef struct tb_crash_target {
    tb_crash_mode mode;
    /// The folder the files go into, opened in advance.
    int directory_fd;
    /// The regions: a 32-byte header (committed record length at offset 16) then framed records.
    const uint8_t *regions[2];
    /// Each region's size in bytes, header included: the bound for its committed length.
    size_t region_sizes[2];
    /// TB_CRASH_WRITE_REGIONS: the file name for each region (shorter than TB_CRASH_NAME_SIZE).
    const char *names[2];
    /// TB_CRASH_WRITE_ENVELOPES: the envelope header line of log envelopes (LF included), and the text
    /// before and after the 32 hex digits of the trace ID in the header line of span envelopes.
    const char *log_header;
    size_t log_header_length;
    const char *span_header_prefix;
    size_t span_header_prefix_length;
    const char *span_header_suffix;
    size_t span_header_suffix_length;
    int max_logs;
    int max_spans;
} tb_crash_target;

/// The signals the handler takes: SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGSEGV, SIGTRAP, SIGSYS.
#define TB_CRASH_SIGNALS_FATAL 1
/// SIGTERM as well (opt-in): a detected termination, then the previous (usually default) action.
#define TB_CRASH_SIGNALS_TERM 2

/// Installs the handler for the signals in `signals` not installed yet (`sigaction` with
/// SA_SIGINFO | SA_ONSTACK | SA_NODEFER), remembering each previous action, and gives the calling thread an
/// alternate signal stack. Returns 0, or an errno value.
int tb_crash_install(int signals);

/// Restores the previous action of every signal whose action is still ours.
void tb_crash_uninstall(void);

/// Copies `target` into a free slot; returns the slot, or -1 when all are taken.
int tb_crash_register(const tb_crash_target *target);

/// Frees a slot; the handler no longer reads its target.
void tb_crash_unregister(int slot);

/// Gives the calling thread an alternate signal stack of TB_CRASH_ALTERNATE_STACK_SIZE bytes, unless it
/// has one at least that large. Without one, a stack overflow on the thread cannot run any handler.
/// Returns 0, or an errno value.
int tb_crash_install_alternate_stack(void);

/// Whether `tb_crc32c` may be called: the CPU has a CRC-32C instruction this build can use. Call it once
/// before the first `tb_crc32c` (it also prepares that function's tables).
int tb_crc32c_available(void);

/// Continues CRC-32C (0 to start) over `count` bytes with the CPU's instruction; same results as the
/// portable table version. Call only when `tb_crc32c_available()`.
uint32_t tb_crc32c(uint32_t crc, const void *bytes, size_t count);

/// Copies `source` to `destination` up to the first byte a JSON string must escape (`"`, backslash or below
/// 0x20) and returns the number of bytes before it (`count` when there is none). Reads exactly `count`
/// bytes of `source`; may write all `count` bytes of `destination`, the ones after the returned length
/// being scratch for the caller to overwrite.
size_t tb_json_copy_clean(uint8_t *destination, const uint8_t *source, size_t count);

#endif
