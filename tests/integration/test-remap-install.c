/*
 * test-remap-install: the daemon installs an evicted page at an address
 * an mremap() is moving away, before it has read that mremap's REMAP.
 * The kernel can then answer UFFDIO_COPY with ENOENT rather than EAGAIN
 * (seen on 6.18 for a copy racing the mremap itself), and the REMAP comes
 * after. A daemon that takes that ENOENT for "unmapped for good" drops
 * the page; the REMAP then carries an empty entry to the new address, and
 * the page reads as zeros there (as test-preload's churn found: a STAGED
 * page installed at one mremap's destination while the next mremap of
 * the same memory was on its way).
 *
 * The race with the kernel cannot be forced from outside, so the kernel's
 * state is made as it was and its answer is injected: with the daemon
 * stopped (SIGSTOP, every thread seen stopped), one thread reads an
 * evicted page (from the kernel: a write(2) of it to a pipe, which gets
 * EFAULT rather than SIGSEGV once its memory is gone) until its fault is
 * queued (the client's own uffd polls readable), and another thread's
 * mremap() moves the memory away (the old address no longer mapped, the
 * REMAP unread). Then the daemon runs again: the kernel hands out the
 * fault first, and the daemon's first UFFDIO_COPY, the install at the old
 * address, fails with ENOENT (ZSWAPD_INJECT=uffd_copy=ENOENT:#1; the
 * kernel itself answers EAGAIN in this state). Every page must read back
 * intact at the new address. The rounds after the first run the same
 * steps without the injection (the kernel's EAGAIN).
 *
 * TEST_REMAP_INSTALL_ROUNDS overrides the number of rounds.
 */
#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "harness.h"
#include "util.h"

#define NPAGES 64
#define LEN ((size_t)NPAGES * ZSWAP_PAGE_SIZE)

static int pipe_w;
static uint8_t *old_addr, *new_addr;
static volatile const uint8_t *fault_at;
static int write_errno;

/* Is every thread of pid stopped (state T)? */
static bool all_stopped(pid_t pid) {
        char path[320], buf[512];
        struct dirent *e;
        bool all = true;

        snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
        DIR *dir = opendir(path);
        ASSERT_TRUE(dir != NULL);
        while (all && (e = readdir(dir))) {
                if (e->d_name[0] == '.')
                        continue;
                snprintf(path, sizeof(path), "/proc/%d/task/%s/stat", (int)pid, e->d_name);
                FILE *f = fopen(path, "re");
                if (!f)
                        continue; /* gone */
                size_t n = fread(buf, 1, sizeof(buf) - 1, f);
                fclose(f);
                buf[n] = 0;
                const char *st = strrchr(buf, ')'); /* the state follows the name */
                all = st && st[1] == ' ' && st[2] == 'T';
        }
        closedir(dir);
        return all;
}

/* Reads the evicted page through the kernel; returns once the daemon has
 * served the fault, or once the memory is gone (EFAULT). */
static void *reader(void *arg) {
        (void)arg;
        ssize_t r = write(pipe_w, (const void *)fault_at, 8);
        write_errno = r < 0 ? errno : 0;
        return NULL;
}

static void *mover(void *arg) {
        (void)arg;
        ASSERT_TRUE(mremap(old_addr, LEN, LEN, MREMAP_MAYMOVE | MREMAP_FIXED, new_addr) == new_addr);
        return NULL;
}

static bool mapped(const void *p) {
        return msync((void *)((uintptr_t)p & ~(uintptr_t)(ZSWAP_PAGE_SIZE - 1)), ZSWAP_PAGE_SIZE, MS_ASYNC) == 0;
}

int main(void) {
        static uint64_t hashes[NPAGES];
        unsigned rounds = test_env_uint("TEST_REMAP_INSTALL_ROUNDS", 4);
        size_t bad = 0;
        TestDaemon d;
        int fds[4], p[2];

#if !ZSWAP_INJECT
        test_skip("built with -Dinject=false: the kernel's ENOENT cannot be injected");
#endif
        /* the first UFFDIO_COPY of the daemon's life: the install in the
         * first round (nothing before it faults on an evicted page) */
        td_start_injected(&d, "uffd_copy=ENOENT:#1");
        struct zswap_client *c = td_connect(&d);
        ASSERT_EQ(td_fds_named("anon_inode:[userfaultfd]", fds, ELEMENTSOF(fds)), 1);
        struct pollfd uffd = { .fd = fds[0], .events = POLLIN };
        ASSERT_OK(pipe(p));
        pipe_w = p[1];
        for (unsigned r = 0; r < rounds; r++) {
                old_addr = td_region(c, LEN, r + 1, hashes);
                new_addr = test_map(LEN); /* where the mremap goes */
                ASSERT_TRUE(td_pageout_want(c, old_addr, LEN, NPAGES) >= 0);
                size_t page = (r * 17 + 5) % NPAGES;
                fault_at = old_addr + page * ZSWAP_PAGE_SIZE;
                ASSERT_EQ(poll(&uffd, 1, 0), 0); /* nothing queued */

                ASSERT_EQ(kill(d.pid, SIGSTOP), 0);
                WAIT_UNTIL(all_stopped(d.pid), TEST_WAIT_S, "zswapd's threads do not all stop");
                pthread_t th[2];
                ASSERT_OK(pthread_create(&th[0], NULL, reader, NULL));
                /* its fault is queued: the reader waits for the daemon */
                WAIT_UNTIL(poll(&uffd, 1, 0) == 1, TEST_WAIT_S, "the read of an evicted page made no fault");
                ASSERT_OK(pthread_create(&th[1], NULL, mover, NULL));
                /* the kernel moved the memory; its REMAP waits to be read */
                WAIT_UNTIL(!mapped(old_addr) && mapped(new_addr), TEST_WAIT_S, "the mremap() did not move the memory");
                ASSERT_EQ(kill(d.pid, SIGCONT), 0);
                ASSERT_OK(pthread_join(th[1], NULL));
                ASSERT_OK(pthread_join(th[0], NULL));

                size_t lost = verify_pages(new_addr, LEN, hashes);
                if (lost)
                        fprintf(stderr, "round %u at %p: %zu of %d pages lost their content (the read of page %zu: %s)\n", r,
                                (void *)new_addr, lost, NPAGES, page, write_errno ? strerror(write_errno) : "ok");
                bad += lost;
                ASSERT_EQ(munmap(new_addr, LEN), 0);
        }
        fprintf(stderr, "%u rounds, each an install racing an mremap(): %zu pages lost\n", rounds, bad);
        ASSERT_EQ(bad, 0);
        zswap_disconnect(c);
        td_stop(&d);
        /* the daemon says at exit what it injected: the install, once */
        if (!td_log_has(&d, "uffd_copy=ENOENT:#1: 1 injected"))
                test_fail("the install in the first round was not the daemon's first UFFDIO_COPY: nothing was tested");
        close(p[0]);
        close(p[1]);
        return 0;
}
