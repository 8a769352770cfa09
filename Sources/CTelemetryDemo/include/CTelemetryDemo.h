#ifndef C_TELEMETRY_DEMO_H
#define C_TELEMETRY_DEMO_H

#include <sys/types.h>

/// `fork()`, which Swift's Darwin overlay marks unavailable: the demo forks a child that adds (its test of
/// the library's fork guards). The demo builds for macOS and Linux only; watchOS and tvOS prohibit `fork`.
pid_t tb_demo_fork(void);

/// Writes `text` to standard output with one `write`: for the child of a `fork()`, where Swift code that
/// takes a lock of the runtime (a metadata or conformance lookup) can wait forever for a thread that
/// held it at the fork and does not exist in the child.
void tb_demo_say(const char *text);

/// Stores through a null pointer (a SIGSEGV at this instruction), likewise for the child of a `fork()`.
void tb_demo_fault(void);

/// Reads `fd` until its end (the parent closed the pipe's other end), then calls `exit(0)`, which runs the
/// `atexit` hooks: for the child of a `fork()` that lives on, then exits gracefully.
void tb_demo_wait_then_exit(int fd);

#endif
