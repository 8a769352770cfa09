#ifndef C_TELEMETRY_SIGNALS_H
#define C_TELEMETRY_SIGNALS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "BufferFormat.h"

// What Swift cannot do itself: the atomics a crash handler reads lists with (Swift has none for iOS 13),
// the compare-and-swap a forward and the handler agree through, the async-signal-safe crash handler,
// CRC-32C with the CPU's instruction, the 16-byte vector scan of JSON strings, and the file system ioctls
// that tell whether a mapped file's pages can fault on a full disk.

/// Publishes `value` (a committed length) after every earlier store to the record bytes.
static inline void tb_store_release_u64(uint64_t *address, uint64_t value) {
    __atomic_store_n(address, value, __ATOMIC_RELEASE);
}

/// The calling thread's lane number: handed out in turn, 0, 1, 2, …, at each thread's first call.
unsigned tb_thread_lane(void);

/// Tells the CPU that this thread is spinning (`pause` on x86, `yield` on ARM).
static inline void tb_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    __asm__ __volatile__("yield");
#endif
}

/// Reads a committed length; every record byte before it is visible afterwards.
static inline uint64_t tb_load_acquire_u64(const uint64_t *address) {
    return __atomic_load_n(address, __ATOMIC_ACQUIRE);
}

/// A region's publication marker (see BufferFormat.h) is changed only by compare-and-swap, so that a
/// forward and the crash handler agree on who stores the region's items. The handler claims a region
/// (sets the claim byte) before it reads it; from then on the forward can no longer change the marker:
/// it cannot commit (`captured`) or reset the region, and gives up. A claim is released only when the
/// process survives the signal.
#define TB_MARKER_CLAIMED ((uint64_t)1 << TB_MARKER_CLAIM_SHIFT)

/// Stores `marker` (claim byte 0) unless the region is claimed. Returns 1 if stored, 0 if claimed.
static inline int tb_marker_store(uint64_t *word, uint64_t marker) {
    uint64_t old = __atomic_load_n(word, __ATOMIC_SEQ_CST);
    while (!(old & TB_MARKER_CLAIMED)) {
        if (__atomic_compare_exchange_n(word, &old, marker, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) return 1;
    }
    return 0;
}

/// Whether the crash handler has claimed the region.
static inline int tb_marker_claimed(const uint64_t *word) {
    return (__atomic_load_n(word, __ATOMIC_SEQ_CST) & TB_MARKER_CLAIMED) != 0;
}

/// Marks an append to a claimable region as under way on this thread. Between this and
/// `tb_appending_end`, the append checks the claim: either it sees the claim and refuses the item, or the
/// handler sees the append under way and waits for it (unless it runs on this very thread), so an item is
/// never acknowledged after the handler read its region.
static inline void tb_appending_begin(uintptr_t *word) { __atomic_store_n(word, (uintptr_t)pthread_self(), __ATOMIC_SEQ_CST); }

/// Marks the append done.
static inline void tb_appending_end(uintptr_t *word) { __atomic_store_n(word, 0, __ATOMIC_SEQ_CST); }

/// Adds `bits` to a doorbell's pending reasons; returns the reasons pending before (0: ring the bell).
static inline uintptr_t tb_doorbell_add(uintptr_t *word, uintptr_t bits) {
    return __atomic_fetch_or(word, bits, __ATOMIC_ACQ_REL);
}

/// Whether a doorbell's word is set (its thread runs).
static inline _Bool tb_doorbell_is_set(uintptr_t *word) { return __atomic_load_n(word, __ATOMIC_ACQUIRE) != 0; }

/// Takes a doorbell's pending reasons, leaving none.
static inline uintptr_t tb_doorbell_take(uintptr_t *word) { return __atomic_exchange_n(word, 0, __ATOMIC_ACQ_REL); }

/// The largest millisecond index `tb_timestamp_sequence_next` tells apart (2^44 − 1).
#define TB_SEQUENCE_MAX_MILLIS ((uint64_t)0xFFFFFFFFFFF)

/// The next `sentry.timestamp.sequence` for a log of millisecond index `millis` (at most TB_SEQUENCE_MAX_MILLIS):
/// 0 when the previous log's millisecond differs (or there was none), else the previous number + 1
/// (saturating at 2^20 − 1). `word` holds the millisecond in its high 44 bits and the number in its low
/// 20; UINT64_MAX before the first log.
static inline uint64_t tb_timestamp_sequence_next(uint64_t *word, uint64_t millis) {
    uint64_t old = __atomic_load_n(word, __ATOMIC_RELAXED);
    for (;;) {
        uint64_t next = millis << 20;
        if (old != UINT64_MAX && (old >> 20) == millis) next = (old & 0xFFFFF) == 0xFFFFF ? old : old + 1;
        if (__atomic_compare_exchange_n(word, &old, next, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return next & 0xFFFFF;
    }
}

/// The next number of a sequence that only grows (a metric's `sentry.timestamp.sequence`): 0 first, then
/// one more each call, back to 0 after INT64_MAX.
static inline uint64_t tb_continuous_sequence_next(uint64_t *word) {
    return __atomic_fetch_add(word, 1, __ATOMIC_RELAXED) & (uint64_t)INT64_MAX;
}

/// Set in the child of a `fork()` (without `exec`) of a process that created a buffer: the child shares
/// the parent's mapped lists and folder, so its buffers accept nothing and its crash handler writes nothing.
extern int tb_forked_child;

/// Whether this process is such a child.
static inline int tb_in_forked_child(void) { return __atomic_load_n(&tb_forked_child, __ATOMIC_RELAXED); }

/// Registers the `fork()` hook that sets `tb_forked_child` (once per process).
void tb_fork_guard_install(void);

/// Registers a folder lock's descriptor, which the child of a `fork()` closes (at most 64 at a time; more
/// are not closed there), and forgets it before the descriptor is closed: each between `tb_folder_locks_hold`
/// (before the `open`, or the unregistration) and `tb_folder_locks_release` (after the registration, or the
/// `close`), which `fork()` waits for.
void tb_folder_locks_hold(void);
void tb_folder_locks_release(void);
void tb_folder_lock_register(int fd);
void tb_folder_lock_unregister(int fd);

enum {
    /// Buffers the handler can serve at once (one per DSN).
    TB_CRASH_MAX_TARGETS = 8,
    /// Room for a file name, terminating NUL included.
    TB_CRASH_NAME_SIZE = 64,
    /// Bytes of the alternate signal stack installed per thread (at least 64 KiB).
    TB_CRASH_ALTERNATE_STACK_SIZE = 128 * 1024,
};

/// What the handler does for a buffer.
typedef enum tb_crash_mode {
    /// `fsync` each region's file (`file_fds`): the regions are mapped files that hold their items
    /// through any death of the process; the sync keeps them through power loss too (DoubleRotatingBuffer).
    TB_CRASH_SYNC_FILES = 1,
    /// Claim each region (see `TB_MARKER_CLAIMED`), wait for an append under way, then write the header
    /// and committed records into a file named `names[i]` (FlushAll, whose regions are in memory).
    TB_CRASH_WRITE_REGIONS = 2,
} tb_crash_mode;

/// A buffer's crash-relevant state, prepared in advance. The memory and descriptors it names must stay
/// valid until `tb_crash_unregister` returns.
typedef struct tb_crash_target {
    tb_crash_mode mode;
    /// The folder the files go into, opened in advance.
    int directory_fd;
    /// The regions: a header then records (BufferFormat.h).
    uint8_t *regions[2];
    /// Each region's size in bytes, header included: the bound for its committed length.
    size_t region_sizes[2];
    /// TB_CRASH_SYNC_FILES: each region's file, open.
    int file_fds[2];
    /// TB_CRASH_WRITE_REGIONS: the file name for each region (shorter than TB_CRASH_NAME_SIZE), and the
    /// word appends mark themselves under way in (`tb_appending_begin`).
    const char *names[2];
    uintptr_t *appending;
} tb_crash_target;

/// The signals the handler takes: SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGSEGV, SIGTRAP, SIGSYS.
#define TB_CRASH_SIGNALS_FATAL 1
/// SIGTERM as well (opt-in): a detected termination, then the previous (usually default) action.
#define TB_CRASH_SIGNALS_TERM 2

/// Installs the handler for the signals in `signals` not installed yet (`sigaction` with
/// SA_SIGINFO | SA_ONSTACK | SA_NODEFER), remembering each previous action, and gives the calling thread an
/// alternate signal stack. An ignored SIGTERM is left alone (it cannot end the process); ignored faults and
/// SIGABRT are hooked (the kernel does not let a fault be ignored, and `abort()` ends the process anyway).
/// Returns 0, or an errno value.
int tb_crash_install(int signals);

/// Restores the previous action of every signal whose action is still ours.
void tb_crash_uninstall(void);

/// Copies `target` into a free slot; returns the slot, or -1 when all are taken.
int tb_crash_register(const tb_crash_target *target);

/// Frees a slot. On return no handler reads its target any more: one that is reading it (another thread
/// crashing) is waited for, and one done with it is let go of (its files stay), so the caller may then
/// free what the target names.
void tb_crash_unregister(int slot);

/// Called from normal code (never from a handler) where a claim got in the way: if a handler returned from
/// its signal at least a second ago, the process survived it, so its files are removed, its claims
/// released and the handler installed again. Returns 0 when no handler holds anything (any more); 1 when
/// one returned less than a second ago or is being settled (worth waiting for: the process may yet die of
/// the signal, as `abort()` does when a handler returns); 2 while one writes or hands the signal on (not
/// worth waiting for: that may be the caller's own previous handler, or the process is ending).
int tb_crash_settle(void);

/// Test hook: from now on the handler, once it has taken a target (and claimed its regions), creates the
/// file `path` and sleeps `pause_ms` before it reads them (so a test can unregister the target meanwhile);
/// with `when_owned`, instead once it has taken the handler, before it writes anything (so a test can
/// crash another thread meanwhile). `path` must outlive it. Debug builds only (`TELEMETRY_BUFFER_FAILPOINTS`,
/// as the Swift failpoints that call it): a release build of this target has no such function.
void tb_crash_test_pause(const char *path, int pause_ms, int when_owned);

/// Gives the calling thread an alternate signal stack of TB_CRASH_ALTERNATE_STACK_SIZE bytes, unless it
/// has one at least that large. Without one, a stack overflow on the thread cannot run any handler.
/// Returns 0, or an errno value: ENOTSUP on watchOS and tvOS, which prohibit `sigaltstack`.
int tb_crash_install_alternate_stack(void);

/// Linux: 1 when a store into a page of a `MAP_SHARED` mapping of `fd` never asks the file system for space
/// once the file is allocated (ext2/3/4, XFS, tmpfs), 0 when it may or cannot be told (btrfs, ZFS, bcachefs,
/// F2FS, overlayfs, FUSE, NFS…): there a full disk raises SIGBUS in the storing thread, and a nearly full
/// btrfs can stall it in the kernel. Elsewhere 0 (Apple platforms ask in Swift: see `MappedFile`).
int tb_file_overwrites_in_place(int fd);

/// Starts writing the file's dirty pages to the disk without waiting (Linux: `sync_file_range` with
/// `SYNC_FILE_RANGE_WRITE`; elsewhere nothing). Not a sync: it makes nothing durable; an `fsync` after it
/// does, and waits less. Returns 0, or the `errno` of the failure (`EINTR` is retried).
int tb_start_writeback(int fd);

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

/// Whether `tb_gzip` can compress: the system's zlib could be loaded (once, on the first call).
int tb_gzip_available(void);

/// Compresses `count` bytes of `source` into one gzip member at `destination` (room for `capacity`
/// bytes) with zlib's default level. Returns its length, or 0 when zlib is missing or it does not fit.
size_t tb_gzip(const uint8_t *source, size_t count, uint8_t *destination, size_t capacity);

#endif
