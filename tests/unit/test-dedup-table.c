/*
 * test-dedup-table.c: a user's shared store's table (daemon/mm/dedup.c).
 *
 *  1. Objects are found by their bytes, and only by their very bytes: a
 *     lookup of the same bytes finds the object (one more holder), one
 *     byte different finds nothing; objects whose keys collide (the same
 *     length and CRC-32C: crafted here) are told apart byte for byte.
 *  2. The sweep lets go of exactly the objects no holder but the table
 *     holds, and every other object stays findable and intact after
 *     records were taken out of the middle of runs (the table deletes by
 *     shifting records back) and after the table grew.
 *  3. Threads looking up and storing the same pages at once while holders
 *     let go and the sweep runs: every object found holds its bytes, and
 *     at the end the table is empty. Built with -fsanitize=thread too.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "crc32c.h"
#include "dedup.h"
#include "pool.h"
#include "store.h"
#include "test.h"

#define N 5000

static void page_bytes(uint8_t *b, size_t len, uint64_t seed) {
        for (size_t i = 0; i < len; i++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                b[i] = (uint8_t)(seed >> 56);
        }
}

static size_t obj_len(uint64_t i) {
        return 16 + (size_t)(i * 37 % 3000);
}

/* Two different 8-byte strings with the same CRC-32C (so the same key in
 * the table): a birthday search over random strings, which finds one
 * after about 80000 (2^32 values). */
static bool collide(uint8_t *a, uint8_t *b) {
        enum { TAB = 1 << 20, TRIES = 600000 };
        static uint64_t tab_val[TAB];
        static uint32_t tab_crc[TAB];
        static bool used[TAB];
        uint64_t s = 12345;

        for (unsigned n = 0; n < TRIES; n++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                uint64_t v = s;
                uint32_t c = crc32c(0, &v, 8);
                for (uint32_t i = c & (TAB - 1);; i = (i + 1) & (TAB - 1)) {
                        if (!used[i]) {
                                used[i] = true;
                                tab_val[i] = v;
                                tab_crc[i] = c;
                                break;
                        }
                        if (tab_crc[i] == c && tab_val[i] != v) {
                                memcpy(a, &tab_val[i], 8);
                                memcpy(b, &v, 8);
                                return true;
                        }
                }
        }
        return false;
}

static void basic(void) {
        PoolShared *sh;
        Dedup *d;
        static PoolHandle h[N];
        uint8_t buf[4096];

        ASSERT_OK(pool_shared_new(0, &sh));
        ASSERT_OK(dedup_new(sh, CODEC_LZ4, 0, 1, &d));
        for (uint64_t i = 0; i < N; i++) {
                page_bytes(buf, obj_len(i), i);
                ASSERT_EQ(dedup_get(d, buf, (uint32_t)obj_len(i), false, &h[i]), -ENOENT);
                ASSERT_EQ(dedup_get(d, buf, (uint32_t)obj_len(i), true, &h[i]), 0);
        }
        for (uint64_t i = 0; i < N; i++) {
                PoolHandle x;
                page_bytes(buf, obj_len(i), i);
                ASSERT_EQ(dedup_get(d, buf, (uint32_t)obj_len(i), false, &x), 1);
                ASSERT_EQ(x, h[i]);
                ASSERT_EQ(pool_holders(dedup_pool(d), x), 3); /* the table, the store, this lookup */
                pool_release(dedup_pool(d), x);
                buf[obj_len(i) / 2] ^= 1;
                ASSERT_EQ(dedup_get(d, buf, (uint32_t)obj_len(i), false, &x), -ENOENT);
        }
        /* a crafted collision: same key, other bytes, another object */
        uint8_t a[8], b[8];
        ASSERT_TRUE(collide(a, b));
        ASSERT_EQ(crc32c(0, a, 8), crc32c(0, b, 8));
        PoolHandle ha, hb, x;
        ASSERT_EQ(dedup_get(d, a, sizeof(a), true, &ha), 0);
        ASSERT_EQ(dedup_get(d, b, sizeof(b), false, &x), -ENOENT);
        ASSERT_EQ(dedup_get(d, b, sizeof(b), true, &hb), 0);
        ASSERT_TRUE(ha != hb);
        ASSERT_EQ(dedup_get(d, a, sizeof(a), false, &x), 1);
        ASSERT_EQ(x, ha);
        pool_release(dedup_pool(d), x);
        ASSERT_EQ(dedup_get(d, b, sizeof(b), false, &x), 1);
        ASSERT_EQ(x, hb);
        pool_release(dedup_pool(d), x);
        ASSERT_TRUE(memcmp(pool_map(dedup_pool(d), ha), a, sizeof(a)) == 0);
        ASSERT_TRUE(memcmp(pool_map(dedup_pool(d), hb), b, sizeof(b)) == 0);
        pool_release(dedup_pool(d), ha);
        pool_release(dedup_pool(d), hb);

        /* the entries of every third object go: the sweep takes exactly
         * those (and the two above), the others stay findable */
        for (uint64_t i = 0; i < N; i += 3)
                pool_release(dedup_pool(d), h[i]);
        unsigned swept = 0;
        for (int k = 0; k < 100; k++)
                swept += dedup_sweep(d, 1000);
        ASSERT_EQ(swept, (N + 2) / 3 + 2);
        DedupStats st;
        dedup_stats(d, &st);
        ASSERT_EQ(st.objects, N - (N + 2) / 3);
        for (uint64_t i = 0; i < N; i++) {
                page_bytes(buf, obj_len(i), i);
                int r = dedup_get(d, buf, (uint32_t)obj_len(i), false, &x);
                if (i % 3 == 0) {
                        ASSERT_EQ(r, -ENOENT);
                        continue;
                }
                ASSERT_EQ(r, 1);
                ASSERT_EQ(x, h[i]);
                ASSERT_TRUE(memcmp(pool_map(dedup_pool(d), x), buf, obj_len(i)) == 0);
                pool_release(dedup_pool(d), x);
                pool_release(dedup_pool(d), h[i]);
        }
        for (int k = 0; k < 100; k++)
                dedup_sweep(d, 1000);
        dedup_stats(d, &st);
        ASSERT_EQ(st.objects, 0);
        ASSERT_EQ(st.bytes, 0);
        dedup_unref(d);
        pool_shared_free(sh);
}

/* ---- threads ---- */

#define PAGES 512
#define THREADS 4

static Dedup *td;
static _Atomic bool stop;
static _Atomic uint64_t found, stored, bad;

static void *worker(void *arg) {
        uint64_t s = (uint64_t)(uintptr_t)arg * 7919 + 1;
        uint8_t buf[4096];
        PoolHandle held[64] = { 0 };

        for (unsigned n = 0; n < 20000; n++) {
                s = s * 6364136223846793005ull + 1;
                uint64_t i = (s >> 33) % PAGES;
                unsigned slot = (unsigned)((s >> 20) % 64);
                if (held[slot]) {
                        pool_release(dedup_pool(td), held[slot]);
                        held[slot] = 0;
                }
                page_bytes(buf, obj_len(i), i);
                PoolHandle h;
                int r = dedup_get(td, buf, (uint32_t)obj_len(i), (s >> 40) & 1, &h);
                if (r < 0)
                        continue;
                atomic_fetch_add(r == 1 ? &found : &stored, 1);
                if (memcmp(pool_map(dedup_pool(td), h), buf, obj_len(i)) != 0)
                        atomic_fetch_add(&bad, 1);
                held[slot] = h;
        }
        for (unsigned k = 0; k < 64; k++)
                if (held[k])
                        pool_release(dedup_pool(td), held[k]);
        return NULL;
}

static void *sweeper(void *arg) {
        while (!atomic_load(&stop)) {
                dedup_sweep(td, 64);
                pool_reclaim(dedup_pool(td));
                sched_yield();
        }
        return NULL;
}

static void threads(void) {
        PoolShared *sh;
        pthread_t t[THREADS], sw;

        ASSERT_OK(pool_shared_new(0, &sh));
        ASSERT_OK(dedup_new(sh, CODEC_LZ4, 0, 2, &td));
        ASSERT_OK(pthread_create(&sw, NULL, sweeper, NULL));
        for (uintptr_t i = 0; i < THREADS; i++)
                ASSERT_OK(pthread_create(&t[i], NULL, worker, (void *)i));
        for (int i = 0; i < THREADS; i++)
                pthread_join(t[i], NULL);
        atomic_store(&stop, true);
        pthread_join(sw, NULL);
        fprintf(stderr, "threads: %llu found, %llu stored, %llu bad\n", (unsigned long long)found,
                (unsigned long long)stored, (unsigned long long)bad);
        ASSERT_EQ(bad, 0);
        ASSERT_TRUE(found > 0 && stored > 0);
        for (int k = 0; k < 100; k++)
                dedup_sweep(td, 1000);
        DedupStats st;
        dedup_stats(td, &st);
        ASSERT_EQ(st.objects, 0);
        dedup_unref(td);
        pool_shared_free(sh);
}

int main(void) {
        basic();
        threads();
        return 0;
}
