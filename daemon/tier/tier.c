/*
 * tier.c: the second tier (tier.h; docs/tier.md).
 *
 * Layout of the backing store: block 0 is the header (TierHeader), blocks
 * 1.. hold objects. The writer packs objects back to back into an extent
 * (a run of up to 16 free blocks), so an object may straddle two blocks;
 * each block's reference count says how many live objects touch it. The
 * count is the whole free-space map: 0 is free.
 *
 * Writing: the writer thread, in tier-writer.c.
 *
 * Reading: tier_read() on the fault thread's own reader. A file is read
 * with O_DIRECT into a registered buffer through the reader's ring; an NBD
 * export with the reader's own connection. Either way the fault waits for
 * its own read and nothing else.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <liburing.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sodium.h>
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
#include "nbd.h"
#include "tier.h"
#include "tier-internal.h"
#include "uring.h"
#include "util.h"

#define TIER_MAGIC "ZSWTIER1"
#define TIER_VERSION 2 /* 2: sealed records (tier-seal.c); a version-1 tier starts anew */
#define READ_BUF (TIER_WINDOW + 2 * TIER_BLOCK)
#define REF_MAX 65000             /* a block's count stops here (tier_get refuses) */

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

struct TierReader {
        Tier *t;
        uint8_t plain[ZSWAP_PAGE_SIZE]; /* the last object opened (tier_read) */
        Ring ring;           /* a file's: buf registered */
        uint8_t *buf;        /* READ_BUF, block aligned */
        uint64_t win_off;    /* what buf holds: [win_off, win_off + win_len) */
        uint32_t win_len;
        bool patient;        /* a pump's: the whole timeout for an NBD answer */
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

/* ---- making and unmaking rings ---- */

/* A connection's ring is made and unmade with it (uring.h): nothing here
 * holds a lock across a connect, a handshake or a disconnect. */
NbdConn *tier_conn_close(NbdConn *c) {
        return nbd_close(c);
}

/* ---- io_uring rounds ---- */

/*
 * A ring and the buffer registered with it. Every use is a round: the
 * caller prepares n operations tagged ring_tag(g, i), tier_ring_run()
 * submits them all and waits for every completion. A completion of an
 * earlier round (there should be none) is recognised by its tag and passed
 * over.
 * A round whose operations cannot all be submitted is reaped of those
 * that were, and the ring is made anew: an operation left in the queue
 * would otherwise go out later, into a buffer that has moved on.
 */
static int ring_init(Ring *g, unsigned entries, void *buf, size_t buflen) {
        int r = uring_init(entries, &g->ring, 0);
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
        if (g->ok)
                uring_exit(&g->ring);
        g->ok = false;
}

static uint64_t ring_tag(const Ring *g, unsigned i) {
        return (g->seq & 0xffffffffffffull) << 16 | i;
}

/* An SQE of this round, tagged i. NULL: the queue is full (never, as used). */
struct io_uring_sqe *tier_ring_sqe(Ring *g, unsigned i) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&g->ring);
        if (sqe)
                io_uring_sqe_set_data64(sqe, ring_tag(g, i));
        return sqe;
}

void tier_ring_prep_rw(Ring *g, struct io_uring_sqe *sqe, int fd, bool write, void *buf, uint32_t len, uint64_t off) {
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
int tier_ring_run(Ring *g, unsigned n, int *res, uint64_t spin_ns) {
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
        if (!(sqe = tier_ring_sqe(g, 0)))
                return -EBUSY;
        tier_ring_prep_rw(g, sqe, fd, write, buf, len, off);
        int r = tier_ring_run(g, 1, &res, 0);
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

int tier_header_write(Tier *t) {
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
        return tier_header_write(t);
}

/* The header read (or written): the tier's id, which every object's CRC
 * needs, is known from here on, and the readers may read (acquire of
 * `ready`). Writer thread, or tier_open() before it starts. */
int tier_ready(Tier *t) {
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

/*
 * The daemon opens its backing as root, and then writes into it. A path
 * someone else can influence must not make it write anywhere else: a
 * symlink planted at the path, a hard link to another file, a file another
 * user made there and can read. So:
 *  - the last component is opened with O_NOFOLLOW, and created only with
 *    O_EXCL (never into a file someone made there meanwhile); a symlink is
 *    followed only where only root could have made it (owned by root, in a
 *    directory only root may write);
 *  - a regular file must be the daemon's own (owner, one link, no group or
 *    other permission bits: it holds other users' memory);
 *  - whatever the path led to, file or device, is written only if its first
 *    block is a tier header or all zeros: never a file system, a swap area
 *    or a file with data, whatever a mistake or an attacker pointed at.
 */
static int open_backing(const char *path, int flags) {
        int fd = open(path, flags);
        if (fd >= 0 || errno != ENOENT)
                return fd;
        /* O_EXCL refuses any symlink: only where none is to be followed */
        return open(path, flags | O_CREAT | (flags & O_NOFOLLOW ? O_EXCL : 0), 0600);
}

/* A symlink only root could have planted: root's, in a directory of root's
 * that nobody else may write to. */
static bool symlink_trusted(const char *path) {
        struct stat link, dir;
        char parent[PATH_MAX];
        const char *slash = strrchr(path, '/');

        if (!slash)
                snprintf(parent, sizeof(parent), ".");
        else
                snprintf(parent, sizeof(parent), "%.*s", slash == path ? 1 : (int)(slash - path), path);
        return lstat(path, &link) == 0 && S_ISLNK(link.st_mode) && link.st_uid == 0 && stat(parent, &dir) == 0 &&
               dir.st_uid == 0 && !(dir.st_mode & (S_IWGRP | S_IWOTH));
}

static int backing_check(Tier *t, const struct stat *st, char *err, size_t errlen) {
        const char *path = t->conf.backing;

        if (!S_ISREG(st->st_mode) && !S_ISBLK(st->st_mode))
                return errorf(-EINVAL, err, errlen, "backing %s: not a regular file or block device", path);
        if (S_ISREG(st->st_mode) &&
            (st->st_uid != geteuid() || st->st_nlink != 1 || (st->st_mode & (S_IRWXG | S_IRWXO))))
                return errorf(-EPERM, err, errlen,
                              "backing %s: must be a file of the daemon's user (uid %u) with one link and no group "
                              "or other permissions (it has uid %u, %u links, mode %04o): it would hold other "
                              "users' memory",
                              path, (unsigned)geteuid(), (unsigned)st->st_uid, (unsigned)st->st_nlink,
                              (unsigned)(st->st_mode & 07777));
        if (S_ISREG(st->st_mode) && st->st_size == 0)
                return 0;
        uint8_t *b = aligned_alloc(TIER_BLOCK, TIER_BLOCK);
        if (!b)
                return errorf(-ENOMEM, err, errlen, "backing %s: %m", path);
        ssize_t n = pread(t->fd, b, TIER_BLOCK, 0);
        int r = n < 0 ? negative_errno() : 0;
        bool ours = n >= 8 && memcmp(b, TIER_MAGIC, 8) == 0;
        bool blank = n >= 0;
        for (ssize_t i = 0; blank && i < n; i++)
                blank = b[i] == 0;
        free(b);
        if (r < 0)
                return errorf(r, err, errlen, "backing %s: cannot read its first block: %m", path);
        if (!ours && !blank)
                return errorf(-EEXIST, err, errlen,
                              "backing %s: holds data that is not a zswapd tier (its first block is neither a tier "
                              "header nor zeros): refusing to overwrite it; clear it (e.g. wipefs, or dd zeros over "
                              "its first 4 KiB) if it really is meant for the tier",
                              path);
        return 0;
}

static int open_file(Tier *t, char *err, size_t errlen) {
        const char *path = t->conf.backing;
        struct stat st;
        uint64_t size;
        int nofollow = symlink_trusted(path) ? 0 : O_NOFOLLOW;

        t->fd = open_backing(path, O_RDWR | O_CLOEXEC | O_DIRECT | nofollow);
        t->direct = t->fd >= 0;
        if (t->fd < 0 && errno == EINVAL) /* a file system without O_DIRECT (tmpfs) */
                t->fd = open_backing(path, O_RDWR | O_CLOEXEC | nofollow);
        if (t->fd < 0 && errno == ELOOP)
                return errorf(-ELOOP, err, errlen,
                              "backing %s: is a symlink that root did not make in a directory only root may write "
                              "to: refused (name the file itself)",
                              path);
        if (t->fd < 0)
                return errorf(negative_errno(), err, errlen, "backing %s: %m", path);
        if (!t->direct)
                log_warn("second tier: %s does not take O_DIRECT: its data passes through the page cache", path);
        if (fstat(t->fd, &st) < 0)
                return errorf(negative_errno(), err, errlen, "backing %s: %m", path);
        int r = backing_check(t, &st, err, errlen);
        if (r < 0)
                return r;
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
int tier_connect_nbd(Tier *t, NbdConn **ret, int timeout_ms, char *err, size_t errlen) {
        int r = nbd_connect(&t->nbd, timeout_ms, ret, err, errlen);
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
                *ret = tier_conn_close(*ret);
        return r;
}

/* The first connection to the NBD server, and the tier's size from it.
 * After the sandbox, as every later one: the server's bytes are parsed by
 * a daemon that holds no more than it needs. */
static int connect_nbd_first(Tier *t, char *err, size_t errlen) {
        char why[256] = "";
        int r = tier_connect_nbd(t, &t->wconn, (int)t->conf.timeout_ms, why, sizeof(why));
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


/* Once the size is known (nblocks): the free-space map and the writer's
 * buffers. */
static int tier_sized(Tier *t, char *err, size_t errlen) {
        if (t->nblocks < 2 + EXTENT_BLOCKS)
                return errorf(-EINVAL, err, errlen, "backing %s: too small (at least %u KiB)", t->conf.backing,
                              (2 + EXTENT_BLOCKS) * TIER_BLOCK / 1024);
        if (t->nblocks > UINT32_MAX) {
                t->nblocks = UINT32_MAX; /* 16 TiB: the rest is not used */
                log_warn("second tier: only the first 16 TiB of %s are used", t->conf.backing);
        }
        t->refs = calloc(t->nblocks, sizeof(*t->refs));
        if (posix_memalign((void **)&t->wmem, TIER_BLOCK, NEXT * TIER_EXTENT + TIER_BLOCK) != 0)
                t->wmem = NULL;
        if (!t->refs || !t->wmem)
                return errorf(-ENOMEM, err, errlen, "out of memory for the free-space map of %" PRIu64 " blocks",
                              t->nblocks);
        for (unsigned i = 0; i < NEXT; i++)
                t->ext[i].buf = t->wmem + (size_t)i * TIER_EXTENT;
        return 0;
}

int tier_open(const TierConf *conf, Tier **ret, char *err, size_t errlen) {
        Tier *t = calloc(1, sizeof(*t));
        int r;

        if (!t)
                return errorf(-ENOMEM, err, errlen, "out of memory");
        t->conf = *conf;
        if (!t->conf.timeout_ms)
                t->conf.timeout_ms = TIER_DEFAULT_TIMEOUT_MS;
        t->fd = -1;
        pthread_mutex_init(&t->lock, NULL);
        pthread_cond_init(&t->cond, NULL);
        r = tier_key_load(conf->key, t->key, err, errlen);
        if (r < 0)
                goto fail;
        t->kind = strncmp(conf->backing, "nbd://", 6) == 0 || strncmp(conf->backing, "nbd+unix://", 11) == 0
                          ? BACKING_NBD
                          : BACKING_FILE;
        if (t->kind == BACKING_NBD) {
                /* only the address now: the connection comes after the
                 * sandbox (tier_start()) */
                char why[256] = "";
                r = nbd_parse(t->conf.backing, &t->nbd, why, sizeof(why));
                if (r < 0)
                        r = errorf(r, err, errlen, "backing %s: %s", t->conf.backing, why);
        } else {
                r = open_file(t, err, errlen);
                r = r ?: tier_sized(t, err, errlen);
        }
        if (r < 0)
                goto fail;
        *ret = t;
        return 0;
fail:
        tier_free(t);
        return r;
}

int tier_start(Tier *t, char *err, size_t errlen) {
        int r;

        if (t->kind == BACKING_NBD && !t->refs) {
                r = connect_nbd_first(t, err, errlen);
                r = r ?: tier_sized(t, err, errlen);
                if (r < 0)
                        return r;
        }

        /* the writer's ring: a file's writes (the NBD connection has its
         * own). Made here, not in tier_open(): the header's I/O through
         * it may start an io_uring worker thread, which is a copy of the
         * thread that submits, privileges included */
        r = ring_init(&t->ring, 2 * NEXT + 4, t->kind == BACKING_FILE ? t->wmem : NULL, NEXT * TIER_EXTENT + TIER_BLOCK);
        if (r < 0)
                return errorf(r, err, errlen, "io_uring: %s", strerror(-r));
        if (t->kind == BACKING_FILE && !t->ring.fixed)
                log_warn("second tier: io_uring buffers not registered: plain writes");
        t->tokens_ns = now_ns();
        t->backoff_ms = BACKOFF_MIN_MS;
        if (t->kind == BACKING_FILE || t->wconn) {
                r = tier_ready(t);
                if (r < 0)
                        return errorf(r, err, errlen, "backing %s: cannot read or write its header: %s",
                                      t->conf.backing, strerror(-r));
        } else
                set_state(t, TIER_DISCONNECTED);
        return 0;
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
        tier_job_free(t->job);
        t->job = NULL;
}

Tier *tier_free(Tier *t) {
        if (!t)
                return NULL;
        tier_stop(t);
        ring_exit(&t->ring);
        tier_conn_close(t->wconn);
        safe_close(t->fd);
        free(t->refs);
        free(t->wmem);
        pthread_mutex_destroy(&t->lock);
        pthread_cond_destroy(&t->cond);
        sodium_memzero(t->key, sizeof(t->key));
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
            s->off > t->nblocks * TIER_BLOCK || t->nblocks * TIER_BLOCK - s->off < tier_rec_len(s))
                return -EBADMSG;
        return 0;
}

void tier_ref_block(Tier *t, uint64_t b) {
        if (atomic_fetch_add_explicit(&t->refs[b], 1, memory_order_relaxed) == 0)
                stat_add(&t->st.used_blocks, 1);
}

void tier_unref_block(Tier *t, uint64_t b) {
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
                tier_unref_block(t, b);
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
                                        tier_unref_block(t, b);
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

int tier_reader_new(Tier *t, bool patient, TierReader **ret) {
        TierReader *r = calloc(1, sizeof(*r));
        int e;

        if (!r)
                return -ENOMEM;
        r->t = t;
        r->patient = patient;
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
        }
        /* an NBD connection is made by the reader's own thread
         * (tier_reader_warm(), or the first read): the thread that makes
         * the reader (the manager, for a spare fault thread) must not
         * wait for a server that does not answer */
        *ret = r;
        return 0;
}

void tier_reader_warm(TierReader *r) {
        if (r->t->kind == BACKING_NBD)
                (void)reader_conn(r);
}

TierReader *tier_reader_free(TierReader *r) {
        if (!r)
                return NULL;
        ring_exit(&r->ring);
        tier_conn_close(r->conn);
        free(r->buf);
        free(r);
        return NULL;
}

/* The reader's NBD connection, made again at most every RECONNECT_MS. A
 * fault thread's reader waits at most 1 s for the server (the thread
 * serves every client); a pump's (tier-pump.h) holds nobody else up and
 * waits the tier's whole timeout, so a slow server is not taken for a
 * dead one. */
static int reader_conn(TierReader *r) {
        Tier *t = r->t;
        char why[256];

        if (r->conn && !nbd_dead(r->conn))
                return 0;
        r->conn = tier_conn_close(r->conn);
        uint64_t now = now_ns();
        if (now < r->next_connect_ns)
                return -ENOTCONN;
        int e = tier_connect_nbd(t, &r->conn, (int)(r->patient ? t->conf.timeout_ms : MIN(t->conf.timeout_ms, 1000u)),
                                 why, sizeof(why));
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
        struct io_uring_sqe *sqe = tier_ring_sqe(&r->ring, 0), *tsqe;
        int res[2];
        if (!r->ring.ok || !sqe)
                return -EIO;
        tier_ring_prep_rw(&r->ring, sqe, t->fd, false, r->buf, len, off);
        sqe->flags |= IOSQE_IO_LINK;
        tsqe = tier_ring_sqe(&r->ring, 1);
        io_uring_prep_link_timeout(tsqe, &ts, 0);
        int e = tier_ring_run(&r->ring, 2, res, t->conf.read_spin_us * 1000ull);
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

static bool window_has(Tier *t, uint64_t win_off, uint32_t win_len, const TierStub *s) {
        return tier_stub_check(t, s) == 0 && s->off >= win_off && s->off + tier_rec_len(s) <= win_off + win_len;
}

bool tier_window_copy(TierReader *r, TierWindow *w) {
        *w = (TierWindow){ 0 };
        if (r->win_len == 0 || !(w->buf = malloc(r->win_len)))
                return false;
        memcpy(w->buf, r->buf, r->win_len);
        w->off = r->win_off;
        w->len = r->win_len;
        return true;
}

void tier_window_free(TierWindow *w) {
        free(w->buf);
        *w = (TierWindow){ 0 };
}

bool tier_window_open(Tier *t, const TierWindow *w, const TierStub *s, uint32_t owner, uint8_t *out) {
        return w->buf && window_has(t, w->off, w->len, s) && tier_unseal(t, s, owner, w->buf + (s->off - w->off), out);
}

int tier_read(TierReader *r, const TierStub *s, uint32_t owner, const uint8_t **obj) {
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
        uint64_t stop = MIN(MAX(start + TIER_WINDOW, ALIGN_TO(s->off + tier_rec_len(s), (uint64_t)TIER_BLOCK)), end);
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
                TierWindow w = { r->buf, r->win_off, r->win_len };
                *obj = tier_window_open(t, &w, s, owner, r->plain) ? r->plain : NULL;
                if (*obj)
                        return 0;
                /* read again: a torn read of a flaky device is not yet a
                 * corrupt page */
        }
        r->win_len = 0;
        stat_add(&t->st.corrupt, 1);
        return -EBADMSG;
}
