/*
 * store.h: a client's compressed memory, in a memfd that outlives the daemon.
 *
 * Every client address space (MMClient) has one store: a sealed memfd the
 * daemon creates, maps and hands to the client, which keeps it for as long
 * as it lives. It holds everything the daemon needs to serve the client's
 * evicted pages: the compressed objects (the client's pool), the page
 * entries (the leaves of its page index) and the registered ranges. What
 * the daemon keeps elsewhere (allocator metadata, reclaim data, counters)
 * can be rebuilt from it. So when the daemon dies, nothing is lost: a new
 * daemon takes the store back from the client (ZMSG_ADOPT) after checking
 * every byte it will rely on, or the client restores its pages itself from
 * the store (libzswap's fallback). docs/reliability.md has the whole story.
 *
 * Everything in it is position-independent: offsets from the start of the
 * memfd, never pointers. A kill -9 stops every thread between two
 * instructions and the memory stays as it was, so the rules that make the
 * running daemon correct also make the store consistent at any instant:
 * an object's bytes are written before the entry naming it (release CAS),
 * a chunk's class is written before any handle in it exists, a leaf's
 * directory slot before any entry in it, a range table copy before the
 * index that makes it current.
 *
 * The client gets a read-only descriptor (store_reopen_ro()) and, unless
 * it runs as the daemon's user, cannot write the store. A new daemon maps
 * a store handed back to it read-only and copies what it keeps into a
 * store of its own, checking each value it reads (store_check(),
 * store_ranges(), store_walk(), store_object(), the codecs' bounded
 * decoders): a store changed behind its back hurts only its client.
 *
 * Layout (every area page aligned; the file is sparse, untouched parts
 * cost nothing):
 *   0                 StoreSuper
 *   STORE_JOURNAL_OFF the event journal: one struct uffd_msg (below)
 *   STORE_RANGES_OFF  StoreRange ranges[2][STORE_RANGES_MAX]  (two copies)
 *   STORE_CLASS_OFF   uint16_t chunk_class[STORE_POOL_IDS]    (0 free, k + 1: class k)
 *   STORE_DIR_OFF     uint64_t dir[STORE_LEAVES_MAX]          (zone address | 1, 0 unused)
 *   STORE_LEAF_OFF    leaves: 512 entries (uint64_t) each, one 2 MiB zone
 *   STORE_POOL_OFF    the pool: 64 KiB span per chunk id (pool.c)
 */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "codec.h"
#include "pentry.h"

#define STORE_MAGIC 0x31524f5453575a5aull /* "ZZWSTOR1" little-endian */
#define STORE_VERSION 1
/* A store that may hold objects of the strong tier (zstd whatever its
 * codec: pentry.h PE_STRONG), marked so before the first such entry is
 * published (store_mark_strong()): a daemon or library older than the
 * strong tier refuses it (its client restores itself, with a library
 * that decodes both), rather than decoding zstd as lz4. */
#define STORE_VERSION_STRONG 2
/* A store that may hold objects made with the client's zstd dictionary
 * (PE_DICT): its dictionary (StoreSuper.dict_*) is written and the store
 * marked so (store_mark_dict()) before the first such entry. A daemon or
 * library that knows no dictionary refuses it. */
#define STORE_VERSION_DICT 3
/* A store that may hold entries naming objects of its user's shared store
 * (PE_SHARED; StoreSuper.shared_tag names that store): marked so
 * (store_mark_shared()) before the first such entry. A daemon or library
 * that knows no shared store refuses it. */
#define STORE_VERSION_SHARED 4
#define STORE_DICT_OBJS 8 /* pool objects of a page that hold the dictionary */

#define STORE_UNIT_SHIFT 4      /* objects sit on 16-byte units */
#define STORE_NR_CLASSES 256    /* 16, 32, ..., 4096 bytes */
#define STORE_SPAN_SHIFT 16     /* 64 KiB of pool per chunk id */
#ifndef STORE_SHIFT
#define STORE_SHIFT 20 /* meson's store_shift: smaller only for valgrind */
#endif
#define STORE_POOL_IDS (1u << STORE_SHIFT)   /* 64 GiB of pool at 20 */
#define STORE_LEAVES_MAX (1u << STORE_SHIFT) /* 2 TiB of client memory that ever held an entry, at 20 */
#define STORE_LEAF_ENTRIES 512
#define STORE_RANGES_MAX 4096

#define STORE_SUPER_SIZE 4096ull
#define STORE_RANGES_OFF STORE_SUPER_SIZE
#define STORE_RANGES_SIZE (2ull * STORE_RANGES_MAX * sizeof(StoreRange))
#define STORE_CLASS_OFF (STORE_RANGES_OFF + STORE_RANGES_SIZE)
#define STORE_DIR_OFF (STORE_CLASS_OFF + (uint64_t)STORE_POOL_IDS * 2)
#define STORE_LEAF_OFF (STORE_DIR_OFF + (uint64_t)STORE_LEAVES_MAX * 8)
#define STORE_POOL_OFF (STORE_LEAF_OFF + (uint64_t)STORE_LEAVES_MAX * 4096)
#define STORE_POOL_SIZE ((uint64_t)STORE_POOL_IDS << STORE_SPAN_SHIFT)
/* A handle can name any 16-byte unit of the pool area and an entry's
 * length is 13 bits: the guard keeps a read of a bad one in the file */
#define STORE_GUARD 8192ull
#define STORE_SIZE (STORE_POOL_OFF + STORE_POOL_SIZE + STORE_GUARD)

#define STORE_DIR_USED 1ull /* low bit of a directory slot */

enum {
        STORE_ACTIVE = 1,   /* a daemon serves (or served, until it died) the client from it */
        STORE_RELEASED = 2, /* the daemon gave every page back and unregistered: nothing to adopt */
};

#define STORE_F_WP_ASYNC 1u /* ranges are registered in write-protect mode too */
/* a user's shared store (daemon/mm/dedup.h): only its pool is used, its
 * objects named by the entries of its members' stores */
#define STORE_F_SHARED 2u

typedef struct StoreRange {
        uint64_t start, end;
} StoreRange;

typedef struct StoreSuper {
        uint64_t magic;
        uint32_t version;
        uint32_t super_size;      /* sizeof(StoreSuper) */
        uint64_t size;            /* of the memfd: STORE_SIZE */
        uint32_t codec;           /* CodecKind of every object */
        uint32_t features;        /* STORE_F_* */
        uint64_t daemon_id;       /* random, per daemon instance: who owns it now */
        _Atomic uint32_t state;   /* STORE_ACTIVE, STORE_RELEASED */
        _Atomic uint32_t ranges_cur; /* which copy of the range table is current: 0 or 1 */
        _Atomic uint32_t nranges[2];
        _Atomic uint32_t leaves;  /* directory slots handed out (a bound, not a count) */
        uint32_t reserved;
        /* the fork token (ZMsgFork) of the last announced fork after which
         * the daemon changed this store again before that fork's child had
         * attached (daemon/fault/fault.c, fork_hold_end()): such a child, whose
         * daemon died, cannot restore itself from its parent's store
         * (client/lib/fork.c, child_lost()) */
        _Atomic uint64_t fork_served;
        /* the token of the last fork this store's daemon answered a
         * FORK_PREPARE for (daemon/manager/manager.c), written before the answer:
         * a child may restore itself only from a store that names its
         * fork here, the one whose daemon the fork was announced to; a
         * store the library held before an adoption it had not finished
         * names none */
        _Atomic uint64_t fork_announced;
        /* the token of the last announced fork whose event this store's
         * daemon read, or whose FORK_DONE came: that fork's instant is
         * past. A daemon adopting a store that names a fork announced and
         * not evented, the fork the library names in its ADOPT, takes the
         * fork as announced to itself (daemon/manager/attach.c, do_adopt()) */
        _Atomic uint64_t fork_evented;
        /* the client's zstd dictionary (PE_DICT), dict_len bytes (0:
         * none) in pool objects of a page each, the last one shorter:
         * written once, before the store is marked STORE_VERSION_DICT */
        uint32_t dict_len;
        uint32_t dict_handle[STORE_DICT_OBJS];
        /* a shared store's own tag (random, never 0); in a member's store,
         * the tag of the shared store its PE_SHARED entries name (written
         * before the store is marked STORE_VERSION_SHARED), 0: none */
        uint32_t shared_tag;
} StoreSuper;

/*
 * The event journal: the uffd message the daemon is handling. A fault
 * thread reads every message of the client's uffd straight into it
 * (daemon/fault/fault.c), so the kernel writes an event into the store before
 * its read() returns (and lets the munmap(), madvise() or mremap() that
 * sent it go on); the daemon clears it once the event is handled (a page
 * fault at once: the next daemon wakes every waiter anyway). A daemon
 * killed in between, even inside that read(), leaves the event to whoever
 * takes the store next: the next daemon applies it to what it adopts
 * (daemon/manager/adopt.c), a client restoring itself to what it installs.
 * Zero in a store written before the journal existed: nothing pending.
 */
#define STORE_JOURNAL_OFF 2048ull

/* An event as the journal's reader applies it: the pages of [start, end)
 * are gone (MADV_DONTNEED, munmap) or went to `to` (mremap); `unmapped`
 * says whether the range itself went too (munmap, mremap), or is still
 * there and registered (MADV_DONTNEED). */
typedef struct StoreEvent {
        uint64_t start, end, to;
        bool unmapped;
} StoreEvent;
#define STORE_EVENT_GONE UINT64_MAX

static inline void *store_journal(uint8_t *map) {
        return map + STORE_JOURNAL_OFF;
}

/* The event in the journal of a store somebody else wrote, checked: 1 and
 * *ev (page aligned, below 2^48, an mremap's two ranges disjoint); 0 if
 * there is none to apply (empty, a page fault, a fork: its child's uffd
 * died with the daemon); -EBADMSG if it is no event the kernel sends. */
int store_journal_event(const uint8_t *map, StoreEvent *ev);

/* Where the page that was at addr is after ev: false if gone. */
static inline bool store_event_where(const StoreEvent *ev, uint64_t addr, uint64_t *ret) {
        if (addr >= ev->start && addr < ev->end) {
                if (ev->to == STORE_EVENT_GONE)
                        return false;
                addr = ev->to + (addr - ev->start);
        }
        *ret = addr;
        return true;
}

/* The geometry of size class k (0 <= k < STORE_NR_CLASSES): object size,
 * chunk size (a multiple of 4 KiB up to the span, store.c) and slots per
 * chunk. pool.c allocates by it; store_object() checks a handle by its
 * class's object size alone. */
typedef struct StoreClass {
        uint32_t size, chunk_size, nr_slots;
} StoreClass;
const StoreClass *store_class(unsigned k);
#define STORE_CHUNK_MAX_SLOTS 252

/* Create a store for a client: a sealed memfd of STORE_SIZE (can neither
 * shrink nor grow) of mode 0600, mapped shared, with its superblock
 * written; named "zswapd-store", or "zswapd-shared" for a user's shared
 * store (features STORE_F_SHARED). Returns the fd (and the mapping in
 * *map), or -errno. */
int store_create(uint32_t codec, uint32_t features, uint64_t daemon_id, uint8_t **map);

/* A read-only descriptor of the same store, for the client: it cannot
 * write through it, nor (not being the owner, mode 0600) open the file
 * again for writing. Returns the fd or -errno. */
int store_reopen_ro(int fd);

/* Map a store handed in by somebody else (never trusted): checks that fd is
 * a memfd sealed against shrinking of exactly STORE_SIZE and maps it
 * (writable if writable). Returns 0 or -errno (-EBADF: not such a memfd). */
int store_map(int fd, bool writable, uint8_t **map);
void store_unmap(uint8_t *map);

/* Check the superblock of a mapped store. 0, or -EBADMSG with why[] filled. */
int store_check(const uint8_t *map, char *why, size_t len);

/* Is shared (a mapped store) the shared store that member's PE_SHARED
 * entries name: a store (store_check()), shared, of member's tag and
 * codec? 0, or -EBADMSG with why[] filled. */
int store_check_shared(const uint8_t *shared, const uint8_t *member, char *why, size_t len);

static inline StoreSuper *store_super(uint8_t *map) {
        return (StoreSuper *)map;
}

/* Before publishing an entry with PE_STRONG in the store: its version
 * says it may hold one (any thread; relaxed: the entry's release CAS
 * comes after it, and an older reader checks the version first). A CAS,
 * never a store: a worker marking the store while the manager marks it
 * STORE_VERSION_DICT must not take it back to 2. */
static inline void store_mark_strong(uint8_t *map) {
        uint32_t *p = &store_super(map)->version, v = __atomic_load_n(p, __ATOMIC_RELAXED);
        while (v < STORE_VERSION_STRONG &&
               !__atomic_compare_exchange_n(p, &v, STORE_VERSION_STRONG, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
                ;
}
/* After the dictionary's objects and StoreSuper.dict_* are written, before
 * the first PE_DICT entry (the thread that writes them; the entry's
 * release CAS comes after). */
static inline void store_mark_version(uint8_t *map, uint32_t version) {
        uint32_t *p = &store_super(map)->version, v = __atomic_load_n(p, __ATOMIC_RELAXED);
        while (v < version &&
               !__atomic_compare_exchange_n(p, &v, version, false, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
                ;
}
static inline void store_mark_dict(uint8_t *map) {
        store_mark_version(map, STORE_VERSION_DICT);
}
/* After StoreSuper.shared_tag is written, before the first PE_SHARED
 * entry (any thread; a CAS that only raises the version, as above). */
static inline void store_mark_shared(uint8_t *map) {
        store_mark_version(map, STORE_VERSION_SHARED);
}
/* The dictionary of a store somebody else wrote, checked and copied into
 * buf (CODEC_DICT_MAX bytes): its length, 0 if it has none, -EBADMSG if
 * its length or an object is bad. */
int store_dict(uint8_t *map, uint8_t *buf);
static inline _Atomic uint64_t *store_dir(uint8_t *map) {
        return (_Atomic uint64_t *)(map + STORE_DIR_OFF);
}
static inline _Atomic uint64_t *store_leaf(uint8_t *map, uint32_t id) {
        return (_Atomic uint64_t *)(map + STORE_LEAF_OFF + (uint64_t)id * 4096);
}
static inline _Atomic uint16_t *store_chunk_class(uint8_t *map) {
        return (_Atomic uint16_t *)(map + STORE_CLASS_OFF);
}
static inline uint8_t *store_pool(uint8_t *map) {
        return map + STORE_POOL_OFF;
}

/* The current range table, checked: sorted, page aligned, non-overlapping,
 * below 2^48. Returns the number of ranges copied to out (at most max),
 * or -EBADMSG. */
int store_ranges(uint8_t *map, StoreRange *out, size_t max);
/* Publish a new range table (writer: one thread at a time): fill the copy
 * that is not current (at most STORE_RANGES_MAX ranges), then commit. */
StoreRange *store_ranges_begin(uint8_t *map);
void store_ranges_commit(uint8_t *map, size_t n);

/* Where the object of handle h with compressed length clen lies, checked
 * against the class table and the pool's bounds: 0 and *obj, or -EBADMSG. */
int store_object(uint8_t *map, uint32_t handle, uint32_t clen, const void **obj, unsigned *cls);

/* Call fn for every non-zero entry of every used leaf, with its address
 * (the leaf's directory slot checked: 2 MiB aligned, below 2^48, no zone
 * twice). Stops at fn's first non-zero return and returns it; -EBADMSG if a
 * directory slot is bad. */
typedef int (*StoreEntryFn)(void *ud, uint64_t addr, _Atomic uint64_t *e);
int store_walk(uint8_t *map, StoreEntryFn fn, void *ud);

/*
 * A store someone else made (ADOPT) is a memfd of theirs, mostly holes:
 * a read of a hole through a mapping allocates a page in that file,
 * charged to the reader and kept by the file's holder. A forged store
 * whose directory names leaves, or whose entries name objects, it never
 * wrote would make its reader fill it with zeros at 512 times what the
 * forger wrote. So a reader of such a store asks first whether what it
 * reads is data (written, or swapped out: SEEK_DATA), through the
 * store's fd; the last extent looked up is kept, so a store that is
 * mostly data costs few system calls. fd < 0: everything is data.
 */
typedef struct StoreData {
        int fd;
        uint64_t from, to; /* the extent last looked up */
        bool data;         /* whether it is data or a hole */
} StoreData;
/* Is the byte at offset off of d's file data? */
bool store_data_at(StoreData *d, uint64_t off);
/* Is the object store_object() would find for handle h and clen data, its
 * class table slot too? True for a handle store_object() refuses. */
bool store_object_data(StoreData *d, uint32_t handle, uint32_t clen);
/* store_walk() that skips directory slots and leaves that are holes of
 * d's file (they would read as zero: no entry) without reading them. */
int store_walk_data(uint8_t *map, StoreData *d, StoreEntryFn fn, void *ud);

/* The content of entry e of a checked store into page (4 KiB): STORED
 * objects decompressed (a PE_SHARED one from the pool of shared, the
 * store's shared store, checked and of the same codec: -EBADMSG if NULL),
 * SAME pages filled. 1 if e holds content, 0 if it
 * holds none (EMPTY, REMOVED, MOVING, STAGED: the page is elsewhere),
 * -EBADMSG if its object is out of bounds or does not decompress,
 * -EREMOTE if its data is on the daemon's second tier (PE_TIER). LOADING
 * and CLEAN count as the STORED/SAME entry they came from. */
int store_entry_content(uint8_t *map, uint8_t *shared, CodecDCtx *dctx, const CodecDict *dict, uint64_t e, void *page);
