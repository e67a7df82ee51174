/*
 * restore.c: a client restoring its pages from its store itself, when no
 * daemon takes the store over (zswap_store_restore(), libzswap-internal.h;
 * docs/reliability.md). Part of libzswap's core, apart from the rest of
 * the library because it runs in its own, narrower world: no malloc(), no
 * stdio, no client handle.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "libzswap-internal.h"
#include "protocol.h"
#include "macro.h"
#include "store.h"
#include "uffd-compat.h"
#include "util.h"

/*
 * Nobody writes the store any more, but it is read like any input: every
 * value is checked before use (store.h), and a page whose object fails is
 * left to the kernel (zeros), which hurts this process only. Installs go
 * through our own uffd with UFFDIO_COPY, which wakes a thread waiting on
 * the page. While an address-space event is unread on the uffd the kernel
 * refuses copies (EAGAIN, mmap_changing), so we read and follow the
 * events ourselves, as the daemon would have: a removed or unmapped range
 * is not filled again, a remapped one is filled at its new place, a fork's
 * child is filled through the uffd the event carries.
 *
 * No malloc() and no stdio from here on: glibc's fork() holds every malloc
 * arena lock and the stdio list lock while the kernel waits for somebody
 * to read its FORK event, and that somebody is us. Scratch memory comes
 * from mmap(), the decompression context is made beforehand, and the
 * store is walked here rather than with store_walk() (which allocates; the
 * duplicate-zone check it makes the room for only guards a daemon's
 * index: a zone twice here installs its pages twice, EEXIST).
 */

#define RESTORE_FORK_DEPTH 4       /* forks within forks served during one restore */
#define RESTORE_EAGAIN_TRIES 1000  /* 10 ms polls for an event that never comes */
#define RESTORE_EVENTS_CHUNK 256   /* events per mmap()ed step */

/* One address space being filled: ours, or a child's. */
typedef struct RestoreTarget {
        int uffd;
        /* our own memory, no longer registered: written in place (no uffd) */
        bool direct;
        int pagemap;      /* direct: /proc/self/pagemap, which says what is in place */
        const ZswapSpan *spans; /* direct: the ranges we had registered, the only ones written */
        size_t nspans;
        StoreEvent *ev;   /* the events read from uffd, in order (mmap()ed) */
        size_t nev, cap;
        unsigned depth;   /* 0: ours */
        bool blind;       /* an event could not be kept: install nothing more */
        uint8_t *page;    /* its own: a child is filled while a copy of ours waits to be retried */
} RestoreTarget;

typedef struct Restore {
        uint8_t *map;
        uint8_t *shared; /* the store's shared store (PE_SHARED objects), checked, or NULL */
        CodecDCtx *dctx;
        uint64_t staging, nslots;
        ZswapRestoreStats *st;
        RestoreTarget *t;
        const CodecDict *dict; /* the store's dictionary (PE_DICT objects), or NULL */
        CodecDict dict_ref;
        _Alignas(64) uint8_t page[ZSWAP_PAGE_SIZE]; /* ours */
        uint8_t dict_bytes[CODEC_DICT_MAX];
} Restore;

/*
 * The library's own mappings, known two ways so that the shim's scanner
 * never hands the daemon any of them (preload.c): named "[anon:zswap]" in
 * /proc/PID/maps where the kernel can name mappings, and listed here, for
 * the kernels that cannot (no CONFIG_ANON_VMA_NAME). A full list keeps
 * the mapping unlisted: only the name protects it then.
 *
 * Without a lock: a fork may copy the list while another thread is
 * changing it, and the child must still be able to use it. A slot is
 * claimed by moving start from 0 to 1, filled (end, then start with
 * release), and emptied by start 1, end 0, start 0; a reader takes a slot
 * only when start (acquire) is past 1.
 */
static struct {
        _Atomic uintptr_t start, end;
} own_maps[ZSWAP_OWN_MAPS];

static void own_forget(void *was) {
        for (int i = 0; was && i < ZSWAP_OWN_MAPS; i++) {
                uintptr_t s = (uintptr_t)was;
                if (atomic_compare_exchange_strong_explicit(&own_maps[i].start, &s, 1, memory_order_acq_rel,
                                                            memory_order_relaxed)) {
                        atomic_store_explicit(&own_maps[i].end, 0, memory_order_relaxed);
                        atomic_store_explicit(&own_maps[i].start, 0, memory_order_release);
                        return;
                }
        }
}

static void own_note(void *p, size_t len) {
        for (int i = 0; i < ZSWAP_OWN_MAPS; i++) {
                uintptr_t zero = 0;
                if (atomic_compare_exchange_strong_explicit(&own_maps[i].start, &zero, 1, memory_order_acq_rel,
                                                            memory_order_relaxed)) {
                        atomic_store_explicit(&own_maps[i].end, (uintptr_t)p + len, memory_order_relaxed);
                        atomic_store_explicit(&own_maps[i].start, (uintptr_t)p, memory_order_release);
                        return;
                }
        }
}

size_t zswap_own_mappings(ZswapSpan *spans, size_t max) {
        size_t n = 0;

        for (int i = 0; i < ZSWAP_OWN_MAPS && n < max; i++) {
                uintptr_t s = atomic_load_explicit(&own_maps[i].start, memory_order_acquire);
                uintptr_t e = atomic_load_explicit(&own_maps[i].end, memory_order_relaxed);
                if (s > 1 && e > s)
                        spans[n++] = (ZswapSpan){ s, e };
        }
        return n;
}

/* p (len bytes) is the library's own now; was (moved to p) no longer */
static void name_own(void *p, size_t len, void *was) {
        (void)prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, (unsigned long)p, len, (unsigned long)ZSWAP_OWN_NAME);
        own_forget(was);
        own_note(p, len);
}

void *zswap_scratch_alloc(size_t len) {
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
                return NULL;
        name_own(p, len, NULL);
        return p;
}

/*
 * The library's own small objects (a client, a request waiting for its
 * reply, the list of registered ranges), in mappings of their own rather
 * than the program's heap: under the shim the heap is managed memory, and
 * the agent must never fault on memory whose faults it may be the one to
 * resolve (a move it is making, a daemon it must reach first). A header
 * before each object holds its mapping's length; growth stays in place
 * while the mapping has room, else mremap() moves it.
 */
#define OWN_HDR 16

void *zswap_mem_alloc(size_t n) {
        size_t len = ALIGN_TO(n + OWN_HDR, (size_t)ZSWAP_PAGE_SIZE);
        uint8_t *p = zswap_scratch_alloc(len);
        if (!p)
                return NULL;
        *(size_t *)p = len;
        return p + OWN_HDR;
}

const CodecAlloc zswap_own_alloc = { zswap_mem_alloc, zswap_mem_free };

void zswap_mem_free(void *q) {
        if (q) {
                uint8_t *p = (uint8_t *)q - OWN_HDR;
                zswap_scratch_free(p, *(size_t *)p);
        }
}

void *zswap_mem_realloc(void *q, size_t n) {
        if (!q)
                return zswap_mem_alloc(n);
        uint8_t *p = (uint8_t *)q - OWN_HDR;
        size_t len = *(size_t *)p, want = ALIGN_TO(n + OWN_HDR, (size_t)ZSWAP_PAGE_SIZE);
        if (want <= len)
                return q;
        want = MAX(want, 2 * len); /* amortised: a list grown one entry at a time */
        uint8_t *np = mremap(p, len, want, MREMAP_MAYMOVE);
        if (np == MAP_FAILED)
                return NULL;
        name_own(np, want, p);
        *(size_t *)np = want;
        return np + OWN_HDR;
}

void zswap_scratch_free(void *p, size_t len) {
        if (p) {
                own_forget(p);
                munmap(p, len);
        }
}

static bool target_grow(RestoreTarget *t, size_t want) {
        if (want <= t->cap)
                return true;
        size_t cap = ALIGN_TO(want, (size_t)RESTORE_EVENTS_CHUNK);
        void *n = t->ev ? mremap(t->ev, t->cap * sizeof(*t->ev), cap * sizeof(*t->ev), MREMAP_MAYMOVE)
                        : zswap_scratch_alloc(cap * sizeof(*t->ev));
        if (!n || n == MAP_FAILED)
                return false;
        if (t->ev)
                name_own(n, cap * sizeof(*t->ev), t->ev);
        t->ev = n;
        t->cap = cap;
        return true;
}

static void target_event(RestoreTarget *t, uint64_t start, uint64_t end, uint64_t to) {
        if (!target_grow(t, t->nev + 1)) {
                /* not knowing where memory went, we could fill discarded
                 * memory with old data: the rest reads as zeros instead */
                t->blind = true;
                return;
        }
        t->ev[t->nev++] = (StoreEvent){ start, end, to, true };
}

/* Where the page the store knows at addr is now; false: gone. */
static bool target_where(const RestoreTarget *t, uint64_t addr, uint64_t *ret) {
        if (t->blind)
                return false;
        for (size_t i = 0; i < t->nev; i++)
                if (!store_event_where(&t->ev[i], addr, &addr))
                        return false;
        *ret = addr;
        return true;
}

static void restore_child(Restore *R, RestoreTarget *parent, int ufd);

/* Read and follow what is pending on t's uffd, after waiting up to wait_ms
 * for the first message (an event is announced a moment before it is
 * queued). PAGEFAULT messages need nothing: our copy or the final
 * unregister wakes their thread. */
static void target_drain(Restore *R, RestoreTarget *t, int wait_ms) {
        if (t->direct)
                return;
        for (;;) {
                struct pollfd p = { .fd = t->uffd, .events = POLLIN };
                struct uffd_msg m;

                if (poll(&p, 1, wait_ms) <= 0 || !(p.revents & POLLIN))
                        return;
                wait_ms = 0;
                ssize_t n = read(t->uffd, &m, sizeof(m));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n != (ssize_t)sizeof(m))
                        return;
                if (m.event == UFFD_EVENT_REMOVE || m.event == UFFD_EVENT_UNMAP)
                        target_event(t, m.arg.remove.start, m.arg.remove.end, STORE_EVENT_GONE);
                else if (m.event == UFFD_EVENT_REMAP)
                        target_event(t, m.arg.remap.from, m.arg.remap.from + m.arg.remap.len, m.arg.remap.to);
                else if (m.event == UFFD_EVENT_FORK)
                        restore_child(R, t, (int)m.arg.fork.ufd);
        }
}

/* Is anything in place at addr in our own memory (a page, or one the
 * kernel swapped out)? -1: not a page of ours to write (outside the
 * ranges we had registered, not mapped, a file's), or cannot tell. */
static int page_in_place(const RestoreTarget *t, uint64_t addr) {
        uint64_t pm;
        unsigned char v;
        bool ours = false;

        for (size_t i = 0; i < t->nspans && !ours; i++)
                ours = addr >= t->spans[i].start && addr < t->spans[i].end;
        if (!ours || mincore((void *)(uintptr_t)addr, ZSWAP_PAGE_SIZE, &v) < 0)
                return -1;
        if (pread(t->pagemap, &pm, sizeof(pm), (off_t)(addr / ZSWAP_PAGE_SIZE) * 8) != (ssize_t)sizeof(pm) ||
            (pm & PM_FILE))
                return -1;
        return (pm & (PM_PRESENT | PM_SWAP)) != 0;
}

/* Install src at the page the store knows as addr. */
static void target_install(Restore *R, RestoreTarget *t, uint64_t addr, const void *src) {
        bool child = t->depth > 0;

        if (t->direct) {
                /* our memory, unregistered: a page in place is ours since
                 * the fork (it was not evicted then), anything else the
                 * page the store holds */
                uint64_t dst;
                int in = target_where(t, addr, &dst) ? page_in_place(t, dst) : -1;
                if (in < 0)
                        R->st->gone++;
                else if (in)
                        R->st->present++;
                else {
                        memcpy((void *)(uintptr_t)dst, src, ZSWAP_PAGE_SIZE);
                        R->st->restored++;
                }
                return;
        }
        for (unsigned tries = 0;; tries++) {
                uint64_t dst;
                if (!target_where(t, addr, &dst))
                        break;
                struct uffdio_copy cp = { .dst = dst, .src = (uintptr_t)src, .len = ZSWAP_PAGE_SIZE };
                if (ioctl(t->uffd, UFFDIO_COPY, &cp) == 0) {
                        if (!child)
                                R->st->restored++;
                        return;
                }
                if (errno == EEXIST) {
                        if (!child)
                                R->st->present++;
                        return;
                }
                /* ENOENT: no longer registered or mapped; ESRCH: the
                 * process is gone; anything else: we cannot */
                if (errno != EAGAIN || tries >= RESTORE_EAGAIN_TRIES)
                        break;
                target_drain(R, t, 10);
        }
        if (!child)
                R->st->gone++;
}

/* A page whose data is lost to this process: only the daemon's second
 * tier had it, or its object does not decode. Poisoned, its next access
 * is a SIGBUS (as for a swap page the kernel cannot read back) instead of
 * a page of zeros; counted in *lost (the tier's or the bad ones). */
static void target_poison(Restore *R, RestoreTarget *t, uint64_t addr, uint64_t *lost) {
        uint64_t dst;

        if (t->direct) {
                /* in place, it is ours; else it is lost (no uffd to poison
                 * it with): counted, the caller decides */
                if (target_where(t, addr, &dst) && page_in_place(t, dst) == 0)
                        (*lost)++;
                return;
        }
        if (t->depth == 0)
                (*lost)++;
        if (!target_where(t, addr, &dst))
                return;
        struct uffdio_poison p = { .range = { .start = dst, .len = ZSWAP_PAGE_SIZE } };
        (void)ioctl(t->uffd, UFFDIO_POISON, &p);
}

static void restore_entry(Restore *R, uint64_t addr, uint64_t e) {
        uint64_t o = pe_state(e) == PE_LOADING ? pe_loading_origin(e) : e;
        const void *src = R->t->page;

        switch (pe_state(o)) {
        case PE_MOVING:
        case PE_STAGED:
                /* in its staging slot, or it never left (EEXIST) */
                if (pe_slot(o) >= R->nslots) {
                        target_poison(R, R->t, addr, &R->st->bad);
                        return;
                }
                src = (const void *)(uintptr_t)(R->staging + (uint64_t)pe_slot(o) * ZSWAP_PAGE_SIZE);
                break;
        case PE_STORED:
        case PE_SAME: {
                int r = store_entry_content(R->map, R->shared, R->dctx, R->dict, e, R->t->page);
                if (r < 0) {
                        target_poison(R, R->t, addr, r == -EREMOTE ? &R->st->tier : &R->st->bad);
                        return;
                }
                if (r == 0)
                        return;
                break;
        }
        default:
                /* EMPTY, REMOVED: nothing held; CLEAN: resident, and if it
                 * went away unseen (MADV_FREE) zero is its content */
                return;
        }
        target_install(R, R->t, addr, src);
}

/* Every entry of every leaf whose directory slot passes the checks
 * store_walk() makes of it (a bad one is skipped, not the rest). */
static void restore_walk(Restore *R) {
        StoreSuper *s = store_super(R->map);
        /* acquire: pairs with the daemon's publication of a leaf, as in
         * store_walk(); the daemon is gone, so it only orders our reads */
        uint32_t nl = MIN(atomic_load_explicit(&s->leaves, memory_order_acquire), STORE_LEAVES_MAX);
        _Atomic uint64_t *dir = store_dir(R->map);

        for (uint32_t i = 0; i < nl; i++) {
                uint64_t d = atomic_load_explicit(&dir[i], memory_order_acquire);
                uint64_t zone = d & ~STORE_DIR_USED;
                if (d == 0)
                        continue;
                if (!(d & STORE_DIR_USED) || zone % (STORE_LEAF_ENTRIES * ZSWAP_PAGE_SIZE) || zone >= PINDEX_MAX_ADDR) {
                        R->st->bad += R->t->depth == 0;
                        continue;
                }
                _Atomic uint64_t *leaf = store_leaf(R->map, i);
                for (unsigned j = 0; j < STORE_LEAF_ENTRIES; j++) {
                        /* relaxed: the writer is gone; a value like any other, checked */
                        uint64_t e = atomic_load_explicit(&leaf[j], memory_order_relaxed);
                        if (e)
                                restore_entry(R, zone + (uint64_t)j * ZSWAP_PAGE_SIZE, e);
                }
        }
}

/* A child forked while we restore: its memory is ours as of the fork, so
 * it gets every page we had not put back yet (those we had, it inherited:
 * EEXIST). Then its uffd is closed: ours was the only reference, so the
 * kernel unregisters its memory and wakes its waiters. */
static void restore_child(Restore *R, RestoreTarget *parent, int ufd) {
        RestoreTarget child = { .uffd = ufd, .pagemap = -1, .depth = parent->depth + 1, .blind = parent->blind };

        if (child.depth <= RESTORE_FORK_DEPTH && target_grow(&child, MAX(parent->nev, (size_t)1)) &&
            (child.page = zswap_scratch_alloc(ZSWAP_PAGE_SIZE))) {
                if (parent->nev)
                        memcpy(child.ev, parent->ev, parent->nev * sizeof(*child.ev));
                child.nev = parent->nev;
                RestoreTarget *saved = R->t;
                R->t = &child;
                restore_walk(R);
                target_drain(R, &child, 0);
                R->t = saved;
                R->st->children++;
        }
        zswap_scratch_free(child.ev, child.cap * sizeof(*child.ev));
        zswap_scratch_free(child.page, ZSWAP_PAGE_SIZE);
        safe_close(ufd);
}

static void unregister_span(int uffd, uint64_t start, uint64_t end) {
        struct uffdio_range r = { .start = start, .len = end - start };
        if (end > start)
                (void)ioctl(uffd, UFFDIO_UNREGISTER, &r);
}

/* The store mapped and checked, and a decompression context for its
 * codec: the caller's (dctx[codec]) or, failing that, one made now in
 * *own (which is not fork-safe). *out is set whenever it was allocated,
 * for restore_close(). */
static int restore_open(int store_fd, int shared_fd, CodecDCtx *const *dctx, Restore **out, CodecDCtx **own) {
        Restore *R = zswap_scratch_alloc(sizeof(Restore));
        int r;

        *out = R;
        *own = NULL;
        if (!R)
                return -ENOMEM;
        r = store_map(store_fd, false, &R->map);
        if (r == 0)
                r = store_check(R->map, NULL, 0);
        if (r == 0) {
                uint32_t codec = store_super(R->map)->codec;
                R->dctx = dctx ? dctx[codec] : NULL;
                if (!R->dctx)
                        r = codec_dctx_new_in((CodecKind)codec, &zswap_own_alloc, own);
                if (!R->dctx)
                        R->dctx = *own;
        }
        /* a shared store that is not the one the store names leaves the
         * pages of its objects lost (counted as bad), not the others */
        if (r == 0 && shared_fd >= 0 && store_map(shared_fd, false, &R->shared) == 0 &&
            store_check_shared(R->shared, R->map, NULL, 0) < 0) {
                store_unmap(R->shared);
                R->shared = NULL;
        }
        /* a dictionary that cannot be read leaves its objects' pages
         * lost (counted as bad), not the others */
        int n = r == 0 ? store_dict(R->map, R->dict_bytes) : 0;
        if (n > 0) {
                codec_dict_init_ref(&R->dict_ref, R->dict_bytes, (size_t)n);
                R->dict = &R->dict_ref;
        }
        return r;
}

/* Every page of the store into target t: an event the daemon read and
 * died before it finished comes first (a bad one, which only this client
 * could have written, is ignored), then the page index. */
static void restore_run(Restore *R, RestoreTarget *t, uint64_t staging, uint64_t staging_len,
                        ZswapRestoreStats *st) {
        StoreEvent ev;

        R->staging = staging;
        R->nslots = staging_len / ZSWAP_PAGE_SIZE;
        R->st = st;
        R->t = t;
        t->page = R->page;
        if (store_journal_event(R->map, &ev) > 0)
                target_event(t, ev.start, ev.end, ev.to);
        restore_walk(R);
}

static void restore_close(Restore *R, RestoreTarget *t, CodecDCtx *own) {
        zswap_scratch_free(t->ev, t->cap * sizeof(*t->ev));
        codec_dctx_free(own);
        if (R) {
                store_unmap(R->map);
                store_unmap(R->shared);
        }
        zswap_scratch_free(R, sizeof(Restore));
}

int zswap_store_restore(int uffd, int store_fd, int shared_fd, CodecDCtx *const *dctx, uint64_t staging,
                        uint64_t staging_len, const ZswapSpan *ranges, size_t nranges, ZswapRestoreStats *st) {
        const size_t sr_size = STORE_RANGES_MAX * sizeof(StoreRange);
        RestoreTarget t = { .uffd = uffd, .pagemap = -1 };
        StoreRange *sr = NULL;
        CodecDCtx *own;
        Restore *R;
        int n = 0;

        int r = restore_open(store_fd, shared_fd, dctx, &R, &own);
        if (r == 0) {
                restore_run(R, &t, staging, staging_len, st);
                sr = zswap_scratch_alloc(sr_size);
                n = sr ? store_ranges(R->map, sr, STORE_RANGES_MAX) : 0;
                /* events still pending: a fork to serve, remaps to follow */
                target_drain(R, &t, 0);
        }
        /* every range we know of stops being managed, wherever it went:
         * the threads still waiting wake and find their page, or zeros
         * where nothing was held */
        for (size_t i = 0; i < nranges; i++)
                unregister_span(uffd, ranges[i].start, ranges[i].end);
        for (int i = 0; i < n; i++)
                unregister_span(uffd, sr[i].start, sr[i].end);
        for (size_t i = 0; i < t.nev; i++)
                if (t.ev[i].to != STORE_EVENT_GONE)
                        unregister_span(uffd, t.ev[i].to, t.ev[i].to + (t.ev[i].end - t.ev[i].start));
        zswap_scratch_free(sr, sr_size);
        restore_close(R, &t, own);
        return r;
}

int zswap_store_restore_forked(int store_fd, int shared_fd, CodecDCtx *const *dctx, uint64_t fork_token, uint64_t staging,
                               uint64_t staging_len, const ZswapSpan *ranges, size_t nranges,
                               ZswapRestoreStats *st) {
        RestoreTarget t = { .uffd = -1, .direct = true, .pagemap = -1, .spans = ranges, .nspans = nranges };
        CodecDCtx *own;
        Restore *R;

        int r = restore_open(store_fd, shared_fd, dctx, &R, &own);
        StoreSuper *s = r == 0 ? store_super(R->map) : NULL;
        /* only the store of the daemon our fork was announced to (acquire:
         * it wrote that before it changed anything more): from the fork's
         * instant until that daemon read its event, the kernel refuses
         * every install in the parent (UFFDIO_COPY and ZEROPAGE fail with
         * EAGAIN while a fork event is pending), nothing of it was evicted
         * (FORK_PREPARE), and from the event on it was held (fork_held());
         * unless it says it served the parent again */
        if (r == 0 && (fork_token == 0 || atomic_load_explicit(&s->fork_announced, memory_order_acquire) != fork_token ||
                       atomic_load_explicit(&s->fork_served, memory_order_acquire) == fork_token ||
                       atomic_load_explicit(&s->state, memory_order_relaxed) != STORE_ACTIVE))
                r = -ESTALE;
        if (r == 0 && (t.pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC)) < 0)
                r = -errno;
        if (r == 0) {
                restore_run(R, &t, staging, staging_len, st);
                /* read again: a daemon that served the parent meanwhile
                 * (it cannot have: it is gone, but the check is cheap)
                 * makes what we read worthless */
                if (atomic_load_explicit(&s->fork_served, memory_order_acquire) == fork_token)
                        r = -ESTALE;
                else if (st->tier || st->bad || t.blind)
                        r = -EREMOTE;
        }
        safe_close(t.pagemap);
        restore_close(R, &t, own);
        return r;
}
