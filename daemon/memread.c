/*
 * memread.c: reads of a client's memory that no client can make wait
 * (memread.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "macro.h"
#include "memread.h"
#include "uring.h"
#include "util.h"

typedef struct Reader {
        struct io_uring ring;
        bool ring_ok; /* false: io_uring_setup() was refused, pread() it is */
        uint8_t *buf; /* where the kernel writes: never reused once abandoned */
        size_t cap;
        uid_t uid;          /* abandoned: whose read it was */
        uint64_t since_ns;  /* and when */
        struct Reader *next;
} Reader;

static pthread_mutex_t stuck_lock = PTHREAD_MUTEX_INITIALIZER;
static Reader *stuck; /* abandoned reads, under stuck_lock */

static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t key; /* a thread's Reader, freed when the thread exits */
static _Thread_local Reader *mine;
static atomic_bool no_uring; /* io_uring_setup() failed once: pread() from now on */

static void reader_free(Reader *r) {
        if (!r)
                return;
        if (r->ring_ok)
                io_uring_queue_exit(&r->ring);
        free(r->buf);
        free(r);
}

static void key_destroy(void *p) {
        reader_free(p);
}

static void key_make(void) {
        (void)pthread_key_create(&key, key_destroy);
}

/* The calling thread's Reader with a buffer of at least len; NULL
 * without memory. */
static Reader *reader_get(size_t len) {
        if (!mine) {
                Reader *r = calloc(1, sizeof(*r));
                if (!r)
                        return NULL;
                int e = atomic_load_explicit(&no_uring, memory_order_relaxed) ? -ENOSYS : uring_init(4, &r->ring, 0);
                r->ring_ok = e == 0;
                if (e < 0 && e != -ENOSYS && !atomic_exchange_explicit(&no_uring, true, memory_order_relaxed))
                        log_warn("no io_uring (%s): reads of clients' memory are made with pread(), which a "
                                 "client can make wait without bound",
                                 strerror(-e));
                pthread_once(&key_once, key_make);
                (void)pthread_setspecific(key, r);
                mine = r;
        }
        if (mine->cap < len) {
                /* nothing is in flight on a ring of our own: the old buffer
                 * can go. Zeroed: what the kernel writes later is no write
                 * a memory checker sees */
                size_t cap = ALIGN_TO(len, (size_t)64 << 10);
                uint8_t *b = calloc(1, cap);
                if (!b)
                        return NULL;
                free(mine->buf);
                mine->buf = b;
                mine->cap = cap;
        }
        return mine;
}

void memread_thread_init(void) {
        (void)reader_get(ZSWAP_PAGE_SIZE);
}

/* The read in flight on our ring outlived its bound: set the ring aside
 * with its buffer, which the kernel may still write. */
static void abandon(uid_t uid) {
        Reader *r = mine;

        mine = NULL;
        (void)pthread_setspecific(key, NULL);
        r->uid = uid;
        r->since_ns = now_ns();
        pthread_mutex_lock(&stuck_lock);
        r->next = stuck;
        stuck = r;
        pthread_mutex_unlock(&stuck_lock);
}

static int pread_all(int fd, uint64_t off, void *buf, size_t len) {
        size_t done = 0;

        while (done < len) {
                ssize_t n = pread(fd, (uint8_t *)buf + done, len - done, (off_t)(off + done));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return errno == EIO ? -EFAULT : negative_errno();
                if (n == 0)
                        return done == 0 ? -ESRCH : -EFAULT;
                done += (size_t)n;
        }
        return 0;
}

int memread_view(int fd, uint64_t off, size_t len, uid_t uid, const uint8_t **out) {
        Reader *r = reader_get(len);
        uint64_t deadline = now_ns() + (uint64_t)MEMREAD_BOUND_MS * 1000000u;
        size_t done = 0;

        if (!r)
                return -ENOMEM;
        if (!r->ring_ok) {
                int e = pread_all(fd, off, r->buf, len);
                *out = r->buf;
                return e;
        }
        while (done < len) {
                struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
                if (!sqe)
                        return -EIO; /* cannot be: one read at a time on a ring of four */
                io_uring_prep_read(sqe, fd, r->buf + done, (unsigned)(len - done), off + done);
                /* to the ring's worker, never in this thread: a /proc/PID/mem
                 * read would otherwise be tried here first */
                sqe->flags |= IOSQE_ASYNC;
                int s;
                while ((s = io_uring_submit(&r->ring)) == -EINTR)
                        ;
                if (s < 0)
                        return s;
                struct io_uring_cqe *cqe = NULL;
                int w;
                for (;;) {
                        uint64_t now = now_ns();
                        uint64_t left = now < deadline ? deadline - now : 0;
                        struct __kernel_timespec ts = { .tv_sec = (long long)(left / 1000000000u),
                                                        .tv_nsec = (long long)(left % 1000000000u) };
                        w = io_uring_wait_cqe_timeout(&r->ring, &cqe, &ts);
                        if (w != -EINTR)
                                break;
                }
                if (w < 0) {
                        /* -ETIME, or the wait itself failed: the read may
                         * still be in flight either way */
                        abandon(uid);
                        return -ETIMEDOUT;
                }
                int res = cqe->res;
                io_uring_cqe_seen(&r->ring, cqe);
                if (res == -EINTR || res == -EAGAIN)
                        continue;
                if (res < 0)
                        return res == -EIO ? -EFAULT : res;
                if (res == 0)
                        return done == 0 ? -ESRCH : -EFAULT; /* 0 at once: that mm is gone */
                done += (size_t)res;
        }
        *out = r->buf;
        return 0;
}

int memread(int fd, uint64_t off, void *buf, size_t len, uid_t uid) {
        const uint8_t *p;
        int r = memread_view(fd, off, len, uid, &p);

        if (r == 0)
                memcpy(buf, p, len);
        return r;
}

unsigned memread_stuck(uid_t uid) {
        unsigned n = 0;

        pthread_mutex_lock(&stuck_lock);
        for (Reader *r = stuck; r; r = r->next)
                n += r->uid == uid;
        pthread_mutex_unlock(&stuck_lock);
        return n;
}

static void reap(bool penalty) {
        uint64_t now = now_ns();

        pthread_mutex_lock(&stuck_lock);
        for (Reader **p = &stuck; *p;) {
                Reader *r = *p;
                struct io_uring_cqe *cqe;
                bool served = !penalty || now - r->since_ns >= (uint64_t)MEMREAD_PENALTY_MS * 1000000u;
                if (served && io_uring_peek_cqe(&r->ring, &cqe) == 0) {
                        *p = r->next;
                        log_info("uid %u: a read of its memory abandoned %llu s ago has completed", r->uid,
                                 (unsigned long long)((now - r->since_ns) / 1000000000u));
                        reader_free(r);
                } else
                        p = &r->next;
        }
        pthread_mutex_unlock(&stuck_lock);
}

void memread_reap(void) {
        reap(true);
}

void memread_free(void) {
        if (mine) {
                (void)pthread_setspecific(key, NULL); /* made with mine */
                reader_free(mine);
                mine = NULL;
        }
        reap(false);
}
