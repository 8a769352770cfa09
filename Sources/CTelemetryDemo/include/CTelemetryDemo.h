#ifndef C_TELEMETRY_DEMO_H
#define C_TELEMETRY_DEMO_H

#include <sys/types.h>

/// `fork()`, which Swift's Darwin overlay marks unavailable: the demo forks a child that adds (its test of
/// the library's fork guards). The demo builds for macOS and Linux only; watchOS and tvOS prohibit `fork`.
pid_t tb_demo_fork(void);

#endif
