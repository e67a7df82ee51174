/*
 * test-early-reply: zswap_pageout() returns its page count only once the
 * staging slots of its batches are empty (docs/protocol.md, PAGEOUT:
 * "once they are out (compressed, staging freed)").
 *
 * The daemon sends a client's PAGEOUT answer right behind the last lane's
 * RELEASE (evict.c, lane_try_release()). The agent executes no RELEASE a
 * dead daemon left on its socket (agent_release(): daemon_gone()), since
 * the next daemon may read those slots; so it must not hand over the
 * answer queued behind it either (agent_main(): undone). Otherwise a
 * daemon that dies with RELEASE + REPLY queued makes zswap_pageout()
 * return its page count with the lane's slots still populated (until an
 * ADOPT, or the library's own restore after the reconnect timeout).
 *
 * Deterministic: once the batch has moved, the test takes the library's
 * c->lock and sends a bad STATS (answered -EINVAL at once); the agent
 * stops at that reply (agent_reply()), in front of the RELEASE. The daemon
 * (a slow codec) compresses and sends RELEASE and the answer; once both
 * wait on the socket, the daemon is killed and the agent let go. No
 * daemon comes back: the library restores every page itself, and each
 * must read back as it was.
 *
 * Built on libzswap's core (static) for the internal header.
 */
#include <fcntl.h>
#include <sys/ioctl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "harness.h"
#include "client.h"

#define NPAGES 256
#define PM_PRESENT_BIT (1ull << 63)

static struct zswap_client *c;
static uint8_t *buf;
static _Atomic int pageout_done;
static _Atomic int pageout_r;

static void *pageout_thread(void *arg) {
        (void)arg;
        atomic_store(&pageout_r, zswap_pageout(c, buf, NPAGES * ZSWAP_PAGE_SIZE));
        atomic_store(&pageout_done, 1);
        return NULL;
}

static size_t present(const void *addr, size_t npages) {
        static uint64_t pm[STAGING_BYTES / ZSWAP_PAGE_SIZE];
        int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
        ASSERT_OK(fd);
        ASSERT_TRUE(npages <= sizeof(pm) / sizeof(pm[0]));
        off_t off = (off_t)((uintptr_t)addr / ZSWAP_PAGE_SIZE * sizeof(uint64_t));
        ASSERT_EQ(pread(fd, pm, npages * sizeof(uint64_t), off), (ssize_t)(npages * sizeof(uint64_t)));
        close(fd);
        size_t n = 0;
        for (size_t i = 0; i < npages; i++)
                n += (pm[i] & PM_PRESENT_BIT) != 0;
        return n;
}

/* bytes waiting on the socket (all its messages: a SOCK_SEQPACKET) */
static size_t queued(int sock) {
        int n = 0;
        ASSERT_OK(ioctl(sock, FIONREAD, &n));
        return (size_t)n;
}

int main(void) {
        TestDaemon d;
        static uint64_t hashes[NPAGES];
        pthread_t t;

        /* a slow codec: the bad request's reply is out long before the batch is compressed */
        td_start(&d, "--compressor zstd --level 19");
        c = td_connect(&d);
        ASSERT_OK(zswap_set_reconnect_timeout(c, 2000));
        buf = td_region(c, NPAGES * ZSWAP_PAGE_SIZE, 7, hashes);
        ASSERT_EQ(present(c->staging, STAGING_BYTES / ZSWAP_PAGE_SIZE), 0);

        ASSERT_OK(-pthread_create(&t, NULL, pageout_thread, NULL));
        /* the batch has moved: the agent is past the MOVE (its MOVE_DONE
         * goes out before it reads anything else) */
        int pmfd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
        ASSERT_OK(pmfd);
        uint64_t end = test_now_ns() + TEST_WAIT_S * 1000000000ull, last;
        off_t last_off = (off_t)((uintptr_t)(buf + (NPAGES - 1) * ZSWAP_PAGE_SIZE) / ZSWAP_PAGE_SIZE * 8);
        do { /* spin: the reply must beat the compression */
                ASSERT_EQ(pread(pmfd, &last, sizeof(last), last_off), (ssize_t)sizeof(last));
                ASSERT_TRUE(test_now_ns() < end);
        } while (last & PM_PRESENT_BIT);
        close(pmfd);

        /* a reply the agent stops at, queued before the RELEASE */
        ZMsgStatsReq q = { .scope = 99 }; /* answered -EINVAL at once, a REPLY */
        pthread_mutex_lock(&c->send_lock);
        pthread_mutex_lock(&c->lock);
        zmsg_init(&q.hdr, ZMSG_STATS, 0x7fff0001, sizeof(q));
        ASSERT_TRUE(zmsg_send(c->sock, &q, sizeof(q), NULL, 0) >= 0);
        pthread_mutex_unlock(&c->send_lock);

        /* the daemon compresses and sends RELEASE and the answer; the
         * agent waits for c->lock at the bad request's reply, so whatever
         * waits on the socket came after it */
        WAIT_UNTIL(queued(c->sock) >= sizeof(ZMsgRelease) + sizeof(ZMsgReply), TEST_WAIT_S,
                   "RELEASE and the answer never came (%zu bytes queued)", queued(c->sock));
        size_t in_staging = present(c->staging, STAGING_BYTES / ZSWAP_PAGE_SIZE);
        if (in_staging == 0) { /* the compression beat the bad request */
                pthread_mutex_unlock(&c->lock);
                test_skip("the RELEASE overtook the bad request's reply: nothing shown this run");
        }
        td_kill(&d);
        pthread_mutex_unlock(&c->lock);

        WAIT_UNTIL(atomic_load(&pageout_done), TEST_WAIT_S, "zswap_pageout() never returned");
        /* at once: the agent's own restore empties staging only after the
         * reconnect timeout (2 s here) */
        size_t after = present(c->staging, STAGING_BYTES / ZSWAP_PAGE_SIZE);
        int r = atomic_load(&pageout_r);
        fprintf(stderr, "zswap_pageout() = %d; %zu staging pages resident before the kill, %zu when it returned\n", r,
                in_staging, after);
        /* an answer means the slots are empty; a failure (-ENOTCONN) is fine */
        if (r > 0)
                ASSERT_EQ(after, 0);
        /* no daemon comes back: the library restores every page from
         * its store itself once its reconnect timeout is over (short
         * here), and empties staging */
        ZswapRecovery rec;
        WAIT_UNTIL((zswap_client_recovery(c, &rec), rec.restores + rec.detached > 0), TEST_WAIT_S,
                   "the library never restored itself");
        ASSERT_EQ(rec.restores, 1);
        ASSERT_EQ(present(c->staging, STAGING_BYTES / ZSWAP_PAGE_SIZE), 0);
        ASSERT_EQ(verify_pages(buf, NPAGES * ZSWAP_PAGE_SIZE, hashes), 0);
        _exit(0);
}
