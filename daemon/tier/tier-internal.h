/*
 * tier-internal.h: what tier.c (open, the free-space map, rings, reading)
 * and tier-writer.c (the writer thread) share. Internal to the daemon,
 * never installed; everything else sees the tier through tier.h only.
 *
 * struct Tier says per field who writes it: the fields under "writer
 * thread only" belong to tier-writer.c once tier_start() has started the
 * thread (after tier_open() and the sandbox). The functions declared at the end
 * are defined in tier.c, but for the last two (tier-writer.c).
 */
#pragma once

#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "crc32c.h"
#include "nbd.h"
#include "tier.h"

#define NEXT 8                    /* extents written in one batch */
#define EXTENT_BLOCKS (TIER_EXTENT / TIER_BLOCK)
#define EXTENT_OBJS 1024          /* objects in one extent at most */
#define BACKOFF_MIN_MS 500
#define RECONNECT_MS 1000         /* a reader tries its NBD connection again after */

typedef struct WbObj {
        MMClient *mm;
        uint64_t addr;
        uint64_t v;       /* the entry's value with PE_WB, as the writer set it */
        uint64_t off;     /* its record's */
        uint32_t len, gen; /* the object's length; the generation it was sealed with */
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

/* An io_uring and the buffer registered with it (tier_ring_run()). */
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

typedef struct Core Core;

struct Tier {
        Core *core;          /* tier_writer_start(): before the writer starts, constant; only the writer reads it */
        TierConf conf;
        int kind;
        int fd;              /* file or block device */
        bool direct;         /* opened O_DIRECT */
        NbdAddr nbd;
        NbdConn *wconn;      /* the writer's connection */
        bool nbd_flush;      /* FLUSH after each batch, before its pages are published (tier_connect_nbd()) */
        char describe[640];

        uint64_t id;         /* written before `ready` is raised, read after */
        uint8_t key[TIER_KEY_BYTES]; /* written at open, before any thread */
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

static inline void set_state(Tier *t, int s) {
        atomic_store_explicit(&t->st.state, s, memory_order_relaxed);
}

static inline void stat_add(_Atomic uint64_t *c, uint64_t v) {
        atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

/* tier-seal.c: the objects sealed (encrypted and authenticated) */
int tier_key_load(const char *path, uint8_t key[TIER_KEY_BYTES], char *err, size_t errlen);
/* s->len bytes of obj, a page of user owner's, into the record at rec
 * (tier_rec_len(s) bytes) */
void tier_seal(const Tier *t, const TierStub *s, uint32_t owner, uint8_t *rec, const void *obj);
/* The record at rec opened into out (s->len bytes); false if it is not
 * what s names, sealed under our key for owner (forged, replayed, moved,
 * another user's, torn) */
bool tier_unseal(const Tier *t, const TierStub *s, uint32_t owner, const uint8_t *rec, uint8_t *out);
/* A stub's generation for a new write */
uint32_t tier_gen_new(void);

/* The blocks the object's record touches */
static inline void block_range(const TierStub *s, uint64_t *b0, uint64_t *b1) {
        *b0 = s->off / TIER_BLOCK;
        *b1 = (s->off + tier_rec_len(s) - 1) / TIER_BLOCK;
}

/* tier.c: rings and connections */
NbdConn *tier_conn_close(NbdConn *c);
int tier_connect_nbd(Tier *t, NbdConn **ret, int timeout_ms, char *err, size_t errlen);
struct io_uring_sqe *tier_ring_sqe(Ring *g, unsigned i);
void tier_ring_prep_rw(Ring *g, struct io_uring_sqe *sqe, int fd, bool write, void *buf, uint32_t len, uint64_t off);
int tier_ring_run(Ring *g, unsigned n, int *res, uint64_t spin_ns);

/* tier.c: the header, and the free-space map */
int tier_header_write(Tier *t);
int tier_ready(Tier *t);
void tier_ref_block(Tier *t, uint64_t b);
void tier_unref_block(Tier *t, uint64_t b);

/* tier-writer.c: the writer thread (tier_start() starts it, tier_stop()
 * ends it and frees the job it left) */
void tier_job_free(Job *j);
