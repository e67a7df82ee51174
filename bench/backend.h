/*
 * backend.h: one interface to every store the benchmarks compare: zswapd
 * (a daemon of the bench's own on a private socket), kernel zram and kernel
 * zswap (each on swap the bench sets up and tears down itself).
 *
 * A benchmark sets a backend up once, makes one client per process, attaches
 * its memory, pages it out and touches it; what differs between the stores
 * (how a page goes out, where the memory figures and the CPU time come from)
 * stays in backend.c. Every function returns 0 (or a count) or a negative
 * errno and prints nothing, except that backend_setup() says on stderr when
 * it has to wait for another bench's lock.
 *
 * Kernel kinds change the machine (swap, zram devices, zswap parameters,
 * page-cluster). They hold an exclusive flock on BACKEND_LOCK_FILE from set-up
 * to teardown, so no two benches ever run a kernel reference at once, and
 * block SIGINT, SIGTERM and SIGHUP while they change or restore the machine,
 * so a bench whose handlers only set a flag always gets to its teardown and
 * the teardown always runs to the end. Only SIGKILL leaves swap behind (and
 * for kernel zswap even that is undone by the next set-up).
 *
 * Threads: set a backend up and tear it down from the thread that lives as
 * long as it (the main thread): the daemon gets PR_SET_PDEATHSIG, which
 * fires when the thread that forked it ends. Clients may be used from any
 * thread of their process.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "macro.h"

/* The benchmarks' lock: whoever holds it may change kernel swap. */
#define BACKEND_LOCK_FILE "/run/zswap-bench.lock"
/* The swapfile behind kernel zswap. */
#define BACKEND_KZSWAP_SWAPFILE "/var/tmp/zswap-bench.swap"

typedef enum BackendKind { BACKEND_ZSWAPD, BACKEND_ZRAM, BACKEND_KZSWAP } BackendKind;

typedef struct BackendConfig {
        BackendKind kind;
        /* zswapd: "lz4"|"zstd"; zram: "lz4"|"lzo"...; kzswap: "lzo" (kernel
         * default) or any the kernel has. NULL: lz4, lz4, lzo. */
        const char *compressor;
        /* Most data that will be out at once: sizes the zram disk or the
         * swapfile (headroom is added here). zswapd ignores it. */
        uint64_t size_bytes;
        /* NULL: <dir of /proc/self/exe>/../daemon/zswapd */
        const char *zswapd_path;
        /* Extra daemon arguments, NULL-terminated, or NULL. */
        const char *const *zswapd_args;
} BackendConfig;

typedef struct Backend Backend;
typedef struct BackendClient BackendClient;

/*
 * Set a backend up. Kernel kinds: take BACKEND_LOCK_FILE (blocking; a
 * caught signal ends the wait with -EINTR), then create the swap. zswapd:
 * start the daemon on a private socket, in its own process group (a ^C
 * reaches the bench only, which still needs the daemon to put pages back),
 * with PR_SET_PDEATHSIG, its output in a /tmp log that is kept on failure
 * (backend_last_log()), and wait until it accepts connections.
 * Errors: -EPERM not root (kernel kinds), -ENODEV the kernel lacks zram or
 * zswap, -EBUSY kernel zswap is enabled (zram would measure zswap), -ENOENT
 * no daemon binary, -ECHILD the daemon exited at start, -ETIMEDOUT it did
 * not accept within 10 s, -EINTR a caught signal came while waiting.
 */
int backend_setup(const BackendConfig *c, Backend **ret);

/*
 * Undo everything set-up did, whichever part of it is still to do, and
 * free b. Every step is tried even if one fails; returns the first failure,
 * -EIO if the daemon did not end cleanly on SIGTERM (its log is kept).
 * Accepts NULL. Free every client and unmap memory paged out to kernel swap
 * first (or swapoff has to read it all back).
 */
int backend_teardown(Backend *b);
static inline void backend_teardownp(Backend **b) {
        backend_teardown(*b);
}
#define _cleanup_backend_ _cleanup_(backend_teardownp)

/* "zswapd-lz4", "zswapd-zstd", "zram-lz4", "zswap-lzo", ... */
const char *backend_name(const Backend *b);
/* A line saying what was set up (device, sizes, parameters, daemon command line). */
const char *backend_describe(const Backend *b);
pid_t backend_daemon_pid(const Backend *b);   /* 0 for kernel kinds */
const char *backend_socket(const Backend *b); /* NULL for kernel kinds */
/* The daemon's log (NULL for kernel kinds); deleted at teardown unless the
 * daemon ended badly or backend_keep_log() was called. Copy it before teardown. */
const char *backend_log(const Backend *b);
void backend_keep_log(Backend *b);
/* The log of this process's last zswapd set-up, kept when that set-up failed; NULL if none. */
const char *backend_last_log(void);

/*
 * A process's handle. One per process: after fork() a child makes its own
 * (never uses the parent's). zswapd: zswap_connect() with SIGINT, SIGTERM
 * and SIGHUP blocked, so the library's agent thread never takes them.
 */
int backend_client_new(Backend *b, BackendClient **ret);
void backend_client_free(BackendClient *c); /* accepts NULL */
static inline void backend_client_freep(BackendClient **c) {
        backend_client_free(*c);
}
#define _cleanup_backend_client_ _cleanup_(backend_client_freep)

/*
 * Hand [addr, addr+len) (page-aligned private anonymous memory) to the
 * backend. Every kind: MADV_NOHUGEPAGE first (one fault is one page on every
 * backend); zswapd then zswap_register(). Kernel kinds need no more.
 */
int backend_attach(BackendClient *c, void *addr, size_t len);
/* Take it back: zswapd: zswap_unregister() (restores every page); kernel: nothing. */
int backend_detach(BackendClient *c, void *addr, size_t len);

/*
 * Page [addr, addr+len) out and return once the pages are really out:
 * zswapd: zswap_pageout(), then wait until the daemon has compressed every
 * page it staged for this process (up to 30 s: -ETIMEDOUT; a caught signal:
 * -EINTR). Kernel: MADV_PAGEOUT, again while a call makes progress (the
 * kernel skips pages it cannot isolate at the moment), at most 8 times.
 * Returns the number of pages out, or a negative errno.
 */
int backend_pageout(BackendClient *c, void *addr, size_t len);

/*
 * orig: bytes of the pages the backend holds; used: memory it uses for them.
 * zram: mm_stat orig_data_size / mem_used_total. Kernel zswap:
 * stored_pages * 4 KiB / pool_total_size from debugfs, else Zswapped /
 * Zswap of /proc/meminfo. zswapd: original_bytes / pool_bytes of the daemon.
 * Both kernel kinds count no all-zero page (the swap layer keeps those in
 * its zeromap, in neither store).
 */
int backend_memory(Backend *b, uint64_t *orig, uint64_t *used);

/*
 * Pages brought back by a fault and pages sent out, counted since the
 * backend started: zswapd: faults less zero fills, and evictions, of the
 * daemon (every client); kernel kinds: pswpin and pswpout of /proc/vmstat
 * (the whole machine). Take two readings and subtract.
 */
int backend_moves(Backend *b, uint64_t *in, uint64_t *out);

/* More of the backend's own counters, as one line of text into buf. */
int backend_report(Backend *b, char *buf, size_t size);

/* CPU seconds of the backend's own threads where measurable: the zswapd
 * daemon's utime + stime from /proc/PID/stat; NAN for kernel kinds (the
 * kernel compresses in the process that pages out or faults). */
double backend_daemon_cpu_s(const Backend *b);
