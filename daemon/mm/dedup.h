/*
 * dedup.h: a user's shared store, where identical pages of that user's
 * clients are held once.
 *
 * A Dedup is a store (store.h) of its own, of one user (a dedup domain:
 * docs/security.md says who joins one), whose pool holds objects any
 * member's entries may name: such an entry carries PE_SHARED, and its
 * handle is of this pool, not of the client's own. Every member holds a
 * read-only descriptor of the store beside its own store, so that what
 * its entries name outlives the daemon like the rest (docs/reliability.md).
 *
 * The objects are found by their compressed bytes: the same page
 * compressed by the same codec gives the same bytes, so a table keyed by
 * a hash of them, checked byte for byte, finds a page's object without
 * decompressing anything. The table holds a reference of its own to each
 * object it names (pool_share()); each entry naming one holds another.
 * Entries let theirs go with pool_release(), lock-free, on any thread;
 * dedup_sweep() drops the table's reference of objects nobody else holds.
 *
 * Threads: dedup_get() and dedup_sweep() take the table's mutex (workers,
 * the manager; never the fault path); the pool, its map and fd are
 * constant; references are atomic.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "pool.h"

typedef struct Dedup Dedup;

typedef struct DedupStats {
        uint64_t objects;   /* objects in the table */
        uint64_t bytes;     /* their compressed bytes */
        uint64_t pool_bytes; /* the store's chunk memory */
        uint64_t hits;      /* pages that found their object there */
        uint64_t stored;    /* objects stored anew */
        uint64_t swept;     /* objects let go when no entry named them any more */
} DedupStats;

/* A new shared store of codec for uid, its objects counted in sh. */
int dedup_new(PoolShared *sh, uint32_t codec, uid_t uid, uint64_t daemon_id, Dedup **ret);
Dedup *dedup_ref(Dedup *d);
/* The last reference frees the table and the pool (the store's memory
 * stays as it is for the members that hold it). NULL-safe; returns NULL. */
Dedup *dedup_unref(Dedup *d);

/* Does only the caller hold d? */
bool dedup_unused(Dedup *d);
uid_t dedup_uid(const Dedup *d);
uint32_t dedup_codec(const Dedup *d);
Pool *dedup_pool(Dedup *d);
uint8_t *dedup_map(Dedup *d);
/* The store's tag (StoreSuper.shared_tag), which its members' stores name. */
uint32_t dedup_tag(const Dedup *d);
/* A read-only descriptor of the store, for a member (store_reopen_ro()). */
int dedup_fd_ro(Dedup *d);

/*
 * The object holding the len compressed bytes at obj (of the store's
 * codec), with a reference taken for the caller's entry: 1 if it was
 * there already, 0 if it was stored now (only if may_store), -ENOENT if
 * it is not there and may not be stored; -ENOSPC or -ENOMEM if it could
 * not be stored, -EOVERFLOW if the object has as many holders as it may
 * have. *h is the handle (in dedup_pool()).
 */
int dedup_get(Dedup *d, const void *obj, uint32_t len, bool may_store, PoolHandle *h);

/* Let go of up to max objects that no entry names any more (the table's
 * reference is their last); the sweep goes on from where the last one
 * stopped. Returns the objects let go. */
unsigned dedup_sweep(Dedup *d, unsigned max);

void dedup_stats(Dedup *d, DedupStats *ret);
