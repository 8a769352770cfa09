// CRC-32C (Castagnoli) with the CPU's instruction: SSE 4.2 `crc32` on x86_64 (checked at run time),
// the ARMv8 CRC extension where the compiler targets it. Swift has no access to these instructions.
#include "CTelemetrySignals.h"

#include <string.h>

#if defined(__x86_64__)
#include <nmmintrin.h>

__attribute__((target("sse4.2")))
static uint32_t crc32c_instruction(uint32_t crc, const uint8_t *bytes, size_t count) {
    uint64_t state = (uint32_t)~crc;
    for (; count >= 8; bytes += 8, count -= 8) {
        uint64_t word;
        memcpy(&word, bytes, 8);
        state = _mm_crc32_u64(state, word);
    }
    uint32_t tail = (uint32_t)state;
    for (; count > 0; bytes++, count--) tail = _mm_crc32_u8(tail, *bytes);
    return ~tail;
}

int tb_crc32c_available(void) { return __builtin_cpu_supports("sse4.2"); }

#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
#include <arm_acle.h>

static uint32_t crc32c_instruction(uint32_t crc, const uint8_t *bytes, size_t count) {
    uint32_t state = ~crc;
    for (; count >= 8; bytes += 8, count -= 8) {
        uint64_t word;
        memcpy(&word, bytes, 8);
        state = __crc32cd(state, word);
    }
    for (; count > 0; bytes++, count--) state = __crc32cb(state, *bytes);
    return ~state;
}

int tb_crc32c_available(void) { return 1; }

#else
static uint32_t crc32c_instruction(uint32_t crc, const uint8_t *bytes, size_t count) {
    (void)bytes;
    (void)count;
    return crc;
}

int tb_crc32c_available(void) { return 0; }
#endif

uint32_t tb_crc32c(uint32_t crc, const void *bytes, size_t count) {
    return crc32c_instruction(crc, (const uint8_t *)bytes, count);
}
