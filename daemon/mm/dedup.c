/*
 * dedup.c: see dedup.h.
 *
 * The table is open addressing with linear probing over records of a
 * 64-bit key (the object's length and the CRC-32C of its bytes: a hint,
 * every match is checked byte for byte) and its handle (0: free slot).
 * It grows at half full; a record is deleted by shifting the ones after
 * it back, so a lookup never meets a hole in its run.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "crc32c.h"
#include "dedup.h"
#include "macro.h"
#include "store.h"

#define TABLE_MIN 1024

typedef struct Rec {
        uint64_t key;
        PoolHandle h; /* 0: free */
        uint32_t len;
} Rec;

struct Dedup {
        _Atomic unsigned refs;
        uid_t uid;
        uint32_t codec;
        uint32_t tag;
        int fd;
        uint8_t *map;
        Pool *pool;

        pthread_mutex_t lock; /* the table and the counters below */
        Rec *rec;
        size_t cap, count;    /* cap: a power of two */
        size_t cursor;        /* where the next sweep starts */
        uint64_t bytes, hits, stored, swept;
};

static size_t home(const Dedup *d, uint64_t key) {
        return (size_t)((key * 0x9e3779b97f4a7c15ull) >> 32) & (d->cap - 1);
}

static void rec_put(Rec *rec, size_t cap, Rec r) {
        size_t mask = cap - 1, i = (size_t)((r.key * 0x9e3779b97f4a7c15ull) >> 32) & mask;
        while (rec[i].h)
                i = (i + 1) & mask;
        rec[i] = r;
}

static int grow(Dedup *d) {
        size_t cap = d->cap ? d->cap * 2 : TABLE_MIN;
        Rec *rec = calloc(cap, sizeof(*rec));
        if (!rec)
                return -ENOMEM;
        for (size_t i = 0; i < d->cap; i++)
                if (d->rec[i].h)
                        rec_put(rec, cap, d->rec[i]);
        free(d->rec);
        d->rec = rec;
        d->cap = cap;
        return 0;
}

/* Take record i out; the records of the run after it move back so that
 * each stays reachable from its home slot. */
static void rec_delete(Dedup *d, size_t i) {
        size_t mask = d->cap - 1, j = i;

        for (;;) {
                j = (j + 1) & mask;
                if (!d->rec[j].h)
                        break;
                size_t k = home(d, d->rec[j].key);
                /* k cyclically in (i, j]: the record at j stays where it is */
                if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
                        continue;
                d->rec[i] = d->rec[j];
                i = j;
        }
        d->rec[i] = (Rec){ 0 };
        d->count--;
}

int dedup_new(PoolShared *sh, uint32_t codec, uid_t uid, uint64_t daemon_id, Dedup **ret) {
        Dedup *d = calloc(1, sizeof(*d));
        int r;

        if (!d)
                return -ENOMEM;
        atomic_init(&d->refs, 1);
        d->uid = uid;
        d->codec = codec;
        d->fd = -1;
        pthread_mutex_init(&d->lock, NULL);
        r = grow(d);
        if (r == 0) {
                r = store_create(codec, STORE_F_SHARED, daemon_id, &d->map);
                d->fd = r < 0 ? -1 : r;
        }
        if (r >= 0)
                r = pool_new_store(sh, d->map, d->fd, &d->pool);
        if (r < 0) {
                dedup_unref(d);
                return r;
        }
        /* its name in its members' stores: never 0 */
        uint64_t mix = (daemon_id ^ ((uint64_t)uid << 17) ^ (uint64_t)(uintptr_t)d) * 0x9e3779b97f4a7c15ull;
        d->tag = (uint32_t)(mix >> 32) | 1;
        store_super(d->map)->shared_tag = d->tag;
        *ret = d;
        return 0;
}

Dedup *dedup_ref(Dedup *d) {
        /* relaxed: the caller holds a reference already */
        atomic_fetch_add_explicit(&d->refs, 1, memory_order_relaxed);
        return d;
}

Dedup *dedup_unref(Dedup *d) {
        if (!d)
                return NULL;
        /* acq_rel: the last holder sees what every other did */
        if (atomic_fetch_sub_explicit(&d->refs, 1, memory_order_acq_rel) != 1)
                return NULL;
        /* the store's memory stays as it is: members may have kept their
         * stores for the next daemon, whose entries name its objects */
        pool_free(d->pool);
        if (d->map)
                store_unmap(d->map);
        safe_close(d->fd);
        free(d->rec);
        pthread_mutex_destroy(&d->lock);
        free(d);
        return NULL;
}

bool dedup_unused(Dedup *d) {
        /* acquire: a member's last unref (acq_rel) came before */
        return atomic_load_explicit(&d->refs, memory_order_acquire) == 1;
}

uid_t dedup_uid(const Dedup *d) {
        return d->uid;
}

uint32_t dedup_codec(const Dedup *d) {
        return d->codec;
}

Pool *dedup_pool(Dedup *d) {
        return d->pool;
}

uint8_t *dedup_map(Dedup *d) {
        return d->map;
}

uint32_t dedup_tag(const Dedup *d) {
        return d->tag;
}

int dedup_fd_ro(Dedup *d) {
        return store_reopen_ro(d->fd);
}

int dedup_get(Dedup *d, const void *obj, uint32_t len, bool may_store, PoolHandle *h) {
        uint64_t key = (uint64_t)len << 32 | crc32c(0, obj, len);
        bool full = false;
        PoolHandle n;
        int r;

        if (len == 0 || len > POOL_MAX_OBJECT)
                return -EINVAL;
        pthread_mutex_lock(&d->lock);
        for (size_t i = home(d, key); d->rec[i].h; i = (i + 1) & (d->cap - 1)) {
                PoolHandle c = d->rec[i].h;
                if (d->rec[i].key != key || memcmp(pool_map(d->pool, c), obj, len) != 0)
                        continue;
                /* the table's own reference keeps it: sharing cannot race
                 * its free */
                if (pool_share(d->pool, c) < 0) {
                        full = true; /* a copy of its own, below, or another one */
                        continue;
                }
                d->hits++;
                pthread_mutex_unlock(&d->lock);
                *h = c;
                return 1;
        }
        if (!may_store) {
                pthread_mutex_unlock(&d->lock);
                return full ? -EOVERFLOW : -ENOENT;
        }
        r = (d->count + 1) * 2 > d->cap ? grow(d) : 0;
        if (r == 0)
                r = pool_alloc(d->pool, len, &n);
        if (r < 0) {
                pthread_mutex_unlock(&d->lock);
                return r;
        }
        memcpy(pool_map(d->pool, n), obj, len);
        /* the first holder is the table, the second the caller's entry:
         * a fresh object has room for both */
        (void)pool_share(d->pool, n);
        rec_put(d->rec, d->cap, (Rec){ .key = key, .h = n, .len = len });
        d->count++;
        d->bytes += len;
        d->stored++;
        pthread_mutex_unlock(&d->lock);
        *h = n;
        return 0;
}

unsigned dedup_sweep(Dedup *d, unsigned max) {
        unsigned n = 0;

        pthread_mutex_lock(&d->lock);
        for (unsigned k = 0; k < max && d->count > 0; k++) {
                size_t i = d->cursor & (d->cap - 1);
                Rec r = d->rec[i];
                /* only the table holds it: no entry names it, and none can
                 * come but through the table, whose lock we hold */
                if (r.h && pool_holders(d->pool, r.h) == 1) {
                        rec_delete(d, i); /* a record of the run may move into i: looked at next */
                        pool_release(d->pool, r.h);
                        d->bytes -= r.len;
                        d->swept++;
                        n++;
                        continue;
                }
                d->cursor++;
        }
        pthread_mutex_unlock(&d->lock);
        return n;
}

void dedup_stats(Dedup *d, DedupStats *ret) {
        pthread_mutex_lock(&d->lock);
        *ret = (DedupStats){ .objects = d->count, .bytes = d->bytes, .hits = d->hits, .stored = d->stored,
                             .swept = d->swept };
        pthread_mutex_unlock(&d->lock);
        ret->pool_bytes = pool_bytes(d->pool);
}
