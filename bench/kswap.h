/*
 * kswap.h: small helpers for the kernel swap the benchmarks set up
 * themselves (zram.c, kzswap.c): sysfs and procfs files, mkswap, swapon and
 * swapoff, page-cluster, and blocking the signals the benches catch while
 * the machine is being changed.
 *
 * All return 0 or a negative errno and never print. None keeps state.
 */
#pragma once

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Above any priority a distribution gives its swap (the kernel caps at 32767). */
#define KSWAP_PRIO 32767

/* nanosleep() that sleeps the whole time even if a signal arrives. */
void kswap_sleep_ms(long ms);

/* Write s to path (one write, as sysfs wants it). */
int kswap_write_file(const char *path, const char *s);

/* Read path into buf (NUL-terminated, a trailing newline removed). */
int kswap_read_file(const char *path, char *buf, size_t size);

/* Read a non-negative decimal number from path. -EBADMSG if it holds none. */
int kswap_read_u64(const char *path, uint64_t *ret);
int kswap_read_int(const char *path, int *ret);

/* Run mkswap on dev (a device or a file), in its own process group so a ^C
 * meant for the bench does not kill it half-way. */
int kswap_mkswap(const char *dev);

/* swapon dev at KSWAP_PRIO, the first choice of the kernel. */
int kswap_swapon(const char *dev);

/* swapoff dev; again while it gives up with EINTR (a signal arrived while
 * it read pages back). */
int kswap_swapoff(const char *dev);

/*
 * Set procfs/sys/vm/page-cluster to 0 (no swap readahead: a fault reads
 * exactly one page, as a zswapd fault does) and store the old value in
 * *saved. kswap_page_cluster_restore() writes *saved back if it is >= 0 and
 * then sets it to -1, so it can be called any number of times.
 */
int kswap_page_cluster_off(const char *procfs, int *saved);
int kswap_page_cluster_restore(const char *procfs, int *saved);

/*
 * Block SIGINT, SIGTERM and SIGHUP in the calling thread (old mask to *old),
 * so that set-up and teardown of kernel swap run to the end; a signal that
 * comes meanwhile is delivered when kswap_signals_restore() unblocks it.
 */
void kswap_signals_block(sigset_t *old);
void kswap_signals_restore(const sigset_t *old);

/*
 * A memory cgroup of the bench's own: v2 where the unified hierarchy has the
 * memory controller, else v1's memory hierarchy. Named
 * zswap-bench-NAME.PID (PID: the caller's). The limit is memory.max (v1:
 * memory.limit_in_bytes); the usage memory.current (v1:
 * memory.usage_in_bytes). kswap_cgroup_remove() removes the directory once
 * the processes in it have exited.
 */
typedef struct KswapCgroup {
        char dir[256];
        bool v2;
} KswapCgroup;

int kswap_cgroup_make(KswapCgroup *cg, const char *name);
/* Move pid (0: the caller) into the cgroup. */
int kswap_cgroup_join(const KswapCgroup *cg, pid_t pid);
int kswap_cgroup_usage(const KswapCgroup *cg, uint64_t *ret);
int kswap_cgroup_limit(const KswapCgroup *cg, uint64_t bytes);
int kswap_cgroup_remove(const KswapCgroup *cg);
