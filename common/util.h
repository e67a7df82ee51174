/*
 * util.h: small helpers shared by daemon, library and tools.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Write why into err (len bytes, may be 0) and return r: the error
 * reporting of every parser and opener that says what went wrong. */
int errorf(int r, char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* The bits of a /proc/PID/pagemap word (Documentation/admin-guide/mm/pagemap.rst) */
#define PM_PRESENT ((uint64_t)1 << 63)
#define PM_SWAP ((uint64_t)1 << 62)
#define PM_FILE ((uint64_t)1 << 61)
#define PM_EXCLUSIVE ((uint64_t)1 << 56) /* mapped by this process only */
#define PM_PFN(pm) ((pm) & ((1ull << 55) - 1))

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t now_ns(void);
static inline uint64_t now_ms(void) {
        return now_ns() / 1000000;
}

/* qsort() comparison of two uint64_t, ascending. */
int cmp_u64(const void *a, const void *b);

/* 1 if fd is a userfaultfd, 0 if not, -errno on error. */
int fd_is_userfaultfd(int fd);

/* Does a "VmFlags:" line of /proc/PID/smaps say its vma is registered
 * with a userfaultfd: for missing faults ("um"), or for write-protect
 * faults alone ("uw": a range the daemon never evicted from)? */
bool vmflags_uffd_registered(const char *line);

/* Parent pid of pid from /proc/PID/stat. */
int proc_ppid(pid_t pid, pid_t *ret);
/* When process pid started, in clock ticks since boot (/proc/PID/stat field 22). */
int proc_start_ticks(pid_t pid, uint64_t *ret);

/* Read a "Key:   N kB" line of /proc/PID/status in bytes; pid 0 = self. */
int proc_status_kb(pid_t pid, const char *key, uint64_t *ret_bytes);

int fd_set_nonblock(int fd, bool nonblock);

/*
 * System-wide memory state, the pressure and free-memory policies' input.
 * root is the directory that holds proc/: "/" (or NULL) on a running
 * system, a directory of fixture files in a unit test (tests/unit/test-proc.c).
 *
 * "some avg10" of root/proc/pressure/memory, in percent; -1 if unreadable
 * or malformed (not a number from 0 to 100).
 */
double proc_psi_memory_some(const char *root);
/* Its "some total=" stall time in µs: 0, or -errno; -EIO if malformed. */
int proc_psi_memory_some_total(const char *root, uint64_t *total_us);
/* MemAvailable of root/proc/meminfo in bytes; 0 if unreadable, missing
 * (kernels before 3.14) or malformed. */
uint64_t proc_mem_available(const char *root);

/* Parse a size like 512, 64K, 2M, 1G (powers of 1024). */
int parse_size(const char *s, uint64_t *ret);

/* Connect a SOCK_SEQPACKET | SOCK_CLOEXEC Unix socket to path; fd or -errno. */
int unix_connect(const char *path);
/* The uid trusted to run the daemon besides root: $ZSWAP_DAEMON_UID (a
 * decimal uid), or (uid_t)-1 when it is unset or not one. */
uid_t daemon_uid_from_env(void);
/* Whether the listener at the other end of the connected Unix socket fd
 * is a daemon we trust (util.c): SO_PEERCRED's uid 0, or trusted unless
 * that is (uid_t)-1. 0, -EPERM if not (its uid in *ret_uid), or -errno. */
int unix_peer_trusted(int fd, uid_t trusted, uid_t *ret_uid);
/* unix_connect(), then unix_peer_trusted(): the fd, or -errno; -EPERM for
 * a peer that is not trusted, to which nothing was sent. */
int unix_connect_daemon(const char *path, uid_t trusted);
