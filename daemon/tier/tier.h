/*
 * tier.h: the second tier — the pool's coldest objects written out to a
 * backing file, block device or NBD export, and read back on fault.
 *
 * When the pool nears its bound (pool_max), a writer thread picks the
 * objects the reclaim policy has seen unused longest, packs them densely
 * (several compressed pages per 4 KiB block, objects back to back) into
 * extents of up to 64 KiB and writes them through io_uring. Once an extent
 * is written, each page's entry takes a 16-byte stub (a TierStub, in the
 * client's pool) in place of its object, and the object's pool memory goes.
 * A fault on such a page reads the blocks holding its object with a read of
 * its own (the fault thread's own ring, and own NBD connection: it never
 * waits behind a write), checks the object's CRC-32C, decompresses and
 * installs it, and installs the neighbours that came in with the same read.
 *
 * Space: a reference count per block (how many live objects touch it) is
 * the free-space map; a block is free again when its count drops to 0,
 * which happens on the fault path (lock-free) or when a page is dropped.
 *
 * Survival: stubs live in the client's store like any object, so a new
 * daemon that adopts the store adopts its pages on the tier too (it rebuilds
 * the counts from the stubs it adopts). Block 0 of the backing store holds a
 * header with the tier's id, which seeds every object's CRC: data of
 * another tier, or of another place, never passes for a page. Blocks an
 * earlier daemon wrote below the header's high-water mark are not reused
 * for `grace` after start, so clients still coming back to be adopted find
 * their objects intact.
 *
 * Threads: tier_writer (one), fault threads (tier_read, tier_put), anyone
 * releasing a page (tier_put). docs/tier.md has the whole story.
 */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct MMClient MMClient;
typedef struct Tier Tier;
typedef struct TierReader TierReader;

#define TIER_BLOCK 4096u
#define TIER_EXTENT (64u * 1024)    /* one write: up to 16 blocks */
#define TIER_WINDOW (16u * 1024)    /* a fault reads the aligned 16 KiB around its object */
#define TIER_STUB_MAGIC 0x5a54u     /* "TZ" */

/* What the pool holds for a page on the tier (16 bytes, the smallest
 * object). Checked before use: it comes from a store. */
typedef struct TierStub {
        uint64_t off;   /* byte offset of the object's record in the backing store */
        uint32_t gen;   /* random, drawn for each write: authenticated with the record */
        uint16_t len;   /* compressed length, 1..4096 (4096: stored raw) */
        uint16_t magic; /* TIER_STUB_MAGIC */
} TierStub;
/* A record on the backing store: 8 random bytes (the nonce's), the
 * 16-byte Poly1305 tag, then the object, encrypted (tier-seal.c) */
#define TIER_SEAL 24u
#define TIER_KEY_BYTES 32u
static inline uint32_t tier_rec_len(const TierStub *s) {
        return (uint32_t)s->len + TIER_SEAL;
}
_Static_assert(sizeof(TierStub) == 16, "a stub is one 16-byte pool unit");

typedef struct TierConf {
        char backing[512];  /* path or nbd:// / nbd+unix:// URI; "" no tier */
        uint64_t size;      /* bytes; 0: the file's, device's or export's size */
        uint64_t rate;      /* bytes written per second at most; 0: no limit */
        uint64_t grace_ms;  /* earlier daemons' blocks kept this long after start */
        uint32_t timeout_ms; /* an NBD request (and connect) this long at most */
        /* a fault's read of a file polls for its completion this long
         * before it sleeps: the wake-up from the disk's interrupt costs
         * as much as the read (KERNEL.md), and the faulting thread waits
         * either way */
        uint32_t read_spin_us;
        /* the file holding the key the objects are sealed with, made at the
         * first start; "" TIER_DEFAULT_KEY */
        char key[512];
} TierConf;
#define TIER_DEFAULT_KEY "/var/lib/zswapd/tier.key"
#define TIER_DEFAULT_GRACE_MS (60 * 1000)
#define TIER_DEFAULT_TIMEOUT_MS 5000
#define TIER_DEFAULT_READ_SPIN_US 200

enum {
        TIER_IDLE,         /* nothing to write */
        TIER_WRITING,
        TIER_FULL,         /* no free extent: objects stay in RAM */
        TIER_ERROR,        /* writes failed: backing off */
        TIER_DISCONNECTED, /* NBD: reconnecting */
        TIER_GRACE,        /* only above the old high-water mark until grace ends */
};
const char *tier_state_name(int state);

typedef struct TierStats {
        uint64_t capacity;      /* bytes of the backing store usable for objects */
        uint64_t used_blocks;   /* blocks holding at least one live object */
        uint64_t pages;         /* pages whose data is on the tier */
        uint64_t bytes;         /* their compressed bytes */
        uint64_t written;       /* bytes written (whole blocks), ever */
        uint64_t writes;        /* write requests */
        uint64_t written_pages; /* pages written out, ever */
        uint64_t reads, read_bytes;
        uint64_t prefetched;    /* pages installed from another page's read */
        uint64_t read_errors, write_errors, corrupt, full_events, reconnects;
        int state;
} TierStats;

/* Open a backing file (create it if missing, sized conf->size), or parse
 * an NBD server's address; no thread yet. 0, or -errno with why in err.
 * Before the sandbox (it opens files the sandbox then forbids). */
int tier_open(const TierConf *conf, Tier **ret, char *err, size_t errlen);
/* Connect to the NBD server the first time, make the writer's ring, read
 * or write the header. After the sandbox: the server's bytes are parsed
 * by a daemon that holds no more than it needs, and an io_uring worker
 * thread is made with the privileges that are left (capabilities are per
 * thread). The writer itself is started by tier_writer_start()
 * (tier-writer.h). */
int tier_start(Tier *t, char *err, size_t errlen);
/* Stop the writer: the batch in flight finishes (its pages stay in RAM
 * if it fails), the clients it holds are let go. */
void tier_stop(Tier *t);
/* tier_stop(), close. After every client is gone (their pages' release
 * counts on the free-space map). Accepts NULL, returns NULL. */
Tier *tier_free(Tier *t);
const char *tier_describe(const Tier *t);
void tier_get_stats(Tier *t, TierStats *ret);


/* A stub read from a pool, checked against the tier's geometry: 0 or
 * -EBADMSG. */
int tier_stub_check(const Tier *t, const TierStub *s);

/* A page's hold on its object ends (fault installed it, the page was
 * dropped, its client went): the blocks it touches lose a reference.
 * Lock-free, any thread. */
void tier_put(Tier *t, const TierStub *s);
/* One more holder of the object (fork, adoption). false if a block's count
 * would overflow (the caller copies the page instead). Any thread. */
bool tier_get(Tier *t, const TierStub *s);

/* Fault threads and their pumps: one reader each (its own ring, buffer
 * and connection). A patient reader (a pump's) waits for an NBD answer as
 * long as the tier's timeout; another (on a fault thread) at most 1 s. */
int tier_reader_new(Tier *t, bool patient, TierReader **ret);
/* Its NBD connection made now rather than at its first read, on the
 * thread that reads with it (it may wait for the server as a read does). */
void tier_reader_warm(TierReader *r);
TierReader *tier_reader_free(TierReader *r);
/*
 * Read the object of s (checked with tier_stub_check() first). 0 and
 * *obj (valid until the next read); -EBADMSG if it fails its CRC twice
 * (corrupt: never to be installed); another -errno if the read itself
 * failed (the backing store is unreachable, an I/O error): try again later.
 */
int tier_read(TierReader *r, const TierStub *s, uint32_t owner, const uint8_t **obj);
/* Pages installed from another page's read (statistics). */
void tier_note_prefetch(Tier *t, unsigned n);

/* What a read brought, copied out of its reader (for another thread):
 * [off, off + len) of the backing store, in buf (malloc'd, or NULL). */
typedef struct TierWindow {
        uint8_t *buf;
        uint64_t off;
        uint32_t len;
} TierWindow;
/* After a tier_read() that returned 0: a copy of its window. false: no
 * memory (w empty). */
bool tier_window_copy(TierReader *r, TierWindow *w);
void tier_window_free(TierWindow *w);
/* s's object from w, opened into out (ZSWAP_PAGE_SIZE bytes): false if w
 * does not hold its record whole, or it does not open (tier-seal.c). */
bool tier_window_open(Tier *t, const TierWindow *w, const TierStub *s, uint32_t owner, uint8_t *out);
