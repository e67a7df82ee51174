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
        /* no ring of its own: the overdue read of a MemReadQueue, which
         * sets completed (release) when it comes back */
        bool queued;
        atomic_bool completed;
        uint64_t completed_ns; /* when reap() saw it complete; 0: not yet */
        struct Reader *next;
} Reader;

static void stuck_add(Reader *r);

static pthread_mutex_t stuck_lock = PTHREAD_MUTEX_INITIALIZER;
static Reader *stuck; /* abandoned reads, under stuck_lock */

static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t key; /* a thread's Reader, freed when the thread exits */
static _Thread_local Reader *mine;
static atomic_bool no_uring;
static _Atomic unsigned bound_ms = MEMREAD_BOUND_MS; /* relaxed: set once, before the threads start */

void memread_set_bound_ms(unsigned ms) {
        atomic_store_explicit(&bound_ms, ms, memory_order_relaxed);
}

unsigned memread_bound_ms(void) {
        return atomic_load_explicit(&bound_ms, memory_order_relaxed);
}

static uint64_t bound_ns(void) {
        return (uint64_t)atomic_load_explicit(&bound_ms, memory_order_relaxed) * 1000000u;
}
 /* io_uring_setup() failed once: pread() from now on */

static void reader_free(Reader *r) {
        if (!r)
                return;
        if (r->ring_ok)
                uring_exit(&r->ring);
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
        stuck_add(r);
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
        uint64_t deadline = now_ns() + bound_ns();
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

static void stuck_add(Reader *r) {
        pthread_mutex_lock(&stuck_lock);
        r->next = stuck;
        stuck = r;
        pthread_mutex_unlock(&stuck_lock);
}

static void reap(bool penalty) {
        uint64_t now = now_ns();

        pthread_mutex_lock(&stuck_lock);
        for (Reader **p = &stuck; *p;) {
                Reader *r = *p;
                struct io_uring_cqe *cqe;
                if (!r->completed_ns) {
                        bool back = r->queued ? atomic_load_explicit(&r->completed, memory_order_acquire)
                                              : io_uring_peek_cqe(&r->ring, &cqe) == 0;
                        if (back) {
                                r->completed_ns = now;
                                log_info("uid %u: a read of its memory set aside %llu ms ago has completed", r->uid,
                                         (unsigned long long)((now - r->since_ns) / 1000000u));
                        }
                }
                /* a read that waited long keeps counting a while after it
                 * completed: a client whose memory answers only just after
                 * the bound cannot hold a thread again and again. One that
                 * came soon after the bound (a fork of a large process
                 * holding its mmap lock) goes at once */
                bool long_wait = r->completed_ns && r->completed_ns - r->since_ns >= MEMREAD_LONG_NS;
                bool served = r->completed_ns &&
                              (!penalty || !long_wait || now - r->completed_ns >= (uint64_t)MEMREAD_PENALTY_MS * 1000000u);
                if (served) {
                        *p = r->next;
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

/* ---- reads nobody waits for ---- */

/* lock: the owner submits, and completes when it can; a thread that
 * takes a held owner's work completes too (memread.h). Held across the
 * ring's peeks and a non-blocking submit, never across a wait. */
struct MemReadQueue {
        pthread_mutex_t lock;
        struct io_uring ring;
        unsigned depth, inflight;
        MemReadOp *live, *live_tail; /* in flight, oldest first, not overdue */
        MemReadOp *late;             /* in flight, reported overdue */
};

int memread_queue_new(unsigned depth, MemReadQueue **ret) {
        MemReadQueue *q;

        if (atomic_load_explicit(&no_uring, memory_order_relaxed))
                return -ENOSYS;
        q = calloc(1, sizeof(*q));
        if (!q)
                return -ENOMEM;
        int e = uring_init(depth, &q->ring, 0);
        if (e < 0) {
                free(q);
                if (!atomic_exchange_explicit(&no_uring, true, memory_order_relaxed))
                        log_warn("no io_uring (%s): reads of clients' memory are made with pread(), which a "
                                 "client can make wait without bound",
                                 strerror(-e));
                return -ENOSYS;
        }
        pthread_mutex_init(&q->lock, NULL);
        q->depth = depth;
        *ret = q;
        return 0;
}

int memread_queue_fd(const MemReadQueue *q) {
        return q->ring.ring_fd;
}

bool memread_queue_has_room(MemReadQueue *q) {
        pthread_mutex_lock(&q->lock);
        bool room = q->inflight < q->depth;
        pthread_mutex_unlock(&q->lock);
        return room;
}

static void op_unlink(MemReadQueue *q, MemReadOp *op) {
        if (op->prev)
                op->prev->next = op->next;
        else if (op->overdue)
                q->late = op->next;
        else
                q->live = op->next;
        if (op->next)
                op->next->prev = op->prev;
        else if (!op->overdue)
                q->live_tail = op->prev;
        op->prev = op->next = NULL;
        q->inflight--;
}

int memread_queue_submit(MemReadQueue *q, MemReadOp *op) {
        pthread_mutex_lock(&q->lock);
        struct io_uring_sqe *sqe = q->inflight < q->depth ? io_uring_get_sqe(&q->ring) : NULL;
        if (!sqe) {
                pthread_mutex_unlock(&q->lock);
                return -EBUSY;
        }
        io_uring_prep_read(sqe, op->fd, op->buf, op->len, op->off);
        sqe->flags |= IOSQE_ASYNC; /* in the ring's worker, never in this thread */
        io_uring_sqe_set_data(sqe, op);
        /* listed before it is submitted: an SQE that io_uring_submit()
         * fails to hand over stays in the queue, and the next submit
         * (memread_queue_complete(), memread_queue_overdue()) takes it */
        op->res = 0;
        op->since_ns = now_ns();
        op->overdue = false;
        op->stuck = NULL;
        op->next = NULL;
        op->prev = q->live_tail;
        if (q->live_tail)
                q->live_tail->next = op;
        else
                q->live = op;
        q->live_tail = op;
        q->inflight++;
        while (io_uring_submit(&q->ring) == -EINTR)
                ;
        pthread_mutex_unlock(&q->lock);
        return 0;
}

static void resubmit(MemReadQueue *q) {
        if (io_uring_sq_ready(&q->ring) > 0)
                (void)io_uring_submit(&q->ring);
}

static void op_done(MemReadQueue *q, MemReadOp *op, int res) {
        op_unlink(q, op);
        if (res == (int)op->len)
                op->res = 0;
        else if (res == 0)
                op->res = -ESRCH; /* that address space is gone */
        else if (res > 0 || res == -EIO)
                op->res = -EFAULT;
        else
                op->res = res;
        if (op->stuck) {
                /* the stuck list owns it; it may go once we let go */
                atomic_store_explicit(&((Reader *)op->stuck)->completed, true, memory_order_release);
                op->stuck = NULL;
        }
}

MemReadOp *memread_queue_complete(MemReadQueue *q) {
        MemReadOp *done = NULL, **tail = &done;
        struct io_uring_cqe *cqe;

        pthread_mutex_lock(&q->lock);
        resubmit(q);
        while (io_uring_peek_cqe(&q->ring, &cqe) == 0) {
                MemReadOp *op = io_uring_cqe_get_data(cqe);
                int res = cqe->res;
                io_uring_cqe_seen(&q->ring, cqe);
                if (!op)
                        continue;
                op_done(q, op, res);
                *tail = op;
                tail = &op->next;
        }
        pthread_mutex_unlock(&q->lock);
        return done;
}

MemReadOp *memread_queue_overdue(MemReadQueue *q, uint64_t now) {
        pthread_mutex_lock(&q->lock);
        MemReadOp *op = q->live;

        resubmit(q);
        if (!op || now - op->since_ns < bound_ns()) {
                pthread_mutex_unlock(&q->lock);
                return NULL;
        }
        /* from live to late, counted against its user from now on */
        op_unlink(q, op);
        q->inflight++;
        op->overdue = true;
        op->next = q->late;
        if (q->late)
                q->late->prev = op;
        q->late = op;
        Reader *r = calloc(1, sizeof(*r));
        if (r) {
                r->queued = true;
                r->uid = op->uid;
                r->since_ns = now;
                op->stuck = r;
                stuck_add(r);
        }
        pthread_mutex_unlock(&q->lock);
        return op;
}

int memread_queue_timeout_ms(MemReadQueue *q, uint64_t now) {
        pthread_mutex_lock(&q->lock);
        uint64_t due = q->live ? q->live->since_ns + bound_ns() : 0;
        pthread_mutex_unlock(&q->lock);
        if (!due)
                return -1;
        return due <= now ? 0 : (int)((due - now + 999999u) / 1000000u);
}

void memread_queue_free(MemReadQueue *q, MemReadOp **left) {
        MemReadOp *rest = NULL, **tail = &rest;

        *left = NULL;
        if (!q)
                return;
        /* cancel what the kernel can cancel, and take back every read that
         * comes back within the bound: a read still waiting on a client's
         * file system after that keeps its op, its buffer and the ring (the
         * kernel may write them yet); the process is exiting */
        struct io_uring_sqe *sqe = io_uring_get_sqe(&q->ring);
        if (sqe) {
                io_uring_prep_cancel(sqe, NULL, IORING_ASYNC_CANCEL_ANY);
                io_uring_sqe_set_data(sqe, NULL);
                (void)io_uring_submit(&q->ring);
        }
        uint64_t deadline = now_ns() + (uint64_t)MEMREAD_BOUND_MS * 1000000u;
        while (q->inflight > 0) {
                *tail = memread_queue_complete(q);
                while (*tail)
                        tail = &(*tail)->next;
                uint64_t now = now_ns();
                if (q->inflight == 0 || now >= deadline)
                        break;
                struct io_uring_cqe *cqe;
                struct __kernel_timespec ts = { .tv_nsec = (long long)MIN(deadline - now, 100000000ull) };
                (void)io_uring_wait_cqe_timeout(&q->ring, &cqe, &ts);
        }
        *left = rest;
        if (q->inflight > 0) {
                log_warn("%u reads of clients' memory still wait at exit: left to the kernel", q->inflight);
                return;
        }
        uring_exit(&q->ring);
        pthread_mutex_destroy(&q->lock);
        free(q);
}
