// The crash handler. Everything reachable from `handle` is async-signal-safe: it reads state prepared
// in advance (lock-free, atomics only), calls only open/write/fsync (F_FULLFSYNC on Apple platforms)/
// close/rename/unlink (their *at forms on prepared folder descriptors), clock_gettime, nanosleep,
// sigaction, pthread_sigmask, sigpending, the sigset_t operations and raise, and allocates nothing.
#include "CTelemetrySignals.h"

#if defined(__APPLE__)
#include <TargetConditionals.h>
#endif

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

// MARK: State

enum { SIGNAL_COUNT = 8, FATAL_COUNT = 7, HEADER = TB_HEADER_SIZE };
static const int signals_handled[SIGNAL_COUNT] = { SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGSEGV, SIGTRAP, SIGSYS, SIGTERM };
static struct sigaction previous_actions[SIGNAL_COUNT];
static int installed[SIGNAL_COUNT];
// The action in place once the previous action, called by `chain`, returned: one it put there (a reporter
// that restores what it saw at its install), which was there before ours and so does not call ours.
static struct sigaction handed_to_actions[SIGNAL_COUNT];
static int has_handed_to[SIGNAL_COUNT];

typedef struct slot {
    int state;    // 0 free, 1 being filled, 2 ready
    int readers;  // handlers holding the target: one reading it now, or one whose writes are not yet settled
    tb_crash_target target;
} slot;
static slot slots[TB_CRASH_MAX_TARGETS];

// The one handler that writes: the thread (0 when none) and how far it is. A handler that returns (the
// previous one did not end the process) leaves its files and claims; `tb_crash_settle`, in normal code a
// second later, decides the process survived and undoes them. Deciding inside the handler would be wrong
// both ways: `abort()` raises again after a handler returns, and a fault returns to its instruction.
enum { IDLE = 0, WRITING = 1, HANDING_ON = 2, RETURNED = 3, SETTLING = 4 };
static uintptr_t owner;
static int phase;
static struct timespec returned_at;

int tb_forked_child;

#ifdef TELEMETRY_BUFFER_FAILPOINTS
static const char *test_pause_path;
static int test_pause_ms;
static int test_pause_when_owned;
#endif

// What the writing handler did, so that it can be undone if the process survives the signal.
typedef struct undo {
    int held;  // 1: the slot's reader count is held until settled; 2: being written again
    int directory_fd;
    const char *names[2];
    uint64_t *claimed[2];
} undo;
static undo undos[TB_CRASH_MAX_TARGETS];

// MARK: Small async-signal-safe helpers

/// `fsync`, or on Apple platforms `fcntl(F_FULLFSYNC)` (the flush to stable storage, tried again if a
/// signal interrupted it), falling back to `fsync` if it fails: the handler has no one to tell of a
/// failure, so it tries what is left.
static void durable_sync(int fd) {
#ifdef F_FULLFSYNC
    int result;
    do { result = fcntl(fd, F_FULLFSYNC); } while (result != 0 && errno == EINTR);
    if (result == 0) return;
#endif
    fsync(fd);
}

static int write_all(int fd, const void *bytes, size_t count) {
    const uint8_t *cursor = bytes;
    while (count > 0) {
        ssize_t written = write(fd, cursor, count);
        if (written < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        cursor += written;
        count -= (size_t)written;
    }
    return 0;
}

static uint64_t committed_length(const uint8_t *region, size_t size) {
    uint64_t committed = tb_header_committed(region);
    return committed > size - HEADER ? size - HEADER : committed;
}

static uint64_t *marker_word(uint8_t *region) { return tb_header_marker_word(region); }

/// Sets the claim byte; returns the marker as it was.
static uint64_t claim(uint64_t *word) {
    return __atomic_fetch_or(word, TB_MARKER_CLAIMED, __ATOMIC_SEQ_CST);
}

/// `.<name>.tmp` into `temporary` (TB_CRASH_NAME_SIZE + 8 bytes).
static void temporary_name(const char *name, char *temporary) {
    size_t length = 0;
    temporary[length++] = '.';
    for (size_t index = 0; name[index] != 0 && length < TB_CRASH_NAME_SIZE + 2; index++) temporary[length++] = name[index];
    const char *suffix = ".tmp";
    for (size_t index = 0; suffix[index] != 0; index++) temporary[length++] = suffix[index];
    temporary[length] = 0;
}

#ifdef TELEMETRY_BUFFER_FAILPOINTS
static void pause_for_test(int owned) {
    if (test_pause_path == NULL || owned != test_pause_when_owned) return;
    int fd = open(test_pause_path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) close(fd);
    struct timespec pause = { test_pause_ms / 1000, (long)(test_pause_ms % 1000) * 1000000L };
    while (nanosleep(&pause, &pause) != 0 && errno == EINTR) {}
}
#else
// Release builds: the handler never pauses, whatever the environment says.
#define pause_for_test(owned) ((void)0)
#endif

// MARK: DoubleRotatingBuffer: sync the mapped lists

static void sync_files(const tb_crash_target *target) {
    pause_for_test(0);
    for (int index = 0; index < 2; index++) {
        if (target->file_fds[index] >= 0) durable_sync(target->file_fds[index]);
    }
}

// MARK: FlushAll: claim the regions, write them verbatim (detected-termination-x)

static void write_regions(const tb_crash_target *target, undo *done) {
    uint8_t headers[2][HEADER];
    for (int index = 0; index < 2; index++) {
        uint8_t *region = target->regions[index];
        if (region == NULL || target->region_sizes[index] < HEADER) continue;
        // From here the forward cannot commit or reset this region; the marker read is the one that counts.
        uint64_t marker = claim(marker_word(region));
        done->claimed[index] = marker_word(region);
        for (int byte = 0; byte < HEADER; byte++) headers[index][byte] = region[byte];
        for (int byte = 0; byte < 8; byte++) headers[index][TB_HEADER_MARKER_OFFSET + byte] = (uint8_t)(marker >> (8 * byte));
        headers[index][TB_HEADER_MARKER_OFFSET + TB_MARKER_CLAIM_SHIFT / 8] = 0;  // the claim byte
    }
    pause_for_test(0);
    // An append on another thread that did not see the claim finishes before the records are read (at
    // most 1 s; one on this thread was stopped by the crash and never returns).
    if (target->appending != NULL) {
        uintptr_t self = (uintptr_t)pthread_self();
        struct timespec pause = { 0, 100000 };
        for (int waited = 0; waited < 10000; waited++) {
            uintptr_t appender = __atomic_load_n(target->appending, __ATOMIC_SEQ_CST);
            if (appender == 0 || appender == self) break;
            nanosleep(&pause, NULL);
        }
    }
    for (int index = 0; index < 2; index++) {
        const uint8_t *region = target->regions[index];
        if (done->claimed[index] == NULL || target->names[index] == NULL) continue;
        uint64_t committed = committed_length(region, target->region_sizes[index]);
        if (committed == 0) continue;
        for (int byte = 0; byte < 8; byte++) headers[index][TB_HEADER_COMMITTED_OFFSET + byte] = (uint8_t)(committed >> (8 * byte));
        char temporary[TB_CRASH_NAME_SIZE + 8];
        temporary_name(target->names[index], temporary);
        int fd = openat(target->directory_fd, temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) continue;
        if (write_all(fd, headers[index], HEADER) != 0 || write_all(fd, region + HEADER, committed) != 0) {
            close(fd);
            unlinkat(target->directory_fd, temporary, 0);
            continue;
        }
        durable_sync(fd);
        close(fd);
        if (renameat(target->directory_fd, temporary, target->directory_fd, target->names[index]) == 0) {
            done->names[index] = target->names[index];
        }
    }
    durable_sync(target->directory_fd);
    done->directory_fd = target->directory_fd;
}

// MARK: The handler

static void write_targets(int again) {
    for (int index = 0; index < TB_CRASH_MAX_TARGETS; index++) {
        if (again) {
            // The slots still held, with the same names; marked 2 meanwhile, so that `tb_crash_unregister`
            // cannot take the hold while this reads.
            int held = 1;
            if (__atomic_compare_exchange_n(&undos[index].held, &held, 2, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                tb_crash_target target = slots[index].target;
                if (target.mode == TB_CRASH_SYNC_FILES) sync_files(&target);
                else if (target.mode == TB_CRASH_WRITE_REGIONS) write_regions(&target, &undos[index]);
                __atomic_store_n(&undos[index].held, 1, __ATOMIC_RELEASE);
                continue;
            }
            // Not held: empty then, taken over by `tb_crash_unregister`, or a buffer registered since (its
            // items acknowledged, its regions never claimed): written as on a first signal.
            if (held != 0) continue;
        }
        undos[index] = (undo){ 0, -1, { NULL, NULL }, { NULL, NULL } };
        // Announce the read before checking the slot: `tb_crash_unregister` clears the slot, then waits
        // for readers, so either this sees it cleared or it waits for this (and for the settling).
        __atomic_add_fetch(&slots[index].readers, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&slots[index].state, __ATOMIC_SEQ_CST) != 2) {
            __atomic_sub_fetch(&slots[index].readers, 1, __ATOMIC_SEQ_CST);
            continue;
        }
        __atomic_store_n(&undos[index].held, 1, __ATOMIC_RELEASE);
        tb_crash_target target = slots[index].target;
        if (target.mode == TB_CRASH_SYNC_FILES) sync_files(&target);
        else if (target.mode == TB_CRASH_WRITE_REGIONS) write_regions(&target, &undos[index]);
    }
}

/// The process survived: what the handler wrote would publish its items a second time, and its claims
/// would stop every later forward. Remove the files, release the claims, let go of the slots.
static void undo_targets(void) {
    for (int index = 0; index < TB_CRASH_MAX_TARGETS; index++) {
        undo *done = &undos[index];
        int held = 1;
        if (!__atomic_compare_exchange_n(&done->held, &held, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) continue;
        for (int region = 0; region < 2; region++) {
            if (done->names[region] != NULL) unlinkat(done->directory_fd, done->names[region], 0);
            if (done->claimed[region] != NULL) __atomic_fetch_and(done->claimed[region], ~TB_MARKER_CLAIMED, __ATOMIC_SEQ_CST);
        }
        if (done->directory_fd >= 0) durable_sync(done->directory_fd);
        *done = (undo){ 0, -1, { NULL, NULL }, { NULL, NULL } };
        __atomic_sub_fetch(&slots[index].readers, 1, __ATOMIC_SEQ_CST);
    }
}

static int signal_index(int signal) {
    for (int index = 0; index < SIGNAL_COUNT; index++) {
        if (signals_handled[index] == signal) return index;
    }
    return -1;
}

static void handle(int signal, siginfo_t *info, void *context);

static int install_one(int index) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = handle;
    // SA_NODEFER: a handler chained to may need the signal unblocked (the Swift runtime's backtracer hangs
    // without: the helper thread it starts inherits the mask).
    action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    // A SIGTERM (say, the system ending the app) waits until the handler is done with its writes.
    sigaddset(&action.sa_mask, SIGTERM);
    return sigaction(signals_handled[index], &action, NULL);
}

/// Whether two actions call the same thing (sa_handler and sa_sigaction share storage).
static int same_action(const struct sigaction *first, const struct sigaction *second) {
    return first->sa_handler == second->sa_handler && (first->sa_flags & SA_SIGINFO) == (second->sa_flags & SA_SIGINFO);
}

/// Whether the signal is a fault the kernel raised at an instruction, which runs again when the handler
/// returns and faults again (as Crashpad's `Signals::WillSignalReraiseAutonomously` decides): SIGSEGV,
/// SIGBUS, SIGILL or SIGFPE with a positive code that no sender uses. Linux gives senders codes of 0 or
/// below, and SI_KERNEL to signals the kernel sends in software. Darwin gives senders 0 (its SI_* codes
/// are defined, not used), but stamps a fault's code on some signals however they came (SIGSEGV, SIGBUS
/// and SIGILL on arm64): one of those sent by `kill()` is taken for a fault, as Crashpad takes it, and the
/// process goes on with the default action put back (a second later it counts as survived). A SIGTRAP (a
/// breakpoint: how Swift traps on arm64) is not taken to recur, nor the SIGBUS Linux sends for a memory
/// error found in the background (`BUS_MCEERR_AO`), which is at no instruction.
static int recurs_by_itself(int signal, const siginfo_t *info) {
    if (info == NULL || (signal != SIGSEGV && signal != SIGBUS && signal != SIGILL && signal != SIGFPE)) return 0;
    int code = info->si_code;
#if defined(BUS_MCEERR_AO)
    if (signal == SIGBUS && code == BUS_MCEERR_AO) return 0;
#endif
    return code > 0 && code != SI_USER && code != SI_QUEUE && code != SI_TIMER && code != SI_MESGQ && code != SI_ASYNCIO
#if defined(SI_KERNEL)
        && code != SI_KERNEL
#endif
        ;
}

/// Hands the signal on as if we had never been there. If our action is the installed one, the previous
/// action is put back first (a handler installed after ours that chained to us is left in place). A
/// default action is put back too and then left to the signal itself: a fault that recurs (see
/// `recurs_by_itself`) faults again at its instruction once the handler returns, and anything else is
/// raised again, held until the handler returns (blocked, then unblocked by the return), so that either
/// way the process dies of the original signal in the original context, with none of our frames, and the
/// system's crash report keeps the fault's own type and address. An ignored signal stays ignored (a fault
/// still ends the process when its instruction runs again: the kernel does not let a fault be ignored), an
/// SA_SIGINFO handler is called with the original info and context (so a backtracer sees the crash, not
/// us), and a plain handler is called. Returns 1 when the default action will end the process once the
/// handler returns, or the signal waits to be delivered again then; else 0.
static int chain(int signal, siginfo_t *info, void *context) {
    int index = signal_index(signal);
    if (index < 0) return 0;
    struct sigaction previous = previous_actions[index], current;
    // Whether ours was the installed action (else it was called by one installed after it).
    int ours = sigaction(signal, NULL, &current) == 0 && (current.sa_flags & SA_SIGINFO) && current.sa_sigaction == handle;
    if (ours) sigaction(signal, &previous, NULL);
    // sa_handler and sa_sigaction share storage: SIG_DFL and SIG_IGN are checked before SA_SIGINFO.
    if (previous.sa_handler == SIG_DFL) {
        // SIG_DFL even over a handler installed after ours that chained to us, which the recurring fault
        // would reach again.
        struct sigaction fallback;
        memset(&fallback, 0, sizeof fallback);
        fallback.sa_handler = SIG_DFL;
        sigaction(signal, &fallback, NULL);
        if (!recurs_by_itself(signal, info)) {
            // Blocked first, so that it waits until the handler returns and the thread's own mask (which
            // lets it through) is back; then it is delivered in the original context.
            sigset_t only;
            sigemptyset(&only);
            sigaddset(&only, signal);
            pthread_sigmask(SIG_BLOCK, &only, NULL);
            raise(signal);
        }
        return 1;
    } else if (previous.sa_handler == SIG_IGN) {
        // Nothing to call.
    } else {
        // Called as the system would call it: with its mask, and the signal unless it asked for
        // SA_NODEFER, blocked (until our handler returns, which restores the thread's mask), and, if it asked
        // for SA_RESETHAND, with the default action in its place, not itself (a fault that recurs would call
        // it again).
        if ((previous.sa_flags & SA_RESETHAND) && sigaction(signal, NULL, &current) == 0 && same_action(&current, &previous)) {
            struct sigaction fallback;
            memset(&fallback, 0, sizeof fallback);
            fallback.sa_handler = SIG_DFL;
            sigaction(signal, &fallback, NULL);
        }
        sigset_t mask = previous.sa_mask;
        if (!(previous.sa_flags & SA_NODEFER)) sigaddset(&mask, signal);
        pthread_sigmask(SIG_BLOCK, &mask, NULL);
        if (previous.sa_flags & SA_SIGINFO) {
            previous.sa_sigaction(signal, info, context);
        } else {
            previous.sa_handler(signal);
        }
        if (ours && sigaction(signal, NULL, &current) == 0 && !((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == handle)) {
            handed_to_actions[index] = current;
            has_handed_to[index] = 1;
        }
        // It raised the signal again (`signal(SIG_DFL); raise()`, or a reporter's own action put back and
        // raised), held by the mask until ours returns: whatever comes of it, the process has not survived
        // yet. The settle a second later decides, if it lives on.
        sigset_t pending;
        if (sigpending(&pending) == 0 && sigismember(&pending, signal)) return 1;
    }
    return 0;
}

static int settle(int now);

/// Writes (or, after a returned handler, writes again: an append it cut short may have finished since),
/// hands the signal on, and notes a return.
static void write_and_chain(int signal, siginfo_t *info, void *context, int again) {
    __atomic_store_n(&phase, WRITING, __ATOMIC_RELEASE);
    write_targets(again);
    __atomic_store_n(&phase, HANDING_ON, __ATOMIC_RELEASE);
    int raised = chain(signal, info, context);
    // Still here: the process may survive, or die a moment later (see `owner`). A signal sent to it (not a
    // fault, which returns to its instruction, nor SIGABRT, which `abort()` raises again) whose default
    // action was not raised cannot come back by itself: it is settled now, and adds go on at once.
    clock_gettime(CLOCK_MONOTONIC, &returned_at);
    __atomic_store_n(&phase, RETURNED, __ATOMIC_RELEASE);
    // Sent by a process: Linux's codes for that are 0 or below; Darwin's are 0 (and SI_USER, SI_QUEUE).
    int sent = info != NULL && (info->si_code <= 0 || info->si_code == SI_USER || info->si_code == SI_QUEUE);
    if (!raised && sent && signal != SIGABRT) settle(1);
}

/// Whether another thread's handler has taken `owner` and not yet handed the signal on: writing, or in
/// the instructions between taking `owner` and saying it writes (the phase still idle then).
static int writing_elsewhere(void) {
    int current = __atomic_load_n(&phase, __ATOMIC_ACQUIRE);
    return current == WRITING || (current == IDLE && __atomic_load_n(&owner, __ATOMIC_ACQUIRE) != 0);
}

static void handle(int signal, siginfo_t *info, void *context) {
    int saved_errno = errno;
    uintptr_t self = (uintptr_t)pthread_self();
    if (tb_in_forked_child()) {
        // The parent's folder and lists: not ours to write.
        chain(signal, info, context);
        errno = saved_errno;
        return;
    }
    struct timespec pause = { 0, 1000000 };
    // Twice at most: a settle on another thread (undoing an earlier survived signal) can start between the
    // wait for it and the compare-and-swaps below, which then both fail; once it is done, this one writes
    // afresh rather than end the process unwritten.
    for (int attempt = 0; attempt < 2; attempt++) {
        for (int waited = 0; waited < 2000 && __atomic_load_n(&phase, __ATOMIC_ACQUIRE) == SETTLING; waited++) nanosleep(&pause, NULL);
        uintptr_t expected = 0;
        int returned = RETURNED;
        if (__atomic_compare_exchange_n(&owner, &expected, self, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            pause_for_test(1);
            write_and_chain(signal, info, context, 0);
            break;
        }
        if (__atomic_compare_exchange_n(&phase, &returned, WRITING, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            // An earlier signal's files, not settled yet: the claims still refuse new items, but an append
            // cut short by that signal may have finished since, so they are written again.
            __atomic_store_n(&owner, self, __ATOMIC_RELEASE);
            write_and_chain(signal, info, context, 1);
            break;
        }
        if (expected != self) {
            // Another thread owns the handler and is about to write, or writing, or settling: let it finish
            // (at most 10 s) before this one ends the process, which would lose what it has not written.
            for (int waited = 0; waited < 10000 && (writing_elsewhere() || __atomic_load_n(&phase, __ATOMIC_ACQUIRE) == SETTLING); waited++) {
                nanosleep(&pause, NULL);
            }
            if (attempt == 0 && __atomic_load_n(&phase, __ATOMIC_ACQUIRE) == IDLE && __atomic_load_n(&owner, __ATOMIC_ACQUIRE) == 0) continue;
        }
        chain(signal, info, context);
        break;
    }
    errno = saved_errno;
}

/// Undoes a returned handler's work (see `tb_crash_settle`); `now` skips the second's wait.
static int settle(int now) {
    int current = __atomic_load_n(&phase, __ATOMIC_ACQUIRE);
    if (current != RETURNED) {
        if (current == IDLE) return 0;
        return current == SETTLING ? 1 : 2;
    }
    if (!now) {
        struct timespec clock;
        clock_gettime(CLOCK_MONOTONIC, &clock);
        long long elapsed_ms = (long long)(clock.tv_sec - returned_at.tv_sec) * 1000 + (clock.tv_nsec - returned_at.tv_nsec) / 1000000;
        if (elapsed_ms < 1000) return 1;
    }
    int expected = RETURNED;
    if (!__atomic_compare_exchange_n(&phase, &expected, SETTLING, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return 1;
    undo_targets();
    // Take back the signals whose previous action `chain` put back, or the action that one left in place
    // (from before ours: it becomes ours's previous), unless someone changed them since.
    for (int index = 0; index < SIGNAL_COUNT; index++) {
        struct sigaction current_action;
        // Not over an ignored SIGTERM (the app's handler ignores it from now on), as an install would not.
        if (installed[index] && sigaction(signals_handled[index], NULL, &current_action) == 0
            && !(signals_handled[index] == SIGTERM && current_action.sa_handler == SIG_IGN)
            && (same_action(&current_action, &previous_actions[index])
                || (has_handed_to[index] && same_action(&current_action, &handed_to_actions[index])))) {
            previous_actions[index] = current_action;
            install_one(index);
        }
        has_handed_to[index] = 0;
    }
    __atomic_store_n(&owner, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&phase, IDLE, __ATOMIC_RELEASE);
    return 0;
}

int tb_crash_settle(void) { return settle(0); }

// MARK: Installation

int tb_crash_install_alternate_stack(void) {
#if defined(__APPLE__) && (TARGET_OS_WATCH || TARGET_OS_TV)
    return ENOTSUP;  // `sigaltstack` is prohibited there
#else
    stack_t current;
    if (sigaltstack(NULL, &current) == 0 && !(current.ss_flags & SS_DISABLE)
        && current.ss_size >= TB_CRASH_ALTERNATE_STACK_SIZE) return 0;
    void *stack = mmap(NULL, TB_CRASH_ALTERNATE_STACK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANON, -1, 0);
    if (stack == MAP_FAILED) return errno;
    stack_t replacement;
    replacement.ss_sp = stack;
    replacement.ss_size = TB_CRASH_ALTERNATE_STACK_SIZE;
    replacement.ss_flags = 0;
    if (sigaltstack(&replacement, NULL) != 0) {
        int error = errno;
        munmap(stack, TB_CRASH_ALTERNATE_STACK_SIZE);
        return error;
    }
    return 0;
#endif
}

int tb_crash_install(int signals) {
    tb_crash_install_alternate_stack();  // best effort: without it only stack overflows go unseen
    for (int index = 0; index < SIGNAL_COUNT; index++) {
        int wanted = index < FATAL_COUNT ? (signals & TB_CRASH_SIGNALS_FATAL) : (signals & TB_CRASH_SIGNALS_TERM);
        if (!wanted || installed[index]) continue;
        struct sigaction current;
        if (sigaction(signals_handled[index], NULL, &current) != 0) return errno;
        // Our own handler is never what came before it (that would call itself without end): it is in
        // place already, put back by someone, and the previous action saved with it still stands.
        if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == handle) {
            installed[index] = 1;
            continue;
        }
        // An ignored SIGTERM cannot end the process. (An ignored fault still does, and so does `abort()`.)
        // sa_handler shares storage with sa_sigaction: SIG_IGN whatever the flags say.
        if (signals_handled[index] == SIGTERM && current.sa_handler == SIG_IGN) continue;
        previous_actions[index] = current;
        if (install_one(index) != 0) return errno;
        installed[index] = 1;
    }
    return 0;
}

void tb_crash_uninstall(void) {
    for (int index = 0; index < SIGNAL_COUNT; index++) {
        if (!installed[index]) continue;
        struct sigaction current;
        if (sigaction(signals_handled[index], NULL, &current) != 0) continue;
        if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == handle) {
            sigaction(signals_handled[index], &previous_actions[index], NULL);
            installed[index] = 0;
        } else if (same_action(&current, &previous_actions[index]) || current.sa_handler == SIG_DFL || current.sa_handler == SIG_IGN
                   || (has_handed_to[index] && same_action(&current, &handed_to_actions[index]))) {
            // Put back by `chain` (a close from the previous handler itself), or its default for a reset, or
            // left by the previous action: nothing calls ours.
            installed[index] = 0;
        }
        // Else someone installed after us: theirs stays, and so does ours in their chain (with no buffer,
        // it writes nothing and hands the signal on to the action saved here). It stays installed, so that
        // the next install does not take their action for what came before ours: it calls or restores ours,
        // and ours installed over it again would go round without end. A buffer made then is reached through
        // it, as one made before it was (one that neither calls nor restores ours hides both alike).
    }
}

int tb_crash_register(const tb_crash_target *target) {
    for (int index = 0; index < TB_CRASH_MAX_TARGETS; index++) {
        int expected = 0;
        if (__atomic_compare_exchange_n(&slots[index].state, &expected, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            slots[index].target = *target;
            __atomic_store_n(&slots[index].state, 2, __ATOMIC_RELEASE);
            return index;
        }
    }
    return -1;
}

void tb_crash_unregister(int slot) {
    if (slot < 0 || slot >= TB_CRASH_MAX_TARGETS) return;
    __atomic_store_n(&slots[slot].state, 0, __ATOMIC_SEQ_CST);
    // A handler may hold the target: one on another thread reading it (the process is ending), or one
    // that returned and is settled a second later.
    struct timespec pause = { 0, 1000000 };
    while (__atomic_load_n(&slots[slot].readers, __ATOMIC_SEQ_CST) != 0) {
        // A handler done with its writes (handing the signal on, or returned) keeps its files: if the
        // process survives, they hold what this buffer could not forward while claimed, and the next start
        // publishes them. So the hold is taken over instead of waited for, which would never end when this
        // runs inside the previous handler (an app's SIGTERM handler that closes its buffers). Only a
        // handler writing right now is waited for.
        int current = __atomic_load_n(&phase, __ATOMIC_ACQUIRE), held = 1;
        if ((current == HANDING_ON || current == RETURNED)
            && __atomic_compare_exchange_n(&undos[slot].held, &held, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            __atomic_sub_fetch(&slots[slot].readers, 1, __ATOMIC_SEQ_CST);
            continue;
        }
        tb_crash_settle();
        nanosleep(&pause, NULL);
    }
}

#ifdef TELEMETRY_BUFFER_FAILPOINTS
void tb_crash_test_pause(const char *path, int pause_ms, int when_owned) {
    test_pause_ms = pause_ms;
    test_pause_when_owned = when_owned;
    __atomic_store_n(&test_pause_path, path, __ATOMIC_RELEASE);
}
#endif

/// The lock files' descriptors (`FolderLock`), each + 1 (0: a free slot). An `flock` belongs to the open
/// file, which a forked child shares: a child that lives on would keep the parent's folder locked after the
/// parent released it (a new buffer there, or the next start after a crash, failed with `folderInUse`).
static int folder_locks[64];
/// Held from a lock file's `open` to its registration, and from its unregistration to its `close`, and
/// across `fork()` (the hook's prepare step): a fork in between left the child a copy no one closed.
static pthread_mutex_t folder_locks_mutex = PTHREAD_MUTEX_INITIALIZER;

static void tb_folder_locks_hold_raw(void) { pthread_mutex_lock(&folder_locks_mutex); }

void tb_folder_locks_hold(void) {
    tb_fork_guard_install();
    pthread_mutex_lock(&folder_locks_mutex);
}

void tb_folder_locks_release(void) { pthread_mutex_unlock(&folder_locks_mutex); }

void tb_folder_lock_register(int fd) {
    for (size_t index = 0; index < sizeof folder_locks / sizeof *folder_locks; index++) {
        int free_slot = 0;
        if (__atomic_compare_exchange_n(&folder_locks[index], &free_slot, fd + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) return;
    }
}

void tb_folder_lock_unregister(int fd) {
    for (size_t index = 0; index < sizeof folder_locks / sizeof *folder_locks; index++) {
        int held = fd + 1;
        if (__atomic_compare_exchange_n(&folder_locks[index], &held, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) return;
    }
}

/// In the child of a `fork()`: marks it, and closes its copies of the lock files' descriptors (`close` is
/// async-signal-safe; the parent's keep their locks).
static void mark_forked_child(void) {
    __atomic_store_n(&tb_forked_child, 1, __ATOMIC_RELAXED);
    for (size_t index = 0; index < sizeof folder_locks / sizeof *folder_locks; index++) {
        int held = __atomic_exchange_n(&folder_locks[index], 0, __ATOMIC_ACQ_REL);
        if (held > 0) close(held - 1);
    }
    pthread_mutex_unlock(&folder_locks_mutex);  // taken by the forking thread, which the child's is
}

static void release_in_parent(void) { pthread_mutex_unlock(&folder_locks_mutex); }

static void register_fork_hook(void) {
    pthread_atfork(tb_folder_locks_hold_raw, release_in_parent, mark_forked_child);
}

void tb_fork_guard_install(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, register_fork_hook);
}
