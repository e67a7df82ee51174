/*
 * test-recompress: the strong tier of compression (docs/reclaim.md,
 * "Recompression"). Objects of pages nobody touched for recompress_age
 * are compressed again with zstd in the background; a fault, a kept copy,
 * a restarted daemon, a client restoring itself and the second tier all
 * read either codec. Every case checks every page's content.
 *
 *   basic     corpus pages out, recompressed (the pool shrinks), read
 *             back, evicted again from their kept copies, read again
 *   torture   readers, writers and pageouts race recompression and
 *             compaction for TORTURE_SECONDS / 3 + 2 seconds
 *   restart   kill -9 once recompressed: the next daemon adopts the
 *             store, with its strong objects, and serves every page
 *   fallback  kill -9 once recompressed and no daemon comes back: the
 *             library restores every page from the store itself
 *   rescue    pages lz4 cannot shrink (32 symbols, no repeats) are stored
 *             by zstd instead of staying resident; with recompress_age 0
 *             they stay resident
 *   client    a client's own recompress_age (zswapctl set --pid) wins
 *             over the daemon's, both ways, but for the daemon's 0
 *   tier      recompressed objects written to the second tier (a backing
 *             file) and read back from it
 *   dict      no dictionary trained before the client's pages can be
 *             cold (recompress_age); then one trained on its pages, objects
 *             recompressed with it (smaller than without), read back by
 *             faults, by a forked child (its copies), by the next daemon
 *             after kill -9 (which adopts the dictionary), and by the
 *             library restoring itself when no daemon comes back
 *
 * Every case but rescue and client holds enough pages for a dictionary
 * (DICT_MIN_PAGES), so their objects are made with one once it is trained.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "harness.h"
#include "protocol.h"

#define NPAGES 4096
#define SAFETY_S 240
#define FAST "-o recompress_age=1s -o recompress_cpu=100"

static TestDaemon d;
static uint8_t *buf;
static uint64_t hashes[NPAGES];
static const size_t len = (size_t)NPAGES * ZSWAP_PAGE_SIZE;

static ZClientRecord mine(void) {
        ZClientRecord r;
        td_clients_sum(&d, getpid(), &r);
        return r;
}

static ZMsgStatusReply status(void) {
        ZMsgStatusReply st;
        td_status(&d, &st);
        return st;
}

/* Wait until at least want of this process's pages are of the strong tier. */
static ZClientRecord wait_strong(uint64_t want) {
        ZClientRecord r;
        WAIT_UNTIL((r = mine()).strong_pages >= want, SAFETY_S,
                   "%llu of %llu stored pages recompressed (want %llu)", (unsigned long long)r.strong_pages,
                   (unsigned long long)r.stored_pages, (unsigned long long)want);
        return r;
}

static void check_all(const char *when) {
        size_t bad = verify_pages(buf, len, hashes);
        if (bad)
                test_fail("%zu pages wrong %s", bad, when);
        fprintf(stderr, "every page right %s\n", when);
}

static struct zswap_client *start(const char *args) {
        td_start(&d, args);
        struct zswap_client *c = td_connect(&d);
        buf = td_region(c, len, 77, hashes);
        ASSERT_TRUE(td_pageout_want(c, buf, len, NPAGES * 9 / 10) > 0);
        return c;
}

static void case_basic(void) {
        /* every page read back keeps its copy: clean_max (2 % by default)
         * would keep the first few hundred read, which may be the ones
         * not recompressed yet (the walk skips a page whose client is
         * busy and takes it on its next pass), and a refill would bring
         * pages back without their copies while the reads go on */
        struct zswap_client *c = start(FAST " -o clean_max=100 -o refill=no");
        ZClientRecord before = mine(), r = wait_strong(before.stored_pages * 3 / 4);
        ZMsgStatusReply st = status();

        fprintf(stderr, "%llu pages: %llu bytes with lz4, %llu bytes once %llu were recompressed (%llu bytes of zstd); "
                "%llu recompressed, %llu bytes saved, %.1f ms of CPU\n",
                (unsigned long long)before.stored_pages, (unsigned long long)before.compressed_bytes,
                (unsigned long long)r.compressed_bytes, (unsigned long long)r.strong_pages,
                (unsigned long long)r.strong_bytes, (unsigned long long)st.recompressed,
                (unsigned long long)st.recompress_saved, (double)st.recompress_cpu_ns / 1e6);
        ASSERT_EQ(r.stored_pages, before.stored_pages);
        /* zstd takes a fifth less than lz4 at least on these heaps */
        ASSERT_TRUE(r.compressed_bytes * 5 < before.compressed_bytes * 4);
        ASSERT_TRUE(st.recompressed >= r.strong_pages);
        ASSERT_TRUE(st.recompress_saved > 0 && st.recompress_cpu_ns > 0);
        /* the walk goes on meanwhile: more of ours may be strong by now */
        ASSERT_TRUE(st.strong_pages >= r.strong_pages);
        ASSERT_EQ(td_ctl(&d, "status -o strong_pages,strong_bytes,recompressed,fast_pages"), 0);
        ASSERT_EQ(td_ctl(&d, "clients -o PID,EVICTED,POOL,STRONG"), 0);

        /* read back: faults decode zstd; the copies kept are zstd's. The
         * walk may still take more before the reads reach them: strong
         * counts up to the read */
        uint64_t strong = mine().strong_pages;
        check_all("read back once recompressed");
        r = mine();
        ASSERT_EQ(r.strong_pages, 0);
        struct zswap_stats ms;
        ASSERT_OK(zswap_get_stats(c, ZSWAP_STATS_CLIENT, &ms));
        fprintf(stderr, "%llu pages read back keep their copies (%llu bytes)\n", (unsigned long long)ms.clean_pages,
                (unsigned long long)ms.clean_bytes);
        ASSERT_TRUE(ms.clean_pages * 10 >= NPAGES * 9);
        /* evicted again from the kept copies (a decode and a compare):
         * a strong page that goes out again is strong at once */
        ASSERT_TRUE(td_pageout_want(c, buf, len, NPAGES * 9 / 10) > 0);
        r = mine();
        ASSERT_OK(zswap_get_stats(c, ZSWAP_STATS_CLIENT, &ms));
        fprintf(stderr, "evicted again: %llu of %llu pages strong at once (%llu were before the read), "
                "%llu from kept copies\n", (unsigned long long)r.strong_pages, (unsigned long long)r.stored_pages,
                (unsigned long long)strong, (unsigned long long)ms.clean_reevictions);
        /* strong again but for the pages not taken this time and the
         * few read back without their copies */
        uint64_t out = ms.stored_pages + ms.same_pages, copies = ms.clean_reevictions;
        ASSERT_TRUE(out <= NPAGES && copies <= NPAGES);
        ASSERT_TRUE(r.strong_pages + (NPAGES - out) + (NPAGES - copies) >= strong);
        check_all("read back again");
        zswap_disconnect(c);
        td_stop(&d);
}

/* ---- torture ---- */

static void case_torture(void) {
        unsigned seconds = test_env_uint("TORTURE_SECONDS", 30) / 3 + 2;
        /* the age at its least: pages the readers leave alone for a
         * second are taken while the others come and go */
        struct zswap_client *client = start(FAST " -o pool_compact=1");
        TdRace race = { .buf = buf, .npages = NPAGES, .hashes = hashes, .read_pause_us = 100, .write_pause_us = 300,
                        .evict_pause_us = 20000 };
        ZMsgStatusReply st;

        race.c = client;
        td_race_start(&race);
        time_t t0 = time(NULL);
        uint64_t at_start = 0;
        for (bool first = true;; first = false) {
                sleep(1);
                st = status();
                if (first)
                        at_start = st.recompressed;
                time_t t = time(NULL) - t0;
                /* recompression while the threads run, not only before */
                if ((t >= (time_t)seconds && st.recompressed > at_start + 128) || t >= SAFETY_S ||
                    atomic_load(&race.bad))
                        break;
        }
        td_race_stop(&race);
        fprintf(stderr,
                "%llu pages checked, %llu rewritten, %llu evicted again; %llu recompressed (%llu while they ran), "
                "%llu compaction passes moved %llu objects\n",
                (unsigned long long)race.checked, (unsigned long long)race.rewritten,
                (unsigned long long)race.evicted, (unsigned long long)st.recompressed,
                (unsigned long long)(st.recompressed - at_start), (unsigned long long)st.compactions,
                (unsigned long long)st.compact_moved);
        ASSERT_EQ(atomic_load(&race.bad), 0);
        ASSERT_TRUE(st.recompressed > at_start + 128); /* else: stopped by the safety timeout */
        check_all("after the race");
        ASSERT_TRUE(td_pageout_want(client, buf, len, NPAGES * 9 / 10) > 0);
        check_all("evicted again after the race");
        zswap_disconnect(client);
        td_stop(&d);
}

/* ---- a daemon that dies ---- */

static void case_restart(void) {
        struct zswap_client *c = start(FAST);
        ZClientRecord r = wait_strong(NPAGES / 2);

        /* posix_spawn, not fork: our fork would wait for the library's
         * recovery, which waits for the daemon */
        td_kill(&d);
        td_respawn(&d);
        /* the next daemon adopts the store: its strong objects stay strong */
        ZClientRecord a;
        WAIT_UNTIL((a = mine()).stored_pages >= r.stored_pages, TEST_WAIT_S, "%llu of %llu pages adopted",
                   (unsigned long long)a.stored_pages, (unsigned long long)r.stored_pages);
        fprintf(stderr, "adopted %llu pages, %llu of them strong (%llu before the kill)\n",
                (unsigned long long)a.stored_pages, (unsigned long long)a.strong_pages,
                (unsigned long long)r.strong_pages);
        ASSERT_TRUE(a.strong_pages >= r.strong_pages);
        check_all("served by the next daemon");
        zswap_disconnect(c);
        td_stop(&d);
}

static void case_fallback(void) {
        ASSERT_OK(setenv("ZSWAP_RECONNECT_TIMEOUT", "0", 1));
        struct zswap_client *c = start(FAST);
        wait_strong(NPAGES / 2);
        td_kill(&d);
        /* the library decodes the store's zstd objects itself */
        check_all("restored by the library");
        WAIT_UNTIL(!vma_uffd_registered(buf), TEST_WAIT_S, "the range still registered");
        zswap_disconnect(c);
}

/* ---- rescue ---- */

/* 32 symbols at random: no repeat for lz4 to find, 5 bits a byte for
 * zstd's entropy coder (about 2.6 KiB a page) */
static void fill_symbols(uint64_t seed) {
        uint64_t s = seed;
        for (size_t i = 0; i < len; i++)
                buf[i] = (uint8_t)('A' + xorshift(&s) % 32);
        hash_pages(buf, len, hashes);
}

static void case_rescue(const char *args, bool rescued) {
        td_start(&d, args);
        struct zswap_client *c = td_connect(&d);
        buf = test_map(len);
        fill_symbols(5);
        ASSERT_OK(zswap_register(c, buf, len));
        int n = zswap_pageout(c, buf, len);
        ASSERT_TRUE(n >= 0);
        ZMsgStatusReply st = status();
        ZClientRecord r = mine();
        fprintf(stderr, "%s: %d pages out, %llu strong (%llu bytes), %llu rescued, %llu incompressible\n", args, n,
                (unsigned long long)r.strong_pages, (unsigned long long)r.strong_bytes,
                (unsigned long long)st.strong_rescued, (unsigned long long)st.stats.incompressible_pages);
        if (rescued) {
                ASSERT_TRUE(n >= NPAGES * 9 / 10);
                ASSERT_TRUE(r.strong_pages >= (uint64_t)n * 9 / 10);
                ASSERT_TRUE(st.strong_rescued >= r.strong_pages);
                ASSERT_TRUE(r.strong_bytes < (uint64_t)r.strong_pages * 3000);
        } else {
                ASSERT_EQ(n, 0);
                ASSERT_EQ(st.strong_rescued, 0);
        }
        check_all(rescued ? "rescued by zstd" : "kept resident");
        zswap_disconnect(c);
        td_stop(&d);
        munmap(buf, len);
}

/* ---- a client's own age ---- */

static void case_client(void) {
        char cmd[128];
        td_start(&d, FAST);
        struct zswap_client *c = td_connect(&d);
        buf = td_region(c, len, 78, hashes);
        ASSERT_EQ(td_ctl(&d, "set --pid %d recompress_age 0", (int)getpid()), 0);
        ASSERT_EQ(mine().recompress_age_ms, 0);
        ASSERT_TRUE(td_pageout_want(c, buf, len, NPAGES * 9 / 10) > 0);
        /* the daemon's 1 s would have taken them twice over */
        sleep(2);
        ZClientRecord r = mine();
        ASSERT_EQ(r.strong_pages, 0);
        ASSERT_EQ(r.recompressed, 0);
        snprintf(cmd, sizeof(cmd), "set --pid %d recompress_age 1s", (int)getpid());
        ASSERT_EQ(td_ctl(&d, "%s", cmd), 0);
        ASSERT_EQ(mine().recompress_age_ms, 1000);
        r = wait_strong(NPAGES / 2);
        fprintf(stderr, "own age off: none recompressed in 2 s; own age 1 s: %llu\n",
                (unsigned long long)r.strong_pages);
        /* the operator's off switch wins over the client's own age */
        ASSERT_EQ(td_ctl(&d, "set recompress_age 0"), 0);
        ASSERT_EQ(mine().recompress_age_ms, 0);
        ASSERT_EQ(td_ctl(&d, "get --pid %d recompress_age", (int)getpid()), 0);
        check_all("with recompression set per client");
        zswap_disconnect(c);
        td_stop(&d);
}

/* ---- the second tier ---- */

static char conf_path[128], backing[128];

static void tier_cleanup(void) {
        if (backing[0])
                unlink(backing);
        if (conf_path[0])
                unlink(conf_path);
}

static void case_tier(void) {
        char args[512];
        snprintf(conf_path, sizeof(conf_path), "/tmp/zswap-test-recompress-%d.conf", (int)getpid());
        snprintf(backing, sizeof(backing), "/var/tmp/zswap-test-recompress-%d.img", (int)getpid());
        atexit(tier_cleanup);
        FILE *f = fopen(conf_path, "w");
        ASSERT_TRUE(f);
        fprintf(f, "[tier]\nbacking = %s\nsize = 64M\nkey = /tmp/zswap-test-tier.key\n", backing);
        fclose(f);
        snprintf(args, sizeof(args), "--config %s %s", conf_path, FAST);
        struct zswap_client *c = start(args);
        ZClientRecord r = wait_strong(NPAGES * 3 / 4), t;
        /* a pool bound far below what it holds: the tier's writer takes
         * the coldest objects, the strong ones among them */
        ASSERT_EQ(td_ctl(&d, "set pool_max 1M"), 0);
        WAIT_UNTIL((t = mine()).tier_pages >= r.strong_pages / 2, TEST_WAIT_S, "%llu pages on the tier",
                   (unsigned long long)t.tier_pages);
        fprintf(stderr, "%llu strong pages; then %llu pages on the tier (%llu bytes), %llu strong left in RAM\n",
                (unsigned long long)r.strong_pages, (unsigned long long)t.tier_pages,
                (unsigned long long)t.tier_bytes, (unsigned long long)t.strong_pages);
        ASSERT_TRUE(t.strong_pages < r.strong_pages);
        /* the zstd objects' bytes went as they were */
        ASSERT_TRUE(t.tier_bytes < (uint64_t)t.tier_pages * ZSWAP_PAGE_SIZE / 2);
        ASSERT_EQ(td_ctl(&d, "set pool_max 0"), 0);
        check_all("read back from the tier");
        zswap_disconnect(c);
        td_stop(&d);
}

/* ---- dictionaries ---- */

static ZMsgStatusReply wait_dict_pages(uint64_t want) {
        ZMsgStatusReply st;
        WAIT_UNTIL((st = status()).dict_pages >= want, TEST_WAIT_S,
                   "%llu pages made with a dictionary (want %llu; %llu trained, %llu refused, %llu strong)",
                   (unsigned long long)st.dict_pages, (unsigned long long)want, (unsigned long long)st.dicts_trained,
                   (unsigned long long)st.dicts_refused, (unsigned long long)st.strong_pages);
        return st;
}

static void case_dict(void) {
        /* no dictionary while no page can be cold: the daemon's quiet
         * ticks (every 20 ms) would have trained one at once */
        struct zswap_client *c = start("-o recompress_age=1h -o recompress_cpu=100");
        ZClientRecord held = mine();
        ASSERT_TRUE(held.stored_pages >= 2048); /* DICT_MIN_PAGES */
        sleep(2);
        ZMsgStatusReply st = status();
        fprintf(stderr, "%llu pages held for 2 s with a recompression age of 1 h: %llu dictionaries trained, "
                "%.1f ms of CPU\n", (unsigned long long)held.stored_pages, (unsigned long long)st.dicts_trained,
                (double)st.dict_train_cpu_ns / 1e6);
        ASSERT_EQ(st.dicts_trained + st.dicts_refused, 0);
        ASSERT_EQ(st.dict_train_cpu_ns, 0);
        ASSERT_EQ(td_ctl(&d, "set recompress_age 1s"), 0);
        st = wait_dict_pages(NPAGES / 2);
        ZClientRecord r = mine();

        fprintf(stderr, "a %llu-byte dictionary (%.1f ms of CPU to train): %llu of %llu pages made with it, %llu bytes; "
                "%llu strong pages in %llu bytes\n",
                (unsigned long long)st.dict_mem, (double)st.dict_train_cpu_ns / 1e6, (unsigned long long)st.dict_pages,
                (unsigned long long)r.stored_pages, (unsigned long long)st.dict_bytes,
                (unsigned long long)st.strong_pages, (unsigned long long)st.strong_bytes);
        ASSERT_EQ(st.dicts_trained, 1);
        ASSERT_EQ(st.dicts, 1);
        ASSERT_TRUE(st.dict_mem > 0 && st.dict_mem <= 32768);
        ASSERT_TRUE(st.dict_bytes <= st.strong_bytes && st.dict_pages <= st.strong_pages);
        ASSERT_EQ(td_ctl(&d, "status -o dicts,dict_mem,dict_pages,dict_bytes,dicts_trained,dict_train_cpu_ns"), 0);

        /* a forked child reads its copies, made with the dictionary it
         * was given */
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0)
                _exit(verify_pages(buf, len, hashes) ? 1 : 0);
        int ws;
        ASSERT_EQ(waitpid(pid, &ws, 0), pid);
        if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
                test_fail("the forked child read wrong pages (status %#x)", ws);
        fprintf(stderr, "every page right in the forked child\n");
        check_all("read back, made with the dictionary");
        ASSERT_EQ(status().dict_pages, 0);

        /* again, and the next daemon adopts the dictionary with the store */
        ASSERT_TRUE(td_pageout_want(c, buf, len, NPAGES * 9 / 10) > 0);
        st = wait_dict_pages(NPAGES / 2);
        td_kill(&d);
        td_respawn(&d); /* with the arguments of the first: an age of 1 h */
        ASSERT_EQ(td_ctl(&d, "set recompress_age 1s"), 0);
        ZMsgStatusReply a;
        WAIT_UNTIL((a = status()).dict_pages >= st.dict_pages, TEST_WAIT_S, "%llu of %llu dictionary pages adopted",
                   (unsigned long long)a.dict_pages, (unsigned long long)st.dict_pages);
        ASSERT_EQ(a.dicts, 1);
        ASSERT_EQ(a.dict_mem, st.dict_mem);
        ASSERT_EQ(a.dicts_trained, 0); /* adopted, not trained again */
        check_all("served by the next daemon");

        /* and when no daemon comes back, the library decodes them itself */
        ASSERT_TRUE(td_pageout_want(c, buf, len, NPAGES * 9 / 10) > 0);
        st = wait_dict_pages(NPAGES / 2);
        ASSERT_OK(zswap_set_reconnect_timeout(c, 0));
        td_kill(&d);
        check_all("restored by the library");
        WAIT_UNTIL(!vma_uffd_registered(buf), TEST_WAIT_S, "the range still registered");
        zswap_disconnect(c);
}

int main(int argc, char **argv) {
        const char *mode = argc > 1 ? argv[1] : "basic";

        if (strcmp(mode, "basic") == 0)
                case_basic();
        else if (strcmp(mode, "torture") == 0)
                case_torture();
        else if (strcmp(mode, "restart") == 0)
                case_restart();
        else if (strcmp(mode, "fallback") == 0)
                case_fallback();
        else if (strcmp(mode, "rescue") == 0) {
                case_rescue(FAST, true);
                case_rescue("-o recompress_age=0", false);
        } else if (strcmp(mode, "client") == 0)
                case_client();
        else if (strcmp(mode, "tier") == 0)
                case_tier();
        else if (strcmp(mode, "dict") == 0)
                case_dict();
        else
                test_fail("unknown case %s", mode);
        return 0;
}
