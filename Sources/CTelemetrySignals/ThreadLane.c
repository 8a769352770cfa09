// Which lane of a crash-safe list a thread writes its records into (see BufferFormat.h): threads take
// numbers in turn at their first add, so two threads adding at once, the case lanes are for, write apart.

#include "CTelemetrySignals.h"

static unsigned next_lane = 0;
static _Thread_local unsigned thread_lane = 0;  // 0: none yet; else the number + 1

unsigned tb_thread_lane(void) {
    if (thread_lane == 0) thread_lane = __atomic_fetch_add(&next_lane, 1, __ATOMIC_RELAXED) + 1;
    return thread_lane - 1;
}
