/*
 * memread.h: reads of a client's memory that no client can make wait.
 *
 * The daemon reads a client's staging slots (a lane to compress, a page
 * in flight that a fault needs) through /proc/PID/mem. Such a read faults
 * the page in, in the reading thread, and the client chooses what is
 * mapped at those addresses: memory it registered on a userfaultfd of its
 * own that it never answers, or a file of a FUSE server it runs. A plain
 * pread() would then wait as long as the client likes, and only a fatal
 * signal to the waiting thread would end it. A read may also wait for
 * reasons that are nobody's attack: the client's mmap lock, held while a
 * large process forks, or a host that swaps.
 *
 * So no daemon thread makes that read itself. Every read is submitted to
 * an io_uring, forced to the ring's kernel worker (IOSQE_ASYNC), into a
 * buffer the kernel may write until the read completes.
 *
 * The fault threads do not wait at all: they hand a read to a
 * MemReadQueue (below), go on serving other faults, and finish what the
 * read was for when its completion comes (fault.c, serve_slot()). The
 * manager reads no client memory (fork tokens come in messages).
 *
 * The compression workers, and the rare paths that need a page at once
 * (a fork the library did not announce, adoption), call memread(), which
 * waits for the completion at most the bound (MEMREAD_BOUND_MS, zswapd
 * --read-bound-ms). A read that has not completed by then is set aside
 * with its ring and buffer, and the thread goes on with a new ring.
 *
 * A read past the bound, set aside or still in a queue, ends nothing for
 * the process: its client is evicted no more (mmclient_read_overdue()),
 * and memread_stuck() counts the read against its user, whose new
 * connections the manager refuses (manager.c) until the read completes,
 * and for MEMREAD_PENALTY_MS more if it waited MEMREAD_LONG_NS or longer:
 * a user whose file system answers late cannot hold a worker for the
 * bound again and again. memread_reap() frees what was set aside.
 *
 * Linux 6.18 fails a read that an io_uring worker makes of memory
 * registered on a userfaultfd with EIO at once (it waits when a plain
 * pread() makes it), so that attack costs the daemon nothing; the bound is
 * for what may wait anyway, such as a FUSE server that never answers.
 * Without io_uring (io_uring_setup() refused, kernel.io_uring_disabled),
 * reads fall back to pread(), unbounded, and the daemon says so once.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define MEMREAD_BOUND_MS 1000u /* the default bound */
#define MEMREAD_PENALTY_MS 60000u
#define MEMREAD_LONG_NS (10ull * 1000000000u) /* a set-aside read that waited this long pays the penalty */

/* The bound from now on (zswapd --read-bound-ms), before any read. */
void memread_set_bound_ms(unsigned ms);
unsigned memread_bound_ms(void);

/*
 * len bytes at offset off of fd (a /proc/PID/mem descriptor) into buf.
 * 0; -EFAULT if part of the range cannot be read (unmapped, or a page the
 * kernel would not fault in); -ESRCH if nothing could be read at all (the
 * address space is gone); -ETIMEDOUT if the read did not complete within
 * MEMREAD_BOUND_MS: it is abandoned, counted against uid. Any thread.
 */
int memread(int fd, uint64_t off, void *buf, size_t len, uid_t uid);

/* Make the calling thread's ring now (each thread that reads clients'
 * memory has one; made lazily otherwise): its descriptor is there from the
 * thread's start, not from its first read. */
void memread_thread_init(void);

/* memread() into a buffer of the calling thread's, *out, valid until its
 * next memread*() call: no copy. */
int memread_view(int fd, uint64_t off, size_t len, uid_t uid, const uint8_t **out);

/* Reads of uid's memory past the bound not yet freed by memread_reap(). */
unsigned memread_stuck(uid_t uid);

/* Free reads past the bound that have completed (and served their
 * penalty, if they waited MEMREAD_LONG_NS).
 * Manager thread, each tick. */
void memread_reap(void);

/* At exit: the calling thread's ring, and every abandoned read whose
 * completion has come (the rest stay: the kernel may write them still). */
void memread_free(void);

/*
 * Reads a thread submits and does not wait for. The caller owns each op
 * and its buffer until the op comes back from memread_queue_complete(),
 * whatever happens to the client meanwhile: the kernel may write the
 * buffer until then. One thread, the owner, submits; any thread may take
 * what has completed or is overdue: a fault thread held in a call into a
 * client (daemon/fault/work.c, work_steal()) has its reads taken by
 * another, so that other clients' pages do not wait for it. The queue's
 * lock is never held across a wait, so the owner's call never holds it.
 */
typedef struct MemReadOp {
        /* in */
        int fd;       /* /proc/PID/mem */
        uint64_t off;
        void *buf;
        uint32_t len;
        uid_t uid;
        unsigned tag; /* the caller's: what the read is for */
        /* out: 0, or as memread() (-EFAULT, -ESRCH, -errno) */
        int res;
        /* the queue's */
        uint64_t since_ns;
        bool overdue;
        void *stuck;
        struct MemReadOp *prev, *next;
} MemReadOp;

typedef struct MemReadQueue MemReadQueue;

/* A queue of up to depth reads in flight: -ENOSYS without io_uring (the
 * caller reads with memread() instead). */
int memread_queue_new(unsigned depth, MemReadQueue **ret);

/* Wait until every read is back and free the queue (a read still waiting
 * on something a client controls makes this wait too, as it makes the
 * kernel's exit of the ring); the ops still in flight come back in *left,
 * linked by next, res -ECANCELED. */
void memread_queue_free(MemReadQueue *q, MemReadOp **left);

/* Readable (EPOLLIN) when a read has completed. */
int memread_queue_fd(const MemReadQueue *q);

/* Room for one more read? */
bool memread_queue_has_room(MemReadQueue *q);

/* Start op: 0, or -EBUSY without room, -errno if the ring refused it (op
 * is not in flight then). */
int memread_queue_submit(MemReadQueue *q, MemReadOp *op);

/* The ops whose reads have completed, linked by next (NULL: none). */
MemReadOp *memread_queue_complete(MemReadQueue *q);

/* An op in flight for MEMREAD_BOUND_MS or more and not reported yet, one
 * per call, NULL when none is left. Each is counted against its uid (memread_stuck()) until it completes,
 * and MEMREAD_PENALTY_MS after. */
MemReadOp *memread_queue_overdue(MemReadQueue *q, uint64_t now);

/* Milliseconds until the oldest read not yet reported becomes overdue,
 * -1 if no read is in flight. */
int memread_queue_timeout_ms(MemReadQueue *q, uint64_t now);

