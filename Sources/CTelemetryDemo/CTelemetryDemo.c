#include "CTelemetryDemo.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/syscall.h>
#endif

pid_t tb_demo_fork(void) { return fork(); }

void tb_demo_say(const char *text) { (void)!write(1, text, strlen(text)); }

void tb_demo_say_error(const char *text) { (void)!write(2, text, strlen(text)); }

void tb_demo_fault(void) {
    volatile int *nowhere = (volatile int *)(uintptr_t)8;
    *nowhere = 42;
}

int tb_demo_machine_check_optional(void) {
#if defined(__linux__) && defined(BUS_MCEERR_AO)
    siginfo_t info;
    memset(&info, 0, sizeof info);
    info.si_signo = SIGBUS;
    info.si_code = BUS_MCEERR_AO;
    // A code above 0 may be sent by a process to itself only, and only with this call.
    return (int)syscall(SYS_rt_tgsigqueueinfo, getpid(), (pid_t)syscall(SYS_gettid), SIGBUS, &info);
#else
    return -1;
#endif
}

void tb_demo_wait_then_exit(int fd) {
    char byte;
    while (read(fd, &byte, 1) > 0) {}
    exit(0);
}

// MARK: Other crash reporters' handlers

static const int reporter_signals[] = { SIGSEGV, SIGABRT, SIGBUS, SIGILL, SIGTRAP, SIGFPE };
#define REPORTER_SIGNALS (int)(sizeof reporter_signals / sizeof reporter_signals[0])
static struct sigaction reporter_previous[REPORTER_SIGNALS];

static int reporter_index(int signal) {
    for (int index = 0; index < REPORTER_SIGNALS; index++) if (reporter_signals[index] == signal) return index;
    return -1;
}

/// As PLCrashReporter or Bugsnag chain: report, then call the action saved at install (the default one put
/// back and the signal raised again).
static void chaining_reporter(int signal, siginfo_t *info, void *context) {
    tb_demo_say_error("chaining reporter called\n");
    int index = reporter_index(signal);
    struct sigaction previous = reporter_previous[index];
    if (previous.sa_handler == SIG_DFL || previous.sa_handler == SIG_IGN) {
        sigaction(signal, &previous, NULL);
        raise(signal);
    } else if (previous.sa_flags & SA_SIGINFO) {
        previous.sa_sigaction(signal, info, context);
    } else {
        previous.sa_handler(signal);
    }
}

/// Installs `reporter` for the fatal signals, saving the actions it replaces.
static void install_reporter(void (*reporter)(int, siginfo_t *, void *)) {
    for (int index = 0; index < REPORTER_SIGNALS; index++) {
        struct sigaction action;
        memset(&action, 0, sizeof action);
        action.sa_sigaction = reporter;
        action.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&action.sa_mask);
        sigaction(reporter_signals[index], &action, &reporter_previous[index]);
    }
}

void tb_demo_install_chaining_reporter(void) { install_reporter(chaining_reporter); }

/// As KSCrash and SentryCrash hand on: report, then put back the action saved at install and raise the
/// signal again.
static void restoring_reporter(int signal, siginfo_t *info, void *context) {
    (void)info;
    (void)context;
    tb_demo_say_error("restoring reporter called\n");
    sigaction(signal, &reporter_previous[reporter_index(signal)], NULL);
    raise(signal);
}

void tb_demo_install_restoring_reporter(void) { install_reporter(restoring_reporter); }

void tb_demo_uninstall_reporter(void) {
    for (int index = 0; index < REPORTER_SIGNALS; index++) sigaction(reporter_signals[index], &reporter_previous[index], NULL);
}

/// Says whether `signal` is blocked on the calling thread.
static const char *blocked(int signal) {
    sigset_t mask;
    pthread_sigmask(SIG_BLOCK, NULL, &mask);
    return sigismember(&mask, signal) ? "blocked" : "not blocked";
}

/// A handler that asks the system to reset it once called (SA_RESETHAND) and to block SIGUSR1 while it
/// runs: it says so, then returns (a fault recurs, and the default action ends the process).
static void resetting_handler(int signal) {
    tb_demo_say_error("resetting handler called: SIGUSR1 ");
    tb_demo_say_error(blocked(SIGUSR1));
    tb_demo_say_error(", the signal ");
    tb_demo_say_error(blocked(signal));
    tb_demo_say_error("\n");
}

void tb_demo_install_resetting_handler(void) {
    for (int index = 0; index < REPORTER_SIGNALS; index++) {
        struct sigaction action;
        memset(&action, 0, sizeof action);
        action.sa_handler = resetting_handler;
        action.sa_flags = SA_RESETHAND;
        sigemptyset(&action.sa_mask);
        sigaddset(&action.sa_mask, SIGUSR1);
        sigaction(reporter_signals[index], &action, NULL);
    }
}
