/*
 * test-syscall-io: the kernel itself touching evicted memory. write(2)
 * from evicted pages and read(2) into evicted pages fault in kernel mode;
 * they must reach the daemon and see the right bytes (UFFD_USER_MODE_ONLY
 * would make them fail with EFAULT).
 */
#include <fcntl.h>
#include <sys/mman.h>

#include "harness.h"

#define NPAGES 1024

int main(void) {
        TestDaemon d;
        const size_t len = NPAGES * ZSWAP_PAGE_SIZE;
        static uint64_t hashes[NPAGES];

        td_start(&d, getenv("TEST_DAEMON_ARGS"));
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = test_map(len), *copy = malloc(len), *src = malloc(len);
        fill_pages(buf, len, 21);
        hash_pages(buf, len, hashes);
        ASSERT_OK(zswap_register(c, buf, len));

        /* write(2) from evicted memory into a file, read back */
        ASSERT_OK(zswap_pageout(c, buf, len));
        int fd = open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        ASSERT_OK(fd);
        ASSERT_EQ(write(fd, buf, len), (ssize_t)len);
        ASSERT_EQ(pread(fd, copy, len, 0), (ssize_t)len);
        ASSERT_EQ(verify_pages(copy, len, hashes), 0);

        /* read(2) into evicted memory: the kernel overwrites it */
        fill_pages(src, len, 22);
        uint64_t *want = malloc(NPAGES * sizeof(uint64_t));
        hash_pages(src, len, want);
        ASSERT_EQ(pwrite(fd, src, len, 0), (ssize_t)len);
        ASSERT_OK(zswap_pageout(c, buf, len));
        /* half the pages partly: a read that covers part of a page keeps the rest */
        ASSERT_EQ(pread(fd, buf, len / 2, 0), (ssize_t)(len / 2));
        ASSERT_EQ(verify_pages(buf, len / 2, want), 0);
        ASSERT_EQ(verify_pages(buf + len / 2, len / 2, hashes + NPAGES / 2), 0);

        /* a pipe, page by page, from evicted memory */
        int p[2];
        ASSERT_OK(pipe(p));
        ASSERT_OK(zswap_pageout(c, buf, len));
        for (size_t i = 0; i < NPAGES; i++) {
                ASSERT_EQ(write(p[1], buf + i * ZSWAP_PAGE_SIZE, ZSWAP_PAGE_SIZE), (ssize_t)ZSWAP_PAGE_SIZE);
                ASSERT_EQ(read(p[0], copy, ZSWAP_PAGE_SIZE), (ssize_t)ZSWAP_PAGE_SIZE);
                ASSERT_EQ(page_hash(copy), i < NPAGES / 2 ? want[i] : hashes[i]);
        }
        close(fd);
        zswap_disconnect(c);
        td_stop(&d);
        return 0;
}
