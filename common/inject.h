/*
 * inject.h: fault injection for the daemon's failure paths.
 *
 * A site is a place where the daemon handles a failure: an allocation that
 * can return NULL, the pool refusing an object, a uffd ioctl the kernel can
 * fail. INJECT(site) returns 0 (go on) or the positive errno the site must
 * act on as if the real call had failed that way; the caller then skips the
 * real call, so the kernel's state is what the real error would leave.
 *
 * Sites are armed from the daemon's environment, once at start, before any
 * thread runs (docs/reliability.md):
 *
 *   ZSWAPD_INJECT="pool_alloc=1/100,malloc=1/50,uffd_copy=EAGAIN:1/20"
 *
 * "1/N" fails every Nth hit, "~1/N" each hit with probability 1/N
 * (ZSWAPD_INJECT_SEED seeds it), "#K" the K-th hit and no other (for a
 * test that knows which call that is: test-remap-install). Built only
 * with meson -Dinject=true; then an unarmed site costs one predictable
 * branch on a global that is written before the threads start and never
 * again. Without it INJECT() is 0.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum InjectSite {
        INJ_POOL_ALLOC,     /* pool_alloc(): -ENOSPC, as if full */
        INJ_MALLOC,         /* the daemon's run-time allocations: NULL */
        INJ_UFFD_COPY,      /* UFFDIO_COPY (fault path and fault-around) */
        INJ_UFFD_ZEROPAGE,  /* UFFDIO_ZEROPAGE */
        INJ_UFFD_REGISTER,  /* UFFDIO_REGISTER of a client's range */
        INJ_UFFD_UNREGISTER,/* UFFDIO_UNREGISTER */
        INJ_UFFD_WP,        /* UFFDIO_WRITEPROTECT (the liveness probe) */
        INJ_KILL_EVENT,     /* SIGKILL to the daemon while it handles a uffd event (fault.c) */
        INJ_TIER_WRITE,     /* a write to the second tier's backing store (tier.c): -EIO */
        INJ_TIER_READ,      /* a fault's read from the backing store: -EIO */
        INJ_LOCK_BUSY,      /* a client's serve_lock found taken where the work is put off (mmclient_serve_trylock()) */
        INJ_DECODE,         /* a fault's decompression of a pool object: -EBADMSG, as if it were corrupt */
        INJ_RETRY_NOMEM,    /* a fault thread finds no retry at hand: neither memory nor its reserve (uffd-ops.c) */
        INJ_SLOT_READ,      /* a staging slot's read is not queued (serve.c slot_read_submit()): read and wait */
        INJ_CALL_SLOW,      /* a fault thread's call into a client lasts CALL_SLOW_MS more, as if its mmap lock held it */
        INJ_KILL_REMAP,     /* SIGKILL in the middle of moving an mremap's entries (a kill_event point too; events.c) */
        INJ_FORK_DONE_LATE, /* a FORK_DONE's sync goes through its fault thread, which waits FORK_DONE_LATE_MS before it and after */
        _INJ_MAX,
} InjectSite;

/* Whether any site is armed: written by inject_setup() before any other
 * thread exists, read-only afterwards. */
extern bool inject_armed;

/* The errno to inject at site s now, 0 for none; counts the hit. Any thread. */
int inject_fire(InjectSite s);

#if ZSWAP_INJECT
#define INJECT(s) (__builtin_expect(inject_armed, 0) ? inject_fire(s) : 0)
#else
#define INJECT(s) 0
#endif

/* Parse spec (NULL or empty: nothing armed). -EINVAL on a bad spec, with
 * what is wrong in err. Call once, single-threaded. */
int inject_setup(const char *spec, const char *seed, char *err, size_t errlen);
/* "site: F injected of H hits" for each armed site i < _INJ_MAX; false
 * for a site that is not armed. */
bool inject_describe(InjectSite s, char *buf, size_t len);

/* An allocation at a site that handles failure: NULL when INJ_MALLOC fires. */
#define INJECT_ALLOC(expr) (INJECT(INJ_MALLOC) ? NULL : (expr))
