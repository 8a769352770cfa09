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

/// The same to standard error.
void tb_demo_say_error(const char *text);

/// Stores through a null pointer (a SIGSEGV at this instruction), likewise for the child of a `fork()`.
void tb_demo_fault(void);

/// Sends the calling thread the SIGBUS that Linux sends for a memory error found in the background
/// (`BUS_MCEERR_AO`: nothing recurs; the default action ends the process). Returns -1 where it cannot.
int tb_demo_machine_check_optional(void);

/// Reads `fd` until its end (the parent closed the pipe's other end), then calls `exit(0)`, which runs the
/// `atexit` hooks: for the child of a `fork()` that lives on, then exits gracefully.
void tb_demo_wait_then_exit(int fd);

/// Installs a crash reporter's handler for the fatal signals that says `chaining reporter called` and
/// then calls the action it replaced, as PLCrashReporter and Bugsnag chain.
void tb_demo_install_chaining_reporter(void);

/// Installs a crash reporter's handler for the fatal signals that says `restoring reporter called`, then
/// puts back the action it replaced and raises the signal again, as KSCrash and SentryCrash hand on.
void tb_demo_install_restoring_reporter(void);

/// Puts back the actions `tb_demo_install_chaining_reporter` or `…restoring…` replaced.
void tb_demo_uninstall_reporter(void);

/// Installs, for the fatal signals, a plain handler with SA_RESETHAND and SIGUSR1 in its mask, which says
/// whether SIGUSR1 and the signal are blocked while it runs, then returns.
void tb_demo_install_resetting_handler(void);

#endif
