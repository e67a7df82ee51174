/*
 * test-memread: reads of a client's memory that cannot make the daemon
 * wait (daemon/util/memread.c), on their own.
 *
 * - A read of another process's memory through /proc/PID/mem returns its
 *   bytes, in a buffer of the reading thread's (memread_view) and copied
 *   out (memread); a range that is not mapped is -EFAULT.
 * - Memory that process registered on a kernel-mode userfaultfd of its own
 *   and never answers: a plain pread() would wait there until killed (the
 *   attack in test-dos stall); memread() returns within its bound.
 * - A read that cannot complete (a pipe nobody writes, standing in for a
 *   FUSE server that never answers) returns -ETIMEDOUT after the bound,
 *   counts against its uid, and the thread's next read works on a new
 *   ring. When the stuck read does complete, its bytes land in the buffer
 *   set aside with it, never in the caller's; memread_reap() then frees
 *   it (it waited less than MEMREAD_LONG_NS: no penalty) and the uid's
 *   count falls to 0.
 * - A MemReadQueue (the fault threads' reads nobody waits for): a read
 *   comes back with the child's bytes, a read of an unmapped range with
 *   -EFAULT; a read that cannot complete stays in flight, is reported
 *   overdue once (after a shortened bound), counts against its uid until
 *   it completes, and then comes back with the bytes written late; at
 *   exit, a read in flight comes back too.
 * - A queue shared: one thread submits reads of the child's pages while
 *   it and another thread take what is back (a fault thread takes the
 *   reads of one a call holds): every read comes back once, to one of
 *   them, with the child's bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "macro.h"
#include "memread.h"
#include "test.h"
#include "util.h"

#define P ZSWAP_PAGE_SIZE

/* A child with 4 pages at *mem: the first two filled (page i with 'a'+i),
 * the last two registered on its own userfaultfd for missing pages and
 * never answered. Returns its pid; *memfd: its /proc/PID/mem. */
static pid_t child_with_trap(uint8_t **mem, int *memfd) {
        uint8_t *p = mmap(NULL, 4 * P, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        int pfd[2];
        char c;

        ASSERT_TRUE(p != MAP_FAILED);
        ASSERT_OK(pipe(pfd));
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                memset(p, 'a', P);
                memset(p + P, 'b', P);
                int u = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
                struct uffdio_api api = { .api = UFFD_API };
                struct uffdio_register reg = { .range = { (uintptr_t)p + 2 * P, 2 * P },
                                               .mode = UFFDIO_REGISTER_MODE_MISSING };
                if (u < 0 || ioctl(u, UFFDIO_API, &api) < 0 || ioctl(u, UFFDIO_REGISTER, &reg) < 0)
                        _exit(1);
                (void)!write(pfd[1], "x", 1);
                pause();
                _exit(0);
        }
        close(pfd[1]);
        ASSERT_EQ(read(pfd[0], &c, 1), 1);
        close(pfd[0]);
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
        *memfd = open(path, O_RDONLY | O_CLOEXEC);
        ASSERT_TRUE(*memfd >= 0);
        *mem = p;
        return pid;
}

static void test_reads(void) {
        uint8_t *mem, buf[2 * P];
        const uint8_t *view;
        int fd;
        pid_t pid = child_with_trap(&mem, &fd);
        uint64_t a = (uint64_t)(uintptr_t)mem;

        ASSERT_OK(memread(fd, a, buf, 2 * P, 1000));
        ASSERT_TRUE(buf[0] == 'a' && buf[P - 1] == 'a' && buf[P] == 'b' && buf[2 * P - 1] == 'b');
        ASSERT_OK(memread_view(fd, a + P, 16, 1000, &view));
        ASSERT_TRUE(view[0] == 'b' && view[15] == 'b');
        /* nothing mapped there */
        ASSERT_EQ(memread(fd, 4096, buf, 8, 1000), -EFAULT);

        /* the trap: within the bound, whatever the kernel makes of it */
        uint64_t t0 = now_ns();
        int r = memread(fd, a + 2 * P, buf, P, 1000);
        uint64_t took = now_ns() - t0;
        fprintf(stderr, "read of a page the client never answers: %s after %.1f ms\n", strerror(-r),
                (double)took / 1e6);
        ASSERT_TRUE(r == -EFAULT || r == -ETIMEDOUT);
        ASSERT_TRUE(took < (uint64_t)(MEMREAD_BOUND_MS + 30000) * 1000000u); /* a safety bound, not a rate */
        if (r == -ETIMEDOUT)
                ASSERT_EQ(memread_stuck(1000), 1);
        /* the reads go on */
        ASSERT_OK(memread(fd, a, buf, 8, 1000));
        ASSERT_TRUE(buf[0] == 'a');

        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        /* the address space is gone: nothing can be read */
        r = memread(fd, a, buf, 8, 1000);
        ASSERT_TRUE(r == -ESRCH || r == -EFAULT);
        close(fd);
        memread_free();
        ASSERT_EQ(memread_stuck(1000), 0);
}

static void test_stuck(void) {
        int p[2];
        uint8_t buf[64];

        ASSERT_OK(pipe2(p, O_CLOEXEC));
        memset(buf, 0x5a, sizeof(buf));
        uint64_t t0 = now_ns();
        ASSERT_EQ(memread(p[0], 0, buf, sizeof(buf), 4242), -ETIMEDOUT);
        ASSERT_TRUE(now_ns() - t0 >= (uint64_t)MEMREAD_BOUND_MS * 1000000u);
        ASSERT_EQ(memread_stuck(4242), 1);
        ASSERT_EQ(memread_stuck(4243), 0);

        /* the next read of this thread has a ring of its own */
        int q[2];
        ASSERT_OK(pipe2(q, O_CLOEXEC));
        ASSERT_EQ(write(q[1], "fresh", 5), 5);
        uint8_t got[5];
        ASSERT_OK(memread(q[0], 0, got, 5, 4242));
        ASSERT_TRUE(memcmp(got, "fresh", 5) == 0);

        /* the stuck read completes: into its own buffer, not ours */
        static const char late[64] = "written late";
        ASSERT_EQ(write(p[1], late, sizeof(late)), (ssize_t)sizeof(late));
        /* completed soon after its bound (not MEMREAD_LONG_NS): no penalty,
         * once reaped; waited for, not slept for */
        WAIT_UNTIL((memread_reap(), memread_stuck(4242) == 0), 60, "the late read still counts as stuck");
        for (size_t i = 0; i < sizeof(buf); i++)
                ASSERT_EQ(buf[i], 0x5a);
        memread_free();
        close(p[0]);
        close(p[1]);
        close(q[0]);
        close(q[1]);
}

static bool fd_readable(int fd) {
        struct pollfd pf = { .fd = fd, .events = POLLIN };
        return poll(&pf, 1, 0) == 1;
}

/* Until a read is back on q (a safety bound that fails the test). */
static MemReadOp *queue_wait(MemReadQueue *q) {
        for (int i = 0; i < 30000; i++) {
                MemReadOp *op = memread_queue_complete(q);
                if (op)
                        return op;
                usleep(1000);
        }
        test_fail("a queued read did not come back in 30 s");
}

static void test_queue(void) {
        MemReadQueue *q;
        uint8_t *mem, page[P], late[P];
        int fd, p[2];
        pid_t pid = child_with_trap(&mem, &fd);

        ASSERT_OK(memread_queue_new(8, &q));
        ASSERT_TRUE(memread_queue_has_room(q));
        ASSERT_EQ(memread_queue_timeout_ms(q, now_ns()), -1);

        /* a page of the child's */
        MemReadOp a = { .fd = fd, .off = (uintptr_t)mem + P, .buf = page, .len = P, .uid = 77 };
        ASSERT_OK(memread_queue_submit(q, &a));
        ASSERT_TRUE(memread_queue_timeout_ms(q, now_ns()) >= 0);
        MemReadOp *done = queue_wait(q);
        ASSERT_TRUE(done == &a && done->next == NULL);
        ASSERT_EQ(a.res, 0);
        ASSERT_TRUE(page[0] == 'b' && page[P - 1] == 'b');
        ASSERT_TRUE(!fd_readable(memread_queue_fd(q)));
        /* nothing mapped there */
        MemReadOp b = { .fd = fd, .off = 4096, .buf = page, .len = P, .uid = 77 };
        ASSERT_OK(memread_queue_submit(q, &b));
        ASSERT_TRUE(queue_wait(q) == &b);
        ASSERT_EQ(b.res, -EFAULT);

        /* a read that cannot complete: overdue once, counted, and back
         * when its bytes come */
        memread_set_bound_ms(50);
        ASSERT_OK(pipe2(p, O_CLOEXEC));
        MemReadOp c = { .fd = p[0], .off = 0, .buf = late, .len = P, .uid = 78 };
        ASSERT_OK(memread_queue_submit(q, &c));
        MemReadOp *over = NULL;
        for (int i = 0; i < 30000 && !over; i++) {
                ASSERT_TRUE(memread_queue_complete(q) == NULL);
                over = memread_queue_overdue(q, now_ns());
                if (!over)
                        usleep(1000);
        }
        ASSERT_TRUE(over == &c);
        ASSERT_TRUE(memread_queue_overdue(q, now_ns()) == NULL); /* reported once */
        ASSERT_EQ(memread_queue_timeout_ms(q, now_ns()), -1);   /* nothing left to become overdue */
        ASSERT_EQ(memread_stuck(78), 1);
        ASSERT_EQ(memread_stuck(77), 0);
        static uint8_t bytes[P];
        memset(bytes, 0xc3, sizeof(bytes));
        ASSERT_EQ(write(p[1], bytes, P), (ssize_t)P);
        ASSERT_TRUE(queue_wait(q) == &c);
        ASSERT_EQ(c.res, 0);
        ASSERT_TRUE(memcmp(late, bytes, P) == 0);
        /* back soon after its bound: counted no more */
        ASSERT_EQ(memread_stuck(78), 1);
        memread_reap();
        ASSERT_EQ(memread_stuck(78), 0);
        memread_set_bound_ms(MEMREAD_BOUND_MS);

        /* at exit, what is in flight comes back */
        MemReadOp d = { .fd = p[0], .off = 0, .buf = late, .len = 8, .uid = 79 };
        ASSERT_OK(memread_queue_submit(q, &d));
        MemReadOp *left;
        memread_queue_free(q, &left);
        ASSERT_TRUE(left == &d && d.res < 0);
        memread_free();
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        close(fd);
        close(p[0]);
        close(p[1]);
}

#define SHARED_OPS 32
#define SHARED_READS 20000u

typedef struct Shared {
        MemReadQueue *q;
        MemReadOp ops[SHARED_OPS];
        uint8_t bufs[SHARED_OPS][64];
        _Atomic bool out[SHARED_OPS]; /* in flight */
        _Atomic unsigned back, twice, wrong;
        _Atomic bool stop;
} Shared;

/* What came back, taken by whichever thread calls it. */
static void shared_take(Shared *sh) {
        for (MemReadOp *op = memread_queue_complete(sh->q); op;) {
                MemReadOp *next = op->next;
                unsigned i = (unsigned)(op - sh->ops);
                /* page 1 of the child's: 'b' */
                if (op->res != 0 || sh->bufs[i][0] != 'b' || sh->bufs[i][63] != 'b')
                        atomic_fetch_add(&sh->wrong, 1);
                if (!atomic_exchange(&sh->out[i], false))
                        atomic_fetch_add(&sh->twice, 1);
                atomic_fetch_add(&sh->back, 1);
                op = next;
        }
}

static void *shared_taker(void *arg) {
        Shared *sh = arg;
        while (!atomic_load(&sh->stop))
                shared_take(sh);
        return NULL;
}

static void test_queue_shared(void) {
        static Shared sh;
        uint8_t *mem;
        int fd;
        pid_t pid = child_with_trap(&mem, &fd);
        pthread_t th;
        unsigned sent = 0;

        ASSERT_OK(memread_queue_new(SHARED_OPS, &sh.q));
        ASSERT_OK(-pthread_create(&th, NULL, shared_taker, &sh));
        for (uint64_t t0 = now_ns(); sent < SHARED_READS;) {
                for (unsigned i = 0; i < SHARED_OPS && sent < SHARED_READS; i++) {
                        if (atomic_load(&sh.out[i]))
                                continue;
                        memset(sh.bufs[i], 0, sizeof(sh.bufs[i]));
                        sh.ops[i] = (MemReadOp){ .fd = fd, .off = (uintptr_t)mem + P, .buf = sh.bufs[i],
                                                 .len = sizeof(sh.bufs[i]), .uid = 80 };
                        atomic_store(&sh.out[i], true);
                        ASSERT_OK(memread_queue_submit(sh.q, &sh.ops[i]));
                        sent++;
                }
                shared_take(&sh);
                if (now_ns() - t0 > 120 * 1000000000ull)
                        test_fail("%u of %u reads sent, %u back in 120 s", sent, SHARED_READS, atomic_load(&sh.back));
        }
        WAIT_UNTIL((shared_take(&sh), atomic_load(&sh.back) >= sent), 60, "%u of %u reads back",
                   atomic_load(&sh.back), sent);
        atomic_store(&sh.stop, true);
        ASSERT_OK(-pthread_join(th, NULL));
        ASSERT_EQ(atomic_load(&sh.back), sent);
        ASSERT_EQ(atomic_load(&sh.twice), 0u);
        ASSERT_EQ(atomic_load(&sh.wrong), 0u);
        MemReadOp *left;
        memread_queue_free(sh.q, &left);
        ASSERT_TRUE(left == NULL);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        close(fd);
}

int main(void) {
        test_require_root(); /* a kernel-mode userfaultfd, /proc/PID/mem of a child */
        test_reads();
        test_stuck();
        test_queue();
        test_queue_shared();
        return 0;
}
