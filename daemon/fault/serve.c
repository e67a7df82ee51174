/*
 * serve.c: the serve path, a page fault from its read to its install:
 * zero fills and zero-fill-ahead, pages from the pool, from a staging
 * slot and from the second tier, fault-around. Overview: fault-internal.h.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "inject.h"
#include "age.h"
#include "fault-internal.h"
#include "log.h"
#include "stages.h"
#include "trace.h"

typedef struct RaPage {
        _Atomic uint64_t *e;
        uint64_t v, loading;
} RaPage;

/* uffd_event_under_way(), a call that takes the client's mmap lock for
 * reading (call_begin()) */
static bool event_under_way(MMClient *mm) {
        call_begin(mm->uffd);
        bool r = uffd_event_under_way(mm->uffd);
        call_end();
        return r;
}

/* Does a page restored for a read keep its compressed copy? Only where
 * writes are tracked (WP_ASYNC): the copy is dropped once one is seen.
 * And only while the client's copies take less than clean_max % of its
 * registered memory: a copy saves a compression when the page goes out
 * again, but until then it costs memory, which is what the daemon is for. */
static bool keeps_clean(MMClient *mm) {
        /* relaxed: tunables (core.h) and counters: a policy, read as it
         * is at this moment, orders nothing */
        if (!mm->wp_async || !atomic_load_explicit(&mm->core->keep_clean, memory_order_relaxed))
                return false;
        uint64_t clean = atomic_load_explicit(&mm->st.clean_bytes, memory_order_relaxed);
        uint64_t registered = atomic_load_explicit(&mm->st.registered, memory_order_relaxed);
        return clean * 1000 < registered * atomic_load_explicit(&mm->core->clean_max_permille, memory_order_relaxed);
}

/* The entry of a page installed from STORED/SAME becomes CLEAN: the payload
 * stays, counted as a kept copy instead of a held page. */
static uint64_t make_clean(MMClient *mm, uint64_t origin) {
        if (pe_state(origin) == PE_STORED) {
                mmclient_count_stored(mm, origin, -1);
                atomic_fetch_add_explicit(&mm->st.clean_bytes, pe_clen(origin), memory_order_relaxed);
        } else
                atomic_fetch_sub_explicit(&mm->st.same_pages, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&mm->st.clean_pages, 1, memory_order_relaxed);
        return pe_make_clean(origin);
}

/*
 * Install page at addr for an entry this thread owns (LOADING value
 * `loading`). On success the entry becomes `final`, or with keep (a read
 * fault on a STORED/SAME page) CLEAN, the page installed write-protected
 * so that its first write shows in PAGEMAP_SCAN. refault: a program's own
 * fault brought it back (reclaim's ageing hears of it). See the life cycle
 * doc for why each error resolves the way it does.
 */
void install(FaultThread *ft, MMClient *mm, uint64_t addr, _Atomic uint64_t *e, uint64_t loading,
             const void *page, uint64_t final, bool keep, bool refault) {
        uint64_t origin = pe_loading_origin(loading);
        /* a page read from the second tier keeps nothing: its blocks are
         * better free than holding a copy of a resident page */
        keep = keep && (pe_state(origin) == PE_STORED || pe_state(origin) == PE_SAME) && !pe_is_tier(origin);
        int r = uffd_copy(mm->uffd, addr, page, keep ? UFFDIO_COPY_MODE_WP : 0);
        if (r == -EINVAL && keep) {
                /* a range not registered for write protection (it cannot be,
                 * short of a kernel that changed its mind): never lose the
                 * page over a copy we only wanted to keep */
                keep = false;
                r = uffd_copy(mm->uffd, addr, page, 0);
        }
        STAGE(ST_COPIED);
        TRACE(TR_INSTALL, addr, loading, (uint64_t)(uint32_t)r | ((const uint64_t *)page)[1] << 32);

        /*
         * ENOENT is not "unmapped for good" while an event is under way.
         * A copy racing an mremap() of its page can fail with ENOENT, not
         * EAGAIN, with that mremap's REMAP still unread (seen on 6.18 in
         * test-preload's churn; mfill_atomic() looks the mapping up before
         * it looks at mmap_changing). Dropped here, the page would reach
         * its new address as an empty entry and read as zeros there
         * (test-remap-install). Kept as a retry, it follows the REMAP
         * (remap_cb()), or an UNMAP drops it (remove_cb()). An ENOENT with
         * no event under way is a mapping really gone.
         *
         * ENOMEM is not "gone" either: the kernel could not allocate the
         * page, or charge it to the client's memory cgroup (at its limit,
         * with nothing its OOM killer could end: mm/userfaultfd.c
         * mfill_atomic_pte_copy()). Dropped, the page was zero at the
         * program's next touch; kept, it is tried again every millisecond
         * (run_due_retries()), as the kernel retries its own fault.
         */
        if (r == -EAGAIN || r == -ENOMEM || (r == -ENOENT && event_under_way(mm))) {
                retry_add(ft, mm, addr, loading, page, keep, refault);
                return;
        }
        if (r == -EEXIST && (pe_state(origin) == PE_STORED || pe_state(origin) == PE_SAME)) {
                /* present already: keep the content we hold, wake the waiter */
                atomic_store_explicit(e, origin, memory_order_release);
                uffd_wake(mm->uffd, addr);
                return;
        }
        if (r == 0 && keep) {
                atomic_store_explicit(e, make_clean(mm, origin), memory_order_release);
        } else {
                mmclient_release_payload(mm, loading);
                /* release: a later reader of the entry sees the pool object freed
                 * only after our read of it finished */
                atomic_store_explicit(e, r == 0 ? final : 0, memory_order_release);
        }
        if (r == 0) {
                if (ft->fault_t0) {
                        /* the program runs again from here: read to install */
                        latency_record(&ft->lat, now_ns() - ft->fault_t0);
                        ft->fault_t0 = 0;
                }
                atomic_fetch_add_explicit(&mm->st.faults, 1, memory_order_relaxed);
                atomic_fetch_add_explicit(&mm->core->faults, 1, memory_order_relaxed);
                if (refault)
                        age_note_refault(mm, addr);
        } else
                uffd_wake(mm->uffd, addr);
}

/* The stub of a page on the second tier, checked. */
int tier_stub(MMClient *mm, uint64_t origin, TierStub *s) {
        const void *p = pool_map(mm->pool, pe_handle(origin));
        if (!p || pe_clen(origin) != sizeof(*s) || !mm->core->tier)
                return -EBADMSG;
        memcpy(s, p, sizeof(*s));
        return tier_stub_check(mm->core->tier, s);
}

/* Decode a STORED/SAME payload into dst. A page on the second tier is read
 * first: -EBADMSG if it is lost (corrupt), another -errno if the read
 * failed and may work later. */
int decode(FaultThread *ft, MMClient *mm, uint64_t origin, uint8_t *dst) {
        if (pe_state(origin) == PE_SAME) {
                page_fill(dst, pe_fill(origin));
                return 0;
        }
        const void *src = pool_map(mmclient_pool_of(mm, origin), pe_handle(origin));
        uint32_t clen = pe_clen(origin);
        if (!src)
                return -EBADMSG;
        if (pe_is_tier(origin)) {
                TierStub stub;
                const uint8_t *obj;
                int r = tier_stub(mm, origin, &stub);
                if (r < 0)
                        return r;
                if (!ft->tier)
                        return -ENODEV;
                r = tier_read(ft->tier, &stub, mm->uid, &obj);
                if (r < 0)
                        return r;
                src = obj;
                clen = stub.len;
        }
        if (clen == ZSWAP_PAGE_SIZE) {
                memcpy(dst, src, ZSWAP_PAGE_SIZE); /* stored raw */
                return 0;
        }
        int inj = pe_is_tier(origin) ? 0 : INJECT(INJ_DECODE);
        if (inj)
                return -inj;
        return pe_decompress(ft->dctx, mmclient_dict(mm), origin, src, clen, dst);
}

/* True if the page was zero-filled by this call. */
static bool serve_zero(FaultThread *ft, MMClient *mm, uint64_t addr, bool write) {
        /* a write fault gets a real zeroed page at once instead of the zero
         * page followed by a copy-on-write fault */
        int r = write ? uffd_copy(mm->uffd, addr, ft->zero, 0) : uffd_zeropage(mm->uffd, addr);
        TRACE(TR_ZERO, addr, write, r);
        if (r == -EAGAIN) {
                retry_add(ft, mm, addr, 0, NULL, false, false);
                return false;
        }
        if (r < 0) {
                /* EEXIST: installed meanwhile (fault-around, a racing
                 * fault): nothing was zero-filled, just wake the thread */
                uffd_wake(mm->uffd, addr);
                return false;
        }
        atomic_fetch_add_explicit(&mm->st.faults_zero, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&mm->core->faults_zero, 1, memory_order_relaxed);
        return true;
}

#define ZA_MIN 16  /* pages zero-filled after a first touch */
#define ZA_MAX 512 /* and at most, doubling while first touches come where the last fill ended */

/*
 * Zero-fill-ahead. A first touch of fresh memory (no entry: never
 * evicted) is a round trip to us, which the same program without zswapd
 * does not make; programs touch fresh memory in runs (a heap that grows,
 * a table filled after its allocation). So the fresh pages after the
 * touched one are mapped to the kernel's zero page in the same round
 * trip, one UFFDIO_ZEROPAGE for the run: no memory is spent (the zero
 * page is shared; a write to one of them is an ordinary kernel
 * copy-on-write fault, as a first write without zswapd is an ordinary
 * fault), and the program's next touches there never reach us. The run
 * grows from ZA_MIN to ZA_MAX pages while first touches come where the
 * last one ended, and shrinks when they scatter, so sparse touches of a
 * huge mapping map little.
 *
 * Safe because we hold serve_lock with `reading` raised (drain_uffd()):
 * no agent move runs, so no page leaves the client meanwhile, and only
 * pages whose entry is 0 (never evicted, nothing on its way) are filled.
 * The run stops at the first page with an entry; the kernel stops the
 * fill at the first page mapped or in swap (EEXIST), which ends it too.
 * An munmap, mremap or madvise under way makes the kernel refuse every
 * fill (EAGAIN) until we have read its event. A run past the end of the
 * mapping (ENOENT: a fill stays within one) is tried again shorter.
 * Nothing of the client is read: only the page index and the uffd.
 */
static void zero_ahead(MMClient *mm, uint64_t addr) {
        const uint64_t page = ZSWAP_PAGE_SIZE;
        uint64_t start = addr + page;
        unsigned w = mm->za_window ? mm->za_window : ZA_MIN;

        if (mm->za_end && start > mm->za_end - page && start <= mm->za_end + page)
                w = MIN(w * 2, (unsigned)ZA_MAX); /* the reader went on from where the last run ended */
        else if (mm->za_end)
                w = MAX(w / 2, (unsigned)ZA_MIN);
        mm->za_window = w;

        size_t n = 0;
        while (n < w && start + n * page < PINDEX_MAX_ADDR) {
                _Atomic uint64_t *e = pindex_entry(mm->index, start + n * page, false);
                if (e && atomic_load_explicit(e, memory_order_acquire) != 0)
                        break;
                n++;
        }
        uint64_t filled = 0;
        while (n > 0) {
                struct uffdio_zeropage z = { .range = { .start = start, .len = n * page } };
                int r = INJECT(INJ_UFFD_ZEROPAGE) ? -EAGAIN
                        : ioctl(mm->uffd, UFFDIO_ZEROPAGE, &z) == 0 ? 0 : negative_errno();
                if (r == 0)
                        filled = n;
                else if (z.zeropage > 0)
                        filled = (uint64_t)z.zeropage / page; /* up to a page mapped or in swap */
                else if (z.zeropage == -ENOENT && n > 1) {
                        n /= 2; /* past the end of the mapping */
                        continue;
                }
                break; /* EEXIST: the next page is mapped; EAGAIN: an event is queued */
        }
        mm->za_end = start + (filled ? filled : 1) * page;
        TRACE(TR_ZERO, addr, 2, filled);
        atomic_fetch_add_explicit(&mm->core->zero_ahead, filled, memory_order_relaxed);
}

/*
 * The read of a staging slot is handed to this thread's queue and not
 * waited for: the slot is the client's memory, and the client chooses
 * what is mapped there (a file of a FUSE server that never answers, say:
 * memread.h). The fault waits, its entry LOADING, and this thread goes on
 * serving the others. The retry made here holds the page's place from
 * now on: events that drop or move the page find it (remove_cb(),
 * remap_cb()), and run_retries() installs it once the read is back
 * (slot_read_done()). False: not now (no queue, no room, no memory); the
 * caller reads and waits instead, or serves the fault later.
 */
static bool slot_read_async(FaultThread *ft, MMClient *mm, uint64_t addr, uint64_t loading, uint32_t slot, Lane *lane,
                            bool refault) {
        if (!slot_read_submit(ft, mm, mm, addr, loading, slot, lane, refault))
                return false;
        /* What the slot holds is decided now, as a read made here would
         * decide it: the moved page, or the zero page, after which the
         * agent's move of this page fails and it stays where it is (race 2
         * in docs/page-lifecycle.md). EAGAIN (an event is queued) leaves it
         * to the read; an event that drops or moves this page poisons the
         * slot itself (remove_cb(), remap_cb()) */
        (void)mmclient_slot_zero(mm, slot);
        return true;
}

/* Submit op, a read of len bytes at off in src's memory into buf, on this
 * thread's read queue, with a descriptor of the read's own: the ring's
 * worker opens the read's fd when it starts, and the client's could be
 * closed and its number reused by then. false: not submitted (the caller
 * undoes what it took for it). */
bool read_submit(FaultThread *ft, MMClient *src, MemReadOp *op, uint64_t off, void *buf, size_t len,
                 int tag) {
        int fd = fcntl(mmclient_mem_fd(src), F_DUPFD_CLOEXEC, 3);
        if (fd < 0)
                return false;
        *op = (MemReadOp){ .fd = fd, .off = off, .buf = buf, .len = len, .uid = src->uid, .tag = tag };
        if (memread_queue_submit(ft->reads, op) < 0) {
                close(fd);
                return false;
        }
        return true;
}

/* A retry of mm's page at addr, READING (a read nobody waits for is
 * about to be made for it), holding a reference to mm; timed from the
 * fault being served. NULL: no memory. */
static Retry *retry_reading_new(FaultThread *ft, MMClient *mm, uint64_t addr, uint64_t loading, bool refault) {
        Retry *r = INJECT_ALLOC(malloc(sizeof(*r)));
        if (!r)
                return NULL;
        r->reserved = false;
        r->addr = addr;
        r->loading = loading;
        r->pin = NULL;
        r->t0 = ft->fault_t0; /* timed to the install */
        r->refault = refault;
        r->keep = false; /* a slot's page or the tier's: neither keeps a copy (install()) */
        r->mm = mmclient_ref(mm);
        r->pin_mm = NULL;
        r->op.res = 0;
        r->tier = false;
        atomic_init(&r->state, RS_READING);
        return r;
}

/* The retry of mm's page at addr whose content is read from src's staging
 * slot (src is mm, or a forked child's parent: then the retry holds a
 * reference to it for the pin), READING; NULL: not now. */
Retry *slot_read_submit(FaultThread *ft, MMClient *mm, MMClient *src, uint64_t addr, uint64_t loading,
                        uint32_t slot, Lane *lane, bool refault) {
        if (!ft->reads || !memread_queue_has_room(ft->reads) || mmclient_mem_fd(src) < 0 || INJECT(INJ_SLOT_READ))
                return NULL;
        Retry *r = retry_reading_new(ft, mm, addr, loading, refault);
        if (!r)
                return NULL;
        r->pin = lane;
        r->pin_mm = src != mm ? mmclient_ref(src) : NULL;
        if (!read_submit(ft, src, &r->op, mmclient_slot_addr(src, slot), r->page, ZSWAP_PAGE_SIZE, READ_SLOT)) {
                mmclient_unref(mm);
                if (r->pin_mm)
                        mmclient_unref(r->pin_mm);
                free(r);
                return NULL;
        }
        TRACE(TR_RETRY, addr, loading, 1);
        /* relaxed: a bound, read by this client's faults, which run under
         * serve_lock as we do */
        atomic_fetch_add_explicit(&mm->slot_reads, 1, memory_order_relaxed);
        r->next = mm->retries;
        mm->retries = r;
        ft->fault_t0 = 0;
        return r;
}

/* A slot read of this thread's is back (or given up at exit: -ECANCELED).
 * No lock: the retry is on its client's list, which serve_lock guards;
 * only its state changes here, and whoever holds the lock next installs
 * it (run_retries(): this thread looks at every client it watches). */
void slot_read_done(FaultThread *ft, MemReadOp *op) {
        Retry *r = container_of(op, Retry, op);
        MMClient *mm = r->mm, *pin_mm = r->pin_mm;

        close(op->fd);
        atomic_fetch_sub_explicit(&mm->slot_reads, 1, memory_order_relaxed);
        if (pin_mm) {
                /* a child's copy of its parent's slot: the bytes are ours,
                 * the parent's lane may go (before READY: whoever frees the
                 * retry then finds no pin) */
                retry_unpin(r->pin);
                r->pin = NULL;
                r->pin_mm = NULL;
        }
        /* release: the page the kernel wrote, and the pin's end, to
         * whoever installs or frees it. seq_cst, with the store of
         * has_retries: run_retries() stores false, then reads state (said
         * there) */
        if (atomic_exchange_explicit(&r->state, RS_READY, memory_order_seq_cst) == RS_CANCELLED) {
                /* taken off its list by an event already (retry_free()) */
                retry_unpin(r->pin);
                free(r);
        } else {
                atomic_store_explicit(&mm->has_retries, true, memory_order_seq_cst);
                ft->retry_due = true;
        }
        mmclient_unref(mm);
        if (pin_mm)
                mmclient_unref(pin_mm);
}

/* Serve a page held in a staging slot (MOVING or STAGED entry v). Returns
 * 1 when done with it, 0 if the entry changed under us (caller reloads),
 * -1 when out of memory for a retry (retry_none(): nothing claimed). */
int serve_slot(FaultThread *ft, MMClient *mm, uint64_t addr, _Atomic uint64_t *e, uint64_t v, uint64_t final,
                bool refault) {
        uint32_t slot = pe_slot(v);
        unsigned lane_idx = slot / LANE_SLOTS;

        if (lane_idx >= mm->nlanes) {
                /* cannot happen unless memory is corrupted: never install garbage */
                log_error("pid %d: entry at %#llx names slot %u outside staging", (int)mmclient_pid(mm),
                          (unsigned long long)addr, slot);
                return 1;
        }
        if (refault && !retry_ready(ft)) {
                /* the program's fault on a page in flight: the eviction
                 * still finishes it, and the fault comes again. (A page
                 * nobody else finishes any more, an mremap's or one a
                 * worker handed back, is taken as before: the reserve, or
                 * pending) */
                retry_none(ft, mm, addr);
                return -1;
        }
        Lane *lane = &mm->lanes[lane_idx];
        /* seq_cst pairs with the manager's seq_cst load of users before it
         * releases the lane: either it sees us, or we see the entry changed */
        atomic_fetch_add_explicit(&lane->users, 1, memory_order_seq_cst);
        uint64_t loading = pe_make_loading(v) | (final & PE_FLAG_INCOMPRESSIBLE);
        if (ft->reads &&
            (atomic_load_explicit(&mm->slot_reads, memory_order_relaxed) >= SLOT_READS_CLIENT ||
             !memread_queue_has_room(ft->reads))) {
                /* no read of this one now: the fault is served again once
                 * a read of this thread's is back. Only a client with many
                 * slot reads that do not come back waits for it. The retry
                 * keeps our pin: the slot must hold the page until then */
                retry_add(ft, mm, addr, 0, NULL, false, false);
                if (mm->retries && mm->retries->addr == addr && !mm->retries->loading && !mm->retries->pin)
                        mm->retries->pin = lane;
                /* else (no memory for the retry) the pin stays: a lane kept
                 * for ever rather than a page lost */
                return 1;
        }
        /* seq_cst: the read half of that pairing, after our increment */
        if (!atomic_compare_exchange_strong_explicit(e, &v, loading, memory_order_seq_cst, memory_order_seq_cst)) {
                atomic_fetch_sub_explicit(&lane->users, 1, memory_order_release);
                return 0;
        }
        if (slot_read_async(ft, mm, addr, loading, slot, lane, refault))
                return 1; /* the retry holds the lane now */
        int r = mmclient_read(mm, mmclient_slot_addr(mm, slot), ft->page, ZSWAP_PAGE_SIZE);
        TRACE(TR_SLOT, addr, v, (uint64_t)(uint32_t)r | ((uint64_t *)ft->page)[1] << 32);
        if (r < 0) {
                atomic_fetch_sub_explicit(&lane->users, 1, memory_order_release);
                /* the client is gone or broke its staging area: nothing to install */
                mmclient_release_payload(mm, loading);
                atomic_store_explicit(e, 0, memory_order_release);
                uffd_wake(mm->uffd, addr);
                return 1;
        }
        install(ft, mm, addr, e, loading, ft->page, final, false, refault);
        /* a copy put off (EAGAIN) keeps the slot, and the lane, until it is
         * made (Retry.pin); else the slot is done with */
        if (!retry_keep_pin(mm, addr, loading, lane))
                atomic_fetch_sub_explicit(&lane->users, 1, memory_order_release);
        return 1;
}

#define RA_MIN 4    /* pages installed ahead once a reader looks sequential */
#define RA_MAX 64   /* and at most, doubling while it stays sequential */

/*
 * Claim up to RA_CHUNK consecutive held pages from a and decode them into
 * ft->ra_buf. Stops at the first page that is not STORED/SAME, is taken by
 * somebody else, was last used before stamp since (0: any), or fails to
 * decode (its entry keeps what it held).
 */
static unsigned ra_claim(FaultThread *ft, MMClient *mm, uint64_t a, unsigned max, uint32_t since, RaPage *pages) {
        unsigned n = 0;

        for (; n < max; n++, a += ZSWAP_PAGE_SIZE) {
                _Atomic uint64_t *e = pindex_entry(mm->index, a, false);
                uint64_t v = e ? atomic_load_explicit(e, memory_order_acquire) : 0;
                if ((pe_state(v) != PE_STORED && pe_state(v) != PE_SAME) || pe_is_tier(v))
                        break; /* the second tier's pages come with their own read (tier_around) */
                if (since) {
                        PageMeta *meta = pindex_meta(mm->index, a, false);
                        if (!meta || atomic_load_explicit(&meta->stamp[pmeta_idx(a)], memory_order_relaxed) < since)
                                break;
                }
                uint64_t loading = pe_make_loading(v);
                if (!atomic_compare_exchange_strong_explicit(e, &v, loading, memory_order_acquire, memory_order_acquire))
                        break;
                if (decode(ft, mm, v, ft->ra_buf[n]) < 0) {
                        atomic_store_explicit(e, v & ~PE_MARKS, memory_order_release);
                        break;
                }
                pages[n] = (RaPage){ e, v, loading };
        }
        return n;
}

/* msg, read ahead of its turn (fault-around's look, the history's), is
 * handled next by this thread (drain_messages()), in order: a fault is
 * timed from now. */
static void stash(FaultThread *ft, MMClient *mm, const struct uffd_msg *msg) {
        mm->stash = *msg;
        mm->has_stash = true;
        ft->stash_t0 = msg->event == UFFD_EVENT_PAGEFAULT ? now_ns() : 0;
}

/* Pages installed ahead of use (fault-around, the tier's, the history's). */
static void count_prefetched(MMClient *mm, unsigned n) {
        atomic_fetch_add_explicit(&mm->st.prefetches, n, memory_order_relaxed);
        atomic_fetch_add_explicit(&mm->core->prefetches, n, memory_order_relaxed);
}

/*
 * Look at the next message while installing ahead. A fault inside the
 * window is the reader that caught up: it is served by the copies to come
 * (they wake from then on), or at once if its page went in already. Any
 * other message ends the window and is handled next (mm->stash), so events
 * keep their order and no other fault waits for more than one chunk.
 * Returns false when the window must end.
 */
static bool ra_look(FaultThread *ft, MMClient *mm, uint64_t done_from, uint64_t a, uint64_t end, bool *waiter) {
        struct uffd_msg msg;
        ssize_t n = uffd_read_msg(mm, &msg);

        if (n != sizeof(msg))
                return true; /* nothing waiting */
        TRACE(TR_RALOOK, msg.arg.pagefault.address, msg.event, msg.arg.pagefault.flags);
        if (msg.event == UFFD_EVENT_PAGEFAULT) {
                uint64_t f = msg.arg.pagefault.address & ~(ZSWAP_PAGE_SIZE - 1);
                if (f >= done_from && f < a) {
                        uffd_wake(mm->uffd, f); /* installed without a wake a moment ago */
                        return true;
                }
                if (f >= a && f < end) {
                        *waiter = true;
                        mm->ra_waiter = f;
                        mm->ra_waiter_tid = msg.arg.pagefault.feat.ptid;
                        /* if the window ends before its page, it becomes the
                         * stash (fault_around): timed from this read */
                        ft->stash_t0 = now_ns();
                        return true;
                }
        }
        stash(ft, mm, &msg);
        return false;
}

/*
 * Install the n pages claimed from a (ft->ra_buf, pages) with one
 * UFFDIO_COPY, waking whoever waits on them if wake, write-protected with
 * the copy kept if keep. Returns the pages copied; the entries of the
 * others keep what they held (present meanwhile, or the address space is
 * changing: EAGAIN, an event is queued).
 */
static unsigned ra_install(FaultThread *ft, MMClient *mm, uint64_t a, const RaPage *pages, unsigned n, bool wake,
                           bool keep) {
        struct uffdio_copy c = { .dst = a, .src = (uintptr_t)ft->ra_buf, .len = n * ZSWAP_PAGE_SIZE,
                                 .mode = (wake ? 0 : UFFDIO_COPY_MODE_DONTWAKE) | (keep ? UFFDIO_COPY_MODE_WP : 0) };
        unsigned copied = n;

        if (INJECT(INJ_UFFD_COPY))
                copied = 0; /* the call skipped, as if it failed before the first page */
        else if (ioctl(mm->uffd, UFFDIO_COPY, &c) < 0)
                copied = c.copy > 0 ? (unsigned)((uint64_t)c.copy >> ZSWAP_PAGE_SHIFT) : 0;
        TRACE(TR_RACOPY, a, n | (uint64_t)copied << 32, c.mode);
        for (unsigned i = 0; i < n; i++) {
                TRACE(TR_RA, a + i * ZSWAP_PAGE_SIZE, pages[i].v, ((uint64_t *)ft->ra_buf[i])[1]);
                if (i >= copied)
                        atomic_store_explicit(pages[i].e, pages[i].v & ~PE_MARKS, memory_order_release);
                else if (keep)
                        atomic_store_explicit(pages[i].e, make_clean(mm, pages[i].v), memory_order_release);
                else {
                        mmclient_release_payload(mm, pages[i].loading);
                        atomic_store_explicit(pages[i].e, 0, memory_order_release);
                }
        }
        return copied;
}

/*
 * A refill's run from a (work.c): up to max consecutive held pages used
 * at stamp since or later (0: any), installed with one UFFDIO_COPY (waking any
 * thread of the program that faulted on one meanwhile), stamped used now.
 * Returns the pages claimed (0: a is not such a page); *got the pages
 * installed.
 */
unsigned refill_run(FaultThread *ft, MMClient *mm, uint64_t a, unsigned max, uint32_t since, unsigned *got) {
        RaPage pages[RA_CHUNK];
        unsigned n = ra_claim(ft, mm, a, MIN(max, (unsigned)RA_CHUNK), since, pages);

        *got = n ? ra_install(ft, mm, a, pages, n, true, false) : 0;
        for (unsigned i = 0; i < *got; i++)
                age_note_stamp(mm, a + i * ZSWAP_PAGE_SIZE);
        return n;
}

/*
 * Fault-around. The faulting page was installed (and its thread woken)
 * first; if this fault continues a sequential run, the next pages held
 * compressed go in too, RA_CHUNK at a time with one UFFDIO_COPY each, so
 * the reader finds them mapped instead of faulting on each. Random faults
 * install nothing extra. A page that is busy, present or gone ends the
 * window; its entry keeps what it held.
 *
 * On a machine where the woken reader runs on this very CPU it preempts us
 * and soon faults on the next page; that fault is absorbed here (ra_look)
 * rather than breaking the window, so the window keeps paying off.
 */
static void fault_around(FaultThread *ft, MMClient *mm, uint64_t addr) {
        bool sequential = addr == mm->ra_next;
        unsigned window = !sequential ? 0 : mm->ra_window ? MIN(mm->ra_window * 2, RA_MAX) : RA_MIN;
        uint64_t first = addr + ZSWAP_PAGE_SIZE, a = first, end = first + (uint64_t)window * ZSWAP_PAGE_SIZE;
        bool waiter = false;
        RaPage pages[RA_CHUNK];

        mm->ra_window = window;
        while (a < end) {
                if (!waiter && !ra_look(ft, mm, first, a, end, &waiter))
                        break;
                unsigned n = ra_claim(ft, mm, a, (unsigned)MIN((uint64_t)RA_CHUNK, (end - a) >> ZSWAP_PAGE_SHIFT), 0, pages);
                if (n == 0)
                        break;
                unsigned copied = ra_install(ft, mm, a, pages, n, waiter, keeps_clean(mm));
                for (unsigned i = 0; i < copied; i++)
                        age_note_use(mm, a + i * ZSWAP_PAGE_SIZE);
                count_prefetched(mm, copied);
                a += (uint64_t)copied * ZSWAP_PAGE_SIZE;
                if (copied < n)
                        break;
        }
        if (waiter && mm->ra_waiter >= a) {
                /* the window ended before the waiter's page: serve it next */
                mm->stash = (struct uffd_msg){ .event = UFFD_EVENT_PAGEFAULT };
                mm->stash.arg.pagefault.address = mm->ra_waiter;
                mm->stash.arg.pagefault.feat.ptid = mm->ra_waiter_tid;
                mm->has_stash = true;
        }
        /* the next fault of a sequential reader is the first page we did
         * not install */
        mm->ra_next = a;
}

/*
 * Fault history. A program that walks the same data again (a tree or a
 * hash chain walked once per request, a collector's mark phase, a loop
 * over the same objects) faults on its cold pages in the same order each
 * time, scattered where fault-around sees no run. So each fault on a held
 * page notes, in the page before it (PageMeta.next), that it came next
 * (history_pair()); once the same page has come next twice in a row, a
 * fault on the page before it brings that one back too, and the one that
 * came after that, up to HIST_CHAIN pages (history_follow()), each in
 * the same round trip. A random reader never faults twice in a row in
 * the same order, so nothing is brought back for it; a pair that stops
 * holding loses its count one miss at a time. Tunable fault_history.
 *
 * A history can be sure and still wrong: a program that thrashes under a
 * resident limit faults in an order that changes with what the limit
 * left it, and each page brought back on a wrong guess pushes out one it
 * still uses. So every fault that follows a sure pair is scored against
 * it (history_score()): the next fault the history foresaw, or another.
 * Chains are followed only while, over the last HIST_WINDOW guesses, at
 * least HIST_RIGHT_PCT % were right. Guesses are scored whether chains
 * are followed or not, so a client's history resumes once its faults
 * keep to their order again.
 */
#define HIST_CHAIN 8                        /* pages a fault brings back by its history, at most */
#define HIST_SURE 2                         /* times in a row a page must have come next */
#define HIST_GAP_NS (100ull * 1000000)      /* two faults further apart are no pair */
#define HIST_FAR (1ll << 29)                /* pages apart that a pair cannot say */
#define HIST_WINDOW 64                      /* guesses scored together */
#define HIST_RIGHT_PCT 75                   /* of them right, for chains to be followed */

static int64_t hist_dist(uint32_t n) {
        return (int64_t)(int32_t)n >> 2;
}

/* The record of which page came after a (PageMeta.next): NULL where the
 * index has no zone for it. Read and written under serve_lock only:
 * relaxed, a count that orders nothing. */
static _Atomic uint32_t *hist_link(MMClient *mm, uint64_t a) {
        PageMeta *meta = pindex_meta(mm->index, a, false);
        return meta ? &meta->next[pmeta_idx(a)] : NULL;
}

/* The page a link v from a leads to */
static uint64_t hist_next(uint64_t a, uint32_t v) {
        return a + (uint64_t)(hist_dist(v) * (int64_t)ZSWAP_PAGE_SIZE);
}

/* addr faulted next after prev. Returns whether prev's history had
 * foreseen it (1) or another page (0); -1: it was not sure of any. */
static int history_pair(MMClient *mm, uint64_t prev, uint64_t addr) {
        int64_t d = ((int64_t)addr - (int64_t)prev) / (int64_t)ZSWAP_PAGE_SIZE;
        _Atomic uint32_t *n = hist_link(mm, prev);

        if (d == 0 || d >= HIST_FAR || d < -HIST_FAR || !n)
                return -1;
        uint32_t v = atomic_load_explicit(n, memory_order_relaxed), seen = v & 3;
        int guess = seen < HIST_SURE ? -1 : hist_dist(v) == d;
        if (seen && hist_dist(v) == d)
                v = (v & ~3u) | MIN(seen + 1, 3u);
        else if (seen > 1)
                v--; /* one miss: the pair holds, less surely */
        else
                v = (uint32_t)(int32_t)d << 2 | 1;
        atomic_store_explicit(n, v, memory_order_relaxed);
        return guess;
}

/* A guess of mm's history was right or wrong: once a window of guesses
 * is sure to have at least HIST_RIGHT_PCT % right or not, decide whether
 * its chains are followed over the next. */
static void history_score(MMClient *mm, bool right) {
        const unsigned need = (HIST_WINDOW * HIST_RIGHT_PCT + 99) / 100;

        /* relaxed: counters (core.h) */
        atomic_fetch_add_explicit(right ? &mm->core->history_right : &mm->core->history_wrong, 1,
                                  memory_order_relaxed);
        mm->hist_right += right;
        mm->hist_guesses++;
        /* decided as soon as the window's outcome is certain: enough
         * right, or too many wrong for the rest to make up */
        if (mm->hist_right < need && mm->hist_guesses - mm->hist_right <= HIST_WINDOW - need)
                return;
        bool paused = mm->hist_right < need;
        if (paused != mm->hist_paused)
                log_debug("pid %d: fault history %s (%u of %u guesses right)", (int)mmclient_pid(mm),
                          paused ? "paused" : "resumed", mm->hist_right, mm->hist_guesses);
        mm->hist_paused = paused;
        mm->hist_guesses = mm->hist_right = 0;
}

/* Is the uffd quiet? A message waiting (a fault the chain did not
 * foresee, or an event) is read, left to be handled next (mm->stash, as
 * fault-around's ra_look()), and ends the chain: no fault waits behind
 * pages brought back on a guess. */
static bool history_quiet(FaultThread *ft, MMClient *mm) {
        struct uffd_msg msg;

        if (mm->has_stash)
                return false;
        if (uffd_read_msg(mm, &msg) != sizeof(msg))
                return true;
        TRACE(TR_RALOOK, msg.arg.pagefault.address, msg.event, msg.arg.pagefault.flags);
        stash(ft, mm, &msg);
        return false;
}

/* Bring back the pages that came after addr the last times, following
 * the chain as far as it is sure, while no other message waits. Held
 * pages of the pool only (the second tier's come with their own read); a
 * page present, busy or gone is passed over. The last page the chain
 * reached is what the next fault pairs with. */
static uint64_t history_follow(FaultThread *ft, MMClient *mm, uint64_t addr, unsigned *links) {
        uint64_t a = addr;
        unsigned got = 0, i;

        for (i = 0; i < HIST_CHAIN; i++) {
                _Atomic uint32_t *n = hist_link(mm, a);
                uint32_t v = n ? atomic_load_explicit(n, memory_order_relaxed) : 0;
                if ((v & 3) < HIST_SURE)
                        break;
                uint64_t next = hist_next(a, v);
                if (next >= PINDEX_MAX_ADDR || !history_quiet(ft, mm))
                        break;
                a = next;
                RaPage page;
                if (ra_claim(ft, mm, a, 1, 0, &page) == 1 &&
                    ra_install(ft, mm, a, &page, 1, true, keeps_clean(mm)) == 1) {
                        age_note_use(mm, a);
                        got++;
                }
        }
        if (got) {
                count_prefetched(mm, got);
                atomic_fetch_add_explicit(&mm->core->history_prefetched, got, memory_order_relaxed);
        }
        *links = i;
        return a;
}

/* The chain of links from addr held: the fault after its end was the one
 * it foresaw. Its links made no fault to count them again, so they are
 * counted here; else a link followed since it was sure would be as
 * unsure after one miss as one just seen twice. */
static void history_confirm(MMClient *mm, uint64_t addr, unsigned links) {
        for (uint64_t a = addr; links--; ) {
                _Atomic uint32_t *n = hist_link(mm, a);
                uint32_t v = n ? atomic_load_explicit(n, memory_order_relaxed) : 0;
                /* a link another thread's faults made unsure since: the
                 * chain is not there to confirm any more */
                if ((v & 3) < HIST_SURE)
                        return;
                if ((v & 3) < 3)
                        atomic_store_explicit(n, v + 1, memory_order_relaxed);
                a = hist_next(a, v);
        }
}

/* The history of thread tid of mm: its own, or the one that faulted
 * longest ago, taken over. */
static HistThread *history_thread(MMClient *mm, uint32_t tid) {
        unsigned old = 0;

        for (unsigned i = 0; i < MM_HIST_THREADS; i++) {
                if (mm->hist[i].tid == tid && mm->hist[i].last)
                        return &mm->hist[i];
                if (mm->hist[i].last_ns < mm->hist[old].last_ns)
                        old = i;
        }
        mm->hist[old].tid = tid;
        mm->hist[old].last = 0;
        return &mm->hist[old];
}

/* A fault on a held page at addr was served (and fault-around done):
 * note the pair it makes with the fault before, and follow the history
 * unless fault-around found a sequential run. */
static void history_note(FaultThread *ft, MMClient *mm, uint64_t addr) {
        /* relaxed: a setting (core.h) */
        if (!atomic_load_explicit(&mm->core->fault_history, memory_order_relaxed))
                return;
        uint64_t t = now_ns();
        HistThread *h = history_thread(mm, mm->fault_tid);
        if (h->last && t - h->last_ns < HIST_GAP_NS) {
                int guess = history_pair(mm, h->last, addr);
                if (guess >= 0)
                        history_score(mm, guess);
                if (guess == 1)
                        history_confirm(mm, h->chain_from, h->chain_links);
        }
        h->last = h->chain_from = addr;
        h->last_ns = t;
        h->chain_links = 0;
        if (mm->ra_window == 0 && !mm->hist_paused)
                h->last = history_follow(ft, mm, addr, &h->chain_links);
}

/*
 * A page whose data is lost: its pool object fails to decompress, or its
 * data on the second tier fails to open (tier-seal.c) or its stub is bad.
 * This thread holds its entry (LOADING value loading). It is never
 * installed: the entry is dropped and the page poisoned, so the process
 * gets SIGBUS on access, as the kernel does with a swapped-out page it
 * cannot read, rather than other content or a fault that never ends.
 * Every loss is counted (where) and logged, the first ones of each minute
 * page by page.
 */
static void page_lost(FaultThread *ft, MMClient *mm, uint64_t addr, _Atomic uint64_t *e, uint64_t loading,
                      const char *why, const char *counter) {
        uint64_t now = now_ns();

        if (now - ft->lost_since_ns > 60ull * 1000000000) {
                if (ft->lost_unlogged)
                        log_error("%u more pages lost in the last minute (zswapctl status: pool_corrupt, tier_corrupt)",
                                  ft->lost_unlogged);
                ft->lost_since_ns = now;
                ft->lost_logged = ft->lost_unlogged = 0;
        }
        if (ft->lost_logged++ < 8)
                log_error("pid %d: page at %#llx is lost: %s; it is poisoned (SIGBUS on access) rather than "
                          "installed (zswapctl status: %s)",
                          (int)mmclient_pid(mm), (unsigned long long)addr, why, counter);
        else
                ft->lost_unlogged++;
        mmclient_release_payload(mm, loading);
        atomic_store_explicit(e, 0, memory_order_release);
        uffd_poison(mm, addr);
}

/* ---- the second tier ---- */

/*
 * A page of the second tier that decode() could not bring back; this
 * thread holds its entry (LOADING value loading, from v). Lost (-EBADMSG):
 * page_lost(). Otherwise the backing store could not be read (an I/O
 * error, the NBD server gone): the entry goes back as it was and the
 * fault waits, served again from a retry every millisecond (the reader
 * itself tries its backing store again at most every 10 ms, an NBD
 * connection every second), for as long as it takes.
 */
void tier_failed(FaultThread *ft, MMClient *mm, uint64_t addr, _Atomic uint64_t *e, uint64_t v,
                 uint64_t loading, int r) {
        uint64_t now = now_ns();

        if (r == -EBADMSG) {
                page_lost(ft, mm, addr, e, loading, "its data on the second tier fails authentication", "tier_corrupt");
                return;
        }
        atomic_store_explicit(e, v, memory_order_release);
        if (now - ft->tier_warned_ns > 10ull * 1000000000 || !ft->tier_warned_ns) {
                log_error("pid %d: page at %#llx: the second tier cannot be read (%s): the fault waits and is "
                          "retried (zswapctl status: tier_errors)",
                          (int)mmclient_pid(mm), (unsigned long long)addr, strerror(-r));
                ft->tier_warned_ns = now;
        }
        if (!retry_find(mm, addr))
                retry_add(ft, mm, addr, 0, NULL, false, false);
}

#define TIER_AROUND 16 /* pages looked at on each side of a fault from the second tier */

/*
 * The read that brought a page back from the second tier brought the
 * objects packed next to it too, written out together because they were
 * neighbours. Install those of the pages around it (without waking
 * anyone) that are in the read's window w and open (tier-seal.c); the
 * rest keep their entries.
 */
void tier_around(FaultThread *ft, MMClient *mm, uint64_t addr, const TierWindow *w) {
        unsigned got = 0;

        if (!w->buf)
                return;
        for (int dir = 1; dir >= -1; dir -= 2) {
                for (unsigned i = 1; i <= TIER_AROUND; i++) {
                        uint64_t a = addr + (uint64_t)(int64_t)(dir * (int)i) * ZSWAP_PAGE_SIZE;
                        if (a >= PINDEX_MAX_ADDR)
                                break;
                        _Atomic uint64_t *e = pindex_entry(mm->index, a, false);
                        uint64_t v = e ? atomic_load_explicit(e, memory_order_acquire) : 0;
                        TierStub s;
                        if (pe_state(v) != PE_STORED || !pe_is_tier(v) || tier_stub(mm, v, &s) < 0 ||
                            s.off < w->off || s.off + tier_rec_len(&s) > w->off + w->len)
                                continue;
                        uint64_t loading = pe_make_loading(v);
                        if (!atomic_compare_exchange_strong_explicit(e, &v, loading, memory_order_acquire,
                                                                     memory_order_acquire))
                                continue;
                        /* ours now: the stub cannot change under us */
                        bool open = tier_stub(mm, v, &s) == 0 && tier_window_open(mm->core->tier, w, &s, mm->uid, ft->page);
                        int r = !open ? -EBADMSG
                                : s.len == ZSWAP_PAGE_SIZE ? (memcpy(ft->ra_buf[0], ft->page, ZSWAP_PAGE_SIZE), 0)
                                                           : pe_decompress(ft->dctx, mmclient_dict(mm), v, ft->page, s.len,
                                                                           ft->ra_buf[0]);
                        if (r == 0)
                                r = uffd_copy(mm->uffd, a, ft->ra_buf[0], UFFDIO_COPY_MODE_DONTWAKE);
                        if (r < 0) {
                                /* present, changing (EAGAIN) or unreadable: it
                                 * keeps what it held */
                                atomic_store_explicit(e, v, memory_order_release);
                                if (r == -EAGAIN)
                                        goto out;
                                continue;
                        }
                        mmclient_release_payload(mm, loading);
                        atomic_store_explicit(e, 0, memory_order_release);
                        age_note_use(mm, a);
                        got++;
                }
        }
out:
        count_prefetched(mm, got);
        tier_note_prefetch(mm->core->tier, got);
}

#define TIER_READS_CLIENT 64 /* a client's pages one pump reads at once */

/*
 * A client with TIER_READS_CLIENT reads of the second tier out: true, and
 * the page waits for one of them to be back (a program's fault in a
 * retry; a restore comes back to it by itself).
 */
static bool tier_reads_full(FaultThread *ft, MMClient *mm, uint64_t addr) {
        /* relaxed: a bound, read under serve_lock as it is raised */
        if (atomic_load_explicit(&mm->tier_reads, memory_order_relaxed) < TIER_READS_CLIENT)
                return false;
        if (ft->fault_t0 && !retry_find(mm, addr))
                retry_add(ft, mm, addr, 0, NULL, false, false);
        return true;
}

/*
 * A page of the second tier, its entry LOADING (loading, from v) and ours:
 * its read goes to this thread's pump (tier-pump.h), and this thread goes
 * on serving every other fault while the backing store answers (or does
 * not: an NBD server that stops answering holds the pump alone). The retry
 * made here holds the page's place as a slot read's does: events that drop
 * or move the page find it (remove_cb(), remap_cb()), a fork copies the
 * object's stub (fork_cb()), and run_retries() installs the page once
 * tier_read_done() has made it READY. False: no memory for it (the caller
 * reads here and now).
 */
static bool tier_read_async(FaultThread *ft, MMClient *mm, uint64_t addr, uint64_t v, uint64_t loading,
                            bool refault) {
        TierStub stub;
        if (tier_stub(mm, v, &stub) < 0)
                return false; /* the read here finds it lost */
        Retry *r = retry_reading_new(ft, mm, addr, loading, refault);
        if (!r)
                return false;
        r->tier = true;
        r->tj.stub = stub;
        r->tj.owner = mm->uid;
        r->tj.page = r->page;
        r->tj.entry = v;
        r->tj.dict = mmclient_dict(mm);
        r->tj.res = 0;
        r->tj.win = (TierWindow){ 0 };
        TRACE(TR_RETRY, addr, loading, 2);
        atomic_fetch_add_explicit(&mm->tier_reads, 1, memory_order_relaxed);
        r->next = mm->retries;
        mm->retries = r;
        ft->fault_t0 = 0;
        tier_pump_submit(ft->pump, &r->tj);
        return true;
}

/* A read of this thread's pump is back (or given up: -ECANCELED). As
 * slot_read_done(): only the retry's state changes here. */
void tier_read_done(FaultThread *ft, TierJob *j) {
        Retry *r = container_of(j, Retry, tj);
        MMClient *mm = r->mm;

        atomic_fetch_sub_explicit(&mm->tier_reads, 1, memory_order_relaxed);
        /* as slot_read_done(): the page and tj to whoever installs or
         * frees it, and seq_cst against run_retries() */
        if (atomic_exchange_explicit(&r->state, RS_READY, memory_order_seq_cst) == RS_CANCELLED) {
                tier_window_free(&r->tj.win);
                free(r);
        } else {
                atomic_store_explicit(&mm->has_retries, true, memory_order_seq_cst);
                ft->retry_due = true;
        }
        mmclient_unref(mm);
}

/* Serve a fault at addr (or take a page back for a restore or an event:
 * around false, no fault-around, since only a real fault may look at the
 * uffd's next message). False: out of memory for a retry, the page was
 * left as it was (and the thread that faulted woken: retry_none()). */
bool serve(FaultThread *ft, MMClient *mm, uint64_t addr, bool write, bool around) {
        _Atomic uint64_t *e = pindex_entry(mm->index, addr, false);
        /* acquire: pairs with the release CAS that published the entry, so
         * the pool object's bytes are visible */
        uint64_t v = e ? atomic_load_explicit(e, memory_order_acquire) : 0;

        for (;;) {
                switch (pe_state(v)) {
                case PE_REMOVED:
                        /* the program touches the page again after dropping it:
                         * from now on its content is new, evictable as any */
                        if (!atomic_compare_exchange_strong_explicit(e, &v, 0, memory_order_acq_rel,
                                                                     memory_order_acquire))
                                continue;
                        if (serve_zero(ft, mm, addr, write) && around)
                                zero_ahead(mm, addr);
                        return true;
                case PE_EMPTY:
                        if (serve_zero(ft, mm, addr, write) && around)
                                zero_ahead(mm, addr);
                        return true;
                case PE_CLEAN:
                        /* the page was resident and is gone without an event
                         * we saw (MADV_FREE reclaimed it): its content is
                         * zero now, not the copy we kept */
                        if (!atomic_compare_exchange_strong_explicit(e, &v, 0, memory_order_acq_rel,
                                                                     memory_order_acquire))
                                continue;
                        mmclient_release_payload(mm, v);
                        serve_zero(ft, mm, addr, write);
                        return true;
                case PE_LOADING:
                        /* this thread holds it in a retry; its copy will wake the waiter */
                        return true;
                case PE_MOVING:
                case PE_STAGED: {
                        int r = serve_slot(ft, mm, addr, e, v, 0, around);
                        if (r != 0)
                                return r > 0;
                        v = atomic_load_explicit(e, memory_order_acquire);
                        continue;
                }
                case PE_STORED:
                case PE_SAME: {
                        bool tiered = pe_state(v) == PE_STORED && pe_is_tier(v) && ft->pump;
                        if (tiered && tier_reads_full(ft, mm, addr))
                                return true;
                        if (!retry_ready(ft)) {
                                retry_none(ft, mm, addr);
                                return false;
                        }
                        uint64_t loading = pe_make_loading(v);
                        if (!atomic_compare_exchange_strong_explicit(e, &v, loading, memory_order_acquire,
                                                                     memory_order_acquire))
                                continue;
                        if (tiered && tier_read_async(ft, mm, addr, v, loading, around))
                                return true;
                        int r = decode(ft, mm, v, ft->page);
                        STAGE(ST_DECODED);
                        if (r < 0 && pe_is_tier(v)) {
                                tier_failed(ft, mm, addr, e, v, loading, r);
                                return true;
                        }
                        if (r < 0) {
                                /* never install garbage */
                                atomic_fetch_add_explicit(&mm->core->pool_corrupt, 1, memory_order_relaxed);
                                page_lost(ft, mm, addr, e, loading, "its pool object fails to decompress",
                                          "pool_corrupt");
                                return true;
                        }
                        install(ft, mm, addr, e, loading, ft->page, 0, around && !write && keeps_clean(mm), around);
                        if (pe_is_tier(v)) {
                                TierWindow w;
                                if (tier_window_copy(ft->tier, &w))
                                        tier_around(ft, mm, addr, &w);
                                tier_window_free(&w);
                        } else if (around) {
                                fault_around(ft, mm, addr);
                                history_note(ft, mm, addr);
                        }
                        return true;
                }
                default:
                        return true;
                }
        }
}
