#ifndef C_TELEMETRY_SIGNALS_H
#define C_TELEMETRY_SIGNALS_H

#include <stdint.h>

// Primitives shared by the Swift side and code that must stay async-signal-safe (a crash handler reads
// a list's committed length while another thread may be appending). Swift has no atomics for iOS 13,
// so these are C11 builtins, inlined into the Swift caller.

/// Publishes `value` (a committed length) after every earlier store to the record bytes.
static inline void tb_store_release_u64(uint64_t *address, uint64_t value) {
    __atomic_store_n(address, value, __ATOMIC_RELEASE);
}

/// Reads a committed length; every record byte before it is visible afterwards.
static inline uint64_t tb_load_acquire_u64(const uint64_t *address) {
    return __atomic_load_n(address, __ATOMIC_ACQUIRE);
}

#endif
