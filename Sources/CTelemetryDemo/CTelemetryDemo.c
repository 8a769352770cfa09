#include "CTelemetryDemo.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

pid_t tb_demo_fork(void) { return fork(); }

void tb_demo_say(const char *text) { (void)!write(1, text, strlen(text)); }

void tb_demo_fault(void) {
    volatile int *nowhere = (volatile int *)(uintptr_t)8;
    *nowhere = 42;
}

void tb_demo_wait_then_exit(int fd) {
    char byte;
    while (read(fd, &byte, 1) > 0) {}
    exit(0);
}
