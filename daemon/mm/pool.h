/*
 * pool.h: the compressed-object pool.
 *
 * Compressed pages (1..POOL_MAX_OBJECT bytes) are packed by size class into
 * chunks of anonymous memory, in the manner of the kernel's zsmalloc. An
 * object is named by a 32-bit handle; 0 is never a valid handle, so callers
 * may use it as "none". See pool.c for the design and the threading rules.
 */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct Pool Pool;
typedef struct PoolShared PoolShared; /* counters and bound every client's pool shares */
typedef uint32_t PoolHandle; /* 0 is never a valid handle */

#define POOL_MAX_OBJECT 4096

typedef struct PoolStats {
        uint64_t pool_bytes;   /* bytes of chunk memory currently held (what the pool costs in RAM) */
        uint64_t object_bytes; /* sum of the sizes requested by live objects */
        uint64_t objects;      /* live objects */
        uint64_t chunks;       /* live chunks */
        uint64_t deferred;     /* released objects whose slot is not yet reusable (see pool_reclaim) */
        uint64_t compactions;  /* compaction passes that took chunks to empty */
        uint64_t compact_moved; /* objects they moved */
        uint64_t compact_freed; /* bytes of chunks they emptied */
} PoolStats;

/* The daemon's counters and bound: max_bytes caps the pool_bytes of all
 * pools made with it together (0 = no cap). */
int pool_shared_new(uint64_t max_bytes, PoolShared **ret);
PoolShared *pool_shared_free(PoolShared *sh);
void pool_shared_stats(PoolShared *sh, PoolStats *ret);

/* A pool in the pool area of a client's store (store.h): store_map is the
 * store's mapping, store_fd its memfd (for punching freed chunks out); both
 * stay the caller's and must outlive the pool. */
int pool_new_store(PoolShared *sh, uint8_t *store_map, int store_fd, Pool **ret);

/* A pool of its own anonymous memory with its own counters (tests,
 * benchmarks). max_bytes caps pool_bytes (0 = no cap). Returns 0, or
 * -ENOMEM if the address space cannot be reserved. */
int pool_new(uint64_t max_bytes, Pool **ret);


/* Unmap everything (a store's memory stays as it is) and take the pool's
 * chunks and objects out of the shared counters. Accepts NULL, returns
 * NULL. No other call may run. */
Pool *pool_free(Pool *p);

/* Allocate an object of len bytes. Returns 0 and a handle in *ret, -EINVAL
 * for len 0 or > POOL_MAX_OBJECT, -ENOSPC if it would take pool_bytes past
 * max_bytes, -ENOMEM if out of memory or address space. May block on a
 * per-size-class mutex; call it from worker threads, not the fault path,
 * except on a pool no other thread can see yet: a fork child's, filled by
 * the fault thread that read the fork event before it hands the child on
 * (daemon/fault/fork.c event_fork()), whose locks nobody else can hold. */
int pool_alloc(Pool *p, size_t len, PoolHandle *ret);

/* pool_alloc() that may take pool_bytes past max_bytes (one chunk per
 * call at most): the second tier's stubs (tier.c), 16 bytes each, which
 * replace objects a hundred times their size, must not fail because the
 * pool is full: that is when they are needed. */
int pool_alloc_over(Pool *p, size_t len, PoolHandle *ret);

/* The object's bytes (pool_object_capacity() of them are writable). Pure
 * arithmetic: lock-free, O(1). Valid until the handle is released. */
void *pool_map(Pool *p, PoolHandle h);

/* The size class of h: at least the len it was allocated with. Lock-free. */
size_t pool_object_capacity(Pool *p, PoolHandle h);

/* Give the object back. Safe on the fault path: never takes a lock, never
 * blocks, never enters the kernel. The slot becomes reusable later, when
 * pool_alloc() or pool_reclaim() processes the release. h == 0 is ignored. */
void pool_release(Pool *p, PoolHandle h);
/* One more holder of h (as after fork, when parent and child hold the same
 * page): each holder calls pool_release() once, the last one frees it.
 * Lock-free. -EOVERFLOW past 255 extra holders (copy instead). */
int pool_share(Pool *p, PoolHandle h);
/* How many hold h (1 + its pool_share()s not yet released): a look, exact
 * only if no other holder can come or go meanwhile. Lock-free. */
unsigned pool_holders(Pool *p, PoolHandle h);

/* Process every deferred release and return chunks that became empty to the
 * kernel (madvise(MADV_DONTNEED), or a hole punched in a store). Takes the
 * size-class mutexes in turn and makes system calls. */
void pool_reclaim(Pool *p);

/* How long pool_trim() keeps an empty chunk mapped, from the first trim
 * that finds it empty (pool.c, "Warm empty chunks"). */
#define POOL_KEEP_EMPTY_MS 1000

/* pool_reclaim() for the periodic callers: process every deferred release,
 * and give back the empty chunks that a trim found empty POOL_KEEP_EMPTY_MS
 * or more before now_ms (every empty chunk if !keep: the pool is near its
 * bound). Call it at least once a second, so that a chunk goes back within
 * about two. As pool_reclaim(), any thread. */
void pool_trim(Pool *p, uint64_t now_ms, bool keep);

/* This pool's chunk memory alone, in bytes. Lock-free. */
uint64_t pool_bytes(Pool *p);

/*
 * Compaction: objects moved out of the sparsest chunks of each class into
 * the free slots of the others, so that those chunks empty and go back to
 * the kernel (pool.c, "Compaction"). One thread at a time per pool, and a
 * pass is begin, moves, end:
 *
 * pool_compact_begin() plans every class and, if the chunks it would
 * empty come to min_gain bytes or more, takes them out of allocation (at
 * most max_move bytes of objects to move in all). Returns the bytes it
 * would free; 0: nothing taken, no pass (call nothing else).
 *
 * pool_compact_source(): is h in one of those chunks? Lock-free.
 *
 * pool_compact_move(): h is a source object that the entry *e named when
 * the caller loaded expect from it (acquire). Copies the object into a
 * slot of another chunk of its class and swaps *e from expect to
 * rename(expect, new handle). Returns 1 if it moved (h is released), 0 if
 * the entry had changed or the object is shared (nothing done: whoever
 * changed the entry owns h), -ENOSPC if the class has no room left.
 * Takes the class mutex for the allocation only; the fault path is never
 * blocked: an entry a fault took is simply not moved.
 *
 * pool_compact_end() puts the chunks back (those it emptied are given
 * back to the kernel, the others stay as they are), ends the pass and
 * returns the bytes of the chunks it emptied.
 */
uint64_t pool_compact_begin(Pool *p, uint64_t max_move, uint64_t min_gain);
bool pool_compact_source(Pool *p, PoolHandle h);
int pool_compact_move(Pool *p, _Atomic uint64_t *e, uint64_t expect, PoolHandle h,
                      uint64_t (*rename)(uint64_t v, PoolHandle nh));
uint64_t pool_compact_end(Pool *p);

/* A snapshot of the counters (of every pool sharing p's PoolShared); each
 * is read on its own (relaxed), so fields may disagree slightly while
 * other threads work. */
void pool_get_stats(Pool *p, PoolStats *ret);
