#ifndef TB_BUFFER_FORMAT_H
#define TB_BUFFER_FORMAT_H

#include <stdint.h>

// The one definition of the framing every buffer file and in-memory region shares, read by the crash
// handler here and imported by Swift (`RecordFraming`). All integers little-endian.
//
// header (32 bytes): magic "TBUF" | u16 version | u8 kind | u8 lanes | u64 created (µs since 1970)
//                    | u64 committed length of the records | u64 publication marker
// lanes: a buffer with more than one lane (version 2) keeps its records in that many runs, each with its
//        own committed length, so that threads adding at once write apart. The header then takes 64 bytes
//        per lane: lane 0's committed length is the one above and its records follow the header; lane
//        k ≥ 1 keeps its committed length at 64 k and where its records start at 64 k + 8. A buffer of one
//        lane is written as version 1 (lanes byte 0), which is all the crash handler writes.
// record (25 bytes, then the payload): u32 payload length | u32 CRC-32C | u8 category | u64 nonce | u64 sequence
// marker: u32 first staged envelope | u16 envelope count | u8 state | u8 claim (0 on disk)
// Every later version keeps magic, version and marker where they are: an older version sets a newer
// file aside, and must still leave the envelopes its marker names (and its generation's boot) alone.

enum {
    TB_FORMAT_VERSION = 2,
    TB_HEADER_SIZE = 32,
    TB_HEADER_MAGIC_OFFSET = 0,
    TB_HEADER_VERSION_OFFSET = 4,
    TB_HEADER_KIND_OFFSET = 6,
    TB_HEADER_LANES_OFFSET = 7,
    TB_HEADER_CREATED_OFFSET = 8,
    TB_HEADER_COMMITTED_OFFSET = 16,
    TB_HEADER_MARKER_OFFSET = 24,
    TB_LANE_LINE = 64,
    TB_LANE_COMMITTED_OFFSET = 0,
    TB_LANE_START_OFFSET = 8,
    TB_MAX_LANES = 8,

    TB_RECORD_HEADER_SIZE = 25,
    TB_RECORD_LENGTH_OFFSET = 0,
    TB_RECORD_CRC_OFFSET = 4,
    TB_RECORD_CATEGORY_OFFSET = 8,
    TB_RECORD_NONCE_OFFSET = 9,
    TB_RECORD_SEQUENCE_OFFSET = 17,

    TB_MARKER_FIRST_SHIFT = 0,
    TB_MARKER_COUNT_SHIFT = 32,
    TB_MARKER_STATE_SHIFT = 48,
    TB_MARKER_CLAIM_SHIFT = 56,
};

/// The header's first four bytes, "TBUF".
static const uint8_t tb_header_magic[4] = { 0x54, 0x42, 0x55, 0x46 };

/// What a framed buffer is (the header's kind byte).
enum {
    TB_KIND_MEMORY_LIST = 1,
    TB_KIND_CRASH_SAFE_LIST = 2,
    TB_KIND_ASYNC_IO_CACHE = 3,
    TB_KIND_STREAM_CACHE = 4,
    TB_KIND_RECOVERED = 5,
};

/// What a record holds (its category byte).
enum {
    TB_CATEGORY_LOG = 1,
    TB_CATEGORY_SPAN = 2,
    TB_CATEGORY_TRACE_METRIC = 3,
};

/// The marker's state byte.
enum {
    TB_MARKER_IDLE = 0,
    TB_MARKER_PUBLISHING = 1,
    TB_MARKER_CAPTURED = 2,
};

/// The committed record length of a live region, read after every record byte before it (acquire).
static inline uint64_t tb_header_committed(const uint8_t *header) {
    return __atomic_load_n((const uint64_t *)(header + TB_HEADER_COMMITTED_OFFSET), __ATOMIC_ACQUIRE);
}

/// The word a live region's publication marker is stored in.
static inline uint64_t *tb_header_marker_word(uint8_t *header) {
    return (uint64_t *)(header + TB_HEADER_MARKER_OFFSET);
}

#endif
