/*
 * reclaim-sim.c: access traces and offline replacement policies for
 * bench-reclaim (see reclaim-sim.h).
 *
 * The daemon's reclaim is scored by how many refaults it takes on a trace,
 * against how many misses the textbook policies take on the same trace with
 * a cache as large as the daemon's resident limit. LRU is the usual
 * yardstick (what an accessed-bit scanner approximates), Belady's OPT the
 * floor no online policy can beat, FIFO and CLOCK what a reclaimer without
 * accessed bits degenerates to when it sees nothing but faults: a page that
 * is read and never written shows the daemon no activity between the fault
 * that brings it in and the eviction that takes it out.
 *
 * Each policy is a loop over the trace with flat arrays indexed by page
 * (n_pages entries, a few MiB for a 2 GiB heap), so the full-size traces
 * (a few million accesses) replay in well under a second, OPT in a few:
 * - LRU: a circular doubly linked list with a sentinel, most recent first;
 * - FIFO: a ring of frames;
 * - CLOCK: the ring with one reference bit per frame and a hand;
 * - OPT: the next use of every access, found by one backward pass, and a
 *   max-heap of the cached pages keyed by it, each page knowing its slot.
 *   A hit raises the page's key from "now" to its next use (sift up); a miss
 *   on a full cache replaces the root, the page used furthest ahead (or
 *   never again; ties among those do not change the miss count).
 *
 * sim_run_naive() is the same four policies written the obvious way, for
 * the self-test (sim_self_test(), at the end) to check the fast ones
 * against on small random traces, next to the textbook examples and the
 * properties any correct replacement simulator has.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "corpus.h"
#include "macro.h"
#include "reclaim-sim.h"

#define NONE UINT32_MAX  /* no page, no slot */
#define NEVER UINT32_MAX /* next use of a page not used again */

struct Zipf {
        uint32_t n;
        double *cdf;     /* cdf[k]: P(rank <= k); cdf[n-1] = 1 */
        uint32_t *guide; /* n + 1 entries: guide[j] = first k with cdf[k] > j / n */
};

uint64_t sim_rand(uint64_t *state) {
        uint64_t x = (*state += 0x9e3779b97f4a7c15ULL);

        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
        return x ^ (x >> 31);
}

/* Uniform in [0, 1), 53 bits. */
static double sim_uniform(uint64_t *rng) {
        return (double)(sim_rand(rng) >> 11) * 0x1.0p-53;
}

Zipf *zipf_free(Zipf *z) {
        if (!z)
                return NULL;
        free(z->cdf);
        free(z->guide);
        free(z);
        return NULL;
}

int zipf_new(uint32_t n, double s, Zipf **ret) {
        Zipf *z;
        double sum = 0;
        uint32_t k = 0;

        if (n == 0 || !(s >= 0) || !ret)
                return -EINVAL;
        z = calloc(1, sizeof(*z));
        if (!z)
                return -ENOMEM;
        z->n = n;
        z->cdf = malloc(n * sizeof(*z->cdf));
        z->guide = malloc(((size_t)n + 1) * sizeof(*z->guide));
        if (!z->cdf || !z->guide) {
                zipf_free(z);
                return -ENOMEM;
        }
        for (uint32_t i = 0; i < n; i++) {
                sum += pow((double)i + 1, -s);
                z->cdf[i] = sum;
        }
        for (uint32_t i = 0; i < n; i++)
                z->cdf[i] /= sum;
        z->cdf[n - 1] = 1.0; /* whatever the rounding: every u < 1 finds a rank */
        for (uint32_t j = 0; j < n; j++) {
                while (z->cdf[k] <= (double)j / n)
                        k++;
                z->guide[j] = k;
        }
        z->guide[n] = n - 1;
        *ret = z;
        return 0;
}

uint32_t zipf_sample(const Zipf *z, uint64_t *rng) {
        double u = sim_uniform(rng);
        uint32_t j = (uint32_t)MIN((double)z->n - 1, u * z->n);
        uint32_t lo = z->guide[j], hi = z->guide[j + 1];

        /* The first rank whose cdf exceeds u lies in [guide[j], guide[j+1]]. */
        while (lo < hi) {
                uint32_t mid = lo + (hi - lo) / 2;

                if (z->cdf[mid] > u)
                        hi = mid;
                else
                        lo = mid + 1;
        }
        /* u * n rounded to the next integer would have picked the bucket after u's. */
        while (lo > 0 && z->cdf[lo - 1] > u)
                lo--;
        return lo;
}

void trace_zipf(const Zipf *z, const size_t *perm, uint32_t *out, size_t len, uint64_t *rng) {
        for (size_t i = 0; i < len; i++)
                out[i] = (uint32_t)perm[zipf_sample(z, rng)];
}

const char *sim_policy_name(SimPolicy p) {
        static const char *const names[SIM_POLICIES] = {
                [SIM_LRU] = "LRU", [SIM_FIFO] = "FIFO", [SIM_CLOCK] = "CLOCK", [SIM_OPT] = "OPT",
        };

        return (unsigned)p < SIM_POLICIES ? names[p] : "?";
}

/* ---- LRU ---- */

static int sim_lru(const uint32_t *t, size_t len, size_t warmup, uint32_t n_pages, uint32_t cap, uint64_t *ret) {
        _cleanup_free_ uint32_t *prev = malloc(((size_t)n_pages + 1) * sizeof(uint32_t));
        _cleanup_free_ uint32_t *next = malloc(((size_t)n_pages + 1) * sizeof(uint32_t));
        _cleanup_free_ uint8_t *in = calloc(n_pages, 1);
        const uint32_t head = n_pages; /* sentinel: next[head] most recent, prev[head] least */
        uint64_t misses = 0;
        uint32_t size = 0;

        if (!prev || !next || !in)
                return -ENOMEM;
        prev[head] = next[head] = head;
        for (size_t i = 0; i < len; i++) {
                uint32_t p = t[i];

                if (in[p]) {
                        next[prev[p]] = next[p];
                        prev[next[p]] = prev[p];
                } else {
                        misses += i >= warmup;
                        if (size == cap) {
                                uint32_t v = prev[head];

                                next[prev[v]] = head;
                                prev[head] = prev[v];
                                in[v] = 0;
                        } else
                                size++;
                        in[p] = 1;
                }
                next[p] = next[head];
                prev[p] = head;
                prev[next[head]] = p;
                next[head] = p;
        }
        *ret = misses;
        return 0;
}

/* ---- FIFO ---- */

static int sim_fifo(const uint32_t *t, size_t len, size_t warmup, uint32_t n_pages, uint32_t cap, uint64_t *ret) {
        _cleanup_free_ uint32_t *ring = malloc((size_t)cap * sizeof(uint32_t));
        _cleanup_free_ uint8_t *in = calloc(n_pages, 1);
        uint32_t oldest = 0, size = 0;
        uint64_t misses = 0;

        if (!ring || !in)
                return -ENOMEM;
        for (size_t i = 0; i < len; i++) {
                uint32_t p = t[i];

                if (in[p])
                        continue;
                misses += i >= warmup;
                if (size == cap) {
                        /* the oldest slot takes the new page: it becomes the newest */
                        in[ring[oldest]] = 0;
                        ring[oldest] = p;
                        oldest = oldest + 1 == cap ? 0 : oldest + 1;
                } else
                        ring[size++] = p;
                in[p] = 1;
        }
        *ret = misses;
        return 0;
}

/* ---- CLOCK ---- */

static int sim_clock(const uint32_t *t, size_t len, size_t warmup, uint32_t n_pages, uint32_t cap, uint64_t *ret) {
        _cleanup_free_ uint32_t *frame = malloc((size_t)cap * sizeof(uint32_t));
        _cleanup_free_ uint8_t *ref = calloc(cap, 1);
        _cleanup_free_ uint32_t *where = malloc((size_t)n_pages * sizeof(uint32_t));
        uint32_t hand = 0, size = 0;
        uint64_t misses = 0;

        if (!frame || !ref || !where)
                return -ENOMEM;
        memset(where, 0xff, (size_t)n_pages * sizeof(uint32_t));
        for (size_t i = 0; i < len; i++) {
                uint32_t p = t[i], f;

                if (where[p] != NONE) {
                        ref[where[p]] = 1;
                        continue;
                }
                misses += i >= warmup;
                if (size < cap)
                        f = size++;
                else {
                        /* second chance: clear bits until a frame without one comes round */
                        while (ref[hand]) {
                                ref[hand] = 0;
                                hand = hand + 1 == cap ? 0 : hand + 1;
                        }
                        f = hand;
                        where[frame[f]] = NONE;
                        hand = hand + 1 == cap ? 0 : hand + 1;
                }
                frame[f] = p;
                ref[f] = 1; /* the access that faulted it in */
                where[p] = f;
        }
        *ret = misses;
        return 0;
}

/* ---- OPT ---- */

/* The max-heap of cached pages by next use; pos[page] is its slot or NONE. */
typedef struct OptHeap {
        uint32_t *key, *page, *pos;
        uint32_t size;
} OptHeap;

static void heap_set(OptHeap *h, uint32_t slot, uint32_t key, uint32_t page) {
        h->key[slot] = key;
        h->page[slot] = page;
        h->pos[page] = slot;
}

static void heap_up(OptHeap *h, uint32_t slot) {
        uint32_t key = h->key[slot], page = h->page[slot];

        while (slot > 0) {
                uint32_t parent = (slot - 1) / 2;

                if (h->key[parent] >= key)
                        break;
                heap_set(h, slot, h->key[parent], h->page[parent]);
                slot = parent;
        }
        heap_set(h, slot, key, page);
}

static void heap_down(OptHeap *h, uint32_t slot) {
        uint32_t key = h->key[slot], page = h->page[slot];

        for (;;) {
                uint32_t c = 2 * slot + 1;

                if (c >= h->size)
                        break;
                if (c + 1 < h->size && h->key[c + 1] > h->key[c])
                        c++;
                if (h->key[c] <= key)
                        break;
                heap_set(h, slot, h->key[c], h->page[c]);
                slot = c;
        }
        heap_set(h, slot, key, page);
}

/* next[i]: the index of the next access to t[i] after i, or NEVER. */
static int next_uses(const uint32_t *t, size_t len, uint32_t n_pages, uint32_t **ret) {
        _cleanup_free_ uint32_t *last = malloc((size_t)n_pages * sizeof(uint32_t));
        uint32_t *next = malloc(len * sizeof(uint32_t));

        if (!last || !next) {
                free(next);
                return -ENOMEM;
        }
        memset(last, 0xff, (size_t)n_pages * sizeof(uint32_t));
        for (size_t i = len; i-- > 0;) {
                next[i] = last[t[i]];
                last[t[i]] = (uint32_t)i;
        }
        *ret = next;
        return 0;
}

static int sim_opt(const uint32_t *t, size_t len, size_t warmup, uint32_t n_pages, uint32_t cap, uint64_t *ret) {
        _cleanup_free_ uint32_t *next = NULL, *key = malloc((size_t)cap * sizeof(uint32_t));
        _cleanup_free_ uint32_t *page = malloc((size_t)cap * sizeof(uint32_t));
        _cleanup_free_ uint32_t *pos = malloc((size_t)n_pages * sizeof(uint32_t));
        OptHeap h = { .key = key, .page = page, .pos = pos };
        uint64_t misses = 0;
        int r;

        if (!key || !page || !pos)
                return -ENOMEM;
        r = next_uses(t, len, n_pages, &next);
        if (r < 0)
                return r;
        memset(pos, 0xff, (size_t)n_pages * sizeof(uint32_t));
        for (size_t i = 0; i < len; i++) {
                uint32_t p = t[i];

                if (pos[p] != NONE) {
                        /* its key was i, its next use is later: it can only rise */
                        h.key[pos[p]] = next[i];
                        heap_up(&h, pos[p]);
                        continue;
                }
                misses += i >= warmup;
                if (h.size < cap) {
                        heap_set(&h, h.size++, next[i], p);
                        heap_up(&h, h.size - 1);
                } else {
                        pos[h.page[0]] = NONE;
                        heap_set(&h, 0, next[i], p);
                        heap_down(&h, 0);
                }
        }
        *ret = misses;
        return 0;
}

int sim_run(SimPolicy p, const uint32_t *trace, size_t len, size_t warmup, uint32_t n_pages, uint32_t capacity,
            uint64_t *ret_misses) {
        if (!trace || !ret_misses || capacity == 0 || n_pages == 0 || n_pages == UINT32_MAX ||
            len >= UINT32_MAX)
                return -EINVAL;
        for (size_t i = 0; i < len; i++)
                if (trace[i] >= n_pages)
                        return -EINVAL;
        capacity = MIN(capacity, n_pages);
        switch (p) {
        case SIM_LRU:
                return sim_lru(trace, len, warmup, n_pages, capacity, ret_misses);
        case SIM_FIFO:
                return sim_fifo(trace, len, warmup, n_pages, capacity, ret_misses);
        case SIM_CLOCK:
                return sim_clock(trace, len, warmup, n_pages, capacity, ret_misses);
        case SIM_OPT:
                return sim_opt(trace, len, warmup, n_pages, capacity, ret_misses);
        default:
                return -EINVAL;
        }
}

int sim_cold(const uint32_t *trace, size_t len, size_t warmup, uint32_t n_pages, uint64_t *ret_distinct,
             uint64_t *ret_cold) {
        _cleanup_free_ uint8_t *seen = calloc(n_pages, 1);
        uint64_t distinct = 0, cold = 0;

        if (!seen)
                return -ENOMEM;
        for (size_t i = 0; i < len; i++) {
                if (seen[trace[i]])
                        continue;
                seen[trace[i]] = 1;
                distinct++;
                cold += i >= warmup;
        }
        *ret_distinct = distinct;
        *ret_cold = cold;
        return 0;
}

int sim_first_refs(const uint32_t *trace, size_t len, size_t warmup, uint32_t n_pages, uint32_t **ret,
                   size_t *ret_n) {
        _cleanup_free_ uint8_t *seen = calloc(n_pages, 1);
        _cleanup_free_ uint32_t *first = NULL;
        uint64_t distinct, cold;
        size_t n = 0;
        int r;

        r = sim_cold(trace, len, warmup, n_pages, &distinct, &cold);
        if (r < 0)
                return r;
        first = malloc(MAX(cold, 1) * sizeof(uint32_t));
        if (!seen || !first)
                return -ENOMEM;
        for (size_t i = 0; i < len; i++) {
                if (seen[trace[i]])
                        continue;
                seen[trace[i]] = 1;
                if (i >= warmup)
                        first[n++] = (uint32_t)i;
        }
        *ret = TAKE_PTR(first);
        *ret_n = n;
        return 0;
}

/* ---- the obvious versions ---- */

/* Where trace[i + 1..] next reads page, or len. */
static size_t naive_next_use(const uint32_t *t, size_t len, size_t i, uint32_t page) {
        for (size_t j = i + 1; j < len; j++)
                if (t[j] == page)
                        return j;
        return len;
}

/* The frame to evict from a full set of frames, by policy p. */
static uint32_t naive_victim(SimPolicy p, const uint32_t *frame, const size_t *stamp, uint8_t *ref,
                             uint32_t cap, uint32_t *hand, const uint32_t *t, size_t len, size_t i) {
        uint32_t v = 0;

        switch (p) {
        case SIM_LRU:  /* stamp: last use */
        case SIM_FIFO: /* stamp: time in */
                for (uint32_t f = 1; f < cap; f++)
                        if (stamp[f] < stamp[v])
                                v = f;
                return v;
        case SIM_CLOCK:
                while (ref[*hand]) {
                        ref[*hand] = 0;
                        *hand = (*hand + 1) % cap;
                }
                v = *hand;
                *hand = (*hand + 1) % cap;
                return v;
        default: {
                size_t far = 0;

                for (uint32_t f = 0; f < cap; f++) {
                        size_t n = naive_next_use(t, len, i, frame[f]);

                        if (n > far || f == 0) {
                                far = n;
                                v = f;
                        }
                }
                return v;
        }
        }
}

int sim_run_naive(SimPolicy p, const uint32_t *t, size_t len, size_t warmup, uint32_t cap, uint64_t *ret) {
        uint32_t frame[4096], hand = 0, used = 0;
        size_t stamp[4096];
        uint8_t ref[4096];
        uint64_t misses = 0;

        if (!t || !ret || cap == 0 || cap > ELEMENTSOF(frame) || (unsigned)p >= SIM_POLICIES)
                return -EINVAL;
        for (size_t i = 0; i < len; i++) {
                uint32_t f = 0;

                while (f < used && frame[f] != t[i])
                        f++;
                if (f == used) {
                        misses += i >= warmup;
                        if (used < cap)
                                used++;
                        else
                                f = naive_victim(p, frame, stamp, ref, cap, &hand, t, len, i);
                        frame[f] = t[i];
                        stamp[f] = i; /* FIFO: time in */
                } else if (p == SIM_LRU)
                        stamp[f] = i;
                ref[f] = 1;
        }
        *ret = misses;
        return 0;
}

/* ---- self-test (bench-reclaim --self-test) ---- */

typedef struct Check {
        FILE *out;
        unsigned run, failed;
} Check;

static void check(Check *c, bool ok, const char *what, uint64_t got, uint64_t want) {
        c->run++;
        if (ok)
                return;
        c->failed++;
        fprintf(c->out, "FAIL %s: got %" PRIu64 ", want %" PRIu64 "\n", what, got, want);
}

static uint64_t misses_of(SimPolicy p, const uint32_t *t, size_t len, size_t warmup, uint32_t n_pages,
                          uint32_t cap) {
        uint64_t m = UINT64_MAX;

        if (sim_run(p, t, len, warmup, n_pages, cap, &m) < 0)
                return UINT64_MAX;
        return m;
}

/* The textbook examples (Silberschatz's reference string, Belady's anomaly). */
static void self_test_textbook(Check *c) {
        static const uint32_t sil[] = { 7, 0, 1, 2, 0, 3, 0, 4, 2, 3, 0, 3, 2, 1, 2, 0, 1, 7, 0, 1 };
        static const uint32_t bel[] = { 1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5 };
        static const struct {
                const uint32_t *t;
                size_t len;
                uint32_t cap;
                uint64_t want[SIM_POLICIES];
        } cases[] = {
                /* CLOCK 14: worked by hand, reference bit set by the faulting access too */
                { sil, ELEMENTSOF(sil), 3, { [SIM_LRU] = 12, [SIM_FIFO] = 15, [SIM_CLOCK] = 14, [SIM_OPT] = 9 } },
                { bel, ELEMENTSOF(bel), 3, { [SIM_LRU] = 10, [SIM_FIFO] = 9, [SIM_CLOCK] = 9, [SIM_OPT] = 7 } },
                { bel, ELEMENTSOF(bel), 4, { [SIM_LRU] = 8, [SIM_FIFO] = 10, [SIM_CLOCK] = 10, [SIM_OPT] = 6 } },
        };
        char what[64];

        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                for (SimPolicy p = 0; p < SIM_POLICIES; p++) {
                        uint64_t m = misses_of(p, cases[i].t, cases[i].len, 0, 8, cases[i].cap);

                        snprintf(what, sizeof(what), "textbook %zu, %s, %u frames", i, sim_policy_name(p),
                                 cases[i].cap);
                        check(c, m == cases[i].want[p], what, m, cases[i].want[p]);
                }
        /* warm-up: the same string, the first 10 accesses not counted (LRU, 3 frames: misses at 10, 13, 15, 17) */
        check(c, misses_of(SIM_LRU, sil, ELEMENTSOF(sil), 10, 8, 3) == 4, "LRU with warm-up",
              misses_of(SIM_LRU, sil, ELEMENTSOF(sil), 10, 8, 3), 4);
}

/* Fast against naive on small random traces, Zipf and uniform, with and without warm-up. */
static void self_test_naive(Check *c) {
        uint32_t t[3000];
        uint64_t rng = 42;
        char what[96];

        for (unsigned round = 0; round < 24; round++) {
                uint32_t n_pages = 20 + (uint32_t)(sim_rand(&rng) % 200);
                uint32_t cap = 1 + (uint32_t)(sim_rand(&rng) % 48);
                size_t warmup = round % 2 ? 700 : 0;
                double s = (round % 4) * 0.4;
                _cleanup_free_ size_t *perm = malloc(n_pages * sizeof(size_t));
                Zipf *z = NULL;

                if (!perm || zipf_new(n_pages, s, &z) < 0) {
                        check(c, false, "allocation", 0, 0);
                        return;
                }
                corpus_shuffle(perm, n_pages, round);
                trace_zipf(z, perm, t, ELEMENTSOF(t), &rng);
                zipf_free(z);
                for (SimPolicy p = 0; p < SIM_POLICIES; p++) {
                        uint64_t fast = misses_of(p, t, ELEMENTSOF(t), warmup, n_pages, cap), slow = 0;

                        sim_run_naive(p, t, ELEMENTSOF(t), warmup, cap, &slow);
                        snprintf(what, sizeof(what), "%s vs naive, %u pages, %u frames, skew %.1f, warm-up %zu",
                                 sim_policy_name(p), n_pages, cap, s, warmup);
                        check(c, fast == slow, what, fast, slow);
                }
        }
}

/* Properties on a Zipf trace of a realistic shape. */
static void self_test_invariants(Check *c) {
        const uint32_t n_pages = 20000;
        const size_t len = 400000, warmup = 100000;
        _cleanup_free_ uint32_t *t = malloc(len * sizeof(uint32_t));
        _cleanup_free_ size_t *perm = malloc(n_pages * sizeof(size_t));
        uint64_t m[SIM_POLICIES], prev[SIM_POLICIES], distinct = 0, cold = 0, rng = 7;
        const uint32_t caps[] = { 100, 2000, 8000, 19999 };
        Zipf *z = NULL;
        char what[96];

        if (!t || !perm || zipf_new(n_pages, 0.9, &z) < 0) {
                check(c, false, "allocation", 0, 0);
                return;
        }
        corpus_shuffle(perm, n_pages, 1);
        trace_zipf(z, perm, t, len, &rng);
        zipf_free(z);
        if (sim_cold(t, len, warmup, n_pages, &distinct, &cold) < 0) {
                check(c, false, "allocation", 0, 0);
                return;
        }
        for (size_t k = 0; k < ELEMENTSOF(caps); k++) {
                for (SimPolicy p = 0; p < SIM_POLICIES; p++) {
                        m[p] = misses_of(p, t, len, warmup, n_pages, caps[k]);
                        snprintf(what, sizeof(what), "%s >= cold misses, %u frames", sim_policy_name(p), caps[k]);
                        check(c, m[p] >= cold && m[p] != UINT64_MAX, what, m[p], cold);
                        /* LRU and OPT are stack algorithms: more frames never cost more misses */
                        snprintf(what, sizeof(what), "%s monotone in frames, %u", sim_policy_name(p), caps[k]);
                        if (k > 0 && (p == SIM_LRU || p == SIM_OPT))
                                check(c, m[p] <= prev[p], what, m[p], prev[p]);
                }
                for (SimPolicy p = 0; p < SIM_OPT; p++) {
                        snprintf(what, sizeof(what), "OPT <= %s, %u frames", sim_policy_name(p), caps[k]);
                        check(c, m[SIM_OPT] <= m[p], what, m[SIM_OPT], m[p]);
                }
                memcpy(prev, m, sizeof(m));
        }
        /* room for every page: only first references miss, in every policy */
        for (SimPolicy p = 0; p < SIM_POLICIES; p++) {
                m[p] = misses_of(p, t, len, warmup, n_pages, (uint32_t)distinct);
                snprintf(what, sizeof(what), "%s with capacity = distinct pages misses cold only",
                         sim_policy_name(p));
                check(c, m[p] == cold, what, m[p], cold);
        }
        /* the first half twice, the first copy as warm-up: a cache of every page never misses */
        memcpy(t + len / 2, t, len / 2 * sizeof(uint32_t));
        sim_cold(t, len, len / 2, n_pages, &distinct, &cold);
        check(c, cold == 0, "no first reference after a warm-up that saw them all", cold, 0);
        for (SimPolicy p = 0; p < SIM_POLICIES; p++) {
                m[p] = misses_of(p, t, len, len / 2, n_pages, (uint32_t)distinct);
                snprintf(what, sizeof(what), "%s: a warmed cache of every page never misses", sim_policy_name(p));
                check(c, m[p] == 0, what, m[p], 0);
        }
}

/* The sampler: in range, rank frequencies as the distribution says. */
static void self_test_zipf(Check *c) {
        const uint32_t n = 1000;
        const size_t draws = 2000000;
        const double skews[] = { 0, 0.8, 1.0, 1.2 };
        const uint32_t ranks[] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 99, 999 };
        char what[96];

        for (size_t k = 0; k < ELEMENTSOF(skews); k++) {
                _cleanup_free_ uint64_t *count = calloc(n, sizeof(uint64_t));
                double h = 0, worst = 0;
                uint64_t rng = 99, bad = 0;
                Zipf *z = NULL;

                if (!count || zipf_new(n, skews[k], &z) < 0) {
                        check(c, false, "allocation", 0, 0);
                        return;
                }
                for (size_t i = 0; i < draws; i++) {
                        uint32_t r = zipf_sample(z, &rng);

                        if (r >= n)
                                bad++;
                        else
                                count[r]++;
                }
                zipf_free(z);
                snprintf(what, sizeof(what), "Zipf %.1f samples in range", skews[k]);
                check(c, bad == 0, what, bad, 0);
                for (uint32_t i = 0; i < n; i++)
                        h += pow(i + 1.0, -skews[k]);
                /* ranks 1..10, 100 and 1000: within 5 standard deviations of the expected count */
                for (size_t j = 0; j < ELEMENTSOF(ranks); j++) {
                        double want = draws * pow(ranks[j] + 1.0, -skews[k]) / h;
                        double dev = fabs(count[ranks[j]] - want) / sqrt(want);

                        worst = MAX(worst, dev);
                }
                snprintf(what, sizeof(what), "Zipf %.1f rank frequencies (worst deviation x100, in sigmas)",
                         skews[k]);
                check(c, worst < 5, what, (uint64_t)(worst * 100), 500);
        }
}

unsigned sim_self_test(FILE *out) {
        Check c = { .out = out };

        self_test_textbook(&c);
        self_test_naive(&c);
        self_test_invariants(&c);
        self_test_zipf(&c);
        fprintf(out, "self-test: %u checks, %u failed\n", c.run, c.failed);
        return c.failed;
}
