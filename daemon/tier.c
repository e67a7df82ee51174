/*
 * tier.c: the second tier (tier.h; docs/tier.md).
 *
 * Layout of the backing store: block 0 is the header (TierHeader), blocks
 * 1.. hold objects. The writer packs objects back to back into an extent
 * (a run of up to 16 free blocks), so an object may straddle two blocks;
 * each block's reference count says how many live objects touch it. The
 * count is the whole free-space map: 0 is free.
 *
 * Writing. The writer thread gets, every manager tick while the pool is
 * over its resume mark and the writer is idle, the list of clients. One
 * pass: a histogram of the reclaim stamps (last use) of every object in RAM
 * gives the stamp under which the pass takes objects, enough of the
 * oldest to bring the pool under its mark; then each client's entries are
 * walked in address order (neighbours land in the same blocks, which is
 * what makes the fault's read bring the next pages in too). An entry taken
 * is marked PE_WB with a CAS, its object copied into the extent, and the
 * entry stays servable all along: a fault takes a WB entry as it takes
 * any STORED one (and drops the mark), so no fault ever waits for a write.
 * Once the extents are written (and, on an NBD export that does not
 * promise consistency across connections, flushed), each entry still
 * carrying the WB value it got becomes STORED|PE_TIER naming a new stub;
 * one a fault or an event took in between fails that CAS and its blocks
 * lose the reference the pass gave them. A failed write leaves every
 * entry as it was (the WB mark is taken back): nothing is lost, the
 * writer backs off.
 *
 * Reading: tier_read() on the fault thread's own reader. A file is read
 * with O_DIRECT into a registered buffer through the reader's ring; an NBD
 * export with the reader's own connection. Either way the fault waits for
 * its own read and nothing else.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

/* io_uring fills buffers behind valgrind's back: say so after each read */
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#else
#define VALGRIND_MAKE_MEM_DEFINED(addr, len) ((void)0)
#endif

#include "crc32c.h"
#include "inject.h"
#include "log.h"
#include "macro.h"
#include "manager.h"
#include "mmclient.h"
#include "nbd.h"
#include "pentry.h"
#include "pindex.h"
#include "pool.h"
#include "reclaim.h"
#include "tier.h"
#include "util.h"

#define TIER_MAGIC "ZSWTIER1"
#define TIER_VERSION 1
#define NEXT 8                    /* extents written in one batch */
#define EXTENT_BLOCKS (TIER_EXTENT / TIER_BLOCK)
#define EXTENT_OBJS 1024          /* objects in one extent at most */
#define READ_BUF (TIER_WINDOW + 2 * TIER_BLOCK)
#define REF_MAX 65000             /* a block's count stops here (tier_get refuses) */
#define BACKOFF_MIN_MS 500
#define BACKOFF_MAX_MS 30000
#define RECONNECT_MS 1000         /* a reader tries its NBD connection again after */
#define HIST 1024

typedef struct TierHeader {
        char magic[8];
        uint32_t version;
        uint32_t block;
        uint64_t id;     /* random, seeds every object's CRC */
        uint64_t size;   /* bytes of the backing store the tier uses */
        uint64_t hwm;    /* no object lies at or above this block */
        uint32_t crc;    /* of the header up to here */
        uint32_t pad;
} TierHeader;

typedef struct WbObj {
        MMClient *mm;
        uint64_t addr;
        uint64_t v;       /* the entry's value with PE_WB, as the writer set it */
        uint64_t off;
        uint32_t len, crc;
} WbObj;

typedef struct Extent {
        uint8_t *buf;     /* TIER_EXTENT, block aligned */
        uint64_t block;   /* first block */
        unsigned nblocks; /* blocks reserved */
        uint32_t fill;    /* bytes packed */
        WbObj objs[EXTENT_OBJS];
        unsigned nobjs;
} Extent;

typedef struct Job {
        MMClient **mms;
        size_t n;
        uint64_t want;    /* object bytes to move out */
} Job;

/* An io_uring and the buffer registered with it (ring_run()). */
typedef struct Ring {
        struct io_uring ring;
        bool ok;
        bool fixed;        /* buf is registered: READ_FIXED / WRITE_FIXED */
        void *buf;
        size_t buflen;
        unsigned entries;
        uint64_t seq;
} Ring;

enum { BACKING_FILE, BACKING_NBD };

struct Tier {
        Manager *m;
        TierConf conf;
        int kind;
        int fd;              /* file or block device */
        bool direct;         /* opened O_DIRECT */
        NbdAddr nbd;
        NbdConn *wconn;      /* the writer's connection */
        bool nbd_flush;      /* FLUSH after each batch, before its pages are published (below) */
        char describe[640];

        uint64_t id;         /* written before `ready` is raised, read after */
        _Atomic bool ready;  /* the header was read: objects can be checked */
        uint64_t nblocks;    /* blocks of the backing store the tier uses, header included */
        _Atomic uint16_t *refs;
        uint64_t grace_until_ns, old_hwm;

        /* writer thread only */
        uint64_t cursor, hwm;
        Ring ring;           /* wmem registered */
        uint8_t *wmem;       /* NEXT extents and the header block */
        Extent ext[NEXT];
        unsigned next_ext;   /* extents in use this batch */
        uint64_t backoff_until_ns, backoff_ms;
        uint64_t full_until_ns; /* no free block was found: not before this */
        uint64_t idle_until_ns; /* a pass found nothing to take: not before this */
        uint64_t next_reconnect_ns;
        bool unreachable_logged;
        double tokens;       /* bytes the rate allows now */
        uint64_t tokens_ns;
        bool full_logged;

        pthread_t thread;
        bool started;
        pthread_mutex_t lock; /* job, stop */
        pthread_cond_t cond;
        Job *job;             /* waiting for the writer, or being written */
        bool busy;
        _Atomic bool stop;   /* set under lock, read anywhere in the writer */

        struct {
                _Atomic uint64_t used_blocks, pages, bytes, written, writes, written_pages;
                _Atomic uint64_t reads, read_bytes, prefetched, read_errors, write_errors, corrupt, full_events,
                        reconnects;
                _Atomic int state;
        } st;
};

struct TierReader {
        Tier *t;
        Ring ring;           /* a file's: buf registered */
        uint8_t *buf;        /* READ_BUF, block aligned */
        uint64_t win_off;    /* what buf holds: [win_off, win_off + win_len) */
        uint32_t win_len;
        NbdConn *conn;
        uint64_t next_connect_ns;
        /* after a failed read, faults retried every millisecond get its
         * error back without a new read until then */
        uint64_t fail_until_ns;
        int fail_err;
};

const char *tier_state_name(int state) {
        static const char *const names[] = { "idle", "writing", "full", "error", "disconnected", "grace" };
        return state >= 0 && (size_t)state < ELEMENTSOF(names) ? names[state] : "?";
}

static void set_state(Tier *t, int s) {
        atomic_store_explicit(&t->st.state, s, memory_order_relaxed);
}

static void stat_add(_Atomic uint64_t *c, uint64_t v) {
        atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

static uint32_t obj_seed(const Tier *t, uint64_t off) {
        uint64_t k[2] = { t->id, off };
        return crc32c(0, k, sizeof(k));
}

static uint32_t obj_crc(const Tier *t, uint64_t off, const void *obj, uint32_t len) {
        return crc32c(obj_seed(t, off), obj, len);
}

/* ---- making and unmaking rings ---- */

/*
 * Rings are made and unmade under one lock: liburing maps and unmaps a
 * ring's queues with raw system calls that ThreadSanitizer does not see,
 * so a ring made at the address of one another thread unmade looks like
 * a race on the same memory. The lock orders each unmaking before the
 * next making (an NBD connection has a ring of its own too). Rare: at
 * start, and when a connection is made again.
 */
static pthread_mutex_t ring_lock = PTHREAD_MUTEX_INITIALIZER;

static NbdConn *conn_close(NbdConn *c) {
        if (!c)
                return NULL;
        pthread_mutex_lock(&ring_lock);
        nbd_close(c);
        pthread_mutex_unlock(&ring_lock);
        return NULL;
}

/* ---- io_uring rounds ---- */

/*
 * A ring and the buffer registered with it. Every use is a round: the
 * caller prepares n operations tagged ring_tag(g, i), ring_run() submits
 * them all and waits for every completion. A completion of an earlier
 * round (there should be none) is recognised by its tag and passed over.
 * A round whose operations cannot all be submitted is reaped of those
 * that were, and the ring is made anew: an operation left in the queue
 * would otherwise go out later, into a buffer that has moved on.
 */
static int ring_init(Ring *g, unsigned entries, void *buf, size_t buflen) {
        pthread_mutex_lock(&ring_lock);
        int r = io_uring_queue_init(entries, &g->ring, 0);
        pthread_mutex_unlock(&ring_lock);
        if (r < 0)
                return r;
        g->ok = true;
        g->entries = entries;
        g->buf = buf;
        g->buflen = buflen;
        struct iovec iov = { buf, buflen };
        /* a registered buffer saves pinning it on every request; without
         * (RLIMIT_MEMLOCK) the plain requests do the same work */
        g->fixed = buf && io_uring_register_buffers(&g->ring, &iov, 1) == 0;
        return 0;
}

static void ring_exit(Ring *g) {
        pthread_mutex_lock(&ring_lock);
        if (g->ok)
                io_uring_queue_exit(&g->ring);
        pthread_mutex_unlock(&ring_lock);
        g->ok = false;
}

static uint64_t ring_tag(const Ring *g, unsigned i) {
        return (g->seq & 0xffffffffffffull) << 16 | i;
}

/* An SQE of this round, tagged i. NULL: the queue is full (never, as used). */
static struct io_uring_sqe *ring_sqe(Ring *g, unsigned i) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&g->ring);
        if (sqe)
                io_uring_sqe_set_data64(sqe, ring_tag(g, i));
        return sqe;
}

static void ring_prep_rw(Ring *g, struct io_uring_sqe *sqe, int fd, bool write, void *buf, uint32_t len, uint64_t off) {
        bool fixed = g->fixed && (uint8_t *)buf >= (uint8_t *)g->buf &&
                     (uint8_t *)buf + len <= (uint8_t *)g->buf + g->buflen;
        if (write && fixed)
                io_uring_prep_write_fixed(sqe, fd, buf, len, off, 0);
        else if (write)
                io_uring_prep_write(sqe, fd, buf, len, off);
        else if (fixed)
                io_uring_prep_read_fixed(sqe, fd, buf, len, off, 0);
        else
                io_uring_prep_read(sqe, fd, buf, len, off);
}

/* Submit this round's n operations and wait for all; res[i] gets each
 * one's result (-ECANCELED if it never ran). Polls the completion queue
 * for spin_ns first (a fault's read: see tier.h, read_spin_us), then
 * sleeps. 0, or -errno of the ring. */
static int ring_run(Ring *g, unsigned n, int *res, uint64_t spin_ns) {
        unsigned submitted = 0;
        int err = 0;

        for (unsigned i = 0; i < n; i++)
                res[i] = -ECANCELED;
        for (int tries = 0; submitted < n && tries < 1000; tries++) {
                int e = io_uring_submit(&g->ring);
                if (e > 0)
                        submitted += (unsigned)e;
                else if (e != 0 && e != -EINTR && e != -EAGAIN && e != -EBUSY) {
                        err = e;
                        break;
                }
        }
        if (submitted < n && !err)
                err = -EIO;
        uint64_t spin_until = spin_ns ? now_ns() + spin_ns : 0;
        for (unsigned got = 0; got < submitted;) {
                struct io_uring_cqe *cqe;
                int e;
                if (spin_until && now_ns() < spin_until) {
                        e = io_uring_peek_cqe(&g->ring, &cqe);
                        if (e == -EAGAIN)
                                continue;
                } else
                        e = io_uring_wait_cqe(&g->ring, &cqe);
                if (e == -EINTR || e == -EAGAIN)
                        continue;
                if (e < 0)
                        return e; /* cannot happen short of a broken ring: keep it, in flight as it is */
                uint64_t u = io_uring_cqe_get_data64(cqe);
                if (u >> 16 == (g->seq & 0xffffffffffffull) && (u & 0xffff) < n) {
                        res[u & 0xffff] = cqe->res;
                        got++;
                }
                io_uring_cqe_seen(&g->ring, cqe);
        }
        g->seq++;
        if (submitted < n) {
                log_error("second tier: io_uring took %u of %u requests (%s): the ring is made anew", submitted, n,
                          strerror(-err));
                ring_exit(g);
                int e = ring_init(g, g->entries, g->buf, g->buflen);
                if (e < 0)
                        log_error("second tier: cannot make the ring anew: %s", strerror(-e));
        }
        return err;
}

/* One read or write, waited for (the writer's header; a file's reads). */
static int ring_rw(Ring *g, int fd, bool write, void *buf, uint32_t len, uint64_t off) {
        struct io_uring_sqe *sqe;
        int res;

        if (!g->ok)
                return -EIO;
        if (!(sqe = ring_sqe(g, 0)))
                return -EBUSY;
        ring_prep_rw(g, sqe, fd, write, buf, len, off);
        int r = ring_run(g, 1, &res, 0);
        if (r < 0)
                return r;
        if (!write && res > 0)
                VALGRIND_MAKE_MEM_DEFINED(buf, (size_t)res);
        if (res >= 0 && (uint32_t)res != len)
                return -EIO;
        return res < 0 ? res : 0;
}

static int backing_write(Tier *t, void *buf, uint32_t len, uint64_t off) {
        if (t->kind == BACKING_NBD) {
                if (!t->wconn)
                        return -ENOTCONN;
                return nbd_pwrite_batch(t->wconn, &(NbdWrite){ buf, len, off }, 1);
        }
        return ring_rw(&t->ring, t->fd, true, buf, len, off);
}

static int backing_read_sync(Tier *t, void *buf, uint32_t len, uint64_t off) {
        if (t->kind == BACKING_NBD)
                return nbd_pread(t->wconn, buf, len, off);
        return ring_rw(&t->ring, t->fd, false, buf, len, off);
}

/* ---- the header ---- */

static uint32_t header_crc(const TierHeader *h) {
        return crc32c(0, h, offsetof(TierHeader, crc));
}

static int header_write(Tier *t) {
        TierHeader *h = (TierHeader *)(t->wmem + NEXT * TIER_EXTENT);

        memset(h, 0, TIER_BLOCK);
        memcpy(h->magic, TIER_MAGIC, 8);
        h->version = TIER_VERSION;
        h->block = TIER_BLOCK;
        h->id = t->id;
        h->size = t->nblocks * TIER_BLOCK;
        h->hwm = t->hwm;
        h->crc = header_crc(h);
        return backing_write(t, h, TIER_BLOCK, 0);
}

/* An earlier daemon's header: keep its id (its objects stay readable) and
 * keep off its blocks for the grace period. Anything else: a new tier. */
static int header_load(Tier *t) {
        TierHeader *h = (TierHeader *)(t->wmem + NEXT * TIER_EXTENT);
        int r = backing_read_sync(t, h, TIER_BLOCK, 0);

        if (r < 0)
                return r;
        if (memcmp(h->magic, TIER_MAGIC, 8) == 0 && h->version == TIER_VERSION && h->block == TIER_BLOCK &&
            h->crc == header_crc(h) && h->size == t->nblocks * TIER_BLOCK && h->hwm >= 1 && h->hwm <= t->nblocks) {
                t->id = h->id;
                t->hwm = t->old_hwm = h->hwm;
                if (t->old_hwm > 1 && t->conf.grace_ms) {
                        t->grace_until_ns = now_ns() + t->conf.grace_ms * 1000000;
                        log_info("second tier: blocks 1..%" PRIu64 " of an earlier daemon are kept for %" PRIu64
                                 " s (clients coming back to be adopted)",
                                 t->old_hwm - 1, t->conf.grace_ms / 1000);
                }
                return 0;
        }
        while (t->id == 0)
                if (getrandom(&t->id, sizeof(t->id), 0) != sizeof(t->id))
                        t->id = now_ns() ^ ((uint64_t)getpid() << 32);
        t->hwm = 1;
        return header_write(t);
}

/* The header read (or written): the tier's id, which every object's CRC
 * needs, is known from here on, and the readers may read (acquire of
 * `ready`). Writer thread, or tier_open() before it starts. */
static int tier_ready(Tier *t) {
        int r = header_load(t);
        if (r < 0)
                return r;
        t->cursor = MAX(t->hwm, 1);
        if (t->cursor >= t->nblocks)
                t->cursor = 1;
        set_state(t, t->grace_until_ns ? TIER_GRACE : TIER_IDLE);
        atomic_store_explicit(&t->ready, true, memory_order_release);
        log_info("second tier: %s, id %016" PRIx64 "%s", t->describe, t->id, t->old_hwm > 1 ? " (kept)" : " (new)");
        return 0;
}

/* ---- open ---- */

static int open_file(Tier *t, char *err, size_t errlen) {
        const char *path = t->conf.backing;
        struct stat st;
        uint64_t size;

        t->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_DIRECT, 0600);
        t->direct = t->fd >= 0;
        if (t->fd < 0 && errno == EINVAL) /* a file system without O_DIRECT (tmpfs) */
                t->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (t->fd < 0)
                return errorf(negative_errno(), err, errlen, "backing %s: %m", path);
        if (!t->direct)
                log_warn("second tier: %s does not take O_DIRECT: its data passes through the page cache", path);
        if (fstat(t->fd, &st) < 0)
                return errorf(negative_errno(), err, errlen, "backing %s: %m", path);
        if (S_ISBLK(st.st_mode)) {
                if (ioctl(t->fd, BLKGETSIZE64, &size) < 0)
                        return errorf(negative_errno(), err, errlen, "backing %s: cannot read its size: %m", path);
                if (t->conf.size && t->conf.size > size)
                        return errorf(-EINVAL, err, errlen, "backing %s: size %" PRIu64 " is larger than the device (%" PRIu64 ")",
                                    path, t->conf.size, size);
                size = t->conf.size ? t->conf.size : size;
        } else if (S_ISREG(st.st_mode)) {
                size = t->conf.size ? t->conf.size : (uint64_t)st.st_size;
                if (size == 0)
                        return errorf(-EINVAL, err, errlen, "backing %s: empty file and no [tier] size", path);
                if ((uint64_t)st.st_size < size && ftruncate(t->fd, (off_t)size) < 0)
                        return errorf(negative_errno(), err, errlen, "backing %s: cannot size it: %m", path);
        } else
                return errorf(-EINVAL, err, errlen, "backing %s: not a regular file or block device", path);
        t->nblocks = size / TIER_BLOCK;
        snprintf(t->describe, sizeof(t->describe), "%s %s (%" PRIu64 " MiB%s)", S_ISBLK(st.st_mode) ? "device" : "file",
                 path, size >> 20, t->direct ? ", O_DIRECT" : "");
        return 0;
}

/*
 * Faults read on connections of their own while the writer writes on
 * another. The NBD protocol promises what one connection sees of another's
 * writes only to a server that advertises NBD_FLAG_CAN_MULTI_CONN, and
 * then only once a FLUSH (of any connection) has been answered: so an
 * export without the flag is refused, and every batch is flushed before
 * its pages name it (when the server takes FLUSH at all; one that does not
 * has no cache to flush). On a connection made again, the export must
 * still be what it was.
 */
static int connect_nbd(Tier *t, NbdConn **ret, int timeout_ms, char *err, size_t errlen) {
        pthread_mutex_lock(&ring_lock); /* its ring: see ring_lock */
        int r = nbd_connect(&t->nbd, timeout_ms, ret, err, errlen);
        pthread_mutex_unlock(&ring_lock);
        if (r < 0)
                return r;
        if (nbd_read_only(*ret))
                r = errorf(-EROFS, err, errlen, "the export is read-only");
        else if (!nbd_multi_conn(*ret))
                r = errorf(-EPROTONOSUPPORT, err, errlen,
                         "the export does not promise that its connections see each other's writes "
                         "(NBD_FLAG_CAN_MULTI_CONN): the daemon reads and writes on several");
        else if (t->nblocks && nbd_size(*ret) < t->nblocks * TIER_BLOCK)
                r = errorf(-EINVAL, err, errlen, "the export shrank to %" PRIu64 " bytes", nbd_size(*ret));
        if (r < 0)
                *ret = conn_close(*ret);
        return r;
}

static int open_nbd(Tier *t, char *err, size_t errlen) {
        char why[256] = "";
        int r = nbd_parse(t->conf.backing, &t->nbd, why, sizeof(why));

        if (r < 0)
                return errorf(r, err, errlen, "backing %s: %s", t->conf.backing, why);
        r = connect_nbd(t, &t->wconn, (int)t->conf.timeout_ms, why, sizeof(why));
        if (r < 0 && t->conf.size && (r == -ECONNREFUSED || r == -ETIMEDOUT || r == -ECONNRESET ||
                                      r == -EHOSTUNREACH || r == -ENETUNREACH || r == -ENOENT || r == -EAGAIN)) {
                /* a restart must not wait for the server: clients coming
                 * back with pages on the tier are adopted now, and served
                 * once it answers (their faults wait until then) */
                log_warn("second tier: %s cannot be reached (%s): starting without it, connecting every second",
                         t->conf.backing, why);
                t->nblocks = t->conf.size / TIER_BLOCK;
                t->nbd_flush = true;
                snprintf(t->describe, sizeof(t->describe), "nbd %s (%" PRIu64 " MiB)", t->conf.backing,
                         t->conf.size >> 20);
                return 0;
        }
        if (r < 0)
                return errorf(r, err, errlen, "backing %s: %s%s", t->conf.backing, why,
                            t->conf.size ? "" : " (with [tier] size set, the daemon would start without it)");
        uint64_t size = nbd_size(t->wconn);
        if (t->conf.size && t->conf.size > size)
                return errorf(-EINVAL, err, errlen, "backing %s: size %" PRIu64 " is larger than the export (%" PRIu64 ")",
                            t->conf.backing, t->conf.size, size);
        size = t->conf.size ? t->conf.size : size;
        t->nblocks = size / TIER_BLOCK;
        t->nbd_flush = nbd_can_flush(t->wconn);
        snprintf(t->describe, sizeof(t->describe), "nbd %s (%" PRIu64 " MiB%s)", t->conf.backing, size >> 20,
                 t->nbd_flush ? "" : ", no flush");
        return 0;
}

static void *writer_main(void *arg);

int tier_open(Manager *m, const TierConf *conf, Tier **ret, char *err, size_t errlen) {
        Tier *t = calloc(1, sizeof(*t));
        int r;

        if (!t)
                return errorf(-ENOMEM, err, errlen, "out of memory");
        t->m = m;
        t->conf = *conf;
        if (!t->conf.timeout_ms)
                t->conf.timeout_ms = TIER_DEFAULT_TIMEOUT_MS;
        t->fd = -1;
        pthread_mutex_init(&t->lock, NULL);
        pthread_cond_init(&t->cond, NULL);
        t->kind = strncmp(conf->backing, "nbd://", 6) == 0 || strncmp(conf->backing, "nbd+unix://", 11) == 0
                          ? BACKING_NBD
                          : BACKING_FILE;
        r = t->kind == BACKING_NBD ? open_nbd(t, err, errlen) : open_file(t, err, errlen);
        if (r < 0)
                goto fail;
        if (t->nblocks < 2 + EXTENT_BLOCKS) {
                r = errorf(-EINVAL, err, errlen, "backing %s: too small (at least %u KiB)", conf->backing,
                         (2 + EXTENT_BLOCKS) * TIER_BLOCK / 1024);
                goto fail;
        }
        if (t->nblocks > UINT32_MAX) {
                t->nblocks = UINT32_MAX; /* 16 TiB: the rest is not used */
                log_warn("second tier: only the first 16 TiB of %s are used", conf->backing);
        }
        t->refs = calloc(t->nblocks, sizeof(*t->refs));
        if (posix_memalign((void **)&t->wmem, TIER_BLOCK, NEXT * TIER_EXTENT + TIER_BLOCK) != 0)
                t->wmem = NULL;
        if (!t->refs || !t->wmem) {
                r = errorf(-ENOMEM, err, errlen, "out of memory for the free-space map of %" PRIu64 " blocks",
                         t->nblocks);
                goto fail;
        }
        for (unsigned i = 0; i < NEXT; i++)
                t->ext[i].buf = t->wmem + (size_t)i * TIER_EXTENT;
        /* the writer's ring: a file's writes (the NBD connection has its own) */
        r = ring_init(&t->ring, 2 * NEXT + 4, t->kind == BACKING_FILE ? t->wmem : NULL, NEXT * TIER_EXTENT + TIER_BLOCK);
        if (r < 0) {
                r = errorf(r, err, errlen, "io_uring: %s", strerror(-r));
                goto fail;
        }
        if (t->kind == BACKING_FILE && !t->ring.fixed)
                log_warn("second tier: io_uring buffers not registered: plain writes");
        t->tokens_ns = now_ns();
        t->backoff_ms = BACKOFF_MIN_MS;
        if (t->kind == BACKING_FILE || t->wconn) {
                r = tier_ready(t);
                if (r < 0) {
                        r = errorf(r, err, errlen, "backing %s: cannot read or write its header: %s", conf->backing,
                                 strerror(-r));
                        goto fail;
                }
        } else
                set_state(t, TIER_DISCONNECTED);
        r = -pthread_create(&t->thread, NULL, writer_main, t);
        if (r < 0) {
                r = errorf(r, err, errlen, "cannot start the writer: %s", strerror(-r));
                goto fail;
        }
        t->started = true;
        *ret = t;
        return 0;
fail:
        tier_free(t);
        return r;
}

static void job_free(Job *j) {
        if (!j)
                return;
        for (size_t i = 0; i < j->n; i++)
                mmclient_unref(j->mms[i]);
        free(j->mms);
        free(j);
}

void tier_stop(Tier *t) {
        if (t->started) {
                pthread_mutex_lock(&t->lock);
                atomic_store_explicit(&t->stop, true, memory_order_relaxed);
                pthread_cond_signal(&t->cond);
                pthread_mutex_unlock(&t->lock);
                pthread_join(t->thread, NULL);
                t->started = false;
        }
        job_free(t->job);
        t->job = NULL;
}

Tier *tier_free(Tier *t) {
        if (!t)
                return NULL;
        tier_stop(t);
        ring_exit(&t->ring);
        conn_close(t->wconn);
        safe_close(t->fd);
        free(t->refs);
        free(t->wmem);
        pthread_mutex_destroy(&t->lock);
        pthread_cond_destroy(&t->cond);
        free(t);
        return NULL;
}

const char *tier_describe(const Tier *t) {
        return t->describe;
}

void tier_get_stats(Tier *t, TierStats *s) {
        *s = (TierStats){
                .capacity = (t->nblocks - 1) * TIER_BLOCK,
                .used_blocks = atomic_load_explicit(&t->st.used_blocks, memory_order_relaxed),
                .pages = atomic_load_explicit(&t->st.pages, memory_order_relaxed),
                .bytes = atomic_load_explicit(&t->st.bytes, memory_order_relaxed),
                .written = atomic_load_explicit(&t->st.written, memory_order_relaxed),
                .writes = atomic_load_explicit(&t->st.writes, memory_order_relaxed),
                .written_pages = atomic_load_explicit(&t->st.written_pages, memory_order_relaxed),
                .reads = atomic_load_explicit(&t->st.reads, memory_order_relaxed),
                .read_bytes = atomic_load_explicit(&t->st.read_bytes, memory_order_relaxed),
                .prefetched = atomic_load_explicit(&t->st.prefetched, memory_order_relaxed),
                .read_errors = atomic_load_explicit(&t->st.read_errors, memory_order_relaxed),
                .write_errors = atomic_load_explicit(&t->st.write_errors, memory_order_relaxed),
                .corrupt = atomic_load_explicit(&t->st.corrupt, memory_order_relaxed),
                .full_events = atomic_load_explicit(&t->st.full_events, memory_order_relaxed),
                .reconnects = atomic_load_explicit(&t->st.reconnects, memory_order_relaxed),
                .state = atomic_load_explicit(&t->st.state, memory_order_relaxed),
        };
}

/* ---- references (the free-space map) ---- */

int tier_stub_check(const Tier *t, const TierStub *s) {
        if (s->magic != TIER_STUB_MAGIC || s->len == 0 || s->len > ZSWAP_PAGE_SIZE || s->off < TIER_BLOCK ||
            s->off > t->nblocks * TIER_BLOCK || t->nblocks * TIER_BLOCK - s->off < s->len)
                return -EBADMSG;
        return 0;
}

static void block_range(const TierStub *s, uint64_t *b0, uint64_t *b1) {
        *b0 = s->off / TIER_BLOCK;
        *b1 = (s->off + s->len - 1) / TIER_BLOCK;
}

static void ref_block(Tier *t, uint64_t b) {
        if (atomic_fetch_add_explicit(&t->refs[b], 1, memory_order_relaxed) == 0)
                stat_add(&t->st.used_blocks, 1);
}

static void unref_block(Tier *t, uint64_t b) {
        /* release: the block's reuse by the writer (acquire load of 0)
         * comes after every read of it by whoever held it */
        uint16_t old = atomic_fetch_sub_explicit(&t->refs[b], 1, memory_order_release);
        if (old == 0) {
                /* a reference given back twice: never let the count wrap
                 * (the block would look used forever, or worse, free
                 * under a live object) */
                atomic_fetch_add_explicit(&t->refs[b], 1, memory_order_relaxed);
                log_error("second tier: block %" PRIu64 " released once too often", b);
                return;
        }
        if (old == 1)
                atomic_fetch_sub_explicit(&t->st.used_blocks, 1, memory_order_relaxed);
}

void tier_put(Tier *t, const TierStub *s) {
        uint64_t b0, b1;

        if (tier_stub_check(t, s) < 0)
                return;
        block_range(s, &b0, &b1);
        for (uint64_t b = b0; b <= b1; b++)
                unref_block(t, b);
        atomic_fetch_sub_explicit(&t->st.pages, 1, memory_order_relaxed);
        atomic_fetch_sub_explicit(&t->st.bytes, s->len, memory_order_relaxed);
}

bool tier_get(Tier *t, const TierStub *s) {
        uint64_t b0, b1;

        if (tier_stub_check(t, s) < 0)
                return false;
        block_range(s, &b0, &b1);
        for (uint64_t b = b0; b <= b1; b++) {
                uint16_t v = atomic_load_explicit(&t->refs[b], memory_order_relaxed);
                do {
                        if (v >= REF_MAX) {
                                while (b-- > b0)
                                        unref_block(t, b);
                                return false;
                        }
                } while (!atomic_compare_exchange_weak_explicit(&t->refs[b], &v, v + 1, memory_order_relaxed,
                                                                memory_order_relaxed));
                if (v == 0)
                        stat_add(&t->st.used_blocks, 1);
        }
        stat_add(&t->st.pages, 1);
        stat_add(&t->st.bytes, s->len);
        return true;
}

/* ---- reading (fault threads) ---- */

static int reader_conn(TierReader *r);

int tier_reader_new(Tier *t, TierReader **ret) {
        TierReader *r = calloc(1, sizeof(*r));
        int e;

        if (!r)
                return -ENOMEM;
        r->t = t;
        if (posix_memalign((void **)&r->buf, TIER_BLOCK, READ_BUF) != 0) {
                free(r);
                return -ENOMEM;
        }
        if (t->kind == BACKING_FILE) {
                e = ring_init(&r->ring, 4, r->buf, READ_BUF);
                if (e < 0) {
                        free(r->buf);
                        free(r);
                        return e;
                }
        } else
                (void)reader_conn(r); /* now rather than on the first fault; else then */
        *ret = r;
        return 0;
}

TierReader *tier_reader_free(TierReader *r) {
        if (!r)
                return NULL;
        ring_exit(&r->ring);
        conn_close(r->conn);
        free(r->buf);
        free(r);
        return NULL;
}

/* The reader's NBD connection, made again at most every RECONNECT_MS: a
 * fault thread serves every client on its CPU and may not sit in connect()
 * for each fault while the server is down. */
static int reader_conn(TierReader *r) {
        Tier *t = r->t;
        char why[256];

        if (r->conn && !nbd_dead(r->conn))
                return 0;
        r->conn = conn_close(r->conn);
        uint64_t now = now_ns();
        if (now < r->next_connect_ns)
                return -ENOTCONN;
        int e = connect_nbd(t, &r->conn, (int)MIN(t->conf.timeout_ms, 1000u), why, sizeof(why));
        if (e < 0) {
                r->next_connect_ns = now + RECONNECT_MS * 1000000ull;
                return e;
        }
        stat_add(&t->st.reconnects, 1);
        return 0;
}

static int reader_io(TierReader *r, uint64_t off, uint32_t len) {
        Tier *t = r->t;
        int inj = INJECT(INJ_TIER_READ);

        if (inj)
                return -inj;
        if (t->kind == BACKING_NBD) {
                int e = reader_conn(r);
                return e < 0 ? e : nbd_pread(r->conn, r->buf, len, off);
        }
        /* a device that hangs must not hold the fault thread (and every
         * client on its CPU) for ever: the read is linked to a timeout,
         * and a read that times out is an error like any other */
        struct __kernel_timespec ts = { .tv_sec = t->conf.timeout_ms / 1000,
                                        .tv_nsec = (long long)(t->conf.timeout_ms % 1000) * 1000000 };
        struct io_uring_sqe *sqe = ring_sqe(&r->ring, 0), *tsqe;
        int res[2];
        if (!r->ring.ok || !sqe)
                return -EIO;
        ring_prep_rw(&r->ring, sqe, t->fd, false, r->buf, len, off);
        sqe->flags |= IOSQE_IO_LINK;
        tsqe = ring_sqe(&r->ring, 1);
        io_uring_prep_link_timeout(tsqe, &ts, 0);
        int e = ring_run(&r->ring, 2, res, t->conf.read_spin_us * 1000ull);
        if (e < 0)
                return e;
        e = res[0] == -ECANCELED ? -ETIMEDOUT : res[0];
        if (e > 0)
                VALGRIND_MAKE_MEM_DEFINED(r->buf, (size_t)e);
        if (e >= 0 && (uint32_t)e != len)
                return -EIO;
        return e < 0 ? e : 0;
}

void tier_note_prefetch(Tier *t, unsigned n) {
        if (t && n)
                stat_add(&t->st.prefetched, n);
}

const uint8_t *tier_window_object(TierReader *r, const TierStub *s) {
        if (tier_stub_check(r->t, s) < 0 || s->off < r->win_off || s->off + s->len > r->win_off + r->win_len)
                return NULL;
        const uint8_t *obj = r->buf + (s->off - r->win_off);
        return obj_crc(r->t, s->off, obj, s->len) == s->crc ? obj : NULL;
}

int tier_read(TierReader *r, const TierStub *s, const uint8_t **obj) {
        Tier *t = r->t;
        uint64_t end = t->nblocks * TIER_BLOCK;
        int e = -EBADMSG;

        if (tier_stub_check(t, s) < 0)
                return -EBADMSG;
        if (!atomic_load_explicit(&t->ready, memory_order_acquire))
                return -ENOTCONN; /* the server has not answered since the start: wait */
        if (r->fail_until_ns && now_ns() < r->fail_until_ns)
                return r->fail_err;
        r->fail_until_ns = 0;
        /* the aligned window around the object, and all of the object */
        uint64_t start = s->off & ~(uint64_t)(TIER_WINDOW - 1);
        uint64_t stop = MIN(MAX(start + TIER_WINDOW, ALIGN_TO(s->off + s->len, (uint64_t)TIER_BLOCK)), end);
        start = MAX(start, (uint64_t)TIER_BLOCK);
        for (int attempt = 0; attempt < 2; attempt++) {
                r->win_len = 0;
                e = reader_io(r, start, (uint32_t)(stop - start));
                stat_add(&t->st.reads, 1);
                if (e < 0) {
                        stat_add(&t->st.read_errors, 1);
                        r->fail_err = e;
                        r->fail_until_ns = now_ns() + 10000000ull;
                        return e;
                }
                stat_add(&t->st.read_bytes, stop - start);
                r->win_off = start;
                r->win_len = (uint32_t)(stop - start);
                *obj = tier_window_object(r, s);
                if (*obj)
                        return 0;
                /* read again: a torn read of a flaky device is not yet a
                 * corrupt page */
        }
        r->win_len = 0;
        stat_add(&t->st.corrupt, 1);
        return -EBADMSG;
}

/* ---- writing (the writer thread) ---- */

void tier_tick(Tier *t, MMClient *mms) {
        uint64_t bound = atomic_load_explicit(&t->m->pool_bound, memory_order_relaxed);
        uint64_t resume = atomic_load_explicit(&t->m->pool_resume, memory_order_relaxed);
        PoolStats ps;

        if (bound == 0)
                return;
        pool_shared_stats(t->m->pools, &ps);
        /* start under the mark where eviction resumes, so that eviction
         * never has to stop; write down to 90 % of it */
        uint64_t lo = resume - resume / 10;
        uint64_t start = resume - resume / 20;
        if (ps.pool_bytes < start)
                return;
        pthread_mutex_lock(&t->lock);
        bool idle = !t->busy && !t->job;
        pthread_mutex_unlock(&t->lock);
        if (!idle)
                return;
        Job *j = calloc(1, sizeof(*j));
        size_t n = 0;
        for (MMClient *mm = mms; mm; mm = mm->next)
                n++;
        if (!j || !(j->mms = calloc(n ? n : 1, sizeof(*j->mms)))) {
                free(j);
                return;
        }
        for (MMClient *mm = mms; mm; mm = mm->next)
                if (mm->pool && atomic_load_explicit(&mm->st.stored_pages, memory_order_relaxed) &&
                    !atomic_load_explicit(&mm->dead, memory_order_relaxed))
                        j->mms[j->n++] = mmclient_ref(mm);
        /* object bytes: the pool's own bytes come down as its chunks empty */
        j->want = ps.pool_bytes - lo;
        pthread_mutex_lock(&t->lock);
        t->job = j;
        pthread_cond_signal(&t->cond);
        pthread_mutex_unlock(&t->lock);
}

/* A run of up to EXTENT_BLOCKS free blocks, next fit from the cursor,
 * reserved (each block one reference, the extent's own). A short run is
 * taken where it comes first: allocation costs the distance to a hole.
 * false: no free block at all. */
static bool extent_alloc(Tier *t, Extent *x) {
        uint64_t n = t->nblocks, lowest = 1, now = now_ns();

        if (t->grace_until_ns && now >= t->grace_until_ns) {
                t->grace_until_ns = 0;
                log_info("second tier: grace over, the free blocks of the earlier daemon are reused");
        }
        if (t->grace_until_ns)
                lowest = t->old_hwm;
        if (now < t->full_until_ns || lowest >= n)
                return false;
        uint64_t span = n - lowest;
        uint64_t first = t->cursor >= lowest && t->cursor < n ? t->cursor - lowest : 0;
        for (uint64_t i = 0; i < span; i++) {
                uint64_t b = lowest + (first + i) % span;
                /* acquire: pairs with unref_block()'s release */
                if (atomic_load_explicit(&t->refs[b], memory_order_acquire) != 0)
                        continue;
                uint64_t e = b;
                while (e < n && e - b < EXTENT_BLOCKS && atomic_load_explicit(&t->refs[e], memory_order_acquire) == 0)
                        e++;
                x->block = b;
                x->nblocks = (unsigned)(e - b);
                x->fill = 0;
                x->nobjs = 0;
                for (uint64_t k = b; k < e; k++)
                        ref_block(t, k);
                t->cursor = e;
                return true;
        }
        /* a whole scan found nothing: look again in a second, not on
         * every tick */
        t->full_until_ns = now + 1000000000ull;
        return false;
}

static void extent_unreserve(Tier *t, Extent *x) {
        for (unsigned i = 0; i < x->nblocks; i++)
                unref_block(t, x->block + i);
        x->nblocks = 0;
}

static void obj_unref(Tier *t, const WbObj *o) {
        TierStub s = { .off = o->off, .len = (uint16_t)o->len, .magic = TIER_STUB_MAGIC };
        uint64_t b0, b1;
        block_range(&s, &b0, &b1);
        for (uint64_t b = b0; b <= b1; b++)
                unref_block(t, b);
}

/* Write failed (or the pass gave up): every entry goes back as it was. */
static void extent_abandon(Tier *t, Extent *x) {
        for (unsigned i = 0; i < x->nobjs; i++) {
                WbObj *o = &x->objs[i];
                _Atomic uint64_t *e = pindex_entry(o->mm->index, o->addr, false);
                uint64_t v = o->v;
                if (e)
                        atomic_compare_exchange_strong_explicit(e, &v, v & ~PE_WB, memory_order_relaxed,
                                                                memory_order_relaxed);
                obj_unref(t, o);
        }
        x->nobjs = 0;
        extent_unreserve(t, x);
}

/* Written: each entry still as the pass left it takes its stub. */
static void extent_publish(Tier *t, Extent *x) {
        for (unsigned i = 0; i < x->nobjs; i++) {
                WbObj *o = &x->objs[i];
                MMClient *mm = o->mm;
                _Atomic uint64_t *e = pindex_entry(mm->index, o->addr, false);
                PoolHandle h;
                uint64_t v = o->v;

                if (!e || atomic_load_explicit(e, memory_order_relaxed) != v || pool_alloc_over(mm->pool, sizeof(TierStub), &h) < 0) {
                        /* taken meanwhile (or no room for a stub): it stays
                         * what it is; only our reference goes */
                        if (e)
                                atomic_compare_exchange_strong_explicit(e, &v, v & ~PE_WB, memory_order_relaxed,
                                                                        memory_order_relaxed);
                        obj_unref(t, o);
                        continue;
                }
                TierStub *s = pool_map(mm->pool, h);
                *s = (TierStub){ .off = o->off, .crc = o->crc, .len = (uint16_t)o->len, .magic = TIER_STUB_MAGIC };
                uint64_t nv = pe_make_stored(h, sizeof(TierStub)) | PE_TIER;
                /* release: the stub's bytes before the entry naming it */
                if (!atomic_compare_exchange_strong_explicit(e, &v, nv, memory_order_release, memory_order_relaxed)) {
                        pool_release(mm->pool, h);
                        obj_unref(t, o);
                        continue;
                }
                /* the object in RAM is ours now: nobody else can reach it */
                pool_release(mm->pool, pe_handle(o->v));
                atomic_fetch_sub_explicit(&mm->st.compressed_bytes, pe_clen(o->v) - sizeof(TierStub),
                                          memory_order_relaxed);
                stat_add(&t->st.pages, 1);
                stat_add(&t->st.bytes, o->len);
                stat_add(&t->st.written_pages, 1);
        }
        x->nobjs = 0;
        extent_unreserve(t, x);
}

static void backoff(Tier *t, int err, const char *what) {
        stat_add(&t->st.write_errors, 1);
        log_error("second tier: %s failed: %s; writeback stops for %" PRIu64 " ms, the pages stay in RAM", what,
                  strerror(-err), t->backoff_ms);
        t->backoff_until_ns = now_ns() + t->backoff_ms * 1000000;
        t->backoff_ms = MIN(t->backoff_ms * 2, (uint64_t)BACKOFF_MAX_MS);
        set_state(t, t->kind == BACKING_NBD && (!t->wconn || nbd_dead(t->wconn)) ? TIER_DISCONNECTED : TIER_ERROR);
}

/* Write the batch's extents (and the header first if they go past its
 * high-water mark), then publish or abandon them. 0 or -errno. */
static int batch_flush(Tier *t) {
        Extent *xs[NEXT];
        unsigned n = 0;
        int r = 0;

        /* an extent that took nothing (a short run too small for the
         * object at hand) is only given back */
        for (unsigned i = 0; i < t->next_ext; i++) {
                if (t->ext[i].fill == 0)
                        extent_unreserve(t, &t->ext[i]);
                else
                        xs[n++] = &t->ext[i];
        }
        t->next_ext = 0;
        if (n == 0)
                return 0;
        uint64_t top = 0;
        for (unsigned i = 0; i < n; i++)
                top = MAX(top, xs[i]->block + xs[i]->nblocks);
        if (top > t->hwm) {
                uint64_t old = t->hwm;
                t->hwm = MIN(t->nblocks, top + MAX(t->nblocks / 64, (uint64_t)256));
                r = header_write(t);
                if (r < 0)
                        t->hwm = old;
        }
        if (r == 0)
                r = -INJECT(INJ_TIER_WRITE);
        if (r == 0 && t->kind == BACKING_NBD) {
                NbdWrite w[NEXT];
                for (unsigned i = 0; i < n; i++)
                        w[i] = (NbdWrite){ xs[i]->buf, ALIGN_TO(xs[i]->fill, TIER_BLOCK), xs[i]->block * TIER_BLOCK };
                r = t->wconn ? nbd_pwrite_batch(t->wconn, w, n) : -ENOTCONN;
                if (r == 0 && t->nbd_flush)
                        r = nbd_flush(t->wconn);
        } else if (r == 0) {
                int res[NEXT];
                for (unsigned i = 0; i < n; i++)
                        ring_prep_rw(&t->ring, ring_sqe(&t->ring, i), t->fd, true, xs[i]->buf,
                                     ALIGN_TO(xs[i]->fill, TIER_BLOCK), xs[i]->block * TIER_BLOCK);
                r = ring_run(&t->ring, n, res, 0);
                for (unsigned i = 0; i < n && r == 0; i++)
                        if (res[i] < 0)
                                r = res[i];
                        else if ((uint32_t)res[i] != ALIGN_TO(xs[i]->fill, TIER_BLOCK))
                                r = -ENOSPC; /* a short write: the file system is full */
        }
        if (r < 0) {
                for (unsigned i = 0; i < n; i++)
                        extent_abandon(t, xs[i]);
                backoff(t, r, "a write");
                return r;
        }
        for (unsigned i = 0; i < n; i++) {
                stat_add(&t->st.written, ALIGN_TO(xs[i]->fill, TIER_BLOCK));
                stat_add(&t->st.writes, 1);
                extent_publish(t, xs[i]);
        }
        t->backoff_ms = BACKOFF_MIN_MS;
        return 0;
}

/* Wait until the rate allows len more bytes. false: stop. */
static bool rate_wait(Tier *t, uint64_t len) {
        if (!t->conf.rate)
                return true;
        for (;;) {
                uint64_t now = now_ns();
                t->tokens = MIN(t->tokens + (double)(now - t->tokens_ns) * 1e-9 * (double)t->conf.rate,
                                (double)t->conf.rate);
                t->tokens_ns = now;
                if (t->tokens >= (double)len) {
                        t->tokens -= (double)len;
                        return true;
                }
                if (atomic_load_explicit(&t->stop, memory_order_relaxed))
                        return false;
                uint64_t wait_ns = (uint64_t)(((double)len - t->tokens) / (double)t->conf.rate * 1e9);
                struct timespec ts = { (time_t)(wait_ns / 1000000000), (long)(wait_ns % 1000000000) };
                if (ts.tv_sec > 0)
                        ts = (struct timespec){ 0, 100000000 };
                nanosleep(&ts, NULL);
        }
}

typedef struct Pass {
        Tier *t;
        MMClient *mm;
        uint32_t now;
        uint32_t cutoff;    /* take stamps at or under this bucket */
        uint64_t hist[HIST];
        uint64_t want, taken;
        bool stop;          /* no room, an error, or done */
} Pass;

static unsigned bucket(const Pass *p, uint32_t stamp) {
        return (unsigned)((uint64_t)stamp * HIST / ((uint64_t)p->now + 1));
}

/* An object worth a stub: one of 32 bytes or less would save nothing. */
static bool takeable(uint64_t v) {
        return pe_state(v) == PE_STORED && !(v & (PE_TIER | PE_WB)) && pe_clen(v) > 2 * sizeof(TierStub);
}

static uint32_t stamp_of(MMClient *mm, uint64_t addr) {
        PageMeta *meta = pindex_meta(mm->index, addr, false);
        return meta ? atomic_load_explicit(&meta->stamp[pmeta_idx(addr)], memory_order_relaxed) : 0;
}

static int hist_cb(void *ud, uint64_t addr, _Atomic uint64_t *e) {
        Pass *p = ud;
        uint64_t v = atomic_load_explicit(e, memory_order_relaxed);

        if (takeable(v))
                p->hist[MIN(bucket(p, stamp_of(p->mm, addr)), HIST - 1)] += pe_clen(v);
        return 0;
}

/* Pack one more object into the current extent (a new one if it is full). */
static int take_cb(void *ud, uint64_t addr, _Atomic uint64_t *e) {
        Pass *p = ud;
        Tier *t = p->t;
        MMClient *mm = p->mm;
        uint64_t v = atomic_load_explicit(e, memory_order_acquire);

        if (p->taken >= p->want || atomic_load_explicit(&t->stop, memory_order_relaxed) ||
            atomic_load_explicit(&mm->dead, memory_order_relaxed))
                return 1;
        if (!takeable(v) || MIN(bucket(p, stamp_of(mm, addr)), HIST - 1) > p->cutoff)
                return 0;
        uint32_t len = pe_clen(v);
        Extent *x = t->next_ext ? &t->ext[t->next_ext - 1] : NULL;
        if (!x || x->nobjs == EXTENT_OBJS || x->fill + len > x->nblocks * TIER_BLOCK) {
                if (t->next_ext == NEXT) {
                        if (batch_flush(t) < 0)
                                return p->stop = true, 1;
                }
                x = &t->ext[t->next_ext];
                if (!extent_alloc(t, x)) {
                        if (!t->full_logged)
                                log_warn("second tier: %s is full: writeback stops, the pages stay in RAM",
                                         t->describe);
                        t->full_logged = true;
                        stat_add(&t->st.full_events, 1);
                        set_state(t, TIER_FULL);
                        return p->stop = true, 1;
                }
                t->full_logged = false;
                t->next_ext++;
                if (!rate_wait(t, TIER_EXTENT))
                        return p->stop = true, 1;
                if (len > x->nblocks * TIER_BLOCK)
                        return 0; /* a short run that cannot take it: the next object may fit */
        }
        /* mark it: a fault takes it all the same, and only this pass ever
         * sets the mark, so an entry that still has it at the end is the
         * page we copied (no ABA) */
        uint64_t wb = v | PE_WB;
        if (!atomic_compare_exchange_strong_explicit(e, &v, wb, memory_order_acquire, memory_order_relaxed))
                return 0;
        const void *src = pool_map(mm->pool, pe_handle(v));
        uint64_t off = x->block * TIER_BLOCK + x->fill;
        memcpy(x->buf + x->fill, src, len);
        /* the copy may race with a fault that took the page and a worker
         * that reused its slot: the entry is then no longer wb, and the
         * publication fails; the CRC is of what was copied */
        x->objs[x->nobjs++] = (WbObj){ .mm = mm, .addr = addr, .v = wb, .off = off, .len = len,
                                        .crc = obj_crc(t, off, x->buf + x->fill, len) };
        TierStub s = { .off = off, .len = (uint16_t)len, .magic = TIER_STUB_MAGIC };
        uint64_t b0, b1;
        block_range(&s, &b0, &b1);
        for (uint64_t b = b0; b <= b1; b++)
                ref_block(t, b);
        x->fill += len;
        p->taken += len;
        return 0;
}

/* The writer's NBD connection, made again at most every RECONNECT_MS; the
 * header read once it first answers. true: connected and ready. */
static bool writer_connected(Tier *t) {
        char why[256];
        uint64_t now = now_ns();

        if (t->kind == BACKING_FILE || (t->wconn && !nbd_dead(t->wconn)))
                return true;
        t->wconn = conn_close(t->wconn);
        if (now < t->next_reconnect_ns)
                return false;
        t->next_reconnect_ns = now + RECONNECT_MS * 1000000ull;
        if (connect_nbd(t, &t->wconn, (int)t->conf.timeout_ms, why, sizeof(why)) < 0) {
                if (!t->unreachable_logged)
                        log_warn("second tier: cannot reach %s: %s; writeback waits", t->conf.backing, why);
                t->unreachable_logged = true;
                set_state(t, TIER_DISCONNECTED);
                return false;
        }
        t->unreachable_logged = false;
        t->nbd_flush = nbd_can_flush(t->wconn);
        if (!atomic_load_explicit(&t->ready, memory_order_relaxed)) {
                int r = tier_ready(t);
                if (r < 0) {
                        log_error("second tier: %s: cannot read or write its header: %s", t->conf.backing, strerror(-r));
                        t->wconn = conn_close(t->wconn);
                        return false;
                }
                return true;
        }
        stat_add(&t->st.reconnects, 1);
        log_info("second tier: connected to %s again", t->conf.backing);
        set_state(t, t->grace_until_ns ? TIER_GRACE : TIER_IDLE);
        return true;
}

static void run_job(Tier *t, Job *j) {
        Pass *p = calloc(1, sizeof(*p));
        uint64_t now = now_ns();

        if (!p)
                return;
        if (now < t->backoff_until_ns || now < t->full_until_ns || now < t->idle_until_ns)
                goto out;
        if (!writer_connected(t))
                goto out;
        p->t = t;
        p->now = reclaim_stamp();
        p->want = j->want;
        set_state(t, TIER_WRITING);
        for (size_t i = 0; i < j->n; i++) {
                p->mm = j->mms[i];
                pindex_walk(p->mm->index, 0, PINDEX_MAX_ADDR, hist_cb, p);
        }
        uint64_t sum = 0;
        p->cutoff = HIST - 1;
        for (unsigned b = 0; b < HIST; b++) {
                sum += p->hist[b];
                if (sum >= p->want) {
                        p->cutoff = b;
                        break;
                }
        }
        for (size_t i = 0; i < j->n && !p->stop && p->taken < p->want; i++) {
                p->mm = j->mms[i];
                if (atomic_load_explicit(&p->mm->dead, memory_order_relaxed))
                        continue;
                pindex_walk(p->mm->index, 0, PINDEX_MAX_ADDR, take_cb, p);
        }
        if (t->next_ext)
                batch_flush(t);
        log_debug("second tier: pass over %zu clients: %" PRIu64 " bytes wanted, %" PRIu64 " taken (stamps under bucket %u of %u)",
                  j->n, p->want, p->taken, p->cutoff, HIST);
        /* the objects let go are deferred releases: make the pool's bytes
         * show them before the next tick measures it */
        for (size_t i = 0; i < j->n; i++)
                pool_reclaim(j->mms[i]->pool);
        if (p->taken == 0)
                t->idle_until_ns = now_ns() + 250000000ull; /* all that is old is out or marked */
        int s = atomic_load_explicit(&t->st.state, memory_order_relaxed);
        if (s == TIER_WRITING)
                set_state(t, t->grace_until_ns ? TIER_GRACE : TIER_IDLE);
out:
        free(p);
}

static void *writer_main(void *arg) {
        Tier *t = arg;

        pthread_setname_np(pthread_self(), "zswapd-tier");
        pthread_mutex_lock(&t->lock);
        while (!atomic_load_explicit(&t->stop, memory_order_relaxed)) {
                if (!t->job && !atomic_load_explicit(&t->ready, memory_order_relaxed)) {
                        /* started without its server: connect (and read the
                         * header, which faults wait for) without waiting for
                         * writeback to be wanted */
                        struct timespec ts;
                        clock_gettime(CLOCK_REALTIME, &ts);
                        ts.tv_sec += 1;
                        pthread_mutex_unlock(&t->lock);
                        writer_connected(t);
                        pthread_mutex_lock(&t->lock);
                        if (!t->job && !atomic_load_explicit(&t->ready, memory_order_relaxed) &&
                            !atomic_load_explicit(&t->stop, memory_order_relaxed))
                                pthread_cond_timedwait(&t->cond, &t->lock, &ts);
                        continue;
                }
                if (!t->job) {
                        pthread_cond_wait(&t->cond, &t->lock);
                        continue;
                }
                Job *j = t->job;
                t->busy = true;
                pthread_mutex_unlock(&t->lock);
                run_job(t, j);
                pthread_mutex_lock(&t->lock);
                t->job = NULL;
                t->busy = false;
                pthread_mutex_unlock(&t->lock);
                job_free(j); /* the last reference to a client may go here */
                pthread_mutex_lock(&t->lock);
        }
        pthread_mutex_unlock(&t->lock);
        return NULL;
}
