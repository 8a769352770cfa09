// Starting the writeback of files before waiting for each: `fsync` one file after another waits for each
// file's data to reach the disk in turn, one round trip per file; with the writes of all of them queued
// first, the disk takes them together and each `fsync` then mostly finds its data written.

// Android declares `sync_file_range` from API level 26.
#if defined(__linux__) && (!defined(__ANDROID__) || __ANDROID_API__ >= 26)
#define TB_HAS_SYNC_FILE_RANGE 1
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#endif

#include "CTelemetrySignals.h"

#if defined(TB_HAS_SYNC_FILE_RANGE)

int tb_start_writeback(int fd) {
    while (sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE) != 0) {
        if (errno != EINTR) return errno;
    }
    return 0;
}

#else

int tb_start_writeback(int fd) { (void)fd; return 0; }

#endif
