/*
 * test-pindex: the lock-free page index on its own.
 *
 * Entries appear on demand and start at zero, lookups without create never
 * allocate, nothing at or above 1 << 48 is reachable, the entry encoding
 * round-trips every state the daemon uses, a walk visits exactly the
 * non-zero entries of its range in address order across leaf and level
 * boundaries, and four threads creating leaves and CASing the same entries
 * at once lose no update and install no duplicate node (run it under
 * -fsanitize=thread as well).
 */
#include <pthread.h>
#include <stdatomic.h>

#include "macro.h"
#include "pindex.h"
#include "test.h"

#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)
#define NODE_BYTES ((uint64_t)512 * 8)

static void test_entries(void) {
        PageIndex *pi;
        ASSERT_OK(pindex_new(&pi));
        ASSERT_EQ(pindex_bytes(pi), NODE_BYTES); /* the root only */

        /* absent leaves: no entry, and looking does not allocate */
        ASSERT_TRUE(pindex_entry(pi, 0x7f0000000000, false) == NULL);
        ASSERT_TRUE(pindex_entry(pi, 0, false) == NULL);
        ASSERT_EQ(pindex_bytes(pi), NODE_BYTES);

        _Atomic uint64_t *e = pindex_entry(pi, 0x7f0000200000, true);
        ASSERT_TRUE(e != NULL);
        ASSERT_EQ(atomic_load(e), 0);
        ASSERT_EQ(pindex_bytes(pi), 4 * NODE_BYTES); /* root + 2 inner + 1 leaf */
        /* the same page, any byte of it, is the same entry; neighbours in
         * the leaf exist (zero) without create, the next leaf does not */
        ASSERT_TRUE(pindex_entry(pi, 0x7f0000200000, true) == e);
        ASSERT_TRUE(pindex_entry(pi, 0x7f0000200fff, false) == e);
        ASSERT_TRUE(pindex_entry(pi, 0x7f0000201000, false) == e + 1);
        ASSERT_TRUE(pindex_entry(pi, 0x7f00003ff000, false) == e + 511);
        ASSERT_EQ(atomic_load(e + 511), 0);
        ASSERT_TRUE(pindex_entry(pi, 0x7f0000400000, false) == NULL);
        ASSERT_TRUE(pindex_entry(pi, 0x7f00001ff000, false) == NULL);
        atomic_store(e, 42);
        ASSERT_EQ(atomic_load(pindex_entry(pi, 0x7f0000200000, false)), 42);
        ASSERT_EQ(pindex_bytes(pi), 4 * NODE_BYTES);

        /* a second leaf under the same inner nodes costs one node */
        ASSERT_TRUE(pindex_entry(pi, 0x7f0000400000, true) != NULL);
        ASSERT_EQ(pindex_bytes(pi), 5 * NODE_BYTES);

        /* the top of the space: reachable up to 1 << 48, never at or above */
        _Atomic uint64_t *top = pindex_entry(pi, PINDEX_MAX_ADDR - ZSWAP_PAGE_SIZE, true);
        ASSERT_TRUE(top != NULL);
        ASSERT_EQ(atomic_load(top), 0);
        ASSERT_TRUE(top != e);
        ASSERT_TRUE(pindex_entry(pi, PINDEX_MAX_ADDR - 1, false) == top);
        uint64_t before = pindex_bytes(pi);
        static const uint64_t bad[] = { PINDEX_MAX_ADDR, PINDEX_MAX_ADDR + ZSWAP_PAGE_SIZE, (uint64_t)1 << 52,
                                        (uint64_t)1 << 63, UINT64_MAX, UINT64_MAX - ZSWAP_PAGE_SIZE + 1 };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                ASSERT_TRUE(pindex_entry(pi, bad[i], true) == NULL);
                ASSERT_TRUE(pindex_entry(pi, bad[i], false) == NULL);
        }
        /* no aliasing: 1 << 48 must not wrap onto address 0 */
        ASSERT_TRUE(pindex_entry(pi, 0, false) == NULL);
        ASSERT_EQ(pindex_bytes(pi), before);
        pindex_free(pi);
        ASSERT_TRUE(pindex_free(NULL) == NULL);
}

static void test_encoding(void) {
        static const uint32_t handles[] = { 0, 1, 0x12345678, 0x80000000, UINT32_MAX };
        static const uint32_t clens[] = { 1, 17, 3072, 4095, 4096, 0x1fff };
        static const uint32_t fills[] = { 0, 0xa5a5a5a5, 0xdeadbeef, 1, UINT32_MAX };

        for (size_t i = 0; i < ELEMENTSOF(handles); i++)
                for (size_t j = 0; j < ELEMENTSOF(clens); j++) {
                        uint64_t v = pe_make_stored(handles[i], clens[j]);
                        ASSERT_EQ(pe_state(v), PE_STORED);
                        ASSERT_EQ(pe_handle(v), handles[i]);
                        ASSERT_EQ(pe_clen(v), clens[j]);
                        ASSERT_EQ(v & PE_FLAG_INCOMPRESSIBLE, 0);
                        ASSERT_TRUE(v != 0);
                }
        for (size_t i = 0; i < ELEMENTSOF(fills); i++) {
                uint64_t v = pe_make_same(fills[i]);
                ASSERT_EQ(pe_state(v), PE_SAME);
                ASSERT_EQ(pe_fill(v), fills[i]);
                ASSERT_TRUE(v != 0);
        }
        for (size_t i = 0; i < ELEMENTSOF(handles); i++) {
                uint64_t m = pe_make_slot(PE_MOVING, handles[i]), s = pe_with_state(m, PE_STAGED);
                ASSERT_EQ(pe_state(m), PE_MOVING);
                ASSERT_EQ(pe_slot(m), handles[i]);
                ASSERT_EQ(pe_state(s), PE_STAGED);
                ASSERT_EQ(pe_slot(s), handles[i]);
                ASSERT_EQ(s, pe_make_slot(PE_STAGED, handles[i]));
        }
        ASSERT_EQ(pe_state(PE_FLAG_INCOMPRESSIBLE), PE_EMPTY);

        /* LOADING keeps the payload and remembers where it came from; the
         * fault path may add the incompressible flag, which must survive in
         * the LOADING value and not leak into the origin */
        for (size_t i = 0; i < ELEMENTSOF(handles); i++) {
                uint64_t from[] = {
                        pe_make_stored(handles[i], clens[i % ELEMENTSOF(clens)]),
                        pe_make_same(handles[i]),
                        pe_make_slot(PE_MOVING, handles[i]),
                        pe_make_slot(PE_STAGED, handles[i]),
                };
                for (size_t k = 0; k < ELEMENTSOF(from); k++)
                        for (int flag = 0; flag < 2; flag++) {
                                uint64_t l = pe_make_loading(from[k]) | (flag ? PE_FLAG_INCOMPRESSIBLE : 0);
                                ASSERT_EQ(pe_state(l), PE_LOADING);
                                ASSERT_EQ(pe_handle(l), handles[i]);
                                ASSERT_EQ(!!(l & PE_FLAG_INCOMPRESSIBLE), flag);
                                ASSERT_EQ(pe_loading_origin(l), from[k]);
                                if (pe_state(from[k]) == PE_STORED)
                                        ASSERT_EQ(pe_clen(l), pe_clen(from[k]));
                        }
        }
}

/* ---- walks ---- */

typedef struct Visit {
        uint64_t addr[64], val[64];
        size_t n;
        size_t stop_after; /* 0: never stop */
} Visit;

static int visit_cb(void *ud, uint64_t addr, _Atomic uint64_t *e) {
        Visit *v = ud;
        ASSERT_TRUE(v->n < ELEMENTSOF(v->addr));
        v->addr[v->n] = addr;
        v->val[v->n] = atomic_load(e);
        v->n++;
        return v->stop_after && v->n == v->stop_after ? 7 : 0;
}

/* Addresses around every boundary of the tree: leaf (2 MiB), level 1
 * (1 GiB), level 2 (512 GiB), the top level (1 << 47) and the end. */
static const uint64_t marks[] = {
        0,
        ZSWAP_PAGE_SIZE,
        2 * MiB - ZSWAP_PAGE_SIZE,
        2 * MiB,
        2 * MiB + ZSWAP_PAGE_SIZE,
        GiB - ZSWAP_PAGE_SIZE,
        GiB,
        GiB + 2 * MiB,
        512 * GiB - ZSWAP_PAGE_SIZE,
        512 * GiB,
        ((uint64_t)1 << 47) - ZSWAP_PAGE_SIZE,
        (uint64_t)1 << 47,
        ((uint64_t)1 << 47) + GiB,
        PINDEX_MAX_ADDR - ZSWAP_PAGE_SIZE,
};

static void check_walk(PageIndex *pi, uint64_t start, uint64_t end) {
        Visit v = {};
        size_t k = 0;

        ASSERT_EQ(pindex_walk(pi, start, end, visit_cb, &v), 0);
        for (size_t i = 0; i < ELEMENTSOF(marks); i++) {
                if (marks[i] < start || marks[i] >= end)
                        continue;
                if (k >= v.n)
                        test_fail("walk [%#llx, %#llx) missed %#llx", (unsigned long long)start,
                                  (unsigned long long)end, (unsigned long long)marks[i]);
                ASSERT_EQ(v.addr[k], marks[i]);
                ASSERT_EQ(v.val[k], i + 1);
                k++;
        }
        ASSERT_EQ(v.n, k);
}

static void test_walk(void) {
        PageIndex *pi;
        ASSERT_OK(pindex_new(&pi));
        for (size_t i = 0; i < ELEMENTSOF(marks); i++)
                atomic_store(pindex_entry(pi, marks[i], true), i + 1);
        /* existing but zero entries are never visited */
        ASSERT_TRUE(pindex_entry(pi, 2 * MiB + 2 * ZSWAP_PAGE_SIZE, true) != NULL);
        ASSERT_TRUE(pindex_entry(pi, 3 * GiB, true) != NULL);

        check_walk(pi, 0, PINDEX_MAX_ADDR);
        check_walk(pi, 0, UINT64_MAX); /* clamped to the index */
        check_walk(pi, ZSWAP_PAGE_SIZE, 2 * MiB);
        check_walk(pi, 2 * MiB - ZSWAP_PAGE_SIZE, 2 * MiB + ZSWAP_PAGE_SIZE);
        check_walk(pi, 2 * MiB, GiB);
        check_walk(pi, GiB - ZSWAP_PAGE_SIZE, GiB + ZSWAP_PAGE_SIZE);
        check_walk(pi, GiB + ZSWAP_PAGE_SIZE, 512 * GiB);
        check_walk(pi, 512 * GiB - ZSWAP_PAGE_SIZE, ((uint64_t)1 << 47) + ZSWAP_PAGE_SIZE);
        check_walk(pi, ((uint64_t)1 << 47) - ZSWAP_PAGE_SIZE, (uint64_t)1 << 47);
        check_walk(pi, ((uint64_t)1 << 47), PINDEX_MAX_ADDR);
        check_walk(pi, 4 * GiB, 256 * GiB);   /* nothing there */
        check_walk(pi, 2 * MiB, 2 * MiB);     /* empty range */
        check_walk(pi, 512 * GiB, 2 * MiB);   /* reversed range */
        check_walk(pi, PINDEX_MAX_ADDR, UINT64_MAX);

        /* a non-zero return stops the walk and is passed up */
        Visit v = { .stop_after = 3 };
        ASSERT_EQ(pindex_walk(pi, 0, PINDEX_MAX_ADDR, visit_cb, &v), 7);
        ASSERT_EQ(v.n, 3);
        ASSERT_EQ(v.addr[2], marks[2]);
        v = (Visit){ .stop_after = 1 };
        ASSERT_EQ(pindex_walk(pi, GiB, PINDEX_MAX_ADDR, visit_cb, &v), 7);
        ASSERT_EQ(v.n, 1);
        ASSERT_EQ(v.addr[0], GiB);

        /* the callback may clear entries; the next walk skips them */
        for (size_t i = 0; i < ELEMENTSOF(marks); i += 2)
                atomic_store(pindex_entry(pi, marks[i], false), 0);
        v = (Visit){};
        ASSERT_EQ(pindex_walk(pi, 0, PINDEX_MAX_ADDR, visit_cb, &v), 0);
        ASSERT_EQ(v.n, ELEMENTSOF(marks) / 2);
        for (size_t k = 0; k < v.n; k++) {
                ASSERT_EQ(v.addr[k], marks[2 * k + 1]);
                ASSERT_EQ(v.val[k], 2 * k + 2);
        }
        pindex_free(pi);
}

/* ---- concurrency ---- */

#define NTHREADS 4
#define ROUNDS 20
#define SPAN 160 /* addresses per thread; neighbours overlap by half */

typedef struct Shared {
        PageIndex *pi;
        pthread_barrier_t barrier;
        uint64_t addrs[(NTHREADS - 1) * SPAN / 2 + SPAN];
        size_t naddrs;
} Shared;

typedef struct Arg {
        Shared *s;
        unsigned idx;
        _Atomic uint64_t *seen[SPAN];
} Arg;

static void *hammer(void *p) {
        Arg *a = p;
        Shared *s = a->s;
        size_t first = a->idx * SPAN / 2;

        pthread_barrier_wait(&s->barrier);
        for (unsigned r = 0; r < ROUNDS; r++)
                for (size_t j = 0; j < SPAN; j++) {
                        /* odd threads walk their span backwards */
                        size_t k = a->idx & 1 ? SPAN - 1 - j : j;
                        _Atomic uint64_t *e = pindex_entry(s->pi, s->addrs[first + k], true);
                        ASSERT_TRUE(e != NULL);
                        if (r == 0)
                                a->seen[k] = e;
                        else
                                ASSERT_TRUE(a->seen[k] == e);
                        /* relaxed: only the counter's value matters, and the
                         * final read happens after pthread_join */
                        uint64_t v = atomic_load_explicit(e, memory_order_relaxed);
                        while (!atomic_compare_exchange_weak_explicit(e, &v, v + 1, memory_order_relaxed,
                                                                      memory_order_relaxed))
                                ;
                }
        return NULL;
}

static int count_cb(void *ud, uint64_t addr, _Atomic uint64_t *e) {
        uint64_t *sum = ud;
        *sum += atomic_load(e);
        return 0;
}

static size_t distinct(const uint64_t *a, size_t n, int shift) {
        size_t d = 0;
        for (size_t i = 0; i < n; i++) {
                bool dup = false;
                for (size_t j = 0; j < i && !dup; j++)
                        dup = a[j] >> shift == a[i] >> shift;
                d += !dup;
        }
        return d;
}

static void test_concurrent(void) {
        for (int iter = 0; iter < 10; iter++) {
                Shared s = {};
                Arg args[NTHREADS];
                pthread_t t[NTHREADS];

                ASSERT_OK(pindex_new(&s.pi));
                /* consecutive pages, then pages spread over leaves and inner
                 * nodes, so that threads race to create the same nodes */
                s.naddrs = ELEMENTSOF(s.addrs);
                for (size_t i = 0; i < s.naddrs; i++) {
                        uint64_t a = i % 3 == 0 ? 0x7f0000000000 + i * ZSWAP_PAGE_SIZE
                                   : i % 3 == 1 ? 0x550000000000 + i * 2 * MiB + (i % 7) * ZSWAP_PAGE_SIZE
                                                : (i * 0x9e3779b97f4a7c15ull) % PINDEX_MAX_ADDR;
                        s.addrs[i] = a & ~(ZSWAP_PAGE_SIZE - 1);
                }
                /* whatever distinct() counts must also be distinct pages */
                ASSERT_EQ(distinct(s.addrs, s.naddrs, ZSWAP_PAGE_SHIFT), s.naddrs);
                pthread_barrier_init(&s.barrier, NULL, NTHREADS);
                for (unsigned i = 0; i < NTHREADS; i++) {
                        args[i] = (Arg){ .s = &s, .idx = i };
                        ASSERT_EQ(pthread_create(&t[i], NULL, hammer, &args[i]), 0);
                }
                for (unsigned i = 0; i < NTHREADS; i++)
                        ASSERT_EQ(pthread_join(t[i], NULL), 0);

                /* every page got ROUNDS increments from each thread covering it */
                uint64_t expect_total = 0;
                for (size_t i = 0; i < s.naddrs; i++) {
                        unsigned covering = 0;
                        for (unsigned k = 0; k < NTHREADS; k++)
                                covering += i >= k * SPAN / 2 && i < k * SPAN / 2 + SPAN;
                        ASSERT_EQ(atomic_load(pindex_entry(s.pi, s.addrs[i], false)), (uint64_t)covering * ROUNDS);
                        expect_total += (uint64_t)covering * ROUNDS;
                }
                ASSERT_EQ(expect_total, (uint64_t)NTHREADS * SPAN * ROUNDS);
                uint64_t sum = 0;
                ASSERT_EQ(pindex_walk(s.pi, 0, PINDEX_MAX_ADDR, count_cb, &sum), 0);
                ASSERT_EQ(sum, expect_total);
                /* threads sharing a page saw the same entry */
                for (unsigned k = 1; k < NTHREADS; k++)
                        for (size_t j = 0; j < SPAN / 2; j++)
                                ASSERT_TRUE(args[k].seen[j] == args[k - 1].seen[j + SPAN / 2]);
                /* each node was installed once: losers freed theirs */
                uint64_t nodes = 1 + distinct(s.addrs, s.naddrs, 39) + distinct(s.addrs, s.naddrs, 30) +
                                 distinct(s.addrs, s.naddrs, 21);
                ASSERT_EQ(pindex_bytes(s.pi), nodes * NODE_BYTES);
                pthread_barrier_destroy(&s.barrier);
                pindex_free(s.pi);
        }
}

int main(void) {
        test_entries();
        test_encoding();
        test_walk();
        test_concurrent();
        fprintf(stderr, "pindex: ok\n");
        return 0;
}
