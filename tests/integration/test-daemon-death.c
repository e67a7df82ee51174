/*
 * test-daemon-death: a dying daemon never turns evicted pages into zeros.
 * The client holds its own reference to its userfaultfd, so the kernel
 * keeps the memory registered: a thread touching an evicted page waits
 * (killable) instead of reading zeros, and resident pages stay readable.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "harness.h"

#define NPAGES 256

static uint8_t *buf;
static _Atomic int reader_done;
static _Atomic uint64_t seen;
static _Atomic pid_t reader_tid;

static void *reader(void *arg) {
        atomic_store(&reader_tid, gettid());
        atomic_store(&seen, page_hash(buf + 200 * ZSWAP_PAGE_SIZE));
        atomic_store(&reader_done, 1);
        return NULL;
}

int main(void) {
        TestDaemon d;
        const size_t len = NPAGES * ZSWAP_PAGE_SIZE;
        static uint64_t hashes[NPAGES];
        pthread_t t;

        td_start(&d, getenv("TEST_DAEMON_ARGS"));
        struct zswap_client *c = td_connect(&d);
        buf = td_region(c, len, 41, hashes);
        ASSERT_OK(zswap_pageout(c, buf + 128 * ZSWAP_PAGE_SIZE, len / 2)); /* upper half out */

        td_kill(&d);
        usleep(100000);
        /* resident pages: fine */
        ASSERT_EQ(verify_pages(buf, len / 2, hashes), 0);
        /* an evicted page: the reader waits, it never sees zeros */
        ASSERT_OK(-pthread_create(&t, NULL, reader, NULL));
        /* the reader's own tid: thread ids of a process are not contiguous
         * while other processes create threads */
        WAIT_UNTIL(atomic_load(&reader_tid) > 0, TEST_WAIT_S, "the reader never started");
        WAIT_UNTIL(task_in_userfault(atomic_load(&reader_tid)) || atomic_load(&reader_done), TEST_WAIT_S,
                   "the reader neither waits in a fault nor is done");
        ASSERT_EQ(atomic_load(&reader_done), 0);
        usleep(100000); /* and stays there */
        ASSERT_EQ(atomic_load(&reader_done), 0);
        ASSERT_TRUE(task_in_userfault(atomic_load(&reader_tid)));
        /* library calls report the daemon gone */
        struct zswap_stats s;
        ASSERT_ERROR(zswap_get_stats(c, ZSWAP_STATS_CLIENT, &s), ENOTCONN);
        fprintf(stderr, "reader still waiting in handle_userfault after the daemon died: ok\n");
        /* the waiting thread cannot be joined; leave without running atexit */
        _exit(0);
}
