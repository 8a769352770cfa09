// The scan behind every JSON string the encoder writes: copy bytes until one must be escaped, 16 at a
// time with the vector unit both 64-bit targets always have (SSE2, NEON). Swift's SIMD types compile to
// byte loops here, which is why this is C.
#include "CTelemetrySignals.h"

#include <string.h>

#if defined(__x86_64__) || defined(__aarch64__)

#if defined(__x86_64__)
#include <emmintrin.h>
typedef __m128i block;

static inline block load_block(const uint8_t *bytes) { return _mm_loadu_si128((const __m128i *)bytes); }
static inline void store_block(uint8_t *bytes, block value) { _mm_storeu_si128((__m128i *)bytes, value); }
static inline block block_of_words(uint64_t low, uint64_t high) {
    return _mm_set_epi64x((long long)high, (long long)low);
}

// The index (0–15) of the first byte of `value` that is `"`, `\` or below 0x20, or 16 for none.
static inline unsigned first_flagged(block value) {
    __m128i quote = _mm_cmpeq_epi8(value, _mm_set1_epi8('"'));
    __m128i backslash = _mm_cmpeq_epi8(value, _mm_set1_epi8('\\'));
    // Unsigned min(v, 0x1F) == v exactly when v ≤ 0x1F (SSE2 has no unsigned less-than).
    __m128i control = _mm_cmpeq_epi8(_mm_min_epu8(value, _mm_set1_epi8(0x1F)), value);
    unsigned mask = (unsigned)_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, backslash), control));
    return mask ? (unsigned)__builtin_ctz(mask) : 16;
}
#else
#include <arm_neon.h>
typedef uint8x16_t block;

static inline block load_block(const uint8_t *bytes) { return vld1q_u8(bytes); }
static inline void store_block(uint8_t *bytes, block value) { vst1q_u8(bytes, value); }
static inline block block_of_words(uint64_t low, uint64_t high) {
    return vcombine_u8(vcreate_u8(low), vcreate_u8(high));
}

static inline unsigned first_flagged(block value) {
    uint8x16_t flags = vorrq_u8(vorrq_u8(vceqq_u8(value, vdupq_n_u8('"')), vceqq_u8(value, vdupq_n_u8('\\'))),
                                vcltq_u8(value, vdupq_n_u8(0x20)));
    // NEON has no byte mask: narrowing each 16-bit lane by 4 bits leaves four bits per byte in a word.
    uint64_t nibbles = vget_lane_u64(vreinterpret_u64_u8(vshrn_n_u16(vreinterpretq_u16_u8(flags), 4)), 0);
    return nibbles ? (unsigned)__builtin_ctzll(nibbles) / 4 : 16;
}
#endif

static inline uint64_t load_word(const uint8_t *bytes) {
    uint64_t word;
    memcpy(&word, bytes, 8);
    return word;
}

static inline uint64_t load_half(const uint8_t *bytes) {
    uint32_t half;
    memcpy(&half, bytes, 4);
    return half | 0x6161616100000000u;  // padding that needs no escape
}

size_t tb_json_copy_clean(uint8_t *destination, const uint8_t *source, size_t count) {
    size_t index = 0;
    for (; count - index >= 16; index += 16) {
        block value = load_block(source + index);
        store_block(destination + index, value);
        unsigned flagged = first_flagged(value);
        if (flagged < 16) return index + flagged;
    }
    if (index == count) return count;
    if (index > 0) {
        // The last 16 bytes, overlapping bytes already checked and copied (they are stored again unchanged).
        size_t start = count - 16;
        block value = load_block(source + start);
        store_block(destination + start, value);
        unsigned flagged = first_flagged(value);
        return flagged < 16 ? start + flagged : count;
    }
    // Fewer than 16 bytes: the first and the last 8 (or 4) of them, overlapping, in one block, so nothing is
    // read or written outside the string.
    size_t part;
    block value;
    if (count >= 8) {
        part = 8;
        uint64_t low = load_word(source), high = load_word(source + count - 8);
        memcpy(destination, &low, 8);
        memcpy(destination + count - 8, &high, 8);
        value = block_of_words(low, high);
    } else if (count >= 4) {
        part = 4;
        uint64_t low = load_half(source), high = load_half(source + count - 4);
        memcpy(destination, &low, 4);
        memcpy(destination + count - 4, &high, 4);
        value = block_of_words(low, high);
    } else {
        for (; index < count; index++) {
            uint8_t byte = source[index];
            if (byte == '"' || byte == '\\' || byte < 0x20) return index;
            destination[index] = byte;
        }
        return count;
    }
    unsigned flagged = first_flagged(value);
    // The padding never flags, so a flag is in the first part or in the last one.
    if (flagged < 8) return flagged;
    return flagged < 16 ? count - part + (flagged - 8) : count;
}

#else

size_t tb_json_copy_clean(uint8_t *destination, const uint8_t *source, size_t count) {
    for (size_t index = 0; index < count; index++) {
        uint8_t byte = source[index];
        if (byte == '"' || byte == '\\' || byte < 0x20) return index;
        destination[index] = byte;
    }
    return count;
}

#endif
