/*
 * adopt.c: taking a client's store over from a daemon that died.
 *
 * The client hands back its uffd and the (read-only) store it kept
 * (ZMSG_ADOPT). Nothing in the store is trusted: it is mapped read-only,
 * its superblock, range table and leaf directory are checked (store.c),
 * and what we keep is copied into a store of our own, entry by entry,
 * each object checked against the old store's class table before its
 * bytes are copied. A store that fails any check is refused as a whole
 * (-EBADMSG): its client restores its pages from it itself, and only it
 * can be hurt by what it holds. Copying, rather than taking the memory
 * over in place, keeps the rule that only the daemon writes a live store
 * and costs one memcpy per compressed byte, once per restart.
 *
 * What reads the client (its smaps and maps, its pagemap, the staging
 * slots) and the copies run on an mm-job thread (adopt.h, AdoptWalk): the
 * client's mmap lock, which each read waits for, is the client's to hold.
 * The manager checks the store before and admits the ranges after.
 *
 * Every quota holds as if the pages had come by REGISTER and eviction
 * (docs/security.md): the ranges are admitted as REGISTER admits them
 * (nothing but private anonymous writable memory maps them, though a
 * part may be unmapped while an munmap's event is pending: the walk;
 * outside the staging area; within the user's max_regions and
 * max_registered: adopt_admit(), once the walk is back), and each
 * object copied is paid from the user's max_pool and must fit under the
 * pool bound (pool_max and the allocator's cap). Each entry gets a copy
 * of its own, counted on its own, so entries that name one object cost
 * what they would have cost evicted one by one. A page whose object does
 * not fit is installed in the client (UFFDIO_COPY), resident, as a page
 * eviction found no room for stays resident: no page of an honest client
 * is lost, and a store forged to hold more than its user may keep costs
 * that user's own memory. A page that cannot be installed either (an
 * event pending on the uffd: -EAGAIN) is kept after all, past the bounds
 * as every page was before they held here (refusing the store would lose
 * its second-tier pages), counted for its user, whose own evictions then
 * wait, and logged. Second-tier stubs (16 bytes for a page on the tier)
 * are kept past the bounds: they are what makes room.
 *
 * What the old daemon was doing when it died decides what an entry means
 * (docs/page-lifecycle.md, "A daemon that dies"):
 *   STORED, SAME     kept (the object copied; for a page on the second
 *                    tier, its stub, and its blocks referenced again)
 *   EMPTY            kept if it carries the incompressible mark
 *   CLEAN, REMOVED   dropped: the page is resident, or was zapped
 *   LOADING          an install was under way: if the page is present it
 *                    happened (dropped), else the entry it came from is kept
 *   MOVING, STAGED   an eviction was under way: a UFFDIO_MOVE is atomic, so
 *                    the page is either still at its address (dropped: it
 *                    is resident) or in its staging slot, from which it is
 *                    read and stored now (the client empties its staging
 *                    area once we reply); in neither (zapped meanwhile):
 *                    dropped
 */
#include <errno.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <stdlib.h>
#include <string.h>

#include "adopt.h"
#include "codec.h"
#include "log.h"
#include "macro.h"
#include "manager.h"
#include "mmclient.h"
#include "pool.h"
#include "store.h"
#include "reclaim.h"
#include "tier.h"
#include "uffd-compat.h"
#include "users.h"
#include "util.h"

typedef struct AdoptCtx {
        MMClient *mm;
        uint8_t *old;
        uint8_t *shared; /* the old store's shared store, checked; NULL: none handed over */
        StoreData old_data, shared_data; /* what the two files hold (store.h): holes are not read */
        const StoreEvent *ev; /* the journal's event, or NULL */
        const StoreRange *ranges;
        size_t nranges;
        uint32_t nslots;
        CodecCCtx *cctx;
        CodecDCtx *dctx;
        uint8_t page[ZSWAP_PAGE_SIZE];
        uint8_t cbuf[ZSWAP_PAGE_SIZE];
        uint64_t held, from_staging, dropped;
        uint64_t installed; /* pages put back in the client for want of quota or pool room */
        uint64_t over;      /* pages kept past them: the client could not take them (install_err) */
        int install_err;
        uint64_t tier, tier_lost; /* pages on the second tier; of them, with a stub this daemon cannot use */
        uint64_t shared_kept, shared_private; /* shared pages kept shared; kept as the client's own */
        char *why;
        size_t why_len;
} AdoptCtx;

static bool in_ranges(const AdoptCtx *a, uint64_t addr) {
        size_t lo = 0, hi = a->nranges;
        while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (a->ranges[mid].end <= addr)
                        lo = mid + 1;
                else if (a->ranges[mid].start > addr)
                        hi = mid;
                else
                        return true;
        }
        return false;
}

static int present(MMClient *mm, uint64_t addr, bool *ret) {
        uint64_t pm;
        int r = mmclient_pagemap(mm, addr, 1, &pm);
        if (r < 0)
                return r;
        *ret = (pm & (PM_PRESENT | PM_SWAP)) != 0;
        return 0;
}

/* An entry not carried over: counted, and the first few named in the log
 * (a page that reads as zeros after a restart can be traced to one). */
static void drop(AdoptCtx *a, uint64_t addr, uint64_t v, const char *why) {
        if (a->dropped++ < 8)
                log_info("pid %d: adopt: entry %#llx at %#llx dropped: %s", (int)mmclient_pid(a->mm),
                         (unsigned long long)v, (unsigned long long)addr, why);
}

static int bad(AdoptCtx *a, uint64_t addr, const char *what) {
        snprintf(a->why, a->why_len, "%s at %#llx", what, (unsigned long long)addr);
        return -EBADMSG;
}

/* The page whose object is len bytes at src (compressed as entry value v
 * says, or raw when len is a page), installed at addr in the client: no
 * entry is kept for it.
 * 1; 0 if it cannot be installed now (an event pending on the uffd:
 * EAGAIN); -EBADMSG if the object does not decompress. */
static int install(AdoptCtx *a, uint64_t addr, uint64_t v, const void *src, uint32_t len) {
        const void *page = src;
        if (len != ZSWAP_PAGE_SIZE) {
                if (pe_decompress(a->dctx, mmclient_dict(a->mm), v, src, len, a->page) < 0)
                        return bad(a, addr, "an object that does not decompress");
                page = a->page;
        }
        struct uffdio_copy c = { .dst = addr, .src = (uintptr_t)page, .len = ZSWAP_PAGE_SIZE,
                                 .mode = UFFDIO_COPY_MODE_DONTWAKE }; /* woken with its range (attach.c, do_adopt()) */
        if (ioctl(a->mm->uffd, UFFDIO_COPY, &c) == 0 || errno == EEXIST) {
                /* EEXIST: the page is there, as a page that never left */
                a->installed++;
                return 1;
        }
        a->install_err = errno;
        return 0;
}

/* Store len bytes (compressed as entry value v says, or the raw page when
 * len is a page) as a new object of the new store, paid from the user's max_pool and under the
 * pool bound; a page that does not fit is installed in the client
 * instead (0 and *nv 0). */
static int keep_object(AdoptCtx *a, uint64_t addr, uint64_t v, const void *src, uint32_t len, uint64_t *nv) {
        MMClient *mm = a->mm;
        PoolHandle h;
        bool paid = mmclient_quota_take(mm, len);
        int r = !paid ? -EDQUOT : core_pool_room(mm->core, len) ? pool_alloc(mm->pool, len, &h) : -ENOSPC;
        if (r < 0 && paid)
                mmclient_quota_give(mm, len);
        if (r == -EDQUOT || r == -ENOSPC) {
                *nv = 0;
                if ((r = install(a, addr, v, src, len)) != 0)
                        return r < 0 ? r : 0;
                /* the client is changing its address space (an event of
                 * its uffd waits for us): keep the object after all, past
                 * the bounds if need be, counted for its user, whose
                 * evictions then wait until it is under max_pool again.
                 * Refusing the store would leave its client to restore
                 * itself, which cannot read the second tier: a page lost */
                r = pool_alloc_over(mm->pool, len, &h);
                if (r < 0) {
                        snprintf(a->why, a->why_len, "no room in the pool for the page at %#llx, which cannot be "
                                 "installed (%s): %s", (unsigned long long)addr, strerror(a->install_err),
                                 strerror(-r));
                        return r;
                }
                a->over++;
        }
        if (r < 0) {
                snprintf(a->why, a->why_len, "no room in the pool: %s", strerror(-r));
                return r;
        }
        memcpy(pool_map(mm->pool, h), src, len);
        *nv = pe_make_stored(h, len) | (v & PE_CODEC);
        if ((*nv & PE_STRONG) && mm->store)
                store_mark_strong(mm->store);
        return 0;
}

/* A second tier's stub: past the pool's bound if need be (16 bytes that
 * stand for a page on the tier; refusing the store would leave its client
 * to restore itself, which cannot read the tier). */
static int keep_stub(AdoptCtx *a, const TierStub *s, uint64_t *nv) {
        PoolHandle h;
        int r = pool_alloc_over(a->mm->pool, sizeof(*s), &h);
        if (r < 0) {
                snprintf(a->why, a->why_len, "no room in the pool: %s", strerror(-r));
                return r;
        }
        memcpy(pool_map(a->mm->pool, h), s, sizeof(*s));
        *nv = pe_make_stored(h, sizeof(*s));
        return 0;
}

/*
 * A page on the second tier: its stub is copied, and its blocks get the
 * reference the dead daemon's count had (the free-space map is rebuilt
 * from the stubs adopted). A stub this daemon cannot use (no [tier], a
 * bad stub) is kept all the same: the page's first fault finds it lost
 * and poisons it (SIGBUS) and says so, where dropping it would turn the
 * page into zeros. 1 and *nv, 0 to drop, -errno.
 */
static int keep_tier(AdoptCtx *a, uint64_t addr, uint64_t v, const void *obj, uint32_t len, uint64_t *nv) {
        Tier *t = a->mm->core->tier;
        TierStub s;
        int r;

        if (len != sizeof(s))
                return bad(a, addr, "a second-tier entry without a stub");
        memcpy(&s, obj, sizeof(s));
        if (!t || tier_stub_check(t, &s) < 0)
                a->tier_lost++;
        else if (!tier_get(t, &s)) {
                drop(a, addr, 0, "its second-tier blocks have too many holders");
                return 0;
        }
        r = keep_stub(a, &s, nv);
        if (r < 0) {
                if (t && tier_stub_check(t, &s) == 0)
                        tier_put(t, &s);
                return r;
        }
        *nv |= PE_TIER | (v & PE_CODEC);
        if ((*nv & PE_STRONG) && a->mm->store)
                store_mark_strong(a->mm->store);
        a->tier++;
        return 1;
}

/* The page an eviction left in staging slot `slot`, stored anew. */
static int keep_staged(AdoptCtx *a, uint64_t addr, uint64_t v, uint64_t *nv) {
        uint32_t slot = pe_slot(v);
        MMClient *mm = a->mm;
        bool here;
        uint32_t fill;
        int r;

        if (slot >= a->nslots)
                return bad(a, addr, "staging slot out of range");
        if ((r = present(mm, addr, &here)) < 0)
                return r;
        if (here)
                return 0; /* it never left */
        if ((r = present(mm, mmclient_slot_addr(mm, slot), &here)) < 0)
                return r;
        if (!here) {
                drop(a, addr, v, "in neither its place nor its staging slot (zapped while it was being evicted)");
                return 0;
        }
        if ((r = mmclient_read(mm, mmclient_slot_addr(mm, slot), a->page, ZSWAP_PAGE_SIZE)) < 0)
                return r;
        a->from_staging++;
        if (page_same_filled(a->page, &fill)) {
                *nv = pe_make_same(fill);
                return 0;
        }
        int n = codec_compress(a->cctx, a->page, a->cbuf, ZSWAP_PAGE_SIZE - 1);
        return n > 0 ? keep_object(a, addr, 0, a->cbuf, (uint32_t)n, nv)
                     : keep_object(a, addr, 0, a->page, ZSWAP_PAGE_SIZE, nv);
}

/* Give back what a kept entry nv holds before it is counted or
 * published: its object, and its blocks' reference if on the tier. */
static void unkeep(MMClient *mm, uint64_t nv) {
        if (pe_state(nv) != PE_STORED)
                return;
        if (pe_is_tier(nv) && mm->core->tier) {
                TierStub s = mmclient_tier_stub(mm, nv);
                tier_put(mm->core->tier, &s);
        }
        pool_release(mmclient_pool_of(mm, nv), pe_handle(nv));
}

/* An object of the old store's shared store: into the client's shared
 * store here, found there if another client brought it already (its
 * bytes are its bytes, whoever hands them over: a page of another
 * client matches only if it compresses to the very same bytes), else
 * stored there, paid as keep_object() pays; a client in no shared store
 * here keeps it as its own. */
static int keep_shared(AdoptCtx *a, uint64_t addr, uint64_t v, const void *obj, uint32_t len, uint64_t *nv) {
        MMClient *mm = a->mm;
        PoolHandle h;
        int r = mm->dedup ? dedup_get(mm->dedup, obj, len, false, &h) : -ENOENT;

        if (r != 1 && mm->dedup && mmclient_quota_take(mm, len)) {
                r = core_pool_room(mm->core, len) ? dedup_get(mm->dedup, obj, len, true, &h) : -ENOSPC;
                if (r != 0)
                        mmclient_quota_give(mm, len);
        }
        if (r < 0) {
                a->shared_private++;
                return keep_object(a, addr, v & ~PE_SHARED, obj, len, nv);
        }
        a->shared_kept++;
        *nv = pe_make_stored(h, len) | PE_SHARED | (v & PE_STRONG);
        if (mm->store)
                store_mark_shared(mm->store);
        if ((*nv & PE_STRONG) && mm->store)
                store_mark_strong(mm->store);
        return 0;
}

/* Is addr, not carried there, where the journal's mremap put pages? */
static bool landed(const AdoptCtx *a, uint64_t addr) {
        const StoreEvent *ev = a->ev;
        return ev && ev->to != STORE_EVENT_GONE && addr >= ev->to && addr - ev->to < ev->end - ev->start;
}

static int adopt_cb(void *ud, uint64_t addr, _Atomic uint64_t *e) {
        AdoptCtx *a = ud;
        MMClient *mm = a->mm;
        /* relaxed: the old store has no writer we could synchronise with;
         * every value is checked below */
        uint64_t v = atomic_load_explicit(e, memory_order_relaxed), nv = 0;
        const void *obj;
        bool here;
        int r;

        /* an entry the journal's mremap carries, or one already where that
         * mremap put the pages (the kernel replaced it: ours wins) */
        bool carried = a->ev && addr >= a->ev->start && addr < a->ev->end;
        if (a->ev && !store_event_where(a->ev, addr, &addr)) {
                drop(a, addr, v, "the journal's event took it");
                return 0;
        }
        if (!in_ranges(a, addr)) {
                drop(a, addr, v, "outside the ranges (an unregister was under way)");
                return 0;
        }
        if (pe_state(v) == PE_LOADING) {
                if ((r = present(mm, addr, &here)) < 0)
                        return r;
                if (here)
                        return 0; /* installed before the end */
                v = pe_loading_origin(v);
        }
        switch (pe_state(v)) {
        case PE_EMPTY:
                nv = v & PE_FLAG_INCOMPRESSIBLE;
                break;
        case PE_SAME:
                nv = pe_make_same(pe_fill(v));
                break;
        case PE_STORED:
                if (v & PE_SHARED) {
                        if (!a->shared || (v & (PE_TIER | PE_DICT)))
                                return bad(a, addr, "a shared entry without its shared store");
                        if (!store_object_data(&a->shared_data, pe_handle(v), pe_clen(v)))
                                return bad(a, addr, "a shared entry names an object never written");
                        if (store_object(a->shared, pe_handle(v), pe_clen(v), &obj, NULL) < 0)
                                return bad(a, addr, "a shared entry names no object");
                        if ((r = keep_shared(a, addr, v, obj, pe_clen(v), &nv)) < 0)
                                return r;
                        break;
                }
                if (!store_object_data(&a->old_data, pe_handle(v), pe_clen(v)))
                        return bad(a, addr, "entry names an object never written");
                if (store_object(a->old, pe_handle(v), pe_clen(v), &obj, NULL) < 0)
                        return bad(a, addr, "entry names no object");
                if ((v & PE_DICT) && (!(v & PE_STRONG) || !mmclient_dict(mm)))
                        return bad(a, addr, "an object made with a dictionary the store lacks");
                if (pe_is_tier(v)) {
                        if ((r = keep_tier(a, addr, v, obj, pe_clen(v), &nv)) <= 0)
                                return r;
                        break;
                }
                if ((r = keep_object(a, addr, v, obj, pe_clen(v), &nv)) < 0)
                        return r;
                break;
        case PE_MOVING:
        case PE_STAGED:
                if ((r = keep_staged(a, addr, v, &nv)) < 0)
                        return r;
                break;
        default:
                return 0; /* CLEAN, REMOVED: resident or zapped */
        }
        if (nv == 0 && carried) {
                /* installed (or nothing to keep): an entry kept before for
                 * what the address held is stale */
                _Atomic uint64_t *old = pindex_entry(mm->index, addr, false);
                if (old && atomic_load_explicit(old, memory_order_relaxed) != 0) {
                        unsigned st = pe_state(atomic_load_explicit(old, memory_order_relaxed));
                        a->held -= st == PE_STORED || st == PE_SAME;
                        mmclient_entry_drop(mm, old);
                }
        }
        if (nv == 0)
                return 0;
        if (!carried && landed(a, addr)) {
                /* where the journal's mremap put pages, the page is there
                 * already (the one it carried, installed): this entry is
                 * for what the address held before */
                if ((r = present(mm, addr, &here)) < 0) {
                        unkeep(mm, nv);
                        return r;
                }
                if (here) {
                        drop(a, addr, nv, "the journal's mremap carried a page here");
                        unkeep(mm, nv);
                        return 0;
                }
        }
        _Atomic uint64_t *ne = pindex_entry(mm->index, addr, true);
        if (!ne) {
                snprintf(a->why, a->why_len, "no room for the index");
                unkeep(mm, nv);
                return -ENOMEM;
        }
        if (atomic_load_explicit(ne, memory_order_relaxed) != 0) {
                /* two entries for one page: only the journal's mremap
                 * brings one here, and the page it carries is what the
                 * address holds now (the other may be the same entry:
                 * the dead daemon writes an entry at its new place before
                 * it clears the old one, events.c remap_cb()) */
                drop(a, addr, nv, carried ? "a page the journal's mremap carried here replaces it" : "the journal's mremap carried a page here");
                if (!carried) {
                        unkeep(mm, nv);
                        return 0;
                }
                unsigned st = pe_state(atomic_load_explicit(ne, memory_order_relaxed));
                a->held -= st == PE_STORED || st == PE_SAME;
                mmclient_entry_drop(mm, ne);
        }
        /* relaxed: the client is not served yet; fault_watch() publishes */
        atomic_store_explicit(ne, nv, memory_order_relaxed);
        if (pe_state(nv) == PE_STORED) {
                if (pe_is_tier(nv))
                        mmclient_count_tier(mm, mmclient_tier_stub(mm, nv).len, 1);
                mmclient_count_stored(mm, nv, 1);
                a->held++;
        } else if (pe_state(nv) == PE_SAME) {
                atomic_fetch_add_explicit(&mm->st.same_pages, 1, memory_order_relaxed);
                a->held++;
        }
        return 0;
}

int adopt_check(Manager *m, uint8_t *old, char *why, size_t len) {
        StoreSuper *s = store_super(old);
        int r = store_check(old, why, len);

        if (r < 0)
                return r;
        /* relaxed: read once, checked */
        uint32_t state = atomic_load_explicit(&s->state, memory_order_relaxed);
        if (state == STORE_RELEASED) {
                snprintf(why, len, "its daemon gave every page back");
                return -ENOENT;
        }
        if (s->daemon_id == m->core.daemon_id) {
                snprintf(why, len, "this daemon still holds it");
                return -EBUSY;
        }
        if (s->codec != (uint32_t)m->cfg.codec) {
                snprintf(why, len, "compressed with %s, this daemon runs %s", codec_to_string((CodecKind)s->codec),
                         codec_to_string(m->cfg.codec));
                return -EBADMSG;
        }
        if (s->features & STORE_F_SHARED) {
                snprintf(why, len, "a shared store, not a client's");
                return -EBADMSG;
        }
        if ((s->features & STORE_F_WP_ASYNC) && !m->core.wp_async) {
                snprintf(why, len, "registered for write tracking, which this daemon lacks");
                return -EBADMSG;
        }
        return 0;
}

static int cmp_range(const void *x, const void *y) {
        const StoreRange *a = x, *b = y;
        return a->start < b->start ? -1 : a->start > b->start;
}

/* The range table as it is after ev: what lay in [ev->start, ev->end) is
 * cut out (munmap, mremap; an MADV_DONTNEED changes nothing) and, for an
 * mremap, put back where it went. Applying it to a table the dead daemon
 * had changed already (it moves the ranges after the entries) changes
 * nothing. Each of the n ranges the event cuts leaves its head in place
 * and adds its tail and, for an mremap, the part moved: up to 3n pieces
 * before they are merged. t holds cap pieces, and no piece is written past
 * them whatever n and ev are (-EBADMSG instead). Returns the new count, or
 * -EBADMSG if the result does not fit a store. */
static int journal_ranges(StoreRange *t, int n, int cap, const StoreEvent *ev) {
        int m = n;
        if (n > cap)
                return -EBADMSG;
        if (!ev->unmapped)
                return n; /* MADV_DONTNEED: the range stays registered */
        for (int i = 0; i < n; i++) {
                StoreRange r = t[i];
                uint64_t s = MAX(r.start, ev->start), e = MIN(r.end, ev->end);
                if (s >= e)
                        continue;
                if (cap - m < (ev->to != STORE_EVENT_GONE ? 2 : 1))
                        return -EBADMSG;
                t[i] = (StoreRange){ r.start, s }; /* may be empty: dropped below */
                t[m++] = (StoreRange){ e, r.end };
                if (ev->to != STORE_EVENT_GONE)
                        t[m++] = (StoreRange){ ev->to + (s - ev->start), ev->to + (e - ev->start) };
        }
        qsort(t, (size_t)m, sizeof(*t), cmp_range);
        int k = 0;
        for (int i = 0; i < m; i++) {
                if (t[i].start >= t[i].end)
                        continue;
                if (k && t[k - 1].end >= t[i].start)
                        t[k - 1].end = MAX(t[k - 1].end, t[i].end);
                else
                        t[k++] = t[i];
        }
        return k <= STORE_RANGES_MAX ? k : -EBADMSG;
}

/* Room for what the journal's event may split (journal_ranges()): each
 * range a head, a tail and a moved part. */
#define ADOPT_RANGES_ROOM (3 * STORE_RANGES_MAX)

int adopt_ranges(uint8_t *old, StoreRange **ret, StoreEvent *ev, bool *has_ev, char *why, size_t len) {
        StoreRange *t = malloc(ADOPT_RANGES_ROOM * sizeof(*t));
        if (!t)
                return -ENOMEM;
        int n = store_ranges(old, t, STORE_RANGES_MAX);
        int j = n < 0 ? 0 : store_journal_event(old, ev);
        if (n >= 0 && j < 0)
                snprintf(why, len, "bad event in the journal");
        else if (n < 0)
                snprintf(why, len, "bad range table");
        if (n >= 0 && j > 0 && (n = journal_ranges(t, n, ADOPT_RANGES_ROOM, ev)) < 0)
                snprintf(why, len, "too many ranges after the journal's event");
        if (n < 0 || j < 0) {
                free(t);
                return n < 0 ? n : j;
        }
        *has_ev = j > 0;
        *ret = t;
        return n;
}

int adopt_admit(Manager *m, MMClient *mm, const StoreRange *ranges, int n, char *why, size_t len) {
        uint64_t bytes = 0, sa = mm->staging_addr, se = sa + (uint64_t)mm->nlanes * LANE_SLOTS * ZSWAP_PAGE_SIZE;
        int r;

        for (int i = 0; i < n; i++) {
                if (ranges[i].start < se && ranges[i].end > sa) {
                        snprintf(why, len, "a range over its staging area");
                        return -EINVAL;
                }
                bytes += ranges[i].end - ranges[i].start;
        }
        if ((r = users_check_adopt(m, mm, (uint64_t)n, bytes)) < 0) {
                snprintf(why, len, "%d ranges of %llu bytes: over its user's max_regions or max_registered", n,
                         (unsigned long long)bytes);
                return r;
        }
        return 0;
}

/* The old store's dictionary, checked and digested, becomes mm's (and
 * goes into mm's store) before any entry made with it: 0, -EBADMSG with
 * why if zstd does not take it, -errno. */
static int adopt_dict(MMClient *mm, uint8_t *old, char *why, size_t len) {
        _cleanup_free_ uint8_t *buf = malloc(CODEC_DICT_MAX);
        CodecDict *d;

        if (!buf)
                return -ENOMEM;
        int n = store_dict(old, buf);
        if (n <= 0) {
                if (n < 0)
                        snprintf(why, len, "a bad dictionary");
                return n;
        }
        int r = codec_dict_new(buf, (size_t)n, &d);
        if (r == -EINVAL) {
                snprintf(why, len, "a dictionary zstd does not take");
                return -EBADMSG;
        }
        if (r == 0 && (r = mmclient_dict_set(mm, d)) < 0)
                codec_dict_unref(d);
        if (r < 0 && !why[0])
                snprintf(why, len, "no room for its dictionary: %s", strerror(-r));
        return r;
}

/* What w's store holds for w's ranges, copied into mm (AdoptWalk). */
static int adopt_entries(MMClient *mm, AdoptWalk *w) {
        AdoptCtx *a = calloc(1, sizeof(*a));
        char *why = w->why;
        size_t len = sizeof(w->why);
        int r;

        if (!a)
                return -ENOMEM;
        *a = (AdoptCtx){ .mm = mm, .old = w->old, .shared = w->shared, .ev = w->has_ev ? &w->ev : NULL,
                         .ranges = w->ranges, .nranges = (size_t)w->n, .nslots = mm->nlanes * LANE_SLOTS,
                         .why = why, .why_len = len, .old_data = { .fd = w->old_fd },
                         .shared_data = { .fd = w->shared ? w->shared_fd : -1 } };
        r = codec_cctx_new(w->codec, w->level, &a->cctx);
        if (r == 0)
                r = codec_dctx_new(w->codec, &a->dctx);
        if (r == 0)
                r = adopt_dict(mm, w->old, why, len);
        if (r == 0)
                r = store_walk_data(w->old, &a->old_data, adopt_cb, a);
        if (r == -EBADMSG && !why[0])
                snprintf(why, len, "bad leaf directory");
        if (r == 0) {
                w->held = a->held;
                if (a->tier_lost)
                        log_error("pid %d: %llu adopted pages are on a second tier this daemon cannot read (%s): "
                                  "they are lost, and poisoned (SIGBUS) when touched",
                                  (int)mmclient_pid(mm), (unsigned long long)a->tier_lost,
                                  mm->core->tier ? "a stub that does not fit its [tier] backing" : "no [tier] backing configured");
                if (a->tier)
                        log_info("pid %d: %llu adopted pages are on the second tier", (int)mmclient_pid(mm),
                                 (unsigned long long)a->tier);
                if (a->over)
                        log_warn("pid %d: %llu adopted pages kept past its user's max_pool or the pool bound: "
                                 "the client was changing its address space and could not take them resident (%s)",
                                 (int)mmclient_pid(mm), (unsigned long long)a->over, strerror(a->install_err));
                if (a->installed)
                        log_info("pid %d: %llu adopted pages installed in the client, resident: no room for them "
                                 "under its user's max_pool or the pool bound", (int)mmclient_pid(mm),
                                 (unsigned long long)a->installed);
                if (a->shared_kept || a->shared_private)
                        log_info("pid %d: %llu adopted pages shared with its user's processes, %llu of them its own "
                                 "now", (int)mmclient_pid(mm), (unsigned long long)a->shared_kept,
                                 (unsigned long long)a->shared_private);
                if (a->from_staging || a->dropped)
                        log_info("pid %d: adopted %llu pages (%llu from staging), %llu entries dropped",
                                 (int)mmclient_pid(mm), (unsigned long long)a->held, (unsigned long long)a->from_staging,
                                 (unsigned long long)a->dropped);
        }
        codec_cctx_free(a->cctx);
        codec_dctx_free(a->dctx);
        free(a);
        return r;
}

/*
 * A dead daemon may have read an event and died before it acted on it: an
 * munmap() then left its range in the store's table, with entries that a
 * new mapping at that address must never see. So the table is cut to what
 * is still mapped and registered in the client (VmFlags "um", or "uw" for
 * a range never evicted from: mmclient_region_arm(); /proc/PID/smaps; the
 * staging area is in no range of the table), but only when no event is
 * pending: the kernel
 * counts an address-space change from before it happens until its event
 * is read (mmap_changing), and UFFDIO_WRITEPROTECT says EAGAIN while the
 * count is not 0. A pending event (an mremap, say, whose range must keep
 * its entries until the event moves them) keeps the table as it is, and
 * the events fix it in order; a change begun after the check finds the
 * snapshot still true and sends its event as usual.
 */
int adopt_live_ranges(MMClient *mm, StoreRange *r, int n) {
        char path[64], *line = NULL;
        size_t cap = 0, nv = 0, nvmax = 0;
        StoreRange *v = NULL, cur = { 0, 0 };
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/smaps", (int)mmclient_pid(mm));
        f = fopen(path, "re");
        if (!f)
                return n;
        while (getline(&line, &cap, f) > 0) {
                unsigned long long s, e;
                if (sscanf(line, "%llx-%llx ", &s, &e) == 2 && strchr(line, '-') < strchr(line, ' ')) {
                        cur = (StoreRange){ s, e };
                        continue;
                }
                if (strncmp(line, "VmFlags:", 8) || !vmflags_uffd_registered(line))
                        continue;
                if (nv == nvmax) {
                        StoreRange *g = realloc(v, (nvmax = nvmax ? 2 * nvmax : 64) * sizeof(*v));
                        if (!g)
                                goto out;
                        v = g;
                }
                v[nv++] = cur;
        }
        if (uffd_event_under_way(mm->uffd))
                goto out; /* an event is pending: the table stands */
        /* both lists are sorted and without overlaps: intersect in place
         * (never more pieces than STORE_RANGES_MAX) */
        int m = 0;
        uint64_t dropped = 0, kept = 0;
        StoreRange *res = malloc(STORE_RANGES_MAX * sizeof(*res));
        if (!res)
                goto out;
        for (int i = 0; i < n; i++) {
                uint64_t before = kept;
                for (size_t j = 0; j < nv && m < STORE_RANGES_MAX; j++) {
                        uint64_t s = MAX(r[i].start, v[j].start), e = MIN(r[i].end, v[j].end);
                        if (s < e) {
                                res[m++] = (StoreRange){ s, e };
                                kept += e - s;
                        }
                }
                dropped += (r[i].end - r[i].start) - (kept - before);
        }
        if (dropped)
                log_warn("pid %d: adopt: %llu KiB of its ranges are no longer mapped and registered "
                         "(an unmap the dead daemon read and never handled): dropped",
                         (int)mmclient_pid(mm), (unsigned long long)dropped >> 10);
        memcpy(r, res, (size_t)m * sizeof(*res));
        free(res);
        n = m;
out:
        free(line);
        free(v);
        fclose(f);
        return n;
}

/* An mm-job thread's (MW_JOB_ADOPT): the walk AdoptWalk describes. */
static void adopt_walk(MMClient *mm, MMJobCall *self) {
        AdoptWalk *w = (AdoptWalk *)self;

        w->n = adopt_live_ranges(mm, w->ranges, w->n);
        w->r = mmclient_check_anon_ranges(mm, w->ranges, (size_t)w->n);
        if (w->r < 0) {
                snprintf(w->why, sizeof(w->why), "a range that is not private anonymous writable memory");
                w->r = w->r == -EINVAL ? -EINVAL : -ESRCH;
                return;
        }
        w->r = adopt_entries(mm, w);
}

void adopt_walk_init(AdoptWalk *w) {
        w->call.fn = adopt_walk;
}
