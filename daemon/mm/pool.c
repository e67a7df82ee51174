/*
 * pool.c: the compressed-object pool, a zsmalloc for userspace.
 *
 * Layout. pool_new() reserves one large range of address space (64 GiB, less
 * if the kernel refuses) with MAP_NORESERVE: it costs nothing until touched.
 * The range is cut into 64 KiB spans, one per chunk id; a chunk of memory of
 * a multiple of 4 KiB up to 64 KiB lives at the start of its span. A handle is the offset of the
 * object from the pool base in 16-byte units, i.e. chunk id << 12 | offset
 * in the span / 16, so pool_map() is base + handle * 16: no lookup, no lock,
 * O(1). Chunk id 0 is never used, which makes 0 an invalid handle.
 *
 * Size classes are the multiples of 16 bytes up to 4096 (zsmalloc's
 * granularity; 32 bytes cost ~0.6 % more memory on real heaps). Each class's
 * chunk size is the one that loses least to chunk tails and to the free
 * slots of a class's last chunk (store.c, store_class()). Objects may
 * straddle page boundaries. Chunk
 * headers live outside chunk memory, in a metadata array indexed by chunk
 * id (also MAP_NORESERVE), so chunks hold nothing but objects and
 * pool_bytes is exactly the memory chunks take.
 *
 * Releasing. pool_release() runs on the fault path, which must never wait
 * for an allocator, so it takes no lock and makes no system call. It sets
 * the slot's bit in the chunk's atomic `released` bitmap. Bit 63 of each
 * bitmap word is WORD_PENDING: the releaser whose fetch_or turned it on
 * pushes that word (a "node": chunk id << 2 | word) onto its class's
 * pending stack, a Treiber stack whose consumer takes the whole stack at
 * once with atomic_exchange. With only push and pop-all there is no ABA: a
 * push links to whatever the head is when its CAS succeeds. A node is on the
 * stack at most once, from the fetch_or that set WORD_PENDING to the
 * exchange that clears the word, and both bits travel in one atomic word, so
 * no release is ever lost between "set bit" and "queue it".
 *
 * Reuse. Under the class mutex, pool_alloc() and pool_reclaim() drain the
 * pending stack: each node's word is swapped to 0 and its bits go into the
 * chunk's `free` bitmap, which only the class mutex guards. Released but not
 * drained slots still count as used, so a chunk whose use count is 0 has no
 * live handle, no node on any stack and no releaser in flight: reclaim can
 * take it off the class, madvise(MADV_DONTNEED_LOCKED) it outside the lock so RSS
 * really drops, and put its id on the free-id stack for any class to reuse.
 *
 * Warm empty chunks. pool_trim(), the periodic give-back, keeps an empty
 * chunk in its class for about a second (POOL_KEEP_EMPTY_MS from the
 * first trim that finds it empty) before it gives it back: pages that
 * come back in and go out again soon after find their chunks still
 * mapped. A first write to a page newly mapped into a process is dear
 * where the hypervisor shadows page tables (~5-6 us a page on the PVM
 * guest of docs/benchmarks.md, more than compressing it), and a pool
 * that gave its chunks back at once paid that for every page of every
 * pageout after a read-back. The chunks kept stay counted in the pool's
 * bytes and against its bound; pool_reclaim() gives them back at once
 * (the allocator at the bound, the second tier's writer, the
 * recompressor, statistics), and so does pool_trim() when its caller says
 * the pool is near its bound. Compaction gives back the chunks it
 * emptied itself, and leaves those kept alone.
 *
 * Limits. pool_alloc() fails with -ENOSPC rather than take pool_bytes past
 * max_bytes (after one pool_reclaim() to give back what it can). New
 * objects fill the holes of partly used chunks before any new chunk is
 * made, but a chunk with one live object keeps all its memory until that
 * object goes: pages that come back and go out again leave chunks partly
 * empty.
 *
 * Compaction. Handles are addresses, so an object moves only with the
 * entry that names it, and the pool does not know that entry: its caller
 * walks the page index (daemon/manager/clients.c, mm_compact()). pool_compact_begin() plans
 * each class under its mutex: its partial chunks sorted sparsest first,
 * as many of them as can empty into the free slots of the others (within
 * a byte budget). Those sources leave the partial list (LIST_EVAC): no
 * allocation takes a slot of theirs until pool_compact_end() puts them
 * back, so a source slot, released or not, is never handed out again
 * during the pass and keeps its bytes. pool_compact_move() takes a slot of
 * another chunk of the class (the mutex, for that only), copies the
 * object and swaps the entry from the value the walk read to the new
 * handle. The CAS is the whole protocol: whoever swaps a STORED value out
 * owns its object (docs/page-lifecycle.md), so if a fault, an event or
 * the tier's writer took the entry first, the CAS fails, the new slot is
 * released and theirs is the old object, unmoved; if the compactor's CAS
 * comes first, they find the new handle. And no ABA: the entry can only
 * name the old handle again if that slot were reused. The releases of the
 * moved-out objects are drained at the end, sources that emptied are
 * given back at once. A kill -9 at any
 * point leaves every entry naming a whole object (the copy is written
 * before the CAS publishes it): a store stays adoptable.
 *
 * Stores. A daemon pool lives in a client's store (store.h): base is the
 * store's pool area, each chunk's class is also written to the store's
 * class table (before any handle in it exists, cleared after the last is
 * gone) and empty chunks are punched out of the memfd, so that whoever
 * reads the store can check a handle against it (store_object()). A new
 * daemon copies the objects a store's entries name into a store of its own
 * (manager.c, adopt). Byte and object counters, and the bound, are shared by
 * every client's pool (PoolShared). pool_new() makes a pool of its own
 * anonymous memory instead, for tests and benchmarks.
 *
 * Threads. pool_alloc(): any number of workers, one mutex per class (plus
 * the id mutex, taken after a class mutex, never before). pool_release():
 * any thread, lock-free. pool_map(), pool_object_capacity(),
 * pool_get_stats(): any thread, lock-free. pool_reclaim(), pool_trim():
 * any thread.
 * Statistics are relaxed atomic counters.
 */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "inject.h"
#include "macro.h"
#include "pool.h"
#include "store.h"

#define UNIT_SHIFT STORE_UNIT_SHIFT                         /* objects sit on 16-byte units (zsmalloc: 16) */
#define UNIT (1U << UNIT_SHIFT)
#define NR_CLASSES (POOL_MAX_OBJECT / UNIT)                 /* 16, 32, ..., 4096 */
#define SPAN_SHIFT STORE_SPAN_SHIFT                         /* 64 KiB of address space per chunk id */
#define SPAN (1UL << SPAN_SHIFT)
#define HANDLE_UNITS_SHIFT (SPAN_SHIFT - UNIT_SHIFT)        /* 12 bits of unit offset in a handle */

#define WORD_BITS 63                                        /* slot bits per bitmap word */
#define WORD_PENDING (1ULL << 63)                           /* the word's node is on the pending stack */
#define CHUNK_WORDS 4
#define CHUNK_MAX_SLOTS (CHUNK_WORDS * WORD_BITS)           /* 252 */
_Static_assert(CHUNK_MAX_SLOTS == STORE_CHUNK_MAX_SLOTS, "store.c sizes classes as we do");
_Static_assert(NR_CLASSES == STORE_NR_CLASSES, "store.c sizes classes as we do");
#define NODE_SHIFT 2                                        /* node = chunk id << 2 | word */

enum {
        LIST_NONE,    /* full, or detached by pool_reclaim() */
        LIST_PARTIAL, /* some slots free */
        LIST_EMPTY,   /* all slots free: reclaim gives it back */
        LIST_EVAC,    /* being emptied by compaction: on no list, allocates nothing */
};

typedef struct Chunk {
        /* Slots released but not yet drained, plus WORD_PENDING. Set by
         * pool_release() on any thread; swapped to 0 by the drainer. */
        _Atomic uint64_t released[CHUNK_WORDS];
        /* Next node on the pending stack. Written only by the releaser that
         * set WORD_PENDING of that word, read by the drainer that popped it. */
        uint32_t pending_next[CHUNK_WORDS];
        /* Size class. Stored under the class mutex before any handle of the
         * chunk exists; loaded lock-free by pool_release() and
         * pool_object_capacity(), see chunk_class(). */
        _Atomic uint8_t cls;
        /* Protected by the class mutex while the chunk belongs to a class.
         * While detached for freeing, owned by the reclaiming thread; while
         * free, `next` links the free-id stack under Pool.id_lock. */
        uint8_t list;
        /* Being emptied by compaction (list LIST_EVAC). Written and read
         * only by the compacting thread (pool_compact_*), which needs it
         * without the class mutex */
        uint8_t evac;
        uint16_t nr_used; /* slots not in free[], including undrained releases */
        /* On the empty list: when pool_trim() first found it there, + 1
         * ms (0: not yet). Protected by the class mutex, as the lists are */
        uint64_t empty_ms;
        uint32_t prev, next;
        uint64_t free[CHUNK_WORDS];
        /* Per slot, capacity minus requested length (< UNIT). Allocated at
         * chunk setup; slack[i] is written by pool_alloc() under the class
         * mutex and read by pool_release() of that very object, which the
         * hand-over of the handle orders after the write. */
        uint8_t *slack;
        /* Per slot, holders beyond the first (pool_share()); 0 for a slot
         * that is free. Changed by any thread with CAS; allocated with slack. */
        _Atomic uint8_t *shares;
} Chunk;

typedef struct ChunkList {
        uint32_t head, tail; /* chunk ids, 0 = none */
} ChunkList;

typedef struct PoolClass {
        _Alignas(64) pthread_mutex_t lock; /* own cache line: classes are independent */
        /* Constant after pool_new(). */
        uint32_t size;
        uint32_t chunk_size;
        uint32_t nr_slots;
        /* Protected by lock. */
        ChunkList partial;
        ChunkList empty;
        bool grown;  /* it has made a chunk before: chunk_populate() */
        /* Top node of the pending stack: pushed by pool_release() on any
         * thread, emptied by class_drain() under lock. */
        _Atomic uint32_t pending;
} PoolClass;

struct PoolShared {
        uint64_t max_bytes; /* constant */
        /* Statistics, written by any thread; relaxed everywhere because no
         * other memory is published through them. pool_bytes is also the
         * bound's count: pool_charge() moves it with a CAS. */
        _Atomic uint64_t pool_bytes;
        _Atomic uint64_t object_bytes;
        _Atomic uint64_t objects;
        _Atomic uint64_t nr_chunks;
        _Atomic uint64_t deferred;
        _Atomic uint64_t compactions, compact_moved, compact_freed;
};

struct Pool {
        /* Constant after pool_new(). */
        PoolShared *sh;
        bool own_sh;          /* pool_new(): sh is ours to free */
        uint8_t *base;
        size_t base_size;     /* mapped by us (pool_new()), 0 if it is a store's */
        int fd;               /* the store's memfd, -1: anonymous memory */
        uint64_t fd_off;      /* where base is in it */
        _Atomic uint16_t *cls_table; /* per chunk id: 0 free, k + 1 class k (store.h) */
        size_t cls_table_size; /* mapped by us, 0 if it is a store's */
        Chunk *chunks;
        size_t chunks_size;
        uint32_t nr_ids;

        pthread_mutex_t id_lock;
        uint32_t free_ids; /* id_lock: stack of free ids, linked by Chunk.next */
        uint32_t next_id;  /* id_lock: lowest id never handed out */

        _Atomic uint64_t bytes; /* this pool's chunk memory (the shared pool_bytes is every pool's) */

        /* The compacting thread's own (pool_compact_*): the chunks it
         * took out of allocation, and room to sort a class's chunks */
        uint32_t *evac_ids;
        size_t nevac, evac_cap;
        struct CompactChunk *scratch;
        size_t scratch_cap;

        PoolClass classes[NR_CLASSES];
};

static inline uint32_t handle_chunk(PoolHandle h) {
        return h >> HANDLE_UNITS_SHIFT;
}

static inline uint32_t handle_offset(PoolHandle h) {
        return (h & ((1U << HANDLE_UNITS_SHIFT) - 1)) << UNIT_SHIFT;
}

static inline PoolHandle handle_make(uint32_t id, uint32_t offset) {
        return id << HANDLE_UNITS_SHIFT | offset >> UNIT_SHIFT;
}

static inline PoolClass *chunk_class(Pool *p, Chunk *ch) {
        /* relaxed: the store happened before the chunk's first handle was
         * made, and the caller got its handle through pool_alloc() and
         * whatever hand-over followed, which already orders it. The atomic
         * only keeps a misbehaving caller from turning this into UB. */
        return &p->classes[atomic_load_explicit(&ch->cls, memory_order_relaxed)];
}

static void stat_add(_Atomic uint64_t *s, uint64_t v) {
        atomic_fetch_add_explicit(s, v, memory_order_relaxed); /* statistics only */
}

static void stat_sub(_Atomic uint64_t *s, uint64_t v) {
        atomic_fetch_sub_explicit(s, v, memory_order_relaxed); /* statistics only */
}

static void class_init(PoolClass *cls, unsigned k) {
        const StoreClass *g = store_class(k); /* one geometry for the pool and the store's checks */

        cls->lock = (pthread_mutex_t) PTHREAD_MUTEX_INITIALIZER;
        cls->size = g->size;
        cls->chunk_size = g->chunk_size;
        cls->nr_slots = g->nr_slots;
}

/* ---- chunk lists, under the class mutex ---- */

static ChunkList *class_list(PoolClass *cls, uint8_t which) {
        return which == LIST_PARTIAL ? &cls->partial : &cls->empty;
}

static void list_add_tail(Pool *p, ChunkList *l, uint32_t id) {
        Chunk *ch = &p->chunks[id];

        ch->prev = l->tail;
        ch->next = 0;
        if (l->tail)
                p->chunks[l->tail].next = id;
        else
                l->head = id;
        l->tail = id;
}

static void list_remove(Pool *p, ChunkList *l, uint32_t id) {
        Chunk *ch = &p->chunks[id];

        if (ch->prev)
                p->chunks[ch->prev].next = ch->next;
        else
                l->head = ch->next;
        if (ch->next)
                p->chunks[ch->next].prev = ch->prev;
        else
                l->tail = ch->prev;
}

/* Put the chunk on the list its use count calls for. Chunks that gain free
 * slots go to the tail, so allocation keeps filling the older ones. */
static void chunk_relist(Pool *p, PoolClass *cls, uint32_t id) {
        Chunk *ch = &p->chunks[id];
        if (ch->list == LIST_EVAC)
                return; /* compaction puts it back when it is done (pool_compact_end()) */
        uint8_t want = ch->nr_used == cls->nr_slots ? LIST_NONE :
                       ch->nr_used == 0             ? LIST_EMPTY :
                                                      LIST_PARTIAL;

        if (want == ch->list)
                return;
        if (ch->list != LIST_NONE)
                list_remove(p, class_list(cls, ch->list), id);
        if (want != LIST_NONE)
                list_add_tail(p, class_list(cls, want), id);
        ch->list = want;
        ch->empty_ms = 0;
}

/* ---- deferred releases ---- */

static void class_push(PoolClass *cls, Chunk *ch, uint32_t node) {
        uint32_t head = atomic_load_explicit(&cls->pending, memory_order_relaxed);

        do
                ch->pending_next[node & (CHUNK_WORDS - 1)] = head;
        /* release on success: the drainer that pops the stack (acquire)
         * must see pending_next; on failure we only retry with the new head,
         * nothing is read through it, so relaxed */
        while (!atomic_compare_exchange_weak_explicit(&cls->pending, &head, node,
                                                      memory_order_release, memory_order_relaxed));
}

static _Atomic uint8_t *slot_shares(Pool *p, PoolHandle h) {
        Chunk *ch = &p->chunks[handle_chunk(h)];
        PoolClass *cls = chunk_class(p, ch);
        return &ch->shares[handle_offset(h) / cls->size];
}

int pool_share(Pool *p, PoolHandle h) {
        _Atomic uint8_t *s;
        uint8_t v;

        if (h == 0)
                return -EINVAL;
        s = slot_shares(p, h);
        /* relaxed: the caller holds a reference, the object cannot go away
         * under us, and nothing else is published through the count */
        v = atomic_load_explicit(s, memory_order_relaxed);
        do {
                if (v == UINT8_MAX)
                        return -EOVERFLOW;
        } while (!atomic_compare_exchange_weak_explicit(s, &v, (uint8_t)(v + 1), memory_order_relaxed,
                                                        memory_order_relaxed));
        return 0;
}

unsigned pool_holders(Pool *p, PoolHandle h) {
        /* acquire: a holder's release (acq_rel) of its share is seen with
         * its reads of the object done */
        return h ? 1u + atomic_load_explicit(slot_shares(p, h), memory_order_acquire) : 0;
}

void pool_release(Pool *p, PoolHandle h) {
        uint32_t id = handle_chunk(h), slot, w;
        Chunk *ch;
        PoolClass *cls;
        uint64_t bit, old;

        if (h == 0)
                return;
        assert(id > 0 && id < p->nr_ids);
        ch = &p->chunks[id];
        cls = chunk_class(p, ch);
        slot = handle_offset(h) / cls->size;
        assert(slot < cls->nr_slots && handle_offset(h) % cls->size == 0);

        /* a shared object: drop one share, the last holder frees it.
         * release: our reads of the object before the last holder's free;
         * acquire: the last holder sees every other holder's reads done */
        uint8_t v = atomic_load_explicit(&ch->shares[slot], memory_order_acquire);
        while (v > 0)
                if (atomic_compare_exchange_weak_explicit(&ch->shares[slot], &v, (uint8_t)(v - 1),
                                                          memory_order_acq_rel, memory_order_acquire))
                        return;
        w = slot / WORD_BITS;
        bit = 1ULL << (slot % WORD_BITS);

        /* counters first: the drain's decrement of `deferred` must not
         * overtake our increment, and the fetch_or below orders them */
        stat_sub(&p->sh->objects, 1);
        stat_sub(&p->sh->object_bytes, cls->size - ch->slack[slot]);
        stat_add(&p->sh->deferred, 1);

        /* release: our caller's last reads of the object, and our read of
         * slack[], must happen before the drainer hands the slot out again.
         * acquire: pairs with the drainer's exchange, so its read of
         * pending_next[w] happens before we overwrite it in class_push(). */
        old = atomic_fetch_or_explicit(&ch->released[w], bit | WORD_PENDING, memory_order_acq_rel);
        assert(!(old & bit)); /* double release */
        if (!(old & WORD_PENDING))
                class_push(cls, ch, id << NODE_SHIFT | w);
        /* nothing touches the chunk after the push: once drained it may be
         * freed and reused by another class */
}

/* Move every deferred release of the class into the free bitmaps. */
static void class_drain(Pool *p, PoolClass *cls) {
        uint32_t node, next;
        uint64_t drained = 0;

        /* relaxed peek: keep the line clean when nothing is pending; a stale
         * 0 only postpones the work to the next call */
        if (atomic_load_explicit(&cls->pending, memory_order_relaxed) == 0)
                return;
        /* acquire: pairs with class_push()'s release, makes pending_next of
         * every node on the stack visible */
        node = atomic_exchange_explicit(&cls->pending, 0, memory_order_acquire);
        for (; node != 0; node = next) {
                uint32_t id = node >> NODE_SHIFT, w = node & (CHUNK_WORDS - 1);
                Chunk *ch = &p->chunks[id];
                uint64_t bits;
                unsigned n;

                /* read before the exchange: after it, a releaser may push
                 * the node again and rewrite pending_next[w] */
                next = ch->pending_next[w];
                /* acquire: pairs with pool_release()'s fetch_or, the users'
                 * accesses to these slots are over before we reuse them.
                 * release: publishes our read of pending_next[w] to the next
                 * releaser that pushes this node. */
                bits = atomic_exchange_explicit(&ch->released[w], 0, memory_order_acq_rel) & ~WORD_PENDING;
                assert(!(ch->free[w] & bits));
                n = (unsigned) __builtin_popcountll(bits);
                ch->free[w] |= bits;
                ch->nr_used -= n;
                drained += n;
                chunk_relist(p, cls, id);
        }
        stat_sub(&p->sh->deferred, drained);
}

/* ---- chunks ---- */

static int pool_charge(Pool *p, uint64_t bytes, bool over) {
        PoolShared *sh = p->sh;
        uint64_t cur = atomic_load_explicit(&sh->pool_bytes, memory_order_relaxed);

        do
                if (sh->max_bytes > 0 && cur + bytes > sh->max_bytes && !over)
                        return -ENOSPC;
        /* relaxed: a counter; the CAS only makes the limit check exact */
        while (!atomic_compare_exchange_weak_explicit(&sh->pool_bytes, &cur, cur + bytes,
                                                      memory_order_relaxed, memory_order_relaxed));
        return 0;
}

static uint32_t pool_get_id(Pool *p) {
        uint32_t id = 0;

        pthread_mutex_lock(&p->id_lock);
        if (p->free_ids) {
                id = p->free_ids;
                p->free_ids = p->chunks[id].next;
        } else if (p->next_id < p->nr_ids)
                id = p->next_id++;
        pthread_mutex_unlock(&p->id_lock);
        return id;
}

/* Give a list of detached chunks (linked by next, ending at tail) back. */
static void pool_put_ids(Pool *p, uint32_t head, uint32_t tail) {
        pthread_mutex_lock(&p->id_lock);
        p->chunks[tail].next = p->free_ids;
        p->free_ids = head;
        pthread_mutex_unlock(&p->id_lock);
}

/* Set up a new, empty chunk for the class. Called under the class mutex. */
static int class_grow(Pool *p, PoolClass *cls, bool over) {
        uint32_t id;
        uint8_t *slack;
        Chunk *ch;
        int r;

        r = pool_charge(p, cls->chunk_size, over);
        if (r < 0)
                return r;
        slack = INJECT_ALLOC(malloc(cls->nr_slots));
        _Atomic uint8_t *shares = calloc(cls->nr_slots, 1);
        id = slack && shares ? pool_get_id(p) : 0;
        if (id == 0) {
                free(slack);
                free((void *)shares);
                stat_sub(&p->sh->pool_bytes, cls->chunk_size);
                return -ENOMEM;
        }

        ch = &p->chunks[id];
        ch->slack = slack;
        ch->shares = shares;
        ch->nr_used = 0;
        ch->list = LIST_NONE;
        for (uint32_t w = 0; w < CHUNK_WORDS; w++) {
                uint32_t first = w * WORD_BITS;
                uint32_t n = cls->nr_slots > first ? MIN(cls->nr_slots - first, (uint32_t) WORD_BITS) : 0;

                ch->free[w] = (1ULL << n) - 1;
        }
        /* relaxed: see chunk_class(); no handle of this chunk exists yet */
        atomic_store_explicit(&ch->cls, (uint8_t) (cls - p->classes), memory_order_relaxed);
        /* release: in the store before any handle of the chunk can be
         * (the handle reaches an entry through a release CAS after this) */
        atomic_store_explicit(&p->cls_table[id], (uint16_t) (cls - p->classes + 1), memory_order_release);
        chunk_relist(p, cls, id);
        stat_add(&p->sh->nr_chunks, 1);
        stat_add(&p->bytes, cls->chunk_size);
        return 0;
}

static uint32_t chunk_take_slot(Chunk *ch) {
        for (uint32_t w = 0;; w++)
                if (ch->free[w]) {
                        unsigned b = (unsigned) __builtin_ctzll(ch->free[w]);

                        ch->free[w] &= ~(1ULL << b);
                        ch->nr_used++;
                        return w * WORD_BITS + b;
                }
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

/* Set once a kernel older than 5.14 refused MADV_POPULATE_WRITE. */
static _Atomic bool no_populate;

/*
 * Map a new chunk's pages in one call, before its first object is
 * written: the objects that fill it would each take a page fault on the
 * pages they first touch, and a page fault is dear on a hypervisor (a
 * 64 KiB chunk: 15.5 us a page touched one by one, 8.8 us populated, on
 * the PVM guest of docs/benchmarks.md). The chunk is charged whole to the
 * pool already (pool_charge()), but a class's first chunk is left to
 * fill by faults: a client with a few objects in many classes would
 * otherwise have every chunk resident whole, up to 64 KiB for one object.
 * Outside the class mutex: our slot keeps the chunk from being discarded,
 * and a populate of pages another allocator wrote meanwhile changes
 * nothing.
 */
static void chunk_populate(Pool *p, uint32_t id, size_t len) {
        /* relaxed: a hint, a stale false costs one failed call */
        if (atomic_load_explicit(&no_populate, memory_order_relaxed))
                return;
        if (madvise(p->base + ((size_t) id << SPAN_SHIFT), len, MADV_POPULATE_WRITE) < 0 && errno == EINVAL)
                atomic_store_explicit(&no_populate, true, memory_order_relaxed);
}

static int class_alloc(Pool *p, PoolClass *cls, size_t len, bool over, PoolHandle *ret) {
        uint32_t id = 0, slot;
        bool grew = false;
        Chunk *ch;
        int r = 0;

        pthread_mutex_lock(&cls->lock);
        class_drain(p, cls);
        if (!cls->partial.head && !cls->empty.head && (r = class_grow(p, cls, over)) >= 0) {
                grew = cls->grown;
                cls->grown = true;
        }
        if (r >= 0) {
                id = cls->partial.head ?: cls->empty.head;
                ch = &p->chunks[id];
                slot = chunk_take_slot(ch);
                ch->slack[slot] = (uint8_t) (cls->size - len);
                chunk_relist(p, cls, id);
                *ret = handle_make(id, slot * cls->size);
        }
        size_t chunk_size = cls->chunk_size;
        pthread_mutex_unlock(&cls->lock);
        if (grew) /* not the class's first chunk */
                chunk_populate(p, id, chunk_size);
        return r;
}

static int alloc(Pool *p, size_t len, bool over, PoolHandle *ret) {
        PoolClass *cls;
        int r;

        if (len == 0 || len > POOL_MAX_OBJECT)
                return -EINVAL;
        if ((r = INJECT(INJ_POOL_ALLOC)))
                return -r; /* as if full: what a pool at its bound answers */
        cls = &p->classes[(len - 1) >> UNIT_SHIFT];
        r = class_alloc(p, cls, len, over, ret);
        if (r < 0) {
                /* out of bytes or chunk ids: other classes may sit on empty
                 * chunks or undrained releases; give those back, retry once */
                pool_reclaim(p);
                r = class_alloc(p, cls, len, over, ret);
        }
        if (r < 0)
                return r;
        stat_add(&p->sh->objects, 1);
        stat_add(&p->sh->object_bytes, len);
        return 0;
}

int pool_alloc(Pool *p, size_t len, PoolHandle *ret) {
        return alloc(p, len, false, ret);
}

int pool_alloc_over(Pool *p, size_t len, PoolHandle *ret) {
        return alloc(p, len, true, ret);
}

void *pool_map(Pool *p, PoolHandle h) {
        return p->base + ((size_t) h << UNIT_SHIFT);
}

size_t pool_object_capacity(Pool *p, PoolHandle h) {
        assert(h != 0 && handle_chunk(h) < p->nr_ids);
        return chunk_class(p, &p->chunks[handle_chunk(h)])->size;
}

#ifndef MADV_DONTNEED_LOCKED
#define MADV_DONTNEED_LOCKED 24 /* Linux 5.18 */
#endif

/* Set once a kernel older than 5.18 refused MADV_DONTNEED_LOCKED. */
static _Atomic bool no_dontneed_locked;

/*
 * Give a chunk's pages back. The daemon normally runs mlockall()ed
 * (sandbox.c), and plain MADV_DONTNEED refuses VM_LOCKED memory with
 * EINVAL; MADV_DONTNEED_LOCKED drops locked and unlocked pages alike
 * (mm/madvise.c, madvise_dontneed_free_valid_vma: only VM_PFNMAP and
 * misaligned hugetlb ranges are refused, neither of which the pool has).
 * Before 5.18 the advice is unknown (EINVAL) and memory cannot be locked
 * and freed at once: plain MADV_DONTNEED then works as long as it is not
 * locked (--no-mlock). It cannot fail on a range we own otherwise; if it
 * did, the memory merely stays resident until the id is reused.
 */
static void chunk_discard(Pool *p, uint32_t id, size_t len) {
        void *addr = p->base + ((size_t) id << SPAN_SHIFT);

        if (p->fd >= 0) {
                /* a store's memory is shared memory: only punching the hole
                 * frees it (MADV_REMOVE would refuse our mlocked mapping) */
                (void) fallocate(p->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                 (off_t) (p->fd_off + ((uint64_t) id << SPAN_SHIFT)), (off_t) len);
                return;
        }
        /* relaxed: a hint, a stale false costs one failed call */
        if (!atomic_load_explicit(&no_dontneed_locked, memory_order_relaxed)) {
                if (madvise(addr, len, MADV_DONTNEED_LOCKED) == 0 || errno != EINVAL)
                        return;
                atomic_store_explicit(&no_dontneed_locked, true, memory_order_relaxed);
        }
        (void) madvise(addr, len, MADV_DONTNEED);
}

/* Return detached empty chunks to the kernel. They have no handles, no
 * pending nodes and belong to no list: this thread owns them. */
static void class_free_chunks(Pool *p, PoolClass *cls, ChunkList l) {
        uint64_t n = 0;

        for (uint32_t id = l.head; id != 0; id = p->chunks[id].next) {
                Chunk *ch = &p->chunks[id];

                /* release: the last handle died before (a new daemon reading
                 * the table finds no entry that names the chunk) */
                atomic_store_explicit(&p->cls_table[id], 0, memory_order_release);
                chunk_discard(p, id, cls->chunk_size);
                free(ch->slack);
                ch->slack = NULL;
                free((void *)ch->shares);
                ch->shares = NULL;
                n++;
        }
        stat_sub(&p->sh->pool_bytes, n * cls->chunk_size);
        stat_sub(&p->bytes, n * cls->chunk_size);
        stat_sub(&p->sh->nr_chunks, n);
        pool_put_ids(p, l.head, l.tail);
}

/* Detach the class's empty chunks that pool_trim() found empty keep_ms
 * ago or more (all of them: keep_ms 0), stamping those it finds for the
 * first time. Under the class mutex. */
static ChunkList class_take_empty(Pool *p, PoolClass *cls, uint64_t now_ms, uint64_t keep_ms) {
        ChunkList l = { 0, 0 };

        if (keep_ms == 0) {
                l = cls->empty;
                cls->empty = (ChunkList) { 0, 0 };
                for (uint32_t id = l.head; id != 0; id = p->chunks[id].next)
                        p->chunks[id].list = LIST_NONE;
                return l;
        }
        for (uint32_t id = cls->empty.head, next; id != 0; id = next) {
                Chunk *ch = &p->chunks[id];

                next = ch->next;
                /* kept as now_ms + 1: 0 is "not yet" */
                if (ch->empty_ms == 0) {
                        ch->empty_ms = now_ms + 1;
                        continue;
                }
                if (now_ms + 1 - ch->empty_ms < keep_ms)
                        continue;
                list_remove(p, &cls->empty, id);
                list_add_tail(p, &l, id);
                ch->list = LIST_NONE;
        }
        return l;
}

static void pool_give_back(Pool *p, uint64_t now_ms, uint64_t keep_ms) {
        for (unsigned k = 0; k < NR_CLASSES; k++) {
                PoolClass *cls = &p->classes[k];
                ChunkList l;

                pthread_mutex_lock(&cls->lock);
                class_drain(p, cls);
                l = class_take_empty(p, cls, now_ms, keep_ms);
                pthread_mutex_unlock(&cls->lock);

                /* madvise outside the lock: allocators of this class go on */
                if (l.head)
                        class_free_chunks(p, cls, l);
        }
}

void pool_reclaim(Pool *p) {
        pool_give_back(p, 0, 0);
}

void pool_trim(Pool *p, uint64_t now_ms, bool keep) {
        pool_give_back(p, now_ms, keep ? POOL_KEEP_EMPTY_MS : 0);
}

uint64_t pool_bytes(Pool *p) {
        return atomic_load_explicit(&p->bytes, memory_order_relaxed);
}

/* ---- compaction ---- */

typedef struct CompactChunk {
        uint32_t id;
        uint16_t used;
} CompactChunk;

static int compact_chunk_cmp(const void *a, const void *b) {
        const CompactChunk *x = a, *y = b;
        return x->used != y->used ? (x->used < y->used ? -1 : 1) : (x->id < y->id ? -1 : x->id > y->id);
}

/*
 * Plan one class under its mutex: its partly used chunks, sparsest first,
 * and how many of them (*ret_take) can be emptied into the free slots of
 * the others, within *budget bytes of objects (taken off it). With evac,
 * those chunks leave the partial list for compaction. Returns the bytes
 * of chunks that would be freed, or -ENOMEM.
 */
static int64_t class_plan(Pool *p, PoolClass *cls, uint64_t *budget, bool evac) {
        size_t n = 0, take = 0;
        uint64_t free_after = 0, moved = 0;

        pthread_mutex_lock(&cls->lock);
        class_drain(p, cls);
        for (uint32_t id = cls->partial.head; id; id = p->chunks[id].next) {
                if (n == p->scratch_cap) {
                        size_t cap = MAX(p->scratch_cap * 2, (size_t)64);
                        CompactChunk *s = realloc(p->scratch, cap * sizeof(*s));
                        if (!s) {
                                pthread_mutex_unlock(&cls->lock);
                                return -ENOMEM;
                        }
                        p->scratch = s;
                        p->scratch_cap = cap;
                }
                p->scratch[n++] = (CompactChunk){ id, p->chunks[id].nr_used };
                free_after += cls->nr_slots - p->chunks[id].nr_used;
        }
        if (free_after < cls->nr_slots) {
                /* not a whole chunk's worth of free slots: nothing to gain */
                pthread_mutex_unlock(&cls->lock);
                return 0;
        }
        qsort(p->scratch, n, sizeof(*p->scratch), compact_chunk_cmp);
        for (; take < n; take++) {
                uint64_t used = p->scratch[take].used, bytes = used * cls->size;
                /* its objects must fit the chunks that stay */
                if (moved + used > free_after - (cls->nr_slots - used) || bytes > *budget)
                        break;
                free_after -= cls->nr_slots - used;
                moved += used;
                *budget -= bytes;
        }
        if (evac && take > 0 && p->nevac + take > p->evac_cap) {
                size_t cap = MAX(p->evac_cap * 2, p->nevac + take);
                uint32_t *v = realloc(p->evac_ids, cap * sizeof(*v));
                if (!v)
                        take = 0;
                else {
                        p->evac_ids = v;
                        p->evac_cap = cap;
                }
        }
        for (size_t i = 0; evac && i < take; i++) {
                uint32_t id = p->scratch[i].id;
                Chunk *ch = &p->chunks[id];
                list_remove(p, &cls->partial, id);
                ch->list = LIST_EVAC;
                ch->evac = 1;
                p->evac_ids[p->nevac++] = id;
        }
        pthread_mutex_unlock(&cls->lock);
        return (int64_t)(take * cls->chunk_size);
}

uint64_t pool_compact_begin(Pool *p, uint64_t max_move, uint64_t min_gain) {
        uint64_t gain = 0, budget = max_move;
        int64_t r;

        assert(p->nevac == 0);
        for (unsigned k = 0; k < NR_CLASSES; k++) {
                r = class_plan(p, &p->classes[k], &budget, false);
                if (r < 0)
                        return 0;
                gain += (uint64_t)r;
        }
        if (gain == 0 || gain < min_gain)
                return 0;
        /* again, for real: the workers went on meanwhile */
        gain = 0;
        budget = max_move;
        for (unsigned k = 0; k < NR_CLASSES; k++) {
                r = class_plan(p, &p->classes[k], &budget, true);
                if (r > 0)
                        gain += (uint64_t)r;
        }
        if (p->nevac)
                stat_add(&p->sh->compactions, 1);
        return gain;
}

bool pool_compact_source(Pool *p, PoolHandle h) {
        uint32_t id = handle_chunk(h);
        return id > 0 && id < p->nr_ids && p->chunks[id].evac;
}

int pool_compact_move(Pool *p, _Atomic uint64_t *e, uint64_t expect, PoolHandle h,
                      uint64_t (*rename)(uint64_t v, PoolHandle nh)) {
        Chunk *src = &p->chunks[handle_chunk(h)], *dst;
        PoolClass *cls = chunk_class(p, src);
        uint32_t sslot = handle_offset(h) / cls->size, id, slot;
        uint8_t slack;

        assert(src->evac);
        /* a shared object has holders this entry does not know of */
        if (atomic_load_explicit(&src->shares[sslot], memory_order_relaxed))
                return 0;
        pthread_mutex_lock(&cls->lock);
        id = cls->partial.head; /* never a source: those are on no list */
        if (!id) {
                pthread_mutex_unlock(&cls->lock);
                return -ENOSPC; /* the workers filled the room: the rest stays */
        }
        dst = &p->chunks[id];
        slot = chunk_take_slot(dst);
        slack = src->slack[sslot];
        dst->slack[slot] = slack;
        chunk_relist(p, cls, id);
        pthread_mutex_unlock(&cls->lock);

        PoolHandle nh = handle_make(id, slot * cls->size);
        size_t len = cls->size - slack;
        /* h cannot be handed out again while its chunk is a source, so
         * its bytes stay the object's whatever happens to the entry;
         * the CAS below tells whether the entry still named it */
        memcpy(pool_map(p, nh), pool_map(p, h), len);
        stat_add(&p->sh->objects, 1);
        stat_add(&p->sh->object_bytes, len);
        /* release: the copy before the entry that names it */
        if (atomic_compare_exchange_strong_explicit(e, &expect, rename(expect, nh), memory_order_acq_rel,
                                                    memory_order_relaxed)) {
                pool_release(p, h);
                stat_add(&p->sh->compact_moved, 1);
                return 1;
        }
        pool_release(p, nh); /* somebody took the page meanwhile: theirs is h */
        return 0;
}

uint64_t pool_compact_end(Pool *p) {
        uint64_t freed = 0;

        for (size_t i = 0; i < p->nevac; i++) {
                uint32_t id = p->evac_ids[i];
                Chunk *ch = &p->chunks[id];
                PoolClass *cls = chunk_class(p, ch);

                pthread_mutex_lock(&cls->lock);
                class_drain(p, cls); /* the releases of what moved */
                ch->evac = 0;
                ch->list = LIST_NONE;
                ChunkList l = { 0, 0 };
                if (ch->nr_used == 0) {
                        /* emptied by the pass: given back now, not kept
                         * warm (pool_trim()), which is what it was for */
                        list_add_tail(p, &l, id);
                        freed += cls->chunk_size;
                } else
                        chunk_relist(p, cls, id);
                pthread_mutex_unlock(&cls->lock);
                if (l.head)
                        class_free_chunks(p, cls, l);
        }
        p->nevac = 0;
        stat_add(&p->sh->compact_freed, freed);
        return freed;
}

void pool_shared_stats(PoolShared *sh, PoolStats *ret) {
        /* relaxed: independent counters, see struct PoolShared */
        *ret = (PoolStats) {
                .pool_bytes = atomic_load_explicit(&sh->pool_bytes, memory_order_relaxed),
                .object_bytes = atomic_load_explicit(&sh->object_bytes, memory_order_relaxed),
                .objects = atomic_load_explicit(&sh->objects, memory_order_relaxed),
                .chunks = atomic_load_explicit(&sh->nr_chunks, memory_order_relaxed),
                .deferred = atomic_load_explicit(&sh->deferred, memory_order_relaxed),
                .compactions = atomic_load_explicit(&sh->compactions, memory_order_relaxed),
                .compact_moved = atomic_load_explicit(&sh->compact_moved, memory_order_relaxed),
                .compact_freed = atomic_load_explicit(&sh->compact_freed, memory_order_relaxed),
        };
}

void pool_get_stats(Pool *p, PoolStats *ret) {
        pool_shared_stats(p->sh, ret);
}

/* ---- life cycle ---- */

static void *reserve(size_t size) {
        void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

        return m == MAP_FAILED ? NULL : m;
}

/* Take what chunk id counts out of the shared counters: its bytes, its
 * live objects, its undrained releases. */
static void chunk_uncount(Pool *p, uint32_t id) {
        Chunk *ch = &p->chunks[id];
        PoolClass *cls = chunk_class(p, ch);
        uint64_t objects = 0, bytes = 0, deferred = 0;

        for (uint32_t slot = 0; slot < cls->nr_slots; slot++) {
                uint32_t w = slot / WORD_BITS;
                uint64_t bit = 1ULL << (slot % WORD_BITS);
                /* relaxed: no other thread uses the pool any more */
                if (atomic_load_explicit(&ch->released[w], memory_order_relaxed) & bit)
                        deferred++;
                else if (!(ch->free[w] & bit)) {
                        objects++;
                        bytes += cls->size - ch->slack[slot];
                }
        }
        stat_sub(&p->sh->pool_bytes, cls->chunk_size);
        stat_sub(&p->sh->nr_chunks, 1);
        stat_sub(&p->sh->objects, objects);
        stat_sub(&p->sh->object_bytes, bytes);
        stat_sub(&p->sh->deferred, deferred);
}

Pool *pool_free(Pool *p) {
        if (!p)
                return NULL;
        if (p->chunks)
                for (uint32_t id = 1; id < p->next_id; id++) {
                        if (p->chunks[id].slack && !p->own_sh)
                                chunk_uncount(p, id);
                        free(p->chunks[id].slack);
                        free((void *)p->chunks[id].shares);
                }
        if (p->chunks)
                munmap(p->chunks, p->chunks_size);
        if (p->base_size)
                munmap(p->base, p->base_size);
        if (p->cls_table_size)
                munmap((void *) p->cls_table, p->cls_table_size);
        for (unsigned k = 0; k < NR_CLASSES; k++)
                pthread_mutex_destroy(&p->classes[k].lock);
        pthread_mutex_destroy(&p->id_lock);
        free(p->evac_ids);
        free(p->scratch);
        if (p->own_sh)
                pool_shared_free(p->sh);
        free(p);
        return NULL;
}

static void pool_freep(Pool **p) {
        pool_free(*p);
}

int pool_shared_new(uint64_t max_bytes, PoolShared **ret) {
        PoolShared *sh = calloc(1, sizeof(*sh));

        if (!sh)
                return -ENOMEM;
        sh->max_bytes = max_bytes;
        *ret = sh;
        return 0;
}

PoolShared *pool_shared_free(PoolShared *sh) {
        free(sh);
        return NULL;
}

static int pool_alloc_struct(PoolShared *sh, Pool **ret) {
        /* aligned_alloc: the classes are cache-line aligned */
        Pool *p = aligned_alloc(_Alignof(Pool), ALIGN_TO(sizeof(Pool), _Alignof(Pool)));
        if (!p)
                return -ENOMEM;
        memset(p, 0, sizeof(*p));
        p->sh = sh;
        p->fd = -1;
        p->id_lock = (pthread_mutex_t) PTHREAD_MUTEX_INITIALIZER;
        for (unsigned k = 0; k < NR_CLASSES; k++)
                class_init(&p->classes[k], k);
        p->next_id = 1; /* id 0 would make handle 0 */
        p->nr_ids = STORE_POOL_IDS;
        p->chunks_size = ALIGN_TO((size_t) p->nr_ids * sizeof(Chunk), ZSWAP_PAGE_SIZE);
        p->chunks = reserve(p->chunks_size);
        if (!p->chunks) {
                free(p);
                return -ENOMEM;
        }
        *ret = p;
        return 0;
}

int pool_new_store(PoolShared *sh, uint8_t *store_map, int store_fd, Pool **ret) {
        Pool *p;
        int r = pool_alloc_struct(sh, &p);

        if (r < 0)
                return r;
        p->base = store_pool(store_map);
        p->fd = store_fd;
        p->fd_off = STORE_POOL_OFF;
        p->cls_table = store_chunk_class(store_map);
        *ret = p;
        return 0;
}

int pool_new(uint64_t max_bytes, Pool **ret) {
        _cleanup_(pool_freep) Pool *p = NULL;
        PoolShared *sh;
        int r;

        r = pool_shared_new(max_bytes, &sh);
        if (r < 0)
                return r;
        r = pool_alloc_struct(sh, &p);
        if (r < 0) {
                pool_shared_free(sh);
                return r;
        }
        p->own_sh = true;
        p->base_size = STORE_POOL_SIZE;
        p->base = reserve(p->base_size);
        p->cls_table_size = ALIGN_TO((size_t) p->nr_ids * 2, ZSWAP_PAGE_SIZE);
        p->cls_table = reserve(p->cls_table_size);
        if (!p->base || !p->cls_table) {
                if (!p->base)
                        p->base_size = 0;
                if (!p->cls_table)
                        p->cls_table_size = 0;
                return -ENOMEM;
        }
        *ret = TAKE_PTR(p);
        return 0;
}
