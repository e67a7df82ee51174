/*
 * inject.c: see inject.h.
 *
 * State: the table of sites is written by inject_setup() before the
 * daemon's threads start (single-threaded); afterwards only the counters
 * change, relaxed atomic increments from any thread: they are statistics,
 * and "every Nth" only needs each hit to get a distinct number. Random
 * mode keeps one xorshift state per thread, so it takes no lock either.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inject.h"

typedef struct Site {
        const char *name;
        int default_errno;
        bool armed;
        bool random;            /* probability 1/every instead of every Nth */
        int err;                /* what to inject */
        uint64_t every;
        uint64_t only;          /* "#K": the K-th hit alone, 0 for none */
        _Atomic uint64_t hits;  /* any thread, relaxed */
        _Atomic uint64_t fired; /* any thread, relaxed */
} Site;

static Site sites[_INJ_MAX] = {
        [INJ_POOL_ALLOC] = { "pool_alloc", ENOSPC },
        [INJ_MALLOC] = { "malloc", ENOMEM },
        [INJ_UFFD_COPY] = { "uffd_copy", EAGAIN },
        [INJ_UFFD_ZEROPAGE] = { "uffd_zeropage", EAGAIN },
        [INJ_UFFD_REGISTER] = { "uffd_register", ENOMEM },
        [INJ_UFFD_UNREGISTER] = { "uffd_unregister", ENOMEM },
        [INJ_UFFD_WP] = { "uffd_wp", EAGAIN },
        [INJ_KILL_EVENT] = { "kill_event", EINTR },
        [INJ_TIER_WRITE] = { "tier_write", EIO },
        [INJ_TIER_READ] = { "tier_read", EIO },
        [INJ_LOCK_BUSY] = { "lock_busy", EBUSY },
        [INJ_DECODE] = { "decode", EBADMSG },
        [INJ_RETRY_NOMEM] = { "retry_nomem", ENOMEM },
        [INJ_SLOT_READ] = { "slot_read", EBUSY },
        [INJ_CALL_SLOW] = { "call_slow", EINTR },
        [INJ_KILL_REMAP] = { "kill_remap", EINTR },
        [INJ_FORK_DONE_LATE] = { "fork_done_late", EINTR },
};

static const struct { const char *name; int err; } errnos[] = {
        { "EAGAIN", EAGAIN }, { "EEXIST", EEXIST }, { "ENOENT", ENOENT }, { "ESRCH", ESRCH },
        { "ENOMEM", ENOMEM }, { "ENOSPC", ENOSPC }, { "EBUSY", EBUSY },   { "EINVAL", EINVAL },
        { "EFAULT", EFAULT }, { "EPERM", EPERM },   { "EIO", EIO },
};

bool inject_armed;
static uint64_t seed0 = 0x9e3779b97f4a7c15ull;
static _Atomic uint64_t thread_seq; /* relaxed: only makes thread seeds differ */
static _Thread_local uint64_t rnd;

static uint64_t next_random(void) {
        if (!rnd)
                rnd = (seed0 ^ (atomic_fetch_add_explicit(&thread_seq, 1, memory_order_relaxed) + 1) *
                                       0xbf58476d1ce4e5b9ull) | 1;
        rnd ^= rnd << 13;
        rnd ^= rnd >> 7;
        rnd ^= rnd << 17;
        return rnd;
}

int inject_fire(InjectSite s) {
        Site *x = &sites[s];
        if (!x->armed)
                return 0;
        uint64_t n = atomic_fetch_add_explicit(&x->hits, 1, memory_order_relaxed) + 1;
        if (x->only ? n != x->only : x->random ? next_random() % x->every != 0 : n % x->every != 0)
                return 0;
        atomic_fetch_add_explicit(&x->fired, 1, memory_order_relaxed);
        return x->err;
}

static int parse_one(char *item, char *err, size_t errlen) {
        char *eq = strchr(item, '=');
        Site *x = NULL;

        if (!eq) {
                snprintf(err, errlen, "'%s': expected SITE=[ERRNO:][~]1/N or SITE=[ERRNO:]#K", item);
                return -EINVAL;
        }
        *eq = 0;
        for (unsigned i = 0; i < _INJ_MAX; i++)
                if (strcmp(item, sites[i].name) == 0)
                        x = &sites[i];
        if (!x) {
                snprintf(err, errlen, "unknown site '%s'", item);
                return -EINVAL;
        }
        char *rate = eq + 1, *colon = strchr(rate, ':');
        x->err = x->default_errno;
        if (colon) {
                *colon = 0;
                x->err = 0;
                for (size_t i = 0; i < sizeof(errnos) / sizeof(errnos[0]); i++)
                        if (strcmp(rate, errnos[i].name) == 0)
                                x->err = errnos[i].err;
                if (!x->err) {
                        snprintf(err, errlen, "%s: unknown errno '%s'", x->name, rate);
                        return -EINVAL;
                }
                rate = colon + 1;
        }
        char *end;
        if (*rate == '#') {
                /* the K-th hit and no other: a test that knows which call
                 * that is makes one failure exactly where it wants it */
                if (!(x->only = strtoull(rate + 1, &end, 10)) || *end) {
                        snprintf(err, errlen, "%s: '%s' is not #K", x->name, rate);
                        return -EINVAL;
                }
                x->armed = true;
                return 0;
        }
        x->random = *rate == '~';
        rate += x->random;
        if (strncmp(rate, "1/", 2) != 0 || !(x->every = strtoull(rate + 2, &end, 10)) || *end) {
                snprintf(err, errlen, "%s: rate '%s' is not 1/N or ~1/N", x->name, rate);
                return -EINVAL;
        }
        x->armed = true;
        return 0;
}

int inject_setup(const char *spec, const char *seed, char *err, size_t errlen) {
        if (seed && *seed)
                seed0 = strtoull(seed, NULL, 0) ?: seed0;
        if (!spec || !*spec)
                return 0;
        char *copy = strdup(spec), *save = NULL;
        int r = copy ? 0 : -ENOMEM;
        for (char *item = copy ? strtok_r(copy, ",", &save) : NULL; item && r == 0; item = strtok_r(NULL, ",", &save))
                r = parse_one(item, err, errlen);
        free(copy);
        if (r < 0) {
                for (unsigned i = 0; i < _INJ_MAX; i++)
                        sites[i].armed = false;
                return r;
        }
        inject_armed = true;
        return 0;
}

bool inject_describe(InjectSite s, char *buf, size_t len) {
        const Site *x = &sites[s];
        if (!x->armed)
                return false;
        snprintf(buf, len, "%s=%s:%s%" PRIu64 ": %" PRIu64 " injected of %" PRIu64 " hits", x->name,
                 strerrorname_np(x->err) ?: "?", x->only ? "#" : x->random ? "~1/" : "1/", x->only ? x->only : x->every,
                 atomic_load_explicit(&x->fired, memory_order_relaxed),
                 atomic_load_explicit(&x->hits, memory_order_relaxed));
        return true;
}
