/*
 * sandbox.h: least privilege for the daemon once it is set up.
 *
 * sandbox_lock_memory() locks the daemon's memory (mlockall, on fault) so
 * that the fault path never waits on a fault of its own; the pool frees
 * its chunks with MADV_DONTNEED_LOCKED. sandbox_enter() drops every
 * capability the daemon does not use (libcap) and installs a seccomp
 * allowlist of the system calls it makes (libseccomp). Both are called by
 * manager_new() on the main thread before any other thread exists, so every
 * thread inherits them. docs/security.md says what is kept and why.
 */
#pragma once

#include <stdbool.h>

typedef struct SandboxConfig {
        /* the listening socket the daemon made and removes at exit with
         * sandbox_unlink(); NULL when it has none of its own (socket
         * activation) */
        const char *socket_path;
        /* keep CAP_SYS_NICE: SCHED_FIFO fault threads or workers at a
         * negative nice value */
        bool realtime;
        /* a second tier (tier.c) over TCP (NBD): inet sockets */
        bool tier_inet;
} SandboxConfig;

/* mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT), with RLIMIT_MEMLOCK
 * raised as far as allowed first. 0 or -errno (logged). */
int sandbox_lock_memory(void);

/* Drop capabilities and install the syscall filter. 0 or -errno (logged). */
int sandbox_enter(const SandboxConfig *cfg);

/* A new close-on-exec fd for /dev/userfaultfd. Inside the sandbox no file
 * may be opened for writing: the device opened by sandbox_enter() is
 * duplicated (its ioctl keeps no state, USERFAULTFD_IOC_NEW acts on the
 * caller's mm). fd or -errno. */
int sandbox_open_uffd_dev(void);

/* Remove the socket named in SandboxConfig (unlinkat() in its directory,
 * the only removal the filter allows); any other path: unlink(). */
int sandbox_unlink(const char *path);
