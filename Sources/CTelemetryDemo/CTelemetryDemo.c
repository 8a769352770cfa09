#include "CTelemetryDemo.h"

#include <unistd.h>

pid_t tb_demo_fork(void) { return fork(); }
