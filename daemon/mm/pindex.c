/*
 * pindex.c: lock-free radix tree of page entries.
 *
 * Four levels of 512 slots cover a 48-bit address space (36-bit page
 * numbers), like an x86-64 page table. Inner nodes hold child pointers,
 * leaves hold the 64-bit entries. Nodes are created on demand with a
 * compare-and-swap of a NULL child pointer (release, so a reader that
 * acquires the pointer sees a zeroed node) and are never freed before the
 * whole index is, so a reader can never hold a pointer to freed memory.
 * That is what lets the fault path look pages up without any lock: the
 * cost is 4 KiB of leaf per 2 MiB of address space that ever held an entry.
 *
 * Concurrency of entries themselves is the callers' business (CAS on each
 * entry); see docs/page-lifecycle.md.
 *
 * A daemon's index keeps its leaves' entries in the client's store
 * (store.h): a leaf takes the next leaf slot of the store, and once its
 * node is in the tree (the CAS won) its zone goes into the store's
 * directory, before any entry of it can be written, so that whoever reads
 * the store finds every entry through the directory (store_walk()).
 */
#include <stdlib.h>
#include <string.h>

#include "inject.h"
#include "macro.h"
#include "pindex.h"
#include "store.h"

#define LEVEL_BITS 9
#define FANOUT (1u << LEVEL_BITS)
#define LEVELS 4

typedef struct Node {
        _Atomic(struct Node *) child[FANOUT]; /* at level 1: Leaf pointers */
} Node;

/* A leaf: the entries of one 2 MiB zone (in the store, or our own page)
 * and what reclaim knows of them. */
typedef struct Leaf {
        _Atomic uint64_t *entry;
        PageMeta meta;
} Leaf;

struct PageIndex {
        Node root;
        _Atomic uint64_t nodes; /* written by any creator, relaxed: statistics */
        uint8_t *store;         /* the store the leaves live in, NULL: their own pages */
};

static unsigned level_index(uint64_t vpn, int level) {
        return (unsigned)(vpn >> (LEVEL_BITS * level)) & (FANOUT - 1);
}

int pindex_new(PageIndex **ret) {
        PageIndex *pi = calloc(1, sizeof(*pi));
        if (!pi)
                return -ENOMEM;
        *ret = pi;
        return 0;
}

static void leaf_free(PageIndex *pi, Leaf *l) {
        if (!pi->store)
                free((void *)l->entry);
        free(l);
}

static void node_free(PageIndex *pi, Node *n, int level) {
        if (!n)
                return;
        for (unsigned i = 0; i < FANOUT; i++) {
                Node *c = atomic_load_explicit(&n->child[i], memory_order_relaxed);
                if (!c)
                        continue;
                if (level == 1)
                        leaf_free(pi, (Leaf *)c);
                else
                        node_free(pi, c, level - 1);
        }
        free(n);
}

PageIndex *pindex_free(PageIndex *pi) {
        if (!pi)
                return NULL;
        for (unsigned i = 0; i < FANOUT; i++)
                node_free(pi, atomic_load_explicit(&pi->root.child[i], memory_order_relaxed), LEVELS - 2);
        free(pi);
        return NULL;
}

int pindex_new_store(uint8_t *store, PageIndex **ret) {
        int r = pindex_new(ret);
        if (r == 0)
                (*ret)->store = store;
        return r;
}

/* A new leaf's entries: the store's next leaf slot (*id), or a page. */
static _Atomic uint64_t *leaf_entries(PageIndex *pi, uint32_t *id) {
        if (pi->store) {
                /* relaxed: a counter; the directory slot, written after,
                 * is what says the leaf is used */
                uint32_t i = atomic_fetch_add_explicit(&store_super(pi->store)->leaves, 1, memory_order_relaxed);
                if (i >= STORE_LEAVES_MAX)
                        return NULL; /* the store's leaf area is full */
                *id = i;
                return store_leaf(pi->store, i);
        }
        void *e = INJECT_ALLOC(aligned_alloc(ZSWAP_PAGE_SIZE, ZSWAP_PAGE_SIZE));
        if (e)
                memset(e, 0, ZSWAP_PAGE_SIZE);
        return e;
}

static Node *child_get(PageIndex *pi, Node *n, unsigned idx, bool create, bool leaf, uint64_t vpn) {
        /* acquire: pairs with the release CAS below, so the new node's
         * zeroed contents are visible before we read them */
        Node *c = atomic_load_explicit(&n->child[idx], memory_order_acquire);
        if (c || !create)
                return c;

        Node *fresh = INJECT_ALLOC(calloc(1, leaf ? sizeof(Leaf) : sizeof(Node)));
        uint32_t id = 0;
        if (!fresh)
                return NULL;
        if (leaf && !(((Leaf *)fresh)->entry = leaf_entries(pi, &id))) {
                free(fresh);
                return NULL;
        }
        Node *expected = NULL;
        if (atomic_compare_exchange_strong_explicit(&n->child[idx], &expected, fresh,
                                                    memory_order_acq_rel, memory_order_acquire)) {
                atomic_fetch_add_explicit(&pi->nodes, 1, memory_order_relaxed);
                if (leaf && pi->store) {
                        uint64_t zone = (vpn & ~(uint64_t)(FANOUT - 1)) << ZSWAP_PAGE_SHIFT;
                        /* release: before any entry of the leaf (the caller
                         * writes them after we return) */
                        atomic_store_explicit(&store_dir(pi->store)[id], zone | STORE_DIR_USED,
                                              memory_order_release);
                }
                return fresh;
        }
        /* somebody else installed one first: use theirs (a store's leaf
         * slot is then left unused: its directory slot stays 0) */
        if (leaf)
                leaf_free(pi, (Leaf *)fresh);
        else
                free(fresh);
        return expected;
}

static Leaf *leaf_get(PageIndex *pi, uint64_t addr, bool create) {
        if (addr >= PINDEX_MAX_ADDR)
                return NULL;
        uint64_t vpn = addr >> ZSWAP_PAGE_SHIFT;
        Node *n = &pi->root;
        for (int level = LEVELS - 1; level > 0; level--) {
                n = child_get(pi, n, level_index(vpn, level), create, level == 1, vpn);
                if (!n)
                        return NULL;
        }
        return (Leaf *)n;
}

_Atomic uint64_t *pindex_entry(PageIndex *pi, uint64_t addr, bool create) {
        Leaf *l = leaf_get(pi, addr, create);
        return l ? &l->entry[level_index(addr >> ZSWAP_PAGE_SHIFT, 0)] : NULL;
}

PageMeta *pindex_meta(PageIndex *pi, uint64_t addr, bool create) {
        Leaf *l = leaf_get(pi, addr, create);
        return l ? &l->meta : NULL;
}

static int walk_node(Node *n, int level, uint64_t base_vpn, uint64_t svpn, uint64_t evpn, PIndexFn fn, void *ud) {
        uint64_t span = (uint64_t)1 << (LEVEL_BITS * level);

        for (unsigned i = 0; i < FANOUT; i++) {
                uint64_t lo = base_vpn + i * span, hi = lo + span;
                if (hi <= svpn || lo >= evpn)
                        continue;
                if (level == 0) {
                        _Atomic uint64_t *e = &((Leaf *)n)->entry[i];
                        if (atomic_load_explicit(e, memory_order_acquire) == 0)
                                continue;
                        int r = fn(ud, lo << ZSWAP_PAGE_SHIFT, e);
                        if (r)
                                return r;
                        continue;
                }
                Node *c = atomic_load_explicit(&n->child[i], memory_order_acquire);
                if (!c)
                        continue;
                int r = walk_node(c, level - 1, lo, svpn, evpn, fn, ud);
                if (r)
                        return r;
        }
        return 0;
}

int pindex_walk(PageIndex *pi, uint64_t start, uint64_t end, PIndexFn fn, void *ud) {
        if (end > PINDEX_MAX_ADDR)
                end = PINDEX_MAX_ADDR;
        if (start >= end)
                return 0;
        return walk_node(&pi->root, LEVELS - 1, 0, start >> ZSWAP_PAGE_SHIFT,
                         DIV_ROUND_UP(end, ZSWAP_PAGE_SIZE), fn, ud);
}

static int walk_meta(Node *n, int level, uint64_t base_vpn, PMetaFn fn, void *ud) {
        uint64_t span = (uint64_t)1 << (LEVEL_BITS * level);
        for (unsigned i = 0; i < FANOUT; i++) {
                Node *c = atomic_load_explicit(&n->child[i], memory_order_acquire);
                if (!c)
                        continue;
                uint64_t lo = base_vpn + i * span;
                int r = level == 1 ? fn(ud, lo << ZSWAP_PAGE_SHIFT, &((Leaf *)c)->meta)
                                   : walk_meta(c, level - 1, lo, fn, ud);
                if (r)
                        return r;
        }
        return 0;
}

int pindex_walk_meta(PageIndex *pi, PMetaFn fn, void *ud) {
        return walk_meta(&pi->root, LEVELS - 1, 0, fn, ud);
}

uint64_t pindex_bytes(PageIndex *pi) {
        return (atomic_load_explicit(&pi->nodes, memory_order_relaxed) + 1) * sizeof(Node);
}
