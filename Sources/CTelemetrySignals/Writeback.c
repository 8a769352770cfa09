// Starting the writeback of files before waiting for each: `fsync` one file after another waits for each
// file's data to reach the disk in turn, one round trip per file; with the writes of all of them queued
// first, the disk takes them together and each `fsync` then mostly finds its data written.

#if defined(__linux__)
#define _GNU_SOURCE
#include <fcntl.h>
#endif

#include "CTelemetrySignals.h"

#if defined(__linux__)

void tb_start_writeback(int fd) {
    // Only a hint: a failure (an I/O error of an earlier write) is what the `fsync` that follows reports.
    (void)sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
}

#else

void tb_start_writeback(int fd) { (void)fd; }

#endif
