// The crash handler. Everything reachable from `handle` is async-signal-safe: it reads state prepared
// in advance (lock-free), calls only open/write/fsync/close/rename (their *at forms on prepared folder
// descriptors), clock_gettime, sigaction and raise, and allocates nothing.
#include "CTelemetrySignals.h"

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

enum { SIGNAL_COUNT = 8, FATAL_COUNT = 7, HEADER = 32, RECORD_HEADER = 25, CATEGORY_LOG = 1, CATEGORY_SPAN = 2 };
static const int signals_handled[SIGNAL_COUNT] = { SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGSEGV, SIGTRAP, SIGSYS, SIGTERM };
static struct sigaction previous_actions[SIGNAL_COUNT];
static int installed[SIGNAL_COUNT];

typedef struct slot {
    int state;  // 0 free, 1 being filled, 2 ready
    tb_crash_target target;
} slot;
static slot slots[TB_CRASH_MAX_TARGETS];

static int handling;           // 0 idle, 1 writing, 2 written
static pthread_t writer;       // the thread writing, valid while handling == 1
static unsigned envelope_counter;

// MARK: Small async-signal-safe helpers

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

static size_t text_length(const char *text) {
    size_t length = 0;
    while (text[length] != 0) length++;
    return length;
}

static int write_text(int fd, const char *text) { return write_all(fd, text, text_length(text)); }

static int write_decimal(int fd, uint64_t value) {
    char reversed[20], digits[20];
    size_t count = 0;
    do {
        reversed[count++] = (char)('0' + value % 10);
        value /= 10;
    } while (value != 0);
    for (size_t index = 0; index < count; index++) digits[index] = reversed[count - 1 - index];
    return write_all(fd, digits, count);
}

static int same_bytes(const uint8_t *first, const uint8_t *second, size_t count) {
    for (size_t index = 0; index < count; index++) {
        if (first[index] != second[index]) return 0;
    }
    return 1;
}

static uint32_t load_u32(const uint8_t *bytes) {
    return (uint32_t)bytes[0] | (uint32_t)bytes[1] << 8 | (uint32_t)bytes[2] << 16 | (uint32_t)bytes[3] << 24;
}

static uint64_t committed_length(const uint8_t *region, size_t size) {
    uint64_t committed = tb_load_acquire_u64((const uint64_t *)(region + 16));
    return committed > size - HEADER ? size - HEADER : committed;
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

/// Makes a file written under its temporary name durable and gives it its name.
static void publish_file(int directory, int fd, const char *temporary, const char *name) {
    fsync(fd);
    close(fd);
    renameat(directory, temporary, directory, name);
}

// MARK: Regions verbatim (DoubleRotatingBuffer: detected-termination-x)

static void write_regions(const tb_crash_target *target) {
    for (int index = 0; index < 2; index++) {
        const uint8_t *region = target->regions[index];
        if (region == NULL || target->names[index] == NULL || target->region_sizes[index] < HEADER) continue;
        uint64_t committed = committed_length(region, target->region_sizes[index]);
        if (committed == 0) continue;
        char temporary[TB_CRASH_NAME_SIZE + 8];
        temporary_name(target->names[index], temporary);
        int fd = openat(target->directory_fd, temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0) continue;
        if (write_all(fd, region, HEADER + committed) != 0) {
            close(fd);
            continue;
        }
        publish_file(target->directory_fd, fd, temporary, target->names[index]);
    }
    fsync(target->directory_fd);
}

// MARK: Records as envelopes (FlushAll)

typedef struct snapshot {
    const uint8_t *records[2];
    size_t committed[2];
} snapshot;

typedef struct cursor {
    int region;
    size_t offset;
} cursor;

/// Finds the next record of `category` from `at`: sets its payload, moves `at` past it, and (if `found`
/// is given) stores where it starts. A record that does not fit ends its region.
static int next_record(const snapshot *records, cursor *at, uint8_t category, const uint8_t **payload,
                       size_t *length, cursor *found) {
    while (at->region < 2) {
        const uint8_t *base = records->records[at->region];
        size_t end = records->committed[at->region];
        if (base == NULL || end < RECORD_HEADER || at->offset > end - RECORD_HEADER) {
            at->region++;
            at->offset = 0;
            continue;
        }
        const uint8_t *record = base + at->offset;
        size_t size = load_u32(record);
        if (size == 0 || size > end - at->offset - RECORD_HEADER) {
            at->region++;
            at->offset = 0;
            continue;
        }
        if (found != NULL) *found = *at;
        at->offset += RECORD_HEADER + size;
        if (record[8] == category) {
            *payload = record + RECORD_HEADER;
            *length = size;
            return 1;
        }
    }
    return 0;
}

/// Opens a new envelope file named `<µs since 1970, 16 digits>-000000-c<counter, 7 hex>.envelope`, the
/// form (and age order) of the file transport's names.
static int open_envelope(const tb_crash_target *target, char *name, char *temporary) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t micros = (uint64_t)now.tv_sec * 1000000u + (uint64_t)now.tv_nsec / 1000u;
    size_t length = 0;
    for (int digit = 15; digit >= 0; digit--) {
        uint64_t power = 1;
        for (int step = 0; step < digit; step++) power *= 10;
        name[length++] = (char)('0' + (micros / power) % 10);
    }
    const char *middle = "-000000-c";
    for (size_t index = 0; middle[index] != 0; index++) name[length++] = middle[index];
    unsigned counter = envelope_counter++;
    for (int digit = 6; digit >= 0; digit--) name[length++] = "0123456789abcdef"[(counter >> (4 * digit)) & 0xF];
    const char *extension = ".envelope";
    for (size_t index = 0; extension[index] != 0; index++) name[length++] = extension[index];
    name[length] = 0;
    temporary_name(name, temporary);
    return openat(target->directory_fd, temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
}

/// Writes one item of `count` payloads of `category` (of `trace`, for spans) from `from`:
/// `{"type":…,"item_count":n,"content_type":…,"length":l}` LF `{"items":[p1,p2,…]}` LF.
static int write_item(int fd, const snapshot *records, cursor from, uint8_t category, const uint8_t *trace,
                      size_t count, size_t bytes) {
    int failed = 0;
    failed |= write_text(fd, category == CATEGORY_LOG ? "{\"type\":\"log\",\"item_count\":" : "{\"type\":\"span\",\"item_count\":");
    failed |= write_decimal(fd, count);
    failed |= write_text(fd, category == CATEGORY_LOG ? ",\"content_type\":\"application/vnd.sentry.items.log+json\",\"length\":"
                                                      : ",\"content_type\":\"application/vnd.sentry.items.span.v2+json\",\"length\":");
    failed |= write_decimal(fd, 12 + bytes + (count - 1));
    failed |= write_text(fd, "}\n{\"items\":[");
    const uint8_t *payload;
    size_t length, written = 0;
    while (written < count && next_record(records, &from, category, &payload, &length, NULL)) {
        if (trace != NULL && !same_bytes(payload + 13, trace, 32)) continue;
        if (written++ > 0) failed |= write_all(fd, ",", 1);
        failed |= write_all(fd, payload, length);
    }
    failed |= write_text(fd, "]}\n");
    return failed;
}

/// Whether `payload` is a span this library encoded: `{"trace_id":"` and 32 characters.
static int is_span(const uint8_t *payload, size_t length) {
    return length >= 46 && same_bytes(payload, (const uint8_t *)"{\"trace_id\":\"", 13) && payload[45] == '"';
}

static void write_envelopes(const tb_crash_target *target) {
    snapshot records;
    for (int index = 0; index < 2; index++) {
        const uint8_t *region = target->regions[index];
        int usable = region != NULL && target->region_sizes[index] >= HEADER;
        records.records[index] = usable ? region + HEADER : NULL;
        records.committed[index] = usable ? (size_t)committed_length(region, target->region_sizes[index]) : 0;
    }
    char name[TB_CRASH_NAME_SIZE], temporary[TB_CRASH_NAME_SIZE + 8];
    const uint8_t *payload;
    size_t length;

    // Logs in order, max_logs to an envelope.
    cursor next = { 0, 0 };
    for (;;) {
        cursor start = next;
        size_t count = 0, bytes = 0;
        while (count < (size_t)target->max_logs && next_record(&records, &next, CATEGORY_LOG, &payload, &length, NULL)) {
            count++;
            bytes += length;
        }
        if (count == 0) break;
        int fd = open_envelope(target, name, temporary);
        if (fd < 0) break;
        int failed = write_all(fd, target->log_header, target->log_header_length);
        failed |= write_item(fd, &records, start, CATEGORY_LOG, NULL, count, bytes);
        if (failed) close(fd); else publish_file(target->directory_fd, fd, temporary, name);
    }

    // Spans: one envelope per trace (max_spans each), traces in order of first appearance.
    cursor scan = { 0, 0 }, first;
    while (next_record(&records, &scan, CATEGORY_SPAN, &payload, &length, &first)) {
        if (!is_span(payload, length)) continue;
        const uint8_t *trace = payload + 13;
        cursor earlier = { 0, 0 }, at;
        const uint8_t *other;
        size_t other_length;
        int seen = 0;
        while (next_record(&records, &earlier, CATEGORY_SPAN, &other, &other_length, &at)
               && (at.region != first.region || at.offset != first.offset)) {
            if (is_span(other, other_length) && same_bytes(other + 13, trace, 32)) { seen = 1; break; }
        }
        if (seen) continue;
        cursor from = first;
        for (;;) {
            cursor walk = from, end = from;
            size_t count = 0, bytes = 0;
            while (count < (size_t)target->max_spans && next_record(&records, &walk, CATEGORY_SPAN, &other, &other_length, NULL)) {
                if (!is_span(other, other_length) || !same_bytes(other + 13, trace, 32)) continue;
                count++;
                bytes += other_length;
                end = walk;
            }
            if (count == 0) break;
            int fd = open_envelope(target, name, temporary);
            if (fd < 0) break;
            int failed = write_all(fd, target->span_header_prefix, target->span_header_prefix_length);
            failed |= write_all(fd, trace, 32);
            failed |= write_all(fd, target->span_header_suffix, target->span_header_suffix_length);
            failed |= write_item(fd, &records, from, CATEGORY_SPAN, trace, count, bytes);
            if (failed) close(fd); else publish_file(target->directory_fd, fd, temporary, name);
            from = end;
        }
    }
    fsync(target->directory_fd);
}

// MARK: The handler

static void write_targets(void) {
    for (int index = 0; index < TB_CRASH_MAX_TARGETS; index++) {
        if (__atomic_load_n(&slots[index].state, __ATOMIC_ACQUIRE) != 2) continue;
        tb_crash_target target = slots[index].target;
        if (target.mode == TB_CRASH_WRITE_REGIONS) write_regions(&target);
        else if (target.mode == TB_CRASH_WRITE_ENVELOPES) write_envelopes(&target);
    }
}

static int signal_index(int signal) {
    for (int index = 0; index < SIGNAL_COUNT; index++) {
        if (signals_handled[index] == signal) return index;
    }
    return -1;
}

/// Hands the signal on as if we had never been there: the previous action is put back, then an
/// SA_SIGINFO handler is called with the original info and context (so a backtracer sees the crash, not
/// us), a plain handler is called, an ignored signal stays ignored, and a default action is taken by
/// raising the signal again: the process dies of the original signal.
static void chain(int signal, siginfo_t *info, void *context) {
    int index = signal_index(signal);
    if (index < 0) return;
    struct sigaction previous = previous_actions[index];
    sigaction(signal, &previous, NULL);
    if (previous.sa_flags & SA_SIGINFO) {
        if (previous.sa_sigaction != NULL) previous.sa_sigaction(signal, info, context);
    } else if (previous.sa_handler == SIG_DFL) {
        raise(signal);
    } else if (previous.sa_handler != SIG_IGN) {
        previous.sa_handler(signal);
    }
}

static void handle(int signal, siginfo_t *info, void *context) {
    int saved_errno = errno;
    int expected = 0;
    if (__atomic_compare_exchange_n(&handling, &expected, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        writer = pthread_self();
        write_targets();
        __atomic_store_n(&handling, 2, __ATOMIC_RELEASE);
    } else if (expected == 1 && !pthread_equal(writer, pthread_self())) {
        // Another thread is writing: let it finish (at most 2 s) before this one ends the process.
        struct timespec pause = { 0, 1000000 };
        for (int waited = 0; waited < 2000 && __atomic_load_n(&handling, __ATOMIC_ACQUIRE) == 1; waited++) nanosleep(&pause, NULL);
    }
    errno = saved_errno;
    chain(signal, info, context);
}

// MARK: Installation

int tb_crash_install_alternate_stack(void) {
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
}

int tb_crash_install(int signals) {
    tb_crash_install_alternate_stack();  // best effort: without it only stack overflows go unseen
    for (int index = 0; index < SIGNAL_COUNT; index++) {
        int wanted = index < FATAL_COUNT ? (signals & TB_CRASH_SIGNALS_FATAL) : (signals & TB_CRASH_SIGNALS_TERM);
        if (!wanted || installed[index]) continue;
        struct sigaction action;
        memset(&action, 0, sizeof action);
        action.sa_sigaction = handle;
        action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
        sigemptyset(&action.sa_mask);
        if (sigaction(signals_handled[index], &action, &previous_actions[index]) != 0) return errno;
        installed[index] = 1;
    }
    return 0;
}

void tb_crash_uninstall(void) {
    for (int index = 0; index < SIGNAL_COUNT; index++) {
        if (!installed[index]) continue;
        struct sigaction current;
        // Someone installed after us: leave theirs (they may chain to us, and we stay harmless).
        if (sigaction(signals_handled[index], NULL, &current) == 0 && (current.sa_flags & SA_SIGINFO)
            && current.sa_sigaction == handle) {
            sigaction(signals_handled[index], &previous_actions[index], NULL);
        }
        installed[index] = 0;
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
    if (slot >= 0 && slot < TB_CRASH_MAX_TARGETS) __atomic_store_n(&slots[slot].state, 0, __ATOMIC_RELEASE);
}
