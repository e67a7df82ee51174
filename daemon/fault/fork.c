/*
 * fork.c: UFFD_EVENT_FORK, a forked child's copy of its parent's pages,
 * and the parent held for a child the library announced. Overview:
 * fault-internal.h.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fault-internal.h"
#include "log.h"

/* No memory to hold a page for the forked child (its index or a pool
 * object): give the child the page now, resident, from origin (a STORED or
 * SAME entry of `from`'s) or from len bytes at src (the object of entry
 * value origin, or the page when len is a page). Out of memory then
 * costs the child memory, never content. The child's uffd is new and has
 * no event pending. */
static bool fork_install(RangeCtx *c, uint64_t addr, MMClient *from, uint64_t origin, const void *src, uint32_t len) {
        FaultThread *ft = c->ft;
        int r;

        if (!src)
                r = decode(ft, from, origin, ft->page);
        else if (len == ZSWAP_PAGE_SIZE)
                r = (memcpy(ft->page, src, len), 0);
        else
                r = pe_decompress(ft->dctx, mmclient_dict(c->mm), origin, src, len, ft->page);
        if (r == 0)
                r = uffd_copy(c->child->uffd, addr, ft->page, UFFDIO_COPY_MODE_DONTWAKE);
        if (r < 0 && !c->install_err)
                c->install_err = r;
        return r == 0;
}

/*
 * A page in flight (MOVING or STAGED, slot S) when the process forked
 * without telling us (a raw clone, _Fork, clone3: no atfork handler held
 * the eviction back). The fork copied the address space at one instant:
 * if the agent had moved the page by then, the child lacks it at addr and
 * has it in its own copy of slot S, which nothing will ever read; if not,
 * the child has it at addr. The parent's slot S holds what was moved, and
 * a move happens once: install that in the child at addr. Where the child
 * has the page already (moved after the fork, or not at all), the copy
 * finds it there (EEXIST) and nothing changes. The lane is pinned (as
 * serve_slot() does) while the slot is read, so that it cannot be released
 * and reused meanwhile; an entry that moved on is looked at again. A slot
 * read before the agent's move maps the zero page there and that move
 * fails: the parent keeps the page resident, as moving_cancel() leaves it.
 */
static int fork_cb(void *ud, uint64_t addr, _Atomic uint64_t *e);

/*
 * The child gets the page in the parent's staging slot without the walk
 * waiting for its read: the child's entry is LOADING (its faults wait)
 * and a retry on the child's list reads the parent's slot, holding the
 * parent's lane (pinned by the caller, handed over here) until the read
 * is back; then it is installed in the child like any retry (EEXIST: the
 * child has its own). Nobody else knows the child yet. False: not now.
 */
static bool fork_copy_async(RangeCtx *c, uint64_t addr, uint32_t slot, Lane *lane) {
        _Atomic uint64_t *ne = pindex_entry(c->child->index, addr, true);
        uint64_t loading = pe_make_loading(pe_make_slot(PE_MOVING, slot)); /* no payload of the child's */

        if (!ne || atomic_load_explicit(ne, memory_order_relaxed) != 0 ||
            !slot_read_submit(c->ft, c->child, c->mm, addr, loading, slot, lane, false))
                return false;
        atomic_store_explicit(ne, loading, memory_order_release);
        c->inflight++;
        return true;
}

/*
 * The child could not take page, read from a slot, now: its uffd has an
 * event under way (EAGAIN) or the kernel had no page or no charge in its
 * memory cgroup for it (ENOMEM). Dropped, the page would read as zeros in
 * the child. So the child keeps it in its pool, raw, and it is installed
 * at the child's fault like any page held. Paid from the parent's share
 * of its user's max_pool where that has room, else kept past it under
 * the allocator's cap, as fork_cb()'s copies are. 0, or -errno: the page
 * is lost.
 */
static int fork_keep(RangeCtx *c, uint64_t addr, const void *page) {
        _Atomic uint64_t *ne = pindex_entry(c->child->index, addr, true);
        PoolHandle h;

        if (!ne)
                return -ENOMEM;
        if (atomic_load_explicit(ne, memory_order_relaxed) != 0)
                return -EEXIST; /* not ours to replace; nobody else knows the child yet */
        bool paid = mmclient_quota_take(c->mm, ZSWAP_PAGE_SIZE);
        int r = pool_alloc(c->child->pool, ZSWAP_PAGE_SIZE, &h);
        if (r < 0) {
                if (paid)
                        mmclient_quota_give(c->mm, ZSWAP_PAGE_SIZE);
                return r;
        }
        c->over += !paid;
        memcpy(pool_map(c->child->pool, h), page, ZSWAP_PAGE_SIZE);
        uint64_t nv = pe_make_stored(h, ZSWAP_PAGE_SIZE);
        mmclient_count_stored(c->child, nv, 1);
        /* relaxed: a counter the manager sums (users.c) */
        atomic_fetch_add_explicit(&c->mm->fork_bytes, ZSWAP_PAGE_SIZE, memory_order_relaxed);
        atomic_store_explicit(ne, nv, memory_order_release);
        c->kept++;
        return 0;
}

/* page, read from the parent's staging slot, into the child at addr: a
 * page in flight at the fork (EEXIST: the child has its own). */
static void fork_slot_install(RangeCtx *c, uint64_t addr, const void *page) {
        int r = uffd_copy(c->child->uffd, addr, page, UFFDIO_COPY_MODE_DONTWAKE);

        if (r == -EAGAIN || r == -ENOMEM)
                r = fork_keep(c, addr, page);
        if (r == -EEXIST)
                r = 0;
        c->inflight++;
        if (r < 0) {
                c->errors++;
                if (!c->install_err)
                        c->install_err = r;
        }
}

/* Pin lane while e still holds v, as serve_slot() does. seq_cst: either
 * the manager sees the pin before it releases the lane, or we see the
 * entry changed. False: e moved on, nothing pinned. */
static bool lane_pin_if(Lane *lane, _Atomic uint64_t *e, uint64_t v) {
        atomic_fetch_add_explicit(&lane->users, 1, memory_order_seq_cst);
        if (atomic_load_explicit(e, memory_order_seq_cst) == v)
                return true;
        atomic_fetch_sub_explicit(&lane->users, 1, memory_order_release);
        return false;
}

static int fork_inflight(RangeCtx *c, uint64_t addr, _Atomic uint64_t *e, uint64_t v) {
        MMClient *mm = c->mm;
        uint32_t slot = pe_slot(v);
        unsigned li = slot / LANE_SLOTS;
        int r;

        if (li >= mm->nlanes) {
                c->errors++;
                c->inflight++;
                return 0;
        }
        Lane *lane = &mm->lanes[li];
        if (!lane_pin_if(lane, e, v))
                return fork_cb(c, addr, e);
        if (fork_copy_async(c, addr, slot, lane))
                return 0; /* the retry holds the pin */
        r = mmclient_read(mm, mmclient_slot_addr(mm, slot), c->ft->page, ZSWAP_PAGE_SIZE);
        atomic_fetch_sub_explicit(&lane->users, 1, memory_order_release);
        if (r == 0)
                fork_slot_install(c, addr, c->ft->page);
        else {
                c->inflight++;
                c->errors++;
                if (!c->install_err)
                        c->install_err = r;
        }
        return 0;
}

/*
 * The pages in flight at a fork the library did not announce, read from
 * the parent's staging slots before anything else is done for the fork.
 * The parent runs again as soon as its FORK event is read, and one that
 * exits at once (a raw clone, then _exit()) takes its address space, its
 * staging slots with it, away. Read by the walk of its whole index, after
 * the child's store was made and every object before them copied
 * (milliseconds for a large index), the slots were often gone, and those
 * pages read as zeros in the child (test-fork-raw-exit). So this pass
 * only notes where each MOVING or STAGED page (and each slot a fault is
 * reading) is, pins its lane and reads the slots in runs, one read each;
 * the walk then installs each such page from what was read, whatever its
 * entry has become since (a page the worker stored meanwhile is the
 * same page). Read at that moment or later, a slot holds what the fork
 * copied, or the page is still at its address in the child and the copy
 * finds it there (fork_inflight()). It narrows the race with the
 * parent's exit, it does not close it: docs/page-lifecycle.md.
 */
typedef struct SnapPage {
        uint64_t addr;
        uint32_t slot;
        int res;          /* 0: read into page; -errno: not read */
        uint8_t *page;
} SnapPage;

typedef struct ForkSnap {
        SnapPage *v;      /* ascending addresses: the walk's order */
        size_t n, cap;
        size_t next;      /* the walk's place in v */
        uint8_t *buf;     /* the pages, n of them */
} ForkSnap;

static int snap_cb(void *ud, uint64_t addr, _Atomic uint64_t *e) {
        RangeCtx *c = ud;
        ForkSnap *s = c->snap;
        MMClient *mm = c->mm;
        uint64_t v = atomic_load_explicit(e, memory_order_acquire);
        uint32_t slot;

        if (pe_state(v) == PE_MOVING || pe_state(v) == PE_STAGED)
                slot = pe_slot(v);
        else if (pe_state(v) == PE_LOADING) {
                /* a fault's read of a slot (not of the second tier) */
                Retry **p = retry_find(mm, addr);
                uint64_t o = p && (*p)->loading && !(*p)->tier ? pe_loading_origin((*p)->loading) : 0;
                if ((pe_state(o) != PE_MOVING && pe_state(o) != PE_STAGED) ||
                    atomic_load_explicit(&(*p)->state, memory_order_acquire) != RS_READING)
                        return 0;
                slot = pe_slot(o);
        } else
                return 0;
        if (slot / LANE_SLOTS >= mm->nlanes)
                return 0;
        if (s->n == s->cap) {
                size_t cap = s->cap ? s->cap * 2 : 64;
                SnapPage *nv = realloc(s->v, cap * sizeof(*nv));
                if (!nv)
                        return 1; /* no memory: the walk reads the rest, as it can */
                s->v = nv;
                s->cap = cap;
        }
        if (!lane_pin_if(&mm->lanes[slot / LANE_SLOTS], e, v))
                return 0; /* moved on: the walk takes it as it is then */
        s->v[s->n++] = (SnapPage){ .addr = addr, .slot = slot, .res = -EAGAIN };
        return 0;
}

static int snap_by_slot(const void *a, const void *b) {
        uint32_t x = (*(SnapPage *const *)a)->slot, y = (*(SnapPage *const *)b)->slot;
        return x < y ? -1 : x > y;
}

/* The slots of s's pages, read in runs of consecutive slots of a lane
 * (a batch's pages sit in consecutive slots), each run into consecutive
 * pages of buf; a run that cannot be read whole is read a page at a
 * time. */
static void snap_read(MMClient *mm, ForkSnap *s) {
        _cleanup_free_ SnapPage **by = malloc(s->n * sizeof(*by));
        if (!by)
                return;
        for (size_t i = 0; i < s->n; i++)
                by[i] = &s->v[i];
        qsort(by, s->n, sizeof(*by), snap_by_slot);
        for (size_t i = 0; i < s->n; i++)
                by[i]->page = s->buf + i * ZSWAP_PAGE_SIZE;
        for (size_t i = 0, k; i < s->n; i = k) {
                for (k = i + 1; k < s->n && by[k]->slot == by[k - 1]->slot + 1 && by[k]->slot % LANE_SLOTS; k++)
                        ;
                int r = mmclient_read(mm, mmclient_slot_addr(mm, by[i]->slot), by[i]->page, (k - i) * ZSWAP_PAGE_SIZE);
                for (size_t j = i; j < k; j++)
                        by[j]->res = r == -EFAULT && k - i > 1 ? mmclient_read(mm, mmclient_slot_addr(mm, by[j]->slot),
                                                                               by[j]->page, ZSWAP_PAGE_SIZE)
                                                               : r;
        }
}

static void snap_unpin(MMClient *mm, ForkSnap *s) {
        for (size_t i = 0; i < s->n; i++)
                atomic_fetch_sub_explicit(&mm->lanes[s->v[i].slot / LANE_SLOTS].users, 1, memory_order_release);
}

/* Under mm's serve_lock, before the child is made. */
static void snap_take(FaultThread *ft, MMClient *mm, ForkSnap *s) {
        RangeCtx c = { .ft = ft, .mm = mm, .snap = s };

        *s = (ForkSnap){ 0 };
        /* a fork the library announced waited for its pages in flight
         * (FORK_PREPARE): there are none */
        if (!mm->nlanes || atomic_load_explicit(&mm->fork_announced, memory_order_relaxed))
                return;
        pindex_walk(mm->index, 0, PINDEX_MAX_ADDR, snap_cb, &c);
        if (!s->n)
                return;
        s->buf = malloc(s->n * ZSWAP_PAGE_SIZE);
        if (s->buf)
                snap_read(mm, s);
        /* the pages are ours now, or were not read: the walk reads those */
        snap_unpin(mm, s);
}

static void snap_free(ForkSnap *s) {
        free(s->v);
        free(s->buf);
}

/* The page read for addr before the walk, or NULL. Addresses come in
 * ascending order. */
static const uint8_t *snap_page(ForkSnap *s, uint64_t addr) {
        if (!s || !s->buf)
                return NULL;
        while (s->next < s->n && s->v[s->next].addr < addr)
                s->next++;
        if (s->next == s->n || s->v[s->next].addr != addr || s->v[s->next].res < 0)
                return NULL;
        return s->v[s->next].page;
}

static int fork_cb(void *ud, uint64_t addr, _Atomic uint64_t *e) {
        RangeCtx *c = ud;
        Pool *pool = c->child->pool;
        uint64_t v = atomic_load_explicit(e, memory_order_acquire), nv = 0;
        const void *src = NULL;
        uint32_t len = 0;
        uint64_t tier = 0;
        TierStub stub;
        const uint8_t *snapped = snap_page(c->snap, addr);

        if (snapped) {
                /* in flight at the fork, read before the walk */
                fork_slot_install(c, addr, snapped);
                return 0;
        }

        if (pe_state(v) == PE_LOADING) {
                /* a read of the second tier under way: the child takes a
                 * reference to the object, as from a page still there (the
                 * stub is the parent's until its install releases it) */
                Retry **p = retry_find(c->mm, addr);
                if (p && (*p)->tier)
                        v = pe_loading_origin(v);
        }
        switch (pe_state(v)) {
        case PE_EMPTY:
                nv = v; /* keeps the incompressible mark */
                break;
        case PE_REMOVED:
                /* the parent's dying frame is still mapped in the child */
                break;
        case PE_CLEAN:
                /* resident in both: the child's copy is its own page now */
                break;
        case PE_SAME:
                nv = v;
                atomic_fetch_add_explicit(&c->child->st.same_pages, 1, memory_order_relaxed);
                break;
        case PE_STORED:
                if (pe_is_tier(v)) {
                        /* both hold the object on the second tier: one more
                         * reference to its blocks, a stub of the child's own.
                         * (Nothing but this thread changes the entry now:
                         * the tier's writer leaves such entries alone.) */
                        if (tier_stub(c->mm, v, &stub) < 0 || !tier_get(c->mm->core->tier, &stub)) {
                                c->errors += !fork_install(c, addr, c->mm, v, NULL, 0);
                                break;
                        }
                        src = &stub;
                        len = sizeof(stub);
                        tier = PE_TIER;
                        break;
                }
                /* the child's store gets its own copy of the object: each
                 * process keeps what it needs to outlive the daemon. The
                 * tier's writer may be taking the object out meanwhile:
                 * hold the entry while copying (a fault of the parent
                 * waits for this thread anyway) */
                if (!atomic_compare_exchange_strong_explicit(e, &v, pe_make_loading(v), memory_order_acquire,
                                                             memory_order_acquire)) {
                        /* the writer just gave it a stub: look again */
                        return fork_cb(ud, addr, e);
                }
                if ((v & PE_SHARED) && pool_share(dedup_pool(c->mm->dedup), pe_handle(v)) == 0) {
                        /* in the shared store both hold: the child's entry
                         * is one more holder (ours, LOADING, keeps the
                         * object while we share it) */
                        nv = v & ~PE_MARKS;
                        if (c->child->store)
                                store_mark_shared(c->child->store);
                        mmclient_count_stored(c->child, nv, 1);
                        atomic_store_explicit(e, v & ~PE_MARKS, memory_order_release);
                        break;
                }
                src = pool_map(mmclient_pool_of(c->mm, v), pe_handle(v));
                len = pe_clen(v);
                break;
        case PE_LOADING: {
                Retry **p = retry_find(c->mm, addr);
                if (p && (*p)->loading && atomic_load_explicit(&(*p)->state, memory_order_acquire) == RS_READING) {
                        /* its slot's read is in flight (the retry keeps the
                         * lane): the child reads the same slot, as a page in
                         * flight, with a pin of its own; else (no room) read
                         * it here, bounded (memread.h). Only a fork the
                         * library did not announce gets here: it pauses
                         * eviction first */
                        uint32_t slot = pe_slot((*p)->loading);
                        Lane *lane = &c->mm->lanes[slot / LANE_SLOTS];
                        /* seq_cst, as serve_slot()'s pin; not argued weaker
                         * (the retry's own pin holds the lane already) */
                        atomic_fetch_add_explicit(&lane->users, 1, memory_order_seq_cst);
                        if (fork_copy_async(c, addr, slot, lane))
                                break;
                        atomic_fetch_sub_explicit(&lane->users, 1, memory_order_release);
                        if (mmclient_read(c->mm, mmclient_slot_addr(c->mm, pe_slot((*p)->loading)), c->ft->page,
                                          ZSWAP_PAGE_SIZE) == 0) {
                                src = c->ft->page;
                                len = ZSWAP_PAGE_SIZE;
                        } else
                                c->errors++;
                } else if (p && (*p)->loading && (*p)->op.res == 0) {
                        src = (*p)->page;
                        len = ZSWAP_PAGE_SIZE;
                } else if (!p)
                        c->errors++;
                break;
        }
        default:
                /* MOVING/STAGED: a fork the library did not announce raced
                 * with an eviction */
                return fork_inflight(c, addr, e, v);
        }
        if (src) {
                /* the copy is paid from the parent's share of its user's
                 * max_pool (the child is the same user's) and must fit
                 * under the pool bound; one that does not is installed in
                 * the child now, resident: a fork costs the child memory,
                 * never content, and never the pool room of other users.
                 * A child that is changing its address space already (an
                 * event of its uffd not read yet: EAGAIN) cannot take the
                 * page now; then the copy is kept after all, under the
                 * allocator's cap, and counted for its user, whose own
                 * evictions wait until it is back under max_pool */
                PoolHandle h;
                /* the entry this thread holds (LOADING), to give back */
                bool held = pe_state(v) == PE_STORED && !tier;
                uint64_t codec = pe_state(v) == PE_STORED ? v & PE_CODEC : 0;
                if (pe_state(v) == PE_STORED && (v & PE_DICT) && !mmclient_dict(c->child)) {
                        /* made with the parent's dictionary, which the child
                         * could not be given (event_fork()): the child gets
                         * the page itself, decoded, as a raw copy (or
                         * resident, below), never an object it cannot read */
                        uint8_t *raw = c->ft->ra_buf[0];
                        int dr = tier ? decode(c->ft, c->mm, v, raw)
                                      : pe_decompress(c->ft->dctx, mmclient_dict(c->mm), v, src, len, raw);
                        if (tier)
                                tier_put(c->mm->core->tier, &stub);
                        if (dr < 0) {
                                c->errors++;
                                if (held)
                                        atomic_store_explicit(e, v & ~PE_MARKS, memory_order_release);
                                return 0;
                        }
                        tier = codec = 0;
                        src = raw;
                        len = ZSWAP_PAGE_SIZE;
                }
                bool paid = mmclient_quota_take(c->mm, len), resident = false;
                int r = !paid ? -EDQUOT : core_pool_room(c->mm->core, len) ? pool_alloc(pool, len, &h) : -ENOSPC;
                if (r < 0 && paid)
                        mmclient_quota_give(c->mm, len);
                if (r == -EDQUOT || (r == -ENOSPC && paid)) {
                        int err = c->install_err;
                        resident = tier ? fork_install(c, addr, c->mm, v, NULL, 0) : fork_install(c, addr, NULL, v, src, len);
                        c->install_err = err; /* not an error yet */
                        if (resident && tier)
                                tier_put(c->mm->core->tier, &stub);
                        c->resident += resident;
                        r = resident ? -EDQUOT : pool_alloc(pool, len, &h);
                        c->over += r == 0;
                }
                if (r == 0) {
                        memcpy(pool_map(pool, h), src, len);
                        /* the strong tier's mark goes with the object (a
                         * page read out of a slot is raw) */
                        nv = pe_make_stored(h, len) | tier | codec;
                        if ((nv & PE_STRONG) && c->child->store)
                                store_mark_strong(c->child->store);
                        if (tier)
                                mmclient_count_tier(c->child, stub.len, 1);
                        mmclient_count_stored(c->child, nv, 1);
                        /* relaxed: a counter the manager sums (users.c) */
                        atomic_fetch_add_explicit(&c->mm->fork_bytes, len, memory_order_relaxed);
                } else if (resident) {
                        /* installed above */
                } else if (tier) {
                        tier_put(c->mm->core->tier, &stub);
                        c->errors += !fork_install(c, addr, c->mm, v, NULL, 0);
                } else
                        c->errors += !fork_install(c, addr, NULL, v, src, len);
                if (held)
                        atomic_store_explicit(e, v & ~PE_MARKS, memory_order_release); /* copied: the parent's again */
                if (r < 0)
                        return 0;
        }
        if (nv) {
                _Atomic uint64_t *ne = pindex_entry(c->child->index, addr, true);
                if (!ne) {
                        unsigned st = pe_state(nv);
                        if (st == PE_STORED || st == PE_SAME)
                                c->errors += !fork_install(c, addr, c->child, nv, NULL, 0);
                        /* EMPTY: only the incompressible mark is forgotten */
                        mmclient_release_payload(c->child, nv);
                        return 0;
                }
                atomic_store_explicit(ne, nv, memory_order_release);
        }
        return 0;
}

void event_fork(FaultThread *ft, MMClient *mm, int child_fd) {
        MMClient *child = NULL;
        int r;

        /* this fork's instant is past: a daemon that adopts the parent from
         * now on must not take it as still to come (do_adopt()). relaxed:
         * the manager set fork_announced before it answered FORK_PREPARE,
         * and the client's fork, so this event, comes after that answer
         * (as fork_held_pages, mmclient.h) */
        if (atomic_load_explicit(&mm->fork_announced, memory_order_relaxed))
                mmclient_fork_evented(mm, atomic_load_explicit(&mm->next_fork_token, memory_order_relaxed));
        /* first of all, while the parent's address space is still there */
        ForkSnap snap;
        snap_take(ft, mm, &snap);
        fd_set_nonblock(child_fd, true);
        r = mmclient_new(mm->core, child_fd, &child);
        /* a child nobody tracks has its faults wait forever (its uffd has
         * no other reader): wait for memory a while, as
         * fault_thread_own() does */
        for (int i = 0; r == -ENOMEM && i < 1000; i++) {
                if (i == 0)
                        log_warn("pid %d: no memory to track its forked child: trying again for up to 1 s",
                                 (int)mmclient_pid(mm));
                usleep(1000);
                r = mmclient_new(mm->core, child_fd, &child);
        }
        if (r < 0) {
                log_error("pid %d: cannot track forked child: %s", (int)mmclient_pid(mm), strerror(-r));
                /* closing the only reference would unregister the child's
                 * memory and turn its evicted pages into zeros; keep it */
                snap_free(&snap);
                return;
        }
        RangeCtx c = { .ft = ft, .mm = mm, .child = child, .snap = &snap };
        child->wp_async = mm->wp_async; /* the child's vmas keep the parent's registration */
        /* the child process shares the parent's sync page (MAP_SHARED survives fork) */
        if (mm->sync_fd >= 0) {
                int fd = fcntl(mm->sync_fd, F_DUPFD_CLOEXEC, 0);
                if (fd < 0 || mmclient_set_sync(child, fd) < 0)
                        log_warn("pid %d: forked child runs without the move/unmap handshake", (int)mmclient_pid(mm));
        }
        mmclient_regions_copy(child, mm);
        /* the parent's shared store, whose objects the child's copies of
         * the parent's shared entries name too (one more holder each) */
        if (mm->dedup)
                mmclient_set_dedup(child, mm->dedup);
        /* the parent's dictionary, shared, and in the child's store: its
         * copies of objects made with it decode there too */
        CodecDict *dict = (CodecDict *)mmclient_dict(mm);
        if (dict && (r = mmclient_dict_set(child, codec_dict_ref(dict))) < 0) {
                codec_dict_unref(dict);
                log_warn("pid %d: forked child gets no dictionary (%s): its pages made with it are installed "
                         "resident", (int)mmclient_pid(mm), strerror(-r));
        }
        pindex_walk(mm->index, 0, PINDEX_MAX_ADDR, fork_cb, &c);
        snap_free(&snap);
        if (c.resident)
                log_info("pid %d: %d pages installed in a forked child, resident: no room for their copies "
                         "under its user's max_pool or the pool bound", (int)mmclient_pid(mm), c.resident);
        if (c.over)
                log_warn("pid %d: %d pages copied to a forked child past its user's max_pool or the pool bound: "
                         "the child was changing its address space and could not take them resident",
                         (int)mmclient_pid(mm), c.over);
        if (c.inflight)
                log_info("pid %d: %d pages in flight at a fork the library did not announce: "
                         "installed in the child from their staging slots", (int)mmclient_pid(mm), c.inflight);
        if (c.kept)
                log_info("pid %d: %d pages in flight at a fork could not be installed in the child now: kept in "
                         "its pool", (int)mmclient_pid(mm), c.kept);
        if (c.errors)
                log_error("pid %d: %d pages could not be copied to a forked child (%d were in flight; "
                          "installing: %s)", (int)mmclient_pid(mm), c.errors, c.inflight,
                          c.install_err ? strerror(-c.install_err) : "no error");
        /* the token of this fork was read at FORK_PREPARE: reading it now
         * could see the next fork's already */
        child->fork_token = atomic_load_explicit(&mm->next_fork_token, memory_order_relaxed);
        /* relaxed: as above; the manager looks at fork_announced again
         * after the fork's FORK_DONE */
        if (child->fork_token && atomic_exchange_explicit(&mm->fork_announced, false, memory_order_relaxed) &&
            atomic_load_explicit(&mm->fork_held_pages, memory_order_relaxed) != 0) {
                /* the library announced it and the parent held pages out:
                 * its child attaches soon, and until then the parent's
                 * store stays as it is now (fork_held()). A parent that
                 * held nothing gives its child nothing to restore should
                 * we die first, and is not held: its child may attach
                 * when it likes (a shell's child execs first) */
                child->fork_parent = mmclient_ref(mm);
                mm->fork_hold_until = now_ns() + FORK_HOLD_NS;
                /* relaxed: only this thread, under serve_lock, reads the
                 * uffd, and the manager's checks are hints it takes again */
                atomic_store_explicit(&mm->fork_hold, child->fork_token, memory_order_relaxed);
        }
        /* the child's fields from here on are written before it is
         * published (fault_thread_own(), the orphan list), and never again
         * (mmclient.h). mm's pid and pidfd are 0 and -1 if mm is a fork
         * child that has not attached yet: then so are the child's */
        child->parent_pid = mmclient_pid(mm);
        child->forked = true;
        /* its parent may exit before it attaches (daemon(3) does at once):
         * then it is matched by its token and its user alone */
        int pidfd = mmclient_pidfd(mm);
        child->parent_pidfd = pidfd >= 0 ? fcntl(pidfd, F_DUPFD_CLOEXEC, 0) : -1;
        child->uid = mm->uid; /* mm's was written before mm was published */
        child->strong_ok = mm->strong_ok; /* the same library: the same as uid */
        child->dict_ok = mm->dict_ok;
        /* what is left of its user's share until the manager counts it
         * (users.c): it may fork before it attaches. relaxed: a budget */
        atomic_store_explicit(&child->quota_left, atomic_load_explicit(&mm->quota_left, memory_order_relaxed),
                              memory_order_relaxed);
        /* its staging area is the parent's, inherited at the same address:
         * it names which of the parent's clients the child copies, and
         * its ATTACH must name it again. mm's was written before mm was
         * published, a fork child's too (here) */
        child->staging_addr = mm->staging_addr;
        child->ft = ft;
        /* A child that has not attached costs us its uffd, its store and
         * memory, for as long as it lives, and the kernel, not we, decides
         * how many a user may have. So a user has at most its
         * max_connections of them at once: at the bound, neither this
         * address space nor the child is read any more (uffd_read_msg()),
         * so their next fork waits in the kernel, until one of the user's
         * children attaches or exits (users_orphans_unstop(), users.c).
         * Only that user's processes wait, those that fork at the bound. */
        uint32_t omax = atomic_load_explicit(&mm->orphans_max, memory_order_relaxed);
        atomic_store_explicit(&child->orphans_max, omax, memory_order_relaxed);
        if (omax && child->uid != 0) {
                uint32_t n = core_orphans_add(mm->core, child->uid, 1);
                child->orphan_counted = n > 0;
                if (n >= omax) {
                        if (!atomic_exchange_explicit(&mm->orphans_stop, true, memory_order_relaxed))
                                log_warn("uid %u: %u forked children not attached (its max_connections): pid %d "
                                         "is not served until one attaches or exits",
                                         (unsigned)child->uid, n, (int)mmclient_pid(mm));
                        atomic_store_explicit(&child->orphans_stop, true, memory_order_relaxed);
                }
        }
        fault_thread_own(ft, child);
        for (unsigned i = 0; mm->core->cfg.fault_shared && i < mm->core->nfts; i++)
                if (mm->core->fts[i] != ft)
                        fault_post_mm(mm->core->fts[i], FW_ADOPT, child);
        core_adopt_orphan(mm->core, child); /* hands over our reference */
        /* the child's copies are counted as an orphan's now (users.c);
         * relaxed: a counter, and only this thread builds children of mm */
        atomic_store_explicit(&mm->fork_bytes, 0, memory_order_relaxed);
}

/* ---- a parent held for its forked child ---- */

/*
 * A fork the library announced (FORK_PREPARE) gives its child an address
 * space whose evicted pages this daemon holds, through a uffd only this
 * daemon has until the child attaches (CHILD_ATTACH hands it over). Should
 * the daemon die before, the kernel unregisters the child's memory, and
 * the child restores those pages itself from its parent's store, which it
 * inherited (client/lib/fork.c, child_lost()). That store must then be as it was
 * at the fork, so until the child attaches nothing of it changes: the
 * parent's uffd is not read and its retries wait (here), nothing of it is
 * evicted (evict.c, reclaim.c), and it is kept if the parent goes first
 * (mmclient.c). Only the parent waits, and for FORK_HOLD_NS at most; a
 * hold that ends so writes the fork's token in the store (fork_served)
 * before anything changes, and the child then knows not to use it.
 * Under serve_lock. True: held, look again later.
 */
bool fork_held(FaultThread *ft, MMClient *mm) {
        /* acquire, not argued weaker: the stores that end a hold are the
         * manager's relaxed CAS (mmclient_fork_release()) and ours below,
         * and nothing read after this depends on them; the hold's start is
         * this thread's own store */
        uint64_t token = atomic_load_explicit(&mm->fork_hold, memory_order_acquire);

        if (!token)
                return false;
        if (now_ns() < mm->fork_hold_until) {
                /* run_due_retries() looks every millisecond, and reads
                 * what the uffd has once the hold is over: its epoll event
                 * (edge-triggered) has come and gone */
                atomic_store_explicit(&mm->fork_unread, true, memory_order_relaxed);
                ft->retry_due = true;
                return true;
        }
        log_info("pid %d: its forked child did not attach within %llu s: served again", (int)mmclient_pid(mm),
                 FORK_HOLD_NS / 1000000000);
        if (mm->store)
                /* release: before anything of the store changes */
                atomic_store_explicit(&store_super(mm->store)->fork_served, token, memory_order_release);
        atomic_compare_exchange_strong_explicit(&mm->fork_hold, &token, 0, memory_order_acq_rel,
                                                memory_order_relaxed);
        return false;
}
