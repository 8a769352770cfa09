// CRC-32C (Castagnoli) with the CPU's instruction: SSE 4.2 `crc32` on x86_64, the ARMv8 CRC extension on
// arm64 (each checked at run time). Swift has no access to these instructions.
#include "CTelemetrySignals.h"

#include <string.h>

#if defined(__x86_64__)
#include <nmmintrin.h>
#include <wmmintrin.h>
#include <pthread.h>

// Three independent streams keep the CPU's CRC unit busy (one instruction per cycle, each result ready
// after three): the buffer is cut into thirds of L bytes, each third is checksummed from state zero in
// the same loop, and the three states are combined by shifting the first two over the bytes after them.
// Shifting a state c over L bytes is c·x^(8L) mod P: a carry-less multiply by K = x^(8L-33) mod P, then
// the CRC instruction on the 64-bit product, which multiplies by the remaining x^33 and reduces.
#define STREAM_MIN 64   // below 3 × 64 bytes the combine costs more than it saves
#define STREAM_MAX 256  // longer buffers go 768 bytes at a time
static uint32_t shift_constants[2 * STREAM_MAX / 8 + 1];  // [n]: x^(64n-33) mod P, n = L/8
static int pclmul_available;

static void prepare_shift_constants(void) {
    pclmul_available = __builtin_cpu_supports("pclmul");
    // x^n mod P, reflected: the polynomial 1 is bit 31; multiplying by x is a right shift that folds
    // the bit leaving x^31 back in as P's low terms.
    uint32_t power = 0x80000000u;
    unsigned exponent = 0;
    for (size_t n = 1; n < sizeof(shift_constants) / sizeof(shift_constants[0]); n++) {
        for (; exponent < 64 * n - 33; exponent++) power = (power >> 1) ^ ((power & 1) ? 0x82F63B78u : 0);
        shift_constants[n] = power;
    }
}

__attribute__((target("sse4.2,pclmul")))
static uint64_t shifted(uint64_t state, size_t length) {
    __m128i product = _mm_clmulepi64_si128(_mm_cvtsi64_si128((long long)state),
                                           _mm_cvtsi64_si128((long long)shift_constants[length / 8]), 0x00);
    return _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(product));
}

__attribute__((target("sse4.2,pclmul")))
static uint32_t crc32c_instruction(uint32_t crc, const uint8_t *bytes, size_t count) {
    uint64_t state = (uint32_t)~crc;
    while (pclmul_available && count >= 3 * STREAM_MIN) {
        size_t length = count / 24 * 8;
        if (length > STREAM_MAX) length = STREAM_MAX;
        uint64_t second = 0, third = 0;
        for (size_t offset = 0; offset < length; offset += 8) {
            uint64_t words[3];
            memcpy(&words[0], bytes + offset, 8);
            memcpy(&words[1], bytes + length + offset, 8);
            memcpy(&words[2], bytes + 2 * length + offset, 8);
            state = _mm_crc32_u64(state, words[0]);
            second = _mm_crc32_u64(second, words[1]);
            third = _mm_crc32_u64(third, words[2]);
        }
        state = shifted(state, 2 * length) ^ shifted(second, length) ^ third;
        bytes += 3 * length;
        count -= 3 * length;
    }
    for (; count >= 8; bytes += 8, count -= 8) {
        uint64_t word;
        memcpy(&word, bytes, 8);
        state = _mm_crc32_u64(state, word);
    }
    uint32_t tail = (uint32_t)state;
    for (; count > 0; bytes++, count--) tail = _mm_crc32_u8(tail, *bytes);
    return ~tail;
}

int tb_crc32c_available(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, prepare_shift_constants);
    return __builtin_cpu_supports("sse4.2");
}

#elif defined(__aarch64__)
// The ARMv8 CRC extension, through a target attribute: compilers for iOS, tvOS and watchOS do not assume it
// (no __ARM_FEATURE_CRC32), though Apple's arm64 CPUs have it, so it is asked for at run time there.
#if defined(__APPLE__)
#include <sys/sysctl.h>
#elif defined(__linux__)
#include <sys/auxv.h>
#endif

__attribute__((target("crc")))
static uint32_t crc32c_instruction(uint32_t crc, const uint8_t *bytes, size_t count) {
    uint32_t state = ~crc;
    for (; count >= 8; bytes += 8, count -= 8) {
        uint64_t word;
        memcpy(&word, bytes, 8);
        state = __builtin_arm_crc32cd(state, word);
    }
    for (; count > 0; bytes++, count--) state = __builtin_arm_crc32cb(state, *bytes);
    return ~state;
}

int tb_crc32c_available(void) {
#if defined(__ARM_FEATURE_CRC32)
    return 1;
#elif defined(__APPLE__)
    int value = 0;
    size_t size = sizeof value;
    return sysctlbyname("hw.optional.armv8_crc32", &value, &size, NULL, 0) == 0 && value == 1;
#elif defined(__linux__)
    return (getauxval(AT_HWCAP) & (1UL << 7)) != 0;  // HWCAP_CRC32
#else
    return 0;
#endif
}

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
