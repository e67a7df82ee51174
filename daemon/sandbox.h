/*
 * sandbox.h: least privilege for the daemon once it is set up.
 *
 * sandbox_lock_memory() locks the daemon's memory (mlockall, on fault) so
 * that the fault path never waits on a fault of its own; the pool frees
 * its chunks with MADV_DONTNEED_LOCKED. sandbox_enter() drops every
 * capability the daemon does not use (libcap) and installs a seccomp
 * allowlist of the system calls it makes (libseccomp). Both are called by
 * manager_new() on the main thread before any other thread exists, so every
 * thread inherits them.
 */
#pragma once

#include <stdbool.h>

/* mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT). 0 or -errno (logged). */
int sandbox_lock_memory(void);

/* Drop capabilities and install the syscall filter. 0 or -errno (logged). */
int sandbox_enter(void);
