/*
 * test-restore-corrupt: a client restoring itself from a store whose
 * objects do not decode loses those pages loudly, never silently.
 *
 * The daemon dies and does not come back: libzswap restores every page
 * from the store it holds (docs/reliability.md). A store is the client's
 * to keep, and a root client can write it; memory under it can rot. An
 * object that fails to decompress must leave its page poisoned (SIGBUS on
 * access, as a swap page the kernel cannot read), counted as bad, and
 * every other page intact: before, the page was skipped and, its range
 * unregistered, read as zeros. Here a few objects of the store are
 * overwritten (the test runs as root and opens its own store for writing)
 * while the daemon holds them, and the daemon is killed. Built on
 * libzswap's core and the store's reader (the internal headers), as
 * test-recompress-old is.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>

#include "harness.h"
#include "libzswap-internal.h"
#include "protocol.h"
#include "store.h"

#define NPAGES 1024
#define CORRUPT 8 /* objects overwritten */

static TestDaemon d;
static uint64_t hashes[NPAGES];
static uint8_t *buf;

typedef struct Hit {
        uint8_t *map;
        uint64_t addr[CORRUPT];
        unsigned n;
} Hit;

/* Overwrite the object of every 64th compressed entry of the region, up
 * to CORRUPT of them: bytes no codec takes for a page. */
static int corrupt_cb(void *ud, uint64_t addr, _Atomic uint64_t *e) {
        Hit *h = ud;
        uint64_t v = atomic_load_explicit(e, memory_order_relaxed);
        const void *obj;

        if (h->n == CORRUPT || pe_state(v) != PE_STORED || pe_is_tier(v) || pe_clen(v) >= ZSWAP_PAGE_SIZE ||
            addr < (uint64_t)(uintptr_t)buf || addr >= (uint64_t)(uintptr_t)buf + (uint64_t)NPAGES * ZSWAP_PAGE_SIZE ||
            (addr - (uint64_t)(uintptr_t)buf) / ZSWAP_PAGE_SIZE % 64 != 0)
                return 0;
        if (store_object(h->map, pe_handle(v), pe_clen(v), &obj, NULL) < 0)
                return 0;
        memset((void *)obj, 0xff, pe_clen(v));
        h->addr[h->n++] = addr;
        return 0;
}

static sigjmp_buf bus_jmp;
static void on_sigbus(int sig) {
        (void)sig;
        siglongjmp(bus_jmp, 1);
}

int main(void) {
        const size_t len = (size_t)NPAGES * ZSWAP_PAGE_SIZE;
        int fds[4];
        char path[64];

        ASSERT_OK(setenv("ZSWAP_RECONNECT_TIMEOUT", "0", 1));
        td_start(&d, NULL);
        struct zswap_client *c = td_connect(&d);
        buf = td_region(c, len, 31, hashes);
        ASSERT_TRUE(td_pageout_want(c, buf, len, NPAGES * 9 / 10) > 0);

        ASSERT_EQ(td_fds_named("memfd:zswapd-store", fds, 4), 1);
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fds[0]);
        int fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd < 0)
                test_skip("cannot open the store for writing: %s", strerror(errno));
        uint8_t *map = mmap(NULL, STORE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
        ASSERT_TRUE(map != MAP_FAILED);
        Hit h = { .map = map };
        ASSERT_OK(store_walk(map, corrupt_cb, &h));
        ASSERT_EQ(h.n, CORRUPT);
        munmap(map, STORE_SIZE);
        close(fd);

        /* the daemon dies before any of them is read: the library
         * restores the region itself, and unregisters it */
        td_kill(&d);
        WAIT_UNTIL(!vma_uffd_registered(buf), TEST_WAIT_S, "the range still registered");
        volatile unsigned good = 0, bus = 0, wrong = 0;
        signal(SIGBUS, on_sigbus);
        for (volatile unsigned i = 0; i < NPAGES; i++) {
                uint8_t *pg = buf + (size_t)i * ZSWAP_PAGE_SIZE;
                if (sigsetjmp(bus_jmp, 1)) {
                        bus++;
                        continue;
                }
                if (page_hash(pg) == hashes[i])
                        good++;
                else
                        wrong++;
        }
        fprintf(stderr, "restored by the library: %u intact, %u SIGBUS, %u wrong (%u objects overwritten)\n", good,
                bus, wrong, CORRUPT);
        if (wrong || bus != CORRUPT || good != NPAGES - CORRUPT)
                test_fail("the pages whose objects were overwritten did not read as lost");
        zswap_disconnect(c);
        return 0;
}
