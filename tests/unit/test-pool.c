/*
 * test-pool.c: the compressed-object pool.
 *
 * Every object is filled with a pattern derived from its own seed and
 * checked later, so overlapping slots or a slot handed out twice show up as
 * corrupted content. The torture test runs allocators, releasers (which
 * check content before releasing, as the fault path does) and a reclaimer
 * at the same time; build it with -fsanitize=thread as well.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <time.h>

#include "pentry.h"
#include "pool.h"
#include "test.h"

static uint64_t mix(uint64_t x) {
        /* splitmix64 */
        x += 0x9e3779b97f4a7c15ULL;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
        return x ^ (x >> 31);
}

static void pattern_fill(void *dst, size_t len, uint64_t seed) {
        uint8_t *d = dst;

        for (size_t i = 0; i < len; i += 8) {
                uint64_t x = mix(seed + i);
                memcpy(d + i, &x, len - i < 8 ? len - i : 8);
        }
}

static bool pattern_ok(const void *src, size_t len, uint64_t seed) {
        const uint8_t *s = src;

        for (size_t i = 0; i < len; i += 8) {
                uint64_t x = mix(seed + i);
                if (memcmp(s + i, &x, len - i < 8 ? len - i : 8) != 0)
                        return false;
        }
        return true;
}

static PoolStats stats(Pool *p) {
        PoolStats st;

        pool_get_stats(p, &st);
        return st;
}

static void assert_empty(Pool *p) {
        PoolStats st = stats(p);

        ASSERT_EQ(st.objects, 0);
        ASSERT_EQ(st.object_bytes, 0);
        ASSERT_EQ(st.deferred, 0);
        ASSERT_EQ(st.pool_bytes, 0);
        ASSERT_EQ(st.chunks, 0);
}

/* 1 + 2: every size, content, exact statistics, everything given back. */
static void test_every_size(void) {
        static PoolHandle h[POOL_MAX_OBJECT + 1];
        Pool *p;
        PoolStats st;

        ASSERT_OK(pool_new(0, &p));
        for (size_t len = 1; len <= POOL_MAX_OBJECT; len++) {
                ASSERT_OK(pool_alloc(p, len, &h[len]));
                ASSERT_TRUE(h[len] != 0);
                ASSERT_LE(len, pool_object_capacity(p, h[len]));
                ASSERT_LE(pool_object_capacity(p, h[len]), len + 31);
                pattern_fill(pool_map(p, h[len]), len, len);
        }
        for (size_t len = 1; len <= POOL_MAX_OBJECT; len++)
                ASSERT_TRUE(pattern_ok(pool_map(p, h[len]), len, len));

        st = stats(p);
        ASSERT_EQ(st.objects, POOL_MAX_OBJECT);
        ASSERT_EQ(st.object_bytes, POOL_MAX_OBJECT * (POOL_MAX_OBJECT + 1) / 2);
        ASSERT_EQ(st.deferred, 0);
        ASSERT_TRUE(st.chunks > 0);
        ASSERT_LE(st.object_bytes, st.pool_bytes);

        for (size_t len = 1; len <= POOL_MAX_OBJECT; len++)
                pool_release(p, h[len]);
        pool_release(p, 0); /* ignored */
        st = stats(p);
        ASSERT_EQ(st.objects, 0);
        ASSERT_EQ(st.object_bytes, 0);
        ASSERT_EQ(st.deferred, POOL_MAX_OBJECT);

        pool_reclaim(p);
        assert_empty(p);
        ASSERT_TRUE(pool_free(p) == NULL);
        ASSERT_TRUE(pool_free(NULL) == NULL);
}

/* Allocate n objects of sizes drawn from seed, fill them, return the sum of
 * their lengths. */
static uint64_t fill(Pool *p, PoolHandle *h, size_t n, uint64_t seed) {
        uint64_t sum = 0;

        for (size_t i = 0; i < n; i++) {
                size_t len = mix(seed + i) % POOL_MAX_OBJECT + 1;

                ASSERT_OK(pool_alloc(p, len, &h[i]));
                pattern_fill(pool_map(p, h[i]), len, seed ^ h[i]);
                sum += len;
        }
        return sum;
}

static void check_and_release(Pool *p, PoolHandle *h, size_t n, uint64_t seed) {
        for (size_t i = 0; i < n; i++) {
                size_t len = mix(seed + i) % POOL_MAX_OBJECT + 1;

                ASSERT_TRUE(pattern_ok(pool_map(p, h[i]), len, seed ^ h[i]));
                pool_release(p, h[i]);
        }
}

/* 3: released slots are reused, by pool_alloc() alone and after
 * pool_reclaim(): the same workload never needs more memory. */
static void test_reuse(void) {
        enum { N = 20000 };
        static PoolHandle h[N];
        uint64_t peak = 0, peak_chunks = 0;
        Pool *p;

        ASSERT_OK(pool_new(0, &p));
        for (unsigned cycle = 0; cycle < 6; cycle++) {
                uint64_t sum = fill(p, h, N, 42);
                PoolStats st = stats(p);

                ASSERT_EQ(st.objects, N);
                ASSERT_EQ(st.object_bytes, sum);
                if (cycle == 0) {
                        peak = st.pool_bytes;
                        peak_chunks = st.chunks;
                }
                ASSERT_EQ(st.pool_bytes, peak);
                ASSERT_EQ(st.chunks, peak_chunks);

                check_and_release(p, h, N, 42);
                if (cycle % 2 == 0) {
                        /* no reclaim: pool_alloc() must drain by itself */
                        ASSERT_EQ(stats(p).deferred, N);
                        ASSERT_EQ(stats(p).pool_bytes, peak);
                } else {
                        pool_reclaim(p);
                        assert_empty(p);
                }
        }
        pool_reclaim(p);
        assert_empty(p);
        pool_free(p);
}

/* 4: bad sizes and the memory cap. */
static void test_limits(void) {
        enum { MAX = 256 * 1024 };
        PoolHandle h[MAX / 4096 + 1], x;
        size_t n = 0;
        Pool *p;
        int r;

        ASSERT_OK(pool_new(0, &p));
        ASSERT_ERROR(pool_alloc(p, 0, &x), EINVAL);
        ASSERT_ERROR(pool_alloc(p, POOL_MAX_OBJECT + 1, &x), EINVAL);
        assert_empty(p);
        pool_free(p);

        ASSERT_OK(pool_new(MAX, &p));
        while ((r = pool_alloc(p, 4096, &h[n])) == 0) {
                n++;
                ASSERT_LE(n, MAX / 4096);
        }
        ASSERT_EQ(r, -ENOSPC);
        ASSERT_EQ(n, MAX / 4096);
        ASSERT_LE(stats(p).pool_bytes, MAX);
        /* 128 bytes: a class whose chunks are 4 KiB, as the one freed below */
        ASSERT_ERROR(pool_alloc(p, 128, &x), ENOSPC);

        /* a deferred release makes room without an explicit reclaim */
        pool_release(p, h[0]);
        ASSERT_OK(pool_alloc(p, 4096, &h[0]));
        /* an empty chunk of another class is given back on demand */
        pool_release(p, h[1]);
        ASSERT_OK(pool_alloc(p, 128, &x));
        pool_release(p, x);
        pool_release(p, h[0]);
        for (size_t i = 2; i < n; i++)
                pool_release(p, h[i]);
        pool_reclaim(p);
        assert_empty(p);
        pool_free(p);
}

/* 5: torture. */
enum {
        QUEUE_SIZE = 4096,
        KEEP = 512,
        TORTURE_MS = 2000,
};

typedef struct Item {
        PoolHandle h;
        uint32_t len;
        uint64_t seed;
} Item;

typedef struct Torture {
        Pool *pool;
        pthread_mutex_t lock;
        Item queue[QUEUE_SIZE]; /* lock: ring of live objects for the releasers */
        size_t head, count;     /* lock */
        atomic_bool stop;
        _Atomic uint64_t allocs, releases, reclaims;
} Torture;

typedef struct Allocator {
        Torture *t;
        uint64_t rng;
        Item keep[KEEP]; /* this thread's long-lived objects; read by main after join */
} Allocator;

static uint64_t counter(_Atomic uint64_t *c) {
        return atomic_load_explicit(c, memory_order_relaxed); /* read after join */
}

static bool stopping(Torture *t) {
        return atomic_load_explicit(&t->stop, memory_order_relaxed);
}

static void item_release(Torture *t, Item *it) {
        ASSERT_TRUE(pattern_ok(pool_map(t->pool, it->h), it->len, it->seed));
        pool_release(t->pool, it->h);
        atomic_fetch_add_explicit(&t->releases, 1, memory_order_relaxed);
        it->h = 0;
}

static bool queue_push(Torture *t, const Item *it) {
        bool ok;

        pthread_mutex_lock(&t->lock);
        ok = t->count < QUEUE_SIZE;
        if (ok)
                t->queue[(t->head + t->count++) % QUEUE_SIZE] = *it;
        pthread_mutex_unlock(&t->lock);
        return ok;
}

static bool queue_pop(Torture *t, Item *ret) {
        bool ok;

        pthread_mutex_lock(&t->lock);
        ok = t->count > 0;
        if (ok) {
                *ret = t->queue[t->head];
                t->head = (t->head + 1) % QUEUE_SIZE;
                t->count--;
        }
        pthread_mutex_unlock(&t->lock);
        return ok;
}

static void *allocator_thread(void *arg) {
        Allocator *a = arg;
        Torture *t = a->t;

        while (!stopping(t)) {
                uint64_t r = mix(a->rng++);
                Item it = { .len = (uint32_t) (r % POOL_MAX_OBJECT + 1), .seed = r };

                ASSERT_OK(pool_alloc(t->pool, it.len, &it.h));
                ASSERT_LE(it.len, pool_object_capacity(t->pool, it.h));
                pattern_fill(pool_map(t->pool, it.h), it.len, it.seed);
                atomic_fetch_add_explicit(&t->allocs, 1, memory_order_relaxed);

                if ((r >> 32) % 8 == 0) {
                        Item *k = &a->keep[(r >> 40) % KEEP];

                        if (k->h)
                                item_release(t, k);
                        *k = it;
                        continue;
                }
                while (!queue_push(t, &it))
                        if (stopping(t)) {
                                item_release(t, &it);
                                break;
                        } else
                                sched_yield();
        }
        return NULL;
}

static void *releaser_thread(void *arg) {
        Torture *t = arg;
        Item it;

        while (!stopping(t))
                if (queue_pop(t, &it))
                        item_release(t, &it);
                else
                        sched_yield();
        return NULL;
}

static void *reclaimer_thread(void *arg) {
        Torture *t = arg;

        while (!stopping(t)) {
                pool_reclaim(t->pool);
                atomic_fetch_add_explicit(&t->reclaims, 1, memory_order_relaxed);
        }
        return NULL;
}

static void torture_finish(Torture *t, Allocator *a, size_t na) {
        uint64_t live = t->count, bytes = 0;
        PoolStats st;
        Item it;

        for (size_t i = 0; i < t->count; i++)
                bytes += t->queue[(t->head + i) % QUEUE_SIZE].len;
        for (size_t i = 0; i < na; i++)
                for (size_t k = 0; k < KEEP; k++)
                        if (a[i].keep[k].h) {
                                live++;
                                bytes += a[i].keep[k].len;
                        }
        st = stats(t->pool);
        ASSERT_EQ(st.objects, live);
        ASSERT_EQ(st.object_bytes, bytes);
        ASSERT_EQ(st.objects, counter(&t->allocs) - counter(&t->releases));
        ASSERT_LE(st.object_bytes, st.pool_bytes);

        while (queue_pop(t, &it))
                item_release(t, &it);
        for (size_t i = 0; i < na; i++)
                for (size_t k = 0; k < KEEP; k++)
                        if (a[i].keep[k].h)
                                item_release(t, &a[i].keep[k]);
        pool_reclaim(t->pool);
        assert_empty(t->pool);
}

static void test_torture(void) {
        static Torture t = { .lock = PTHREAD_MUTEX_INITIALIZER };
        static Allocator a[2];
        pthread_t th[5];
        struct timespec ts = { TORTURE_MS / 1000, (TORTURE_MS % 1000) * 1000000L };

        ASSERT_OK(pool_new(0, &t.pool));
        for (size_t i = 0; i < 2; i++) {
                a[i] = (Allocator) { .t = &t, .rng = (i + 1) << 40 };
                ASSERT_EQ(pthread_create(&th[i], NULL, allocator_thread, &a[i]), 0);
                ASSERT_EQ(pthread_create(&th[2 + i], NULL, releaser_thread, &t), 0);
        }
        ASSERT_EQ(pthread_create(&th[4], NULL, reclaimer_thread, &t), 0);
        nanosleep(&ts, NULL);
        /* and on until the threads have done some work, however slow the
         * machine: a bound that says how far they got */
        for (int i = 0; counter(&t.allocs) <= 1000; i++) {
                if (i == 6000)
                        test_fail("%" PRIu64 " allocs after 60 s more", counter(&t.allocs));
                nanosleep(&(struct timespec){ 0, 10000000 }, NULL);
        }
        atomic_store_explicit(&t.stop, true, memory_order_relaxed); /* a flag; join orders the rest */
        for (size_t i = 0; i < 5; i++)
                ASSERT_EQ(pthread_join(th[i], NULL), 0);

        printf("torture: %" PRIu64 " allocs, %" PRIu64 " releases, %" PRIu64 " reclaims\n",
               counter(&t.allocs), counter(&t.releases), counter(&t.reclaims));
        ASSERT_TRUE(counter(&t.allocs) > 1000);
        torture_finish(&t, a, 2);
        pool_free(t.pool);
}

/* Packing efficiency, object_bytes / pool_bytes, on sizes 1000..3000 (what
 * zstd/lz4 typically make of a 4 KiB page). */
static void test_efficiency(void) {
        enum { N = 100000 };
        static PoolHandle h[N];
        Pool *p;
        PoolStats st;
        double full, holes, refill;

        ASSERT_OK(pool_new(0, &p));
        for (size_t i = 0; i < N; i++)
                ASSERT_OK(pool_alloc(p, 1000 + mix(i) % 2001, &h[i]));
        st = stats(p);
        full = (double) st.object_bytes / (double) st.pool_bytes;

        /* free a random half: holes the pool cannot compact */
        for (size_t i = 0; i < N; i++)
                if (mix(i ^ 0xabcdef) & 1) {
                        pool_release(p, h[i]);
                        h[i] = 0;
                }
        pool_reclaim(p);
        st = stats(p);
        holes = (double) st.object_bytes / (double) st.pool_bytes;

        for (size_t i = 0; i < N; i++)
                if (!h[i])
                        ASSERT_OK(pool_alloc(p, 1000 + mix(i + N) % 2001, &h[i]));
        st = stats(p);
        refill = (double) st.object_bytes / (double) st.pool_bytes;

        printf("packing efficiency (sizes 1000..3000, %d objects): full %.4f, half released %.4f, refilled %.4f\n",
               N, full, holes, refill);
        ASSERT_TRUE(full > 0.95);
        ASSERT_TRUE(refill > 0.95);
        for (size_t i = 0; i < N; i++)
                pool_release(p, h[i]);
        pool_reclaim(p);
        assert_empty(p);
        pool_free(p);
}

/* Shared objects (fork): every holder releases once, the last one frees;
 * until then the bytes stay intact and the slot is not handed out again. */
static void test_share(void) {
        Pool *p;
        PoolHandle h, other;
        PoolStats st;

        ASSERT_OK(pool_new(0, &p));
        ASSERT_OK(pool_alloc(p, 1000, &h));
        memset(pool_map(p, h), 0x5a, 1000);
        ASSERT_OK(pool_share(p, h));
        ASSERT_OK(pool_share(p, h));
        pool_release(p, h);
        pool_release(p, h);
        pool_reclaim(p);
        pool_get_stats(p, &st);
        ASSERT_EQ(st.objects, 1);
        for (int i = 0; i < 1000; i++)
                ASSERT_EQ(((uint8_t *)pool_map(p, h))[i], 0x5a);
        ASSERT_OK(pool_alloc(p, 1000, &other));
        ASSERT_TRUE(other != h);
        pool_release(p, h);
        pool_release(p, other);
        pool_reclaim(p);
        pool_get_stats(p, &st);
        ASSERT_EQ(st.objects, 0);
        ASSERT_EQ(st.pool_bytes, 0);
        /* a slot freed with shares gone starts unshared when reused */
        ASSERT_OK(pool_alloc(p, 1000, &h));
        for (int i = 0; i < 255; i++)
                ASSERT_OK(pool_share(p, h));
        ASSERT_ERROR(pool_share(p, h), EOVERFLOW);
        for (int i = 0; i < 256; i++)
                pool_release(p, h);
        pool_reclaim(p);
        pool_get_stats(p, &st);
        ASSERT_EQ(st.objects, 0);
        pool_free(p);
}


/* ---- compaction ---- */

#define CE_N 4096

static uint64_t xorshift_next(uint64_t *s) {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        return *s;
}

/* Entries as a page index holds them: STORED(handle, len), 0 for none.
 * An object's content is the pattern of (entry index, len). */
static _Atomic uint64_t ce[CE_N];

static uint64_t ce_seed(size_t i, uint32_t len) {
        return (uint64_t)i << 16 | len;
}

static uint64_t ce_rename(uint64_t v, PoolHandle nh) {
        return (v & 0xffffffffull) | (uint64_t)nh << 32;
}

static void ce_store(Pool *p, size_t i, uint32_t len) {
        PoolHandle h;
        ASSERT_OK(pool_alloc(p, len, &h));
        pattern_fill(pool_map(p, h), len, ce_seed(i, len));
        atomic_store_explicit(&ce[i], pe_make_stored(h, len), memory_order_release);
}

/* One compaction pass over every entry; the objects it moved. */
static uint64_t ce_compact(Pool *p, uint64_t max_move, uint64_t min_gain, uint64_t *ret_freed) {
        uint64_t moved = 0;
        *ret_freed = 0;
        if (!pool_compact_begin(p, max_move, min_gain))
                return 0;
        for (size_t i = 0; i < CE_N; i++) {
                uint64_t v = atomic_load_explicit(&ce[i], memory_order_acquire);
                if (pe_state(v) != PE_STORED || !pool_compact_source(p, pe_handle(v)))
                        continue;
                int r = pool_compact_move(p, &ce[i], v, pe_handle(v), ce_rename);
                ASSERT_TRUE(r >= 0 || r == -ENOSPC);
                moved += r > 0;
        }
        *ret_freed = pool_compact_end(p);
        return moved;
}

static size_t ce_check(Pool *p) {
        size_t bad = 0;
        for (size_t i = 0; i < CE_N; i++) {
                uint64_t v = atomic_load(&ce[i]);
                if (pe_state(v) == PE_STORED && !pattern_ok(pool_map(p, pe_handle(v)), pe_clen(v), ce_seed(i, pe_clen(v))))
                        bad++;
        }
        return bad;
}

/* Three quarters of the objects released at random: compaction gives back
 * the chunks they leave, every object left reads as it was, and an empty
 * chunk kept warm (pool_trim()) stays kept through the passes. */
static void test_compact(void) {
        Pool *p;
        PoolStats st;
        uint64_t s = 7, freed, live_bytes = 0;

        ASSERT_OK(pool_new(0, &p));
        for (size_t i = 0; i < CE_N; i++)
                ce_store(p, i, 300 + (uint32_t)(xorshift_next(&s) % 160));
        uint64_t full = pool_bytes(p);
        for (size_t i = 0; i < CE_N; i++)
                if (xorshift_next(&s) % 4) {
                        pool_release(p, pe_handle(ce[i]));
                        ce[i] = 0;
                } else
                        live_bytes += pe_clen(ce[i]);
        pool_reclaim(p);
        PoolHandle warm;
        uint64_t live_only = pool_bytes(p);
        ASSERT_OK(pool_alloc(p, 4000, &warm)); /* a class of its own */
        pool_release(p, warm);
        pool_trim(p, 1, true);
        uint64_t kept = pool_bytes(p) - live_only;
        ASSERT_TRUE(kept > 0);
        uint64_t before = pool_bytes(p);
        /* nothing worth it is not a pass */
        ASSERT_EQ(pool_compact_begin(p, 64 << 20, before + 1), 0);

        uint64_t moved = 0, freed_all = 0, m;
        while ((m = ce_compact(p, 64 << 20, 0, &freed)) > 0) {
                moved += m;
                freed_all += freed;
        }
        uint64_t after = pool_bytes(p);
        pool_get_stats(p, &st);
        fprintf(stderr, "compaction: %llu bytes of chunks for %llu of objects, %llu after releasing 3/4, "
                        "%llu after moving %llu objects (%llu freed)\n",
                (unsigned long long)full, (unsigned long long)live_bytes, (unsigned long long)before,
                (unsigned long long)after, (unsigned long long)moved, (unsigned long long)freed_all);
        ASSERT_EQ(ce_check(p), 0);
        ASSERT_TRUE(moved > 0);
        ASSERT_EQ(st.compact_moved, moved);
        ASSERT_EQ(st.compact_freed, freed_all);
        ASSERT_EQ(before - after, freed_all);
        /* each class keeps less than one chunk of free slots, and a class
         * holds at most 64 KiB chunks: 11 classes here */
        ASSERT_TRUE(after - kept <= live_bytes + live_bytes / 8 + 11 * (64 << 10));
        ASSERT_TRUE(after < before / 2);
        pool_trim(p, 1 + POOL_KEEP_EMPTY_MS, true);
        ASSERT_EQ(pool_bytes(p), after - kept);
        for (size_t i = 0; i < CE_N; i++)
                if (ce[i]) {
                        pool_release(p, pe_handle(ce[i]));
                        ce[i] = 0;
                }
        pool_reclaim(p);
        pool_get_stats(p, &st);
        ASSERT_EQ(st.objects, 0);
        ASSERT_EQ(st.object_bytes, 0);
        ASSERT_EQ(pool_bytes(p), 0);
        pool_free(p);
}

/* Faults against compaction: threads take entries as the fault path does
 * (CAS to LOADING, check the object, release it), and put new objects
 * back, while another compacts over and over, for TORTURE_SECONDS / 3 + 1
 * seconds and at least TEST_COMPACT_MOVES (2000) objects moved (about
 * 20000 in 3 s at native speed). An object read wrong, or an
 * entry that names a released slot, shows up as a bad pattern; a double
 * release trips pool_release()'s assertion. */
typedef struct CeArg {
        Pool *p;
        uint64_t seed;
        _Atomic bool *stop;
        uint64_t ops, bad;
} CeArg;

static void *ce_fault(void *arg) {
        CeArg *a = arg;
        while (!atomic_load_explicit(a->stop, memory_order_relaxed)) {
                size_t i = xorshift_next(&a->seed) % CE_N;
                uint64_t v = atomic_load_explicit(&ce[i], memory_order_acquire);
                if (pe_state(v) == PE_STORED) {
                        if (!atomic_compare_exchange_strong_explicit(&ce[i], &v, pe_make_loading(v),
                                                                     memory_order_acquire, memory_order_relaxed))
                                continue;
                        if (!pattern_ok(pool_map(a->p, pe_handle(v)), pe_clen(v), ce_seed(i, pe_clen(v))))
                                a->bad++;
                        pool_release(a->p, pe_handle(v));
                        atomic_store_explicit(&ce[i], 0, memory_order_release);
                        a->ops++;
                } else if (v == 0 && xorshift_next(&a->seed) % 2) {
                        uint64_t loading = pe_make_loading(pe_make_stored(0, 0));
                        if (!atomic_compare_exchange_strong_explicit(&ce[i], &v, loading, memory_order_acquire,
                                                                     memory_order_relaxed))
                                continue;
                        ce_store(a->p, i, 200 + (uint32_t)(xorshift_next(&a->seed) % 1200));
                        a->ops++;
                }
        }
        return NULL;
}

static void test_compact_race(void) {
        Pool *p;
        _Atomic bool stop = false;
        uint64_t s = 11, passes = 0, moved = 0, freed;
        unsigned seconds = test_env_uint("TORTURE_SECONDS", 6) / 3 + 1;
        uint64_t min_moves = test_env_uint("TEST_COMPACT_MOVES", 2000);

        ASSERT_OK(pool_new(0, &p));
        memset((void *)ce, 0, sizeof(ce));
        for (size_t i = 0; i < CE_N; i++)
                if (xorshift_next(&s) % 2)
                        ce_store(p, i, 200 + (uint32_t)(xorshift_next(&s) % 1200));
        CeArg args[3];
        pthread_t th[3];
        for (unsigned t = 0; t < 3; t++) {
                args[t] = (CeArg){ .p = p, .seed = 100 + t, .stop = &stop };
                ASSERT_OK(pthread_create(&th[t], NULL, ce_fault, &args[t]));
        }
        time_t t0 = time(NULL);
        while (time(NULL) - t0 < (time_t)seconds || moved < min_moves) {
                moved += ce_compact(p, 1 << 20, 0, &freed);
                passes++;
                if (time(NULL) - t0 > 120)
                        break; /* safety: said below */
        }
        atomic_store(&stop, true);
        uint64_t ops = 0, bad = 0;
        for (unsigned t = 0; t < 3; t++) {
                ASSERT_OK(pthread_join(th[t], NULL));
                ops += args[t].ops;
                bad += args[t].bad;
        }
        fprintf(stderr, "compaction race: %llu passes moved %llu objects while %llu entries were taken or filled, "
                        "%llu read wrong\n",
                (unsigned long long)passes, (unsigned long long)moved, (unsigned long long)ops,
                (unsigned long long)bad);
        ASSERT_EQ(bad, 0);
        ASSERT_EQ(ce_check(p), 0);
        ASSERT_TRUE(moved >= min_moves); /* else: stopped by the safety timeout */
        for (size_t i = 0; i < CE_N; i++)
                if (pe_state(ce[i]) == PE_STORED)
                        pool_release(p, pe_handle(ce[i]));
        pool_reclaim(p);
        ASSERT_EQ(pool_bytes(p), 0);
        pool_free(p);
}

/* A class's first chunk fills by faults; every later one is mapped whole
 * before its first object is written (chunk_populate()). 1488 bytes: two
 * to a 4 KiB chunk would waste a quarter of it, so the class's chunks are
 * larger. */
static void test_populate(void) {
        enum { N = 200 };
        static PoolHandle h[N];
        unsigned char vec[2];
        uint8_t *first = NULL;
        Pool *p;
        unsigned n = 0, checked = 0;

        ASSERT_OK(pool_new(0, &p));
        for (; n < N; n++) {
                ASSERT_OK(pool_alloc(p, 1488, &h[n]));
                uint8_t *o = pool_map(p, h[n]);
                if (n == 0) {
                        first = o;
                        ASSERT_OK(mincore(o, 2 * 4096, vec));
                        ASSERT_TRUE(!(vec[1] & 1)); /* the first chunk: by faults */
                } else if (o < first || o >= first + 65536) {
                        /* slot 0 of a later chunk, untouched */
                        ASSERT_TRUE(((uintptr_t) o & 4095) == 0);
                        ASSERT_OK(mincore(o, 2 * 4096, vec));
                        ASSERT_TRUE(vec[0] & 1);
                        ASSERT_TRUE(vec[1] & 1);
                        checked++;
                        n++;
                        break;
                }
                memset(o, 1, 1488);
        }
        ASSERT_EQ(checked, 1);
        for (unsigned i = 0; i < n; i++)
                pool_release(p, h[i]);
        pool_reclaim(p);
        assert_empty(p);
        pool_free(p);
}

/* Empty chunks kept warm: pool_trim() gives a chunk back only once a trim
 * found it empty POOL_KEEP_EMPTY_MS before, a chunk used again meanwhile
 * starts over, and pool_trim(keep = false) and pool_reclaim() give back
 * at once. */
static void test_trim(void) {
        enum { N = 200, T0 = 10000, K = POOL_KEEP_EMPTY_MS };
        static PoolHandle h[N];
        unsigned char vec;
        Pool *p;

        ASSERT_OK(pool_new(0, &p));
        for (unsigned i = 0; i < N; i++) {
                ASSERT_OK(pool_alloc(p, 1488, &h[i]));
                pattern_fill(pool_map(p, h[i]), 1488, i);
        }
        uint64_t bytes = stats(p).pool_bytes;
        uint8_t *first = pool_map(p, h[0]);
        ASSERT_TRUE(stats(p).chunks > 2);
        for (unsigned i = 0; i < N; i++)
                pool_release(p, h[i]);

        pool_trim(p, T0, true); /* finds them empty: kept, mapped */
        ASSERT_EQ(stats(p).deferred, 0);
        ASSERT_EQ(stats(p).objects, 0);
        ASSERT_EQ(stats(p).pool_bytes, bytes);
        ASSERT_OK(mincore(first, 4096, &vec));
        ASSERT_TRUE(vec & 1);
        pool_trim(p, T0 + K - 1, true);
        ASSERT_EQ(stats(p).pool_bytes, bytes);

        /* used again: the same chunks, no new memory, and a trim long after
         * leaves chunks in use alone */
        for (unsigned i = 0; i < N; i++) {
                ASSERT_OK(pool_alloc(p, 1488, &h[i]));
                pattern_fill(pool_map(p, h[i]), 1488, i + N);
        }
        ASSERT_EQ(stats(p).pool_bytes, bytes);
        pool_trim(p, T0 + 10 * K, true);
        ASSERT_EQ(stats(p).pool_bytes, bytes);
        for (unsigned i = 0; i < N; i++)
                ASSERT_TRUE(pattern_ok(pool_map(p, h[i]), 1488, i + N));

        /* emptied again: stamped afresh, so kept a whole K from now; one
         * chunk used and emptied meanwhile starts over once more */
        for (unsigned i = 0; i < N; i++)
                pool_release(p, h[i]);
        pool_trim(p, T0 + 11 * K, true);
        ASSERT_EQ(stats(p).pool_bytes, bytes);
        ASSERT_OK(pool_alloc(p, 1488, &h[0]));
        pool_release(p, h[0]);
        pool_trim(p, T0 + 12 * K, true);
        uint64_t one = stats(p).pool_bytes;
        ASSERT_TRUE(one > 0 && one < bytes);
        ASSERT_EQ(stats(p).chunks, 1);
        pool_trim(p, T0 + 13 * K, true);
        assert_empty(p);

        /* near the bound (keep = false), and pool_reclaim(): at once */
        for (unsigned round = 0; round < 2; round++) {
                for (unsigned i = 0; i < N; i++)
                        ASSERT_OK(pool_alloc(p, 1488, &h[i]));
                for (unsigned i = 0; i < N; i++)
                        pool_release(p, h[i]);
                if (round == 0) {
                        pool_trim(p, T0 + 14 * K, false);
                        assert_empty(p);
                }
        }
        pool_trim(p, T0 + 15 * K, true);
        ASSERT_EQ(stats(p).pool_bytes, bytes);
        pool_reclaim(p);
        assert_empty(p);
        pool_free(p);
}

int main(void) {
        test_populate();
        test_trim();
        test_compact();
        test_compact_race();
        test_share();
        test_every_size();
        test_reuse();
        test_limits();
        test_efficiency();
        test_torture();
        return 0;
}
