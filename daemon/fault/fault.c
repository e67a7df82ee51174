/*
 * fault.c: fault threads, the latency-critical side of the daemon.
 *
 * One fault thread per CPU, pinned there; every thread watches every
 * client uffd (edge-triggered), so a fault wakes the thread on its own CPU
 * first (a wake-up across vCPUs costs ~60 us here). Whoever wakes takes
 * the client's serve_lock with a trylock and reads; the lock is held from
 * a read() until that message is handled, so at any moment one thread is
 * the reader, and every message of that uffd, page faults and the
 * FORK/REMAP/REMOVE/UNMAP events alike, is handled completely, in the
 * order the kernel queued it, and every UFFDIO_COPY or ZEROPAGE into that
 * address space is made under the same lock. That single ordering point is
 * what makes mremap, munmap and MADV_DONTNEED race-free against restores:
 * an event is never processed while a copy for the same address space is
 * half done (docs/page-lifecycle.md). A thread that finds the lock taken
 * leaves a kick for the holder (serve_unlock), so no message is left
 * unread. Each client also has a home thread, which receives its installs,
 * restores and syncs through its inbox.
 *
 * The fault path (serve()) takes no lock a worker or the manager waits on:
 * entries are claimed with a compare-and-swap (STORED/SAME/MOVING/STAGED ->
 * LOADING), the pool object is then private to this thread, lz4
 * decompression uses no context and zstd a context of this thread's own.
 * Compression workers never hold anything the fault path waits for (the
 * manager only ever trylocks serve_lock). Work from workers and from the
 * manager arrives through a lock-free inbox.
 *
 * A copy that fails with EAGAIN (the kernel is in the middle of an mremap
 * or fork of that address space and has an event queued for us) keeps its
 * page in a retry item of the address space, keeps the entry LOADING, and
 * is retried after the queued messages have been read.
 */
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "inject.h"
#include "codec.h"
#include "fault.h"
#include "latency.h"
#include "log.h"
#include "memread.h"
#include "core.h"
#include "age.h"
#include "tier.h"
#include "tier-pump.h"
#include "uffd-compat.h"
#include "util.h"
#include "trace.h"

#define RA_CHUNK 8  /* pages decoded and copied in one UFFDIO_COPY by fault-around */

typedef struct RaPage {
        _Atomic uint64_t *e;
        uint64_t v, loading;
} RaPage;

/* A retry's page: there (READY), or being read from its staging slot by
 * the thread that made it (READING), or given up by an event while that
 * read was in flight (CANCELLED: the read's completion frees it). */
enum { RS_READY, RS_READING, RS_CANCELLED };

/* What a read of a thread's queue is for (MemReadOp.tag) */
enum { READ_SLOT, READ_REVOKE };

typedef struct Retry {
        struct Retry *next;
        bool reserved;     /* from a thread's reserve, not malloc */
        uint64_t addr;
        uint64_t loading;  /* the LOADING value this thread put in the entry; 0: a zero fill */
        uint64_t t0;       /* when the fault it serves was read (fault_t0), 0: none */
        /* the staging lane whose slot the page came from (serve_slot()),
         * kept from release until the page is in: the retry holds it only
         * in this process, and a daemon that dies meanwhile leaves it to
         * the next one through the slot (adopt.c) */
        Lane *pin;
        /* a read of the slot nobody waits for (slot_read_async()): the
         * retry is made at once, READING, and becomes READY when the read
         * is back. The thread that completes the read only swaps state;
         * the list it is on belongs to whoever holds serve_lock */
        _Atomic int state;
        bool refault;      /* the program's own fault (reclaim's ageing hears of it) */
        MMClient *mm;      /* READING: a reference for the read, dropped when it is back */
        /* a forked child's copy of its parent's slot (fork_copy_async()):
         * pin is the parent's lane, pin_mm a reference to the parent, both
         * given up as soon as the read is back (the page is ours then) */
        MMClient *pin_mm;
        MemReadOp op;      /* READING: the read, into page */
        /* a read of the second tier (tier_read_async()): instead of op,
         * the pump's job, into page; READY with tj.res and tj.win */
        bool tier;
        TierJob tj;
        uint8_t page[ZSWAP_PAGE_SIZE];
} Retry;

struct FaultThread {
        Core *core;
        unsigned idx;
        pthread_t thread;
        bool started;
        int epfd;
        Inbox inbox;
        CodecDCtx *dctx;
        TierReader *tier;   /* reads from the second tier here and now (a fork's copies), or NULL (tier.h) */
        TierPump *pump;     /* reads from the second tier for faults, or NULL (tier-pump.h) */
        int pump_fd;        /* eventfd: the pump's jobs are back */
        uint64_t tier_warned_ns; /* last "cannot read the second tier" line; this thread only */
        uint64_t lost_since_ns;  /* pages lost on the tier: logged one by one this minute, and not */
        unsigned lost_logged, lost_unlogged;
        Retry *reserve;     /* spare retries for when malloc fails; this thread only */
        MemReadQueue *reads; /* slot reads in flight (memread.h), NULL: read and wait; this thread only */
        void *revoke_buf;   /* where revocations read lanes to, never looked at (revoke_moves()); this thread only */
        Work *restores;     /* unfinished FW_RESTORE, this thread only */
        Work *deferred;     /* FW_INSTALL and FW_SYNC that found serve_lock taken, this thread only */
        MMClient **owned;   /* watched in epfd, one reference each; this thread only */
        size_t nowned;
        bool retry_due;     /* this thread left retries on some mm; this thread only */
        bool read_soon;     /* a read waits for a move to end: look again in READ_RECHECK_NS; this thread only */
        _Atomic bool stop; /* written by the manager, read by the thread */
        /* when the page fault being handled was read (now_ns()), 0: the
         * work at hand is no program's fault; this thread only */
        uint64_t fault_t0;
        uint64_t stash_t0; /* when fault-around read the page fault it left in mm->stash */
        _Alignas(64) uint8_t page[ZSWAP_PAGE_SIZE];
        _Alignas(64) uint8_t zero[ZSWAP_PAGE_SIZE];
        _Alignas(64) uint8_t ra_buf[RA_CHUNK][ZSWAP_PAGE_SIZE];
        /* last: the page buffers keep their place in the struct */
        _Alignas(64) LatencyHist lat; /* read to install, this thread writes (latency.h) */
};

/* ---- uffd ioctls ---- */

static int uffd_copy(int uffd, uint64_t addr, const void *page, uint64_t mode) {
        struct uffdio_copy c = { .dst = addr, .src = (uintptr_t)page, .len = ZSWAP_PAGE_SIZE, .mode = mode };
        int inj = INJECT(INJ_UFFD_COPY);
        if (inj)
                return -inj; /* instead of the call: the kernel's state stays as that error leaves it */
        if (ioctl(uffd, UFFDIO_COPY, &c) == 0)
                return 0;
        return c.copy < 0 ? (int)c.copy : negative_errno();
}

static int uffd_zeropage(int uffd, uint64_t addr) {
        struct uffdio_zeropage z = { .range = { .start = addr, .len = ZSWAP_PAGE_SIZE } };
        int inj = INJECT(INJ_UFFD_ZEROPAGE);
        if (inj)
                return -inj;
        if (ioctl(uffd, UFFDIO_ZEROPAGE, &z) == 0)
                return 0;
        return z.zeropage < 0 ? (int)z.zeropage : negative_errno();
}

static void uffd_wake(int uffd, uint64_t addr) {
        struct uffdio_range r = { .start = addr, .len = ZSWAP_PAGE_SIZE };
        (void)ioctl(uffd, UFFDIO_WAKE, &r);
}

Work *work_new(int type, MMClient *mm) {
        Work *w = INJECT_ALLOC(calloc(1, sizeof(*w)));
        if (!w)
                return NULL;
        w->type = type;
        w->mm = mm ? mmclient_ref(mm) : NULL;
        return w;
}

void work_free(Work *w) {
        if (!w)
                return;
        mmclient_unref(w->mm);
        free(w);
}

void fault_thread_post(FaultThread *ft, Work *w) {
        inbox_push(&ft->inbox, w);
}

int fault_post_mm(FaultThread *ft, int type, MMClient *mm) {
        Work *w = work_new(type, mm);
        if (!w)
                return -ENOMEM;
        fault_thread_post(ft, w);
        return 0;
}

int fault_watch(Core *core, MMClient *mm) {
        /* the home thread first: if the others cannot be told, it alone
         * still serves every message, only not always on the faulting CPU */
        int r = fault_post_mm(mm->ft, FW_ADOPT, mm);
        if (r < 0 || !core->cfg.fault_shared)
                return r;
        for (unsigned i = 0; i < core->nfts; i++)
                if (core->fts[i] != mm->ft && fault_post_mm(core->fts[i], FW_ADOPT, mm) < 0)
                        log_warn("pid %d: a fault thread cannot watch the client (out of memory)",
                                 (int)mmclient_pid(mm));
        return 0;
}

void fault_unwatch(Core *core, MMClient *mm) {
        /* a thread that misses this keeps a reference and an epoll entry
         * until it stops: the client's memory is not lost, only kept */
        for (unsigned i = 0; i < core->nfts; i++)
                if (fault_post_mm(core->fts[i], FW_REMOVE, mm) < 0)
                        log_error("pid %d: fault thread %u cannot let the client go (out of memory)",
                                  (int)mmclient_pid(mm), i);
}

/* ---- owning a LOADING entry ---- */

#define RETRY_RESERVE 64

static void retry_unpin(Lane *pin) {
        if (pin)
                atomic_fetch_sub_explicit(&pin->users, 1, memory_order_release);
}

static void retry_free(FaultThread *ft, Retry *r) {
        /* acq_rel: the completion's READY (release) before we free, or our
         * CANCELLED before it frees. A read in flight keeps its slot's pin
         * until it is back: its completion unpins and frees */
        if (atomic_load_explicit(&r->state, memory_order_acquire) != RS_READY &&
            atomic_exchange_explicit(&r->state, RS_CANCELLED, memory_order_acq_rel) == RS_READING)
                return;
        retry_unpin(r->pin);
        r->pin = NULL;
        if (r->tier)
                tier_window_free(&r->tj.win);
        if (r->reserved) {
                r->next = ft->reserve;
                ft->reserve = r;
        } else
                free(r);
}

static void retry_add(FaultThread *ft, MMClient *mm, uint64_t addr, uint64_t loading, const void *page) {
        Retry *r = INJECT_ALLOC(malloc(sizeof(*r)));
        if (r)
                r->reserved = false;
        else if (ft->reserve) {
                /* the page must not be lost, and spinning here cannot help:
                 * only this thread reads the event the copy waits for */
                r = ft->reserve;
                ft->reserve = r->next;
        } else {
                log_error("pid %d: out of memory and retry reserve: page at %#llx stays pending",
                          (int)mmclient_pid(mm), (unsigned long long)addr);
                return;
        }
        r->addr = addr;
        r->loading = loading;
        r->pin = NULL;
        atomic_init(&r->state, RS_READY);
        r->refault = false;
        r->mm = NULL;
        r->pin_mm = NULL;
        r->op.res = 0;
        r->tier = false;
        r->t0 = ft->fault_t0; /* the fault still waits: its time runs on */
        TRACE(TR_RETRY, addr, loading, 0);
        if (page)
                memcpy(r->page, page, ZSWAP_PAGE_SIZE);
        r->next = mm->retries;
        mm->retries = r;
        atomic_store_explicit(&mm->has_retries, true, memory_order_relaxed);
        ft->retry_due = true;
}

void fault_mm_free_retries(MMClient *mm) {
        while (mm->retries) {
                Retry *r = mm->retries;
                mm->retries = r->next;
                if (r->tier)
                        tier_window_free(&r->tj.win);
                free(r); /* reserve entries too: the thread that lent it gets by with one less */
        }
}

/* Does a page restored for a read keep its compressed copy? Only where
 * writes are tracked (WP_ASYNC): the copy is dropped once one is seen.
 * And only while the client's copies take less than clean_max % of its
 * registered memory: a copy saves a compression when the page goes out
 * again, but until then it costs memory, which is what the daemon is for. */
static bool keeps_clean(MMClient *mm) {
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
                atomic_fetch_sub_explicit(&mm->st.stored_pages, 1, memory_order_relaxed);
                atomic_fetch_sub_explicit(&mm->st.compressed_bytes, pe_clen(origin), memory_order_relaxed);
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
static void install(FaultThread *ft, MMClient *mm, uint64_t addr, _Atomic uint64_t *e, uint64_t loading,
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
        TRACE(TR_INSTALL, addr, loading, (uint64_t)(uint32_t)r | ((const uint64_t *)page)[1] << 32);

        if (r == -EAGAIN) {
                retry_add(ft, mm, addr, loading, page);
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
static int tier_stub(MMClient *mm, uint64_t origin, TierStub *s) {
        const void *p = pool_map(mm->pool, pe_handle(origin));
        if (!p || pe_clen(origin) != sizeof(*s) || !mm->core->tier)
                return -EBADMSG;
        memcpy(s, p, sizeof(*s));
        return tier_stub_check(mm->core->tier, s);
}

/* Decode a STORED/SAME payload into dst. A page on the second tier is read
 * first: -EBADMSG if it is lost (corrupt), another -errno if the read
 * failed and may work later. */
static int decode(FaultThread *ft, MMClient *mm, uint64_t origin, uint8_t *dst) {
        if (pe_state(origin) == PE_SAME) {
                page_fill(dst, pe_fill(origin));
                return 0;
        }
        const void *src = pool_map(mm->pool, pe_handle(origin));
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
        return codec_decompress(ft->dctx, src, clen, dst);
}

/* True if the page was zero-filled by this call. */
static bool serve_zero(FaultThread *ft, MMClient *mm, uint64_t addr, bool write) {
        /* a write fault gets a real zeroed page at once instead of the zero
         * page followed by a copy-on-write fault */
        int r = write ? uffd_copy(mm->uffd, addr, ft->zero, 0) : uffd_zeropage(mm->uffd, addr);
        TRACE(TR_ZERO, addr, write, r);
        if (r == -EAGAIN) {
                retry_add(ft, mm, addr, 0, NULL);
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

/* Serve a page held in a staging slot (MOVING or STAGED entry v). Returns
 * false if the entry changed under us (caller reloads). */
static bool retry_keep_pin(MMClient *mm, uint64_t addr, uint64_t loading, Lane *pin);

#define SLOT_READS_DEPTH 256  /* slot reads one thread has in flight */
#define SLOT_READS_CLIENT 32  /* of those, for one client */

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
static Retry *slot_read_submit(FaultThread *ft, MMClient *mm, MMClient *src, uint64_t addr, uint64_t loading,
                               uint32_t slot, Lane *lane, bool refault);

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
static bool read_submit(FaultThread *ft, MMClient *src, MemReadOp *op, uint64_t off, void *buf, size_t len,
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
static Retry *slot_read_submit(FaultThread *ft, MMClient *mm, MMClient *src, uint64_t addr, uint64_t loading,
                               uint32_t slot, Lane *lane, bool refault) {
        if (!ft->reads || !memread_queue_has_room(ft->reads) || mmclient_mem_fd(src) < 0)
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
static void slot_read_done(FaultThread *ft, MemReadOp *op) {
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
         * whoever installs or frees it */
        if (atomic_exchange_explicit(&r->state, RS_READY, memory_order_acq_rel) == RS_CANCELLED) {
                /* taken off its list by an event already (retry_free()) */
                retry_unpin(r->pin);
                free(r);
        } else {
                atomic_store_explicit(&mm->has_retries, true, memory_order_relaxed);
                ft->retry_due = true;
        }
        mmclient_unref(mm);
        if (pin_mm)
                mmclient_unref(pin_mm);
}

static bool serve_slot(FaultThread *ft, MMClient *mm, uint64_t addr, _Atomic uint64_t *e, uint64_t v, uint64_t final,
                       bool refault) {
        uint32_t slot = pe_slot(v);
        unsigned lane_idx = slot / LANE_SLOTS;

        if (lane_idx >= mm->nlanes) {
                /* cannot happen unless memory is corrupted: never install garbage */
                log_error("pid %d: entry at %#llx names slot %u outside staging", (int)mmclient_pid(mm),
                          (unsigned long long)addr, slot);
                return true;
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
                retry_add(ft, mm, addr, 0, NULL);
                if (mm->retries && mm->retries->addr == addr && !mm->retries->loading && !mm->retries->pin)
                        mm->retries->pin = lane;
                /* else (no memory for the retry) the pin stays: a lane kept
                 * for ever rather than a page lost */
                return true;
        }
        /* seq_cst: the read half of that pairing, after our increment */
        if (!atomic_compare_exchange_strong_explicit(e, &v, loading, memory_order_seq_cst, memory_order_seq_cst)) {
                atomic_fetch_sub_explicit(&lane->users, 1, memory_order_release);
                return false;
        }
        if (slot_read_async(ft, mm, addr, loading, slot, lane, refault))
                return true; /* the retry holds the lane now */
        int r = mmclient_read(mm, mmclient_slot_addr(mm, slot), ft->page, ZSWAP_PAGE_SIZE);
        TRACE(TR_SLOT, addr, v, (uint64_t)(uint32_t)r | ((uint64_t *)ft->page)[1] << 32);
        if (r < 0) {
                atomic_fetch_sub_explicit(&lane->users, 1, memory_order_release);
                /* the client is gone or broke its staging area: nothing to install */
                mmclient_release_payload(mm, loading);
                atomic_store_explicit(e, 0, memory_order_release);
                uffd_wake(mm->uffd, addr);
                return true;
        }
        install(ft, mm, addr, e, loading, ft->page, final, false, refault);
        /* a copy put off (EAGAIN) keeps the slot, and the lane, until it is
         * made (Retry.pin); else the slot is done with */
        if (!retry_keep_pin(mm, addr, loading, lane))
                atomic_fetch_sub_explicit(&lane->users, 1, memory_order_release);
        return true;
}

#define RA_MIN 4    /* pages installed ahead once a reader looks sequential */
#define RA_MAX 64   /* and at most, doubling while it stays sequential */

/*
 * Claim up to RA_CHUNK consecutive held pages from a and decode them into
 * ft->ra_buf. Stops at the first page that is not STORED/SAME, is taken by
 * somebody else, or fails to decode (its entry keeps what it held).
 */
static unsigned ra_claim(FaultThread *ft, MMClient *mm, uint64_t a, unsigned max, RaPage *pages) {
        unsigned n = 0;

        for (; n < max; n++, a += ZSWAP_PAGE_SIZE) {
                _Atomic uint64_t *e = pindex_entry(mm->index, a, false);
                uint64_t v = e ? atomic_load_explicit(e, memory_order_acquire) : 0;
                if ((pe_state(v) != PE_STORED && pe_state(v) != PE_SAME) || pe_is_tier(v))
                        break; /* the second tier's pages come with their own read (tier_around) */
                uint64_t loading = pe_make_loading(v);
                if (!atomic_compare_exchange_strong_explicit(e, &v, loading, memory_order_acquire, memory_order_acquire))
                        break;
                if (decode(ft, mm, v, ft->ra_buf[n]) < 0) {
                        atomic_store_explicit(e, v & ~PE_WB, memory_order_release);
                        break;
                }
                pages[n] = (RaPage){ e, v, loading };
        }
        return n;
}

/*
 * Every message of a client's uffd is read into its store's journal
 * (store.h): from the moment the kernel hands an event over (and lets the
 * munmap, madvise or mremap that sent it return) until we have handled it,
 * a daemon killed at any instant leaves it to the next one (adopt.c). A
 * page fault needs no such care (the next daemon wakes every waiter) and
 * leaves the journal at once; an event leaves it through journal_done().
 * Under serve_lock. Returns what read() returned.
 */
static void journal_done(MMClient *mm) {
        /* release: what handling the event wrote to the store comes first,
         * so that a daemon killed right after this store leaves a store
         * whose journal is empty only once the event is applied. A GCC
         * builtin, not atomic_store_explicit(): the journal is the
         * kernel's struct uffd_msg (linux/userfaultfd.h, event a __u8),
         * which read(2) fills whole (uffd_read_msg()) and which cannot be
         * declared _Atomic; its layout is the store's format (store.c
         * asserts where it lies). Every other access of it is the reader's,
         * under serve_lock, or another process's after this daemon died
         * (store_journal_event(): a copy) */
        __atomic_store_n(&mm->journal->event, 0, __ATOMIC_RELEASE);
}

/* Fault injection (kill_event): the daemon killed between reading an event
 * and finishing it, the window the journal closes. */
static void kill_point(const char *where) {
        if (INJECT(INJ_KILL_EVENT)) {
                log_warn("fault injection: killed %s", where);
                raise(SIGKILL);
        }
}

static ssize_t uffd_read_msg(MMClient *mm, struct uffd_msg *msg) {
        if (atomic_load_explicit(&mm->fork_hold, memory_order_relaxed)) {
                /* held for a forked child (fork_held()): read nothing */
                errno = EAGAIN;
                return -1;
        }
        ssize_t n = read(mm->uffd, mm->journal, sizeof(*msg));

        if (n != (ssize_t)sizeof(*msg))
                return n;
        *msg = *mm->journal;
        if (msg->event == UFFD_EVENT_PAGEFAULT)
                journal_done(mm);
        /* staging_addr and nlanes of a fork child whose ATTACH the manager
         * is handling are written meanwhile, unsynchronised (a data race,
         * MMClient.staging_addr): only whether fault injection may kill
         * here depends on them */
        else if (msg->event != UFFD_EVENT_REMOVE || msg->arg.remove.start < mm->staging_addr ||
                 msg->arg.remove.start >= mm->staging_addr + (uint64_t)mm->nlanes * LANE_SLOTS * ZSWAP_PAGE_SIZE)
                kill_point("with an event read"); /* the library's own staging releases do not count */
        return n;
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
                        /* if the window ends before its page, it becomes the
                         * stash (fault_around): timed from this read */
                        ft->stash_t0 = now_ns();
                        return true;
                }
        }
        mm->stash = msg;
        mm->has_stash = true;
        /* handled next by this thread (drain_messages): time it from now */
        ft->stash_t0 = msg.event == UFFD_EVENT_PAGEFAULT ? now_ns() : 0;
        return false;
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
                unsigned n = ra_claim(ft, mm, a, (unsigned)MIN((uint64_t)RA_CHUNK, (end - a) >> ZSWAP_PAGE_SHIFT), pages);
                if (n == 0)
                        break;
                bool keep = keeps_clean(mm);
                struct uffdio_copy c = { .dst = a, .src = (uintptr_t)ft->ra_buf, .len = n * ZSWAP_PAGE_SIZE,
                                         .mode = (waiter ? 0 : UFFDIO_COPY_MODE_DONTWAKE) |
                                                 (keep ? UFFDIO_COPY_MODE_WP : 0) };
                unsigned copied = n;
                if (INJECT(INJ_UFFD_COPY))
                        copied = 0; /* the call skipped, as if it failed before the first page */
                else if (ioctl(mm->uffd, UFFDIO_COPY, &c) < 0)
                        copied = c.copy > 0 ? (unsigned)((uint64_t)c.copy >> ZSWAP_PAGE_SHIFT) : 0;
                TRACE(TR_RACOPY, a, n | (uint64_t)copied << 32, c.mode);
                for (unsigned i = 0; i < n; i++) {
                        TRACE(TR_RA, a + i * ZSWAP_PAGE_SIZE, pages[i].v, ((uint64_t *)ft->ra_buf[i])[1]);
                        if (i >= copied) {
                                /* present meanwhile, or the address space is changing
                                 * (EAGAIN: an event is queued): keep what we hold */
                                atomic_store_explicit(pages[i].e, pages[i].v & ~PE_WB, memory_order_release);
                                continue;
                        }
                        if (keep)
                                atomic_store_explicit(pages[i].e, make_clean(mm, pages[i].v), memory_order_release);
                        else {
                                mmclient_release_payload(mm, pages[i].loading);
                                atomic_store_explicit(pages[i].e, 0, memory_order_release);
                        }
                        age_note_use(mm, a + i * ZSWAP_PAGE_SIZE);
                }
                atomic_fetch_add_explicit(&mm->st.prefetches, copied, memory_order_relaxed);
                atomic_fetch_add_explicit(&mm->core->prefetches, copied, memory_order_relaxed);
                a += (uint64_t)copied * ZSWAP_PAGE_SIZE;
                if (copied < n)
                        break;
        }
        if (waiter && mm->ra_waiter >= a) {
                /* the window ended before the waiter's page: serve it next */
                mm->stash = (struct uffd_msg){ .event = UFFD_EVENT_PAGEFAULT };
                mm->stash.arg.pagefault.address = mm->ra_waiter;
                mm->has_stash = true;
        }
        /* the next fault of a sequential reader is the first page we did
         * not install */
        mm->ra_next = a;
}

/* ---- the second tier ---- */

static Retry **retry_find(MMClient *mm, uint64_t addr);

/* A page the kernel will never see again: UFFDIO_POISON makes every
 * access to it a SIGBUS, as the kernel does with a swapped-out page it
 * cannot read back. A uffd set up without the feature (an earlier
 * daemon's, adopted) cannot: the process gets SIGBUS now rather than wait
 * forever for the page. */
static void uffd_poison(MMClient *mm, uint64_t addr) {
        struct uffdio_poison p = { .range = { .start = addr, .len = ZSWAP_PAGE_SIZE } };

        if (ioctl(mm->uffd, UFFDIO_POISON, &p) == 0)
                return;
        if (errno == EEXIST) {
                /* present after all (installed by fault-around): the
                 * waiter reads what is there */
                uffd_wake(mm->uffd, addr);
                return;
        }
        log_error("pid %d: cannot poison the lost page (%m): the process is sent SIGBUS", (int)mmclient_pid(mm));
        int pidfd = mmclient_pidfd(mm);
        if (pidfd >= 0)
                (void)syscall(SYS_pidfd_send_signal, pidfd, SIGBUS, NULL, 0);
        uffd_wake(mm->uffd, addr);
}

/*
 * A page of the second tier that decode() could not bring back; this
 * thread holds its entry (LOADING value loading, from v). Lost (its data
 * fails to open (tier-seal.c), or its stub is bad): never installed, the page is
 * poisoned and the entry dropped. Otherwise the backing store could not
 * be read (an I/O error, the NBD server gone): the entry goes back as it
 * was and the fault waits, served again from a retry every millisecond
 * (the reader itself tries its backing store again at most every 10 ms,
 * an NBD connection every second), for as long as it takes.
 */
static void tier_failed(FaultThread *ft, MMClient *mm, uint64_t addr, _Atomic uint64_t *e, uint64_t v,
                        uint64_t loading, int r) {
        uint64_t now = now_ns();

        if (r == -EBADMSG) {
                /* every loss is told, the first ones a minute page by page */
                if (now - ft->lost_since_ns > 60ull * 1000000000) {
                        if (ft->lost_unlogged)
                                log_error("%u more pages lost on the second tier in the last minute (zswapctl status: "
                                          "tier_corrupt)", ft->lost_unlogged);
                        ft->lost_since_ns = now;
                        ft->lost_logged = ft->lost_unlogged = 0;
                }
                if (ft->lost_logged++ < 8)
                        log_error("pid %d: page at %#llx is lost: its data on the second tier fails authentication; "
                                  "it is poisoned (SIGBUS on access) rather than installed",
                                  (int)mmclient_pid(mm), (unsigned long long)addr);
                else
                        ft->lost_unlogged++;
                mmclient_release_payload(mm, loading);
                atomic_store_explicit(e, 0, memory_order_release);
                uffd_poison(mm, addr);
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
                retry_add(ft, mm, addr, 0, NULL);
}

#define TIER_AROUND 16 /* pages looked at on each side of a fault from the second tier */

/*
 * The read that brought a page back from the second tier brought the
 * objects packed next to it too, written out together because they were
 * neighbours. Install those of the pages around it (without waking
 * anyone) that are in the read's window w and open (tier-seal.c); the
 * rest keep their entries.
 */
static void tier_around(FaultThread *ft, MMClient *mm, uint64_t addr, const TierWindow *w) {
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
                                                           : codec_decompress(ft->dctx, ft->page, s.len, ft->ra_buf[0]);
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
        atomic_fetch_add_explicit(&mm->st.prefetches, got, memory_order_relaxed);
        atomic_fetch_add_explicit(&mm->core->prefetches, got, memory_order_relaxed);
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
                retry_add(ft, mm, addr, 0, NULL);
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
static void tier_read_done(FaultThread *ft, TierJob *j) {
        Retry *r = container_of(j, Retry, tj);
        MMClient *mm = r->mm;

        atomic_fetch_sub_explicit(&mm->tier_reads, 1, memory_order_relaxed);
        if (atomic_exchange_explicit(&r->state, RS_READY, memory_order_acq_rel) == RS_CANCELLED) {
                tier_window_free(&r->tj.win);
                free(r);
        } else {
                atomic_store_explicit(&mm->has_retries, true, memory_order_relaxed);
                ft->retry_due = true;
        }
        mmclient_unref(mm);
}

/* Serve a fault at addr (or take a page back for a restore or an event:
 * around false, no fault-around, since only a real fault may look at the
 * uffd's next message). */
static void serve(FaultThread *ft, MMClient *mm, uint64_t addr, bool write, bool around) {
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
                        return;
                case PE_EMPTY:
                        if (serve_zero(ft, mm, addr, write) && around)
                                zero_ahead(mm, addr);
                        return;
                case PE_CLEAN:
                        /* the page was resident and is gone without an event
                         * we saw (MADV_FREE reclaimed it): its content is
                         * zero now, not the copy we kept */
                        if (!atomic_compare_exchange_strong_explicit(e, &v, 0, memory_order_acq_rel,
                                                                     memory_order_acquire))
                                continue;
                        mmclient_release_payload(mm, v);
                        serve_zero(ft, mm, addr, write);
                        return;
                case PE_LOADING:
                        /* this thread holds it in a retry; its copy will wake the waiter */
                        return;
                case PE_MOVING:
                case PE_STAGED:
                        if (serve_slot(ft, mm, addr, e, v, 0, around))
                                return;
                        v = atomic_load_explicit(e, memory_order_acquire);
                        continue;
                case PE_STORED:
                case PE_SAME: {
                        bool tiered = pe_state(v) == PE_STORED && pe_is_tier(v) && ft->pump;
                        if (tiered && tier_reads_full(ft, mm, addr))
                                return;
                        uint64_t loading = pe_make_loading(v);
                        if (!atomic_compare_exchange_strong_explicit(e, &v, loading, memory_order_acquire,
                                                                     memory_order_acquire))
                                continue;
                        if (tiered && tier_read_async(ft, mm, addr, v, loading, around))
                                return;
                        int r = decode(ft, mm, v, ft->page);
                        if (r < 0 && pe_is_tier(v)) {
                                tier_failed(ft, mm, addr, e, v, loading, r);
                                return;
                        }
                        if (r < 0) {
                                /* never install garbage; leave the entry so the
                                 * fault stays pending and the error is visible */
                                log_error("pid %d: page at %#llx fails to decompress", (int)mmclient_pid(mm),
                                          (unsigned long long)addr);
                                atomic_store_explicit(e, v & ~PE_WB, memory_order_release);
                                return;
                        }
                        install(ft, mm, addr, e, loading, ft->page, 0, around && !write && keeps_clean(mm), around);
                        if (pe_is_tier(v)) {
                                TierWindow w;
                                if (tier_window_copy(ft->tier, &w))
                                        tier_around(ft, mm, addr, &w);
                                tier_window_free(&w);
                        } else if (around)
                                fault_around(ft, mm, addr);
                        return;
                }
                default:
                        return;
                }
        }
}

/* ---- events ---- */

static Retry **retry_find(MMClient *mm, uint64_t addr) {
        for (Retry **p = &mm->retries; *p; p = &(*p)->next)
                if ((*p)->addr == addr)
                        return p;
        return NULL;
}

/* Hand the pin of a page's slot on to the retry that now holds the page
 * (retry_add() of addr with loading), if there is one: true. */
static bool retry_keep_pin(MMClient *mm, uint64_t addr, uint64_t loading, Lane *pin) {
        Retry **p = pin ? retry_find(mm, addr) : NULL;
        if (!p || (*p)->loading != loading || (*p)->pin)
                return false;
        (*p)->pin = pin;
        return true;
}

/* A page whose slot read is in flight, dropped or moved by an event: the
 * agent's move of it, should it not have happened, must not happen now
 * (a new mapping's page may be at its old address). moving_cancel() does
 * the same for a page nobody claimed. */
static void slot_poison(MMClient *mm, uint32_t slot);

static void retry_poison(MMClient *mm, Retry *r) {
        if (!r->tier && atomic_load_explicit(&r->state, memory_order_acquire) == RS_READING)
                slot_poison(mm, pe_slot(r->loading));
}

static void retry_drop(FaultThread *ft, Retry **p) {
        Retry *r = *p;
        *p = r->next;
        retry_free(ft, r);
}

typedef struct RangeCtx {
        FaultThread *ft;
        MMClient *mm;
        MMClient *child;
        int64_t delta;
        uint64_t kill_at; /* remap: the fault injection's kill at the first entry from here (kill_event) */
        int errors;
        int inflight;    /* fork: pages caught in an eviction (MOVING, STAGED) */
        int install_err; /* fork: the first error installing a page in the child */
        int resident;    /* fork: pages installed in the child for want of quota or pool room */
        int over;        /* fork: of those, copied after all: the child could not take them (EAGAIN) */
} RangeCtx;

/*
 * A page chosen for eviction (MOVING) in a range the program just dropped
 * or unmapped. The agent may not have moved it yet; whatever it would move
 * from now on is either the dying frame or, after munmap, a new mapping's
 * page that is not ours. Reading the slot maps the zero page there, and
 * UFFDIO_MOVE refuses a destination that is populated: the move can no
 * longer happen. If it happened already, the slot holds dead content. The
 * entry is dropped either way; the manager's and worker's CAS will fail.
 */
/*
 * Map the zero page at a staging slot, so that a move into it can no
 * longer happen (UFFDIO_MOVE refuses a populated destination). Under
 * serve_lock, while handling an event. UFFDIO_ZEROPAGE fails with EAGAIN
 * while another event is queued, unread; the agent's moves fail too until
 * it is read, and this thread reads it next: the slot waits in mm->poison
 * and is poisoned right after (drain_uffd()), before this thread lets the
 * agent move again (zsync.h). No read of the client's memory, no wait;
 * with the list full (16 slots, each an unread event's worth), the slot is
 * read instead, which maps the zero page whatever is queued (bounded,
 * memread.h).
 */
static void slot_poison(MMClient *mm, uint32_t slot) {
        if (mmclient_slot_zero(mm, slot) != -EAGAIN)
                return;
        if (mm->npoison < ELEMENTSOF(mm->poison)) {
                mm->poison[mm->npoison++] = slot;
                return;
        }
        mmclient_slot_poison(mm, slot);
}

/* The slots slot_poison() left: true once none is left. */
static bool poisons_run(MMClient *mm) {
        unsigned k = 0;

        for (unsigned i = 0; i < mm->npoison; i++)
                if (mmclient_slot_zero(mm, mm->poison[i]) == -EAGAIN)
                        mm->poison[k++] = mm->poison[i];
        mm->npoison = k;
        return k == 0;
}

static void moving_cancel(MMClient *mm, _Atomic uint64_t *e, uint64_t v) {
        TRACE(TR_CANCEL, 0, v, 0);
        for (;;) {
                unsigned st = pe_state(v);
                if (st == PE_MOVING) {
                        slot_poison(mm, pe_slot(v));
                        if (atomic_compare_exchange_strong_explicit(e, &v, 0, memory_order_acq_rel,
                                                                    memory_order_acquire))
                                return;
                        continue; /* MOVE_DONE made it STAGED meanwhile */
                }
                if (st == PE_STAGED || st == PE_STORED || st == PE_SAME) {
                        /* moved before the event (and maybe compressed since):
                         * dead. Only this thread turns such an entry back into
                         * EMPTY, so it is still that page */
                        mmclient_entry_drop(mm, e);
                        return;
                }
                return;
        }
}

static int remove_cb(void *ud, uint64_t addr, _Atomic uint64_t *e) {
        RangeCtx *c = ud;
        uint64_t v = atomic_load_explicit(e, memory_order_acquire);
        TRACE(TR_DROP, addr, v, 0);

        if (pe_state(v) == PE_LOADING) {
                Retry **p = retry_find(c->mm, addr);
                if (p) {
                        retry_poison(c->mm, *p);
                        mmclient_release_payload(c->mm, (*p)->loading);
                        retry_drop(c->ft, p);
                        atomic_store_explicit(e, 0, memory_order_release);
                        uffd_wake(c->mm->uffd, addr);
                }
                return 0;
        }
        if (pe_state(v) == PE_MOVING) {
                moving_cancel(c->mm, e, v);
                return 0;
        }
        if (pe_state(v) == PE_REMOVED)
                return 0;
        /* STAGED: moved before the event, dead content. The worker's CAS
         * fails and it lets the page go */
        mmclient_entry_drop(c->mm, e);
        return 0;
}

/*
 * MADV_DONTNEED sends REMOVE before it zaps the pages, and the zap comes
 * only after we have read the event. A page still mapped now could be
 * chosen for eviction and moved out by the agent in that window; its old
 * content would then come back after the zap. So every page still mapped
 * gets a tombstone with its frame number: the planner will not move that
 * frame. Once the page is gone or replaced by a new frame, the tombstone
 * means nothing and is overwritten.
 */
static void tombstone_mapped(MMClient *mm, uint64_t start, uint64_t end) {
        uint64_t pm[512];

        if (mmclient_pagemap_fd(mm) < 0)
                return;
        end = MIN(end, PINDEX_MAX_ADDR);
        for (uint64_t a = start; a < end;) {
                size_t n = MIN((end - a) >> ZSWAP_PAGE_SHIFT, ELEMENTSOF(pm));
                ssize_t got = pread(mmclient_pagemap_fd(mm), pm, n * 8, (off_t)(a >> ZSWAP_PAGE_SHIFT) * 8);
                if (got <= 0)
                        return;
                n = (size_t)got / 8;
                for (size_t i = 0; i < n; i++) {
                        if (!(pm[i] & PM_PRESENT))
                                continue;
                        _Atomic uint64_t *e = pindex_entry(mm->index, a + i * ZSWAP_PAGE_SIZE, true);
                        if (!e)
                                continue;
                        uint64_t v = atomic_load_explicit(e, memory_order_acquire);
                        for (;;) {
                                unsigned st = pe_state(v);
                                if (st == PE_MOVING || st == PE_STAGED) {
                                        /* the planner chose it since remove_cb */
                                        moving_cancel(mm, e, v);
                                        break;
                                }
                                if (st != PE_EMPTY)
                                        break;
                                if (atomic_compare_exchange_weak_explicit(e, &v, pe_make_removed(), memory_order_acq_rel,
                                                                          memory_order_acquire)) {
                                        TRACE(TR_TOMB, a + i * ZSWAP_PAGE_SIZE, pm[i], 0);
                                        break;
                                }
                        }
                }
                a += n * ZSWAP_PAGE_SIZE;
        }
}

static void event_remove(FaultThread *ft, MMClient *mm, uint64_t start, uint64_t end, bool unmap) {
        RangeCtx c = { .ft = ft, .mm = mm };
        TRACE(TR_REMOVE, start, end, unmap);

        /* the region goes first: a page the planner marks after our walk is
         * then outside every region, which the planner checks (evict.c) */
        if (unmap)
                mmclient_region_remove(mm, start, end, false);
        if (inject_armed && (unmap || mmclient_region_clip(mm, &(uint64_t){ start }, &(uint64_t){ end })))
                kill_point(unmap ? "with an munmap's ranges cut, its entries not yet" : "before dropping the entries of an MADV_DONTNEED");
        pindex_walk(mm->index, start, end, remove_cb, &c);
        if (unmap)
                return;
        /* only what we manage: the staging area is registered too, and
         * MADV_DONTNEED of it (RELEASE) comes here as well */
        for (uint64_t s = start, e = end; s < end; s = e, e = end) {
                if (!mmclient_region_clip(mm, &s, &e))
                        break;
                tombstone_mapped(mm, s, e);
        }
}

static int remap_cb(void *ud, uint64_t addr, _Atomic uint64_t *e) {
        RangeCtx *c = ud;
        uint64_t to = addr + (uint64_t)c->delta;
        _Atomic uint64_t *ne = pindex_entry(c->mm->index, to, true);

        if (!ne) {
                c->errors++;
                return 0;
        }
        /* the kernel unmapped the destination first: what we held there is
         * dead, including a retry of ours */
        if (pe_state(atomic_load_explicit(ne, memory_order_acquire)) == PE_LOADING) {
                Retry **p = retry_find(c->mm, to);
                if (p) {
                        retry_poison(c->mm, *p);
                        mmclient_release_payload(c->mm, (*p)->loading);
                        retry_drop(c->ft, p);
                        atomic_store_explicit(ne, 0, memory_order_release);
                }
        }
        mmclient_entry_drop(c->mm, ne);
        /*
         * The entry is written at its new place before it leaves the old
         * one: a daemon killed in between leaves it at both, and the next
         * one keeps the one the journal's mremap carries, this one
         * (adopt.c). Taken from the old place first, a kill in between
         * left the page at neither, and it read as zeros (test-soak). A
         * CAS that fails (a worker, the manager or reclaim changed the
         * entry meanwhile) writes the new place again. An entry the next
         * daemon drops anyway (CLEAN: resident; REMOVED; EMPTY) leaves the
         * old place first, so that reclaim never finds a kept copy twice.
         */
        uint64_t v = atomic_load_explicit(e, memory_order_acquire), nv;
        for (;;) {
                /* a page the tier's writer is copying comes here without
                 * its mark: the writer knows a page by its address and
                 * value, and another page of the same value (a reused pool
                 * handle) may have been marked at this address before
                 * (docs/tier.md) */
                nv = pe_state(v) == PE_STORED ? v & ~PE_WB : v;
                if (pe_state(v) == PE_CLEAN || pe_state(v) == PE_REMOVED || pe_state(v) == PE_EMPTY) {
                        if (!atomic_compare_exchange_weak_explicit(e, &v, 0, memory_order_acq_rel,
                                                                   memory_order_acquire))
                                continue;
                        atomic_store_explicit(ne, nv, memory_order_release);
                        break;
                }
                atomic_store_explicit(ne, nv, memory_order_release);
                if (c->kill_at && addr >= c->kill_at) {
                        c->kill_at = 0;
                        kill_point("with an mremap's entry at its old place and its new one");
                }
                if (atomic_compare_exchange_weak_explicit(e, &v, 0, memory_order_acq_rel, memory_order_acquire))
                        break;
        }
        v = nv;
        if (pe_state(v) == PE_LOADING) {
                Retry **p = retry_find(c->mm, addr);
                if (p) {
                        retry_poison(c->mm, *p);
                        (*p)->addr = to;
                }
                uffd_wake(c->mm->uffd, addr);
        } else if (pe_state(v) == PE_MOVING || pe_state(v) == PE_STAGED) {
                /* the worker and the manager know the page by its old
                 * address; take it over now and install it where it went */
                serve(c->ft, c->mm, to, false, false);
        }
        return 0;
}

static void event_remap(FaultThread *ft, MMClient *mm, uint64_t from, uint64_t to, uint64_t len) {
        RangeCtx c = { .ft = ft, .mm = mm, .delta = (int64_t)(to - from) };

        if (to > from && to < from + len) {
                /* overlapping move to higher addresses: walk would revisit moved
                 * entries; the kernel never does this (mremap needs disjoint
                 * ranges), so just refuse to guess */
                log_error("pid %d: overlapping remap %#llx -> %#llx", (int)mmclient_pid(mm), (unsigned long long)from,
                          (unsigned long long)to);
                return;
        }
        if (inject_armed)
                c.kill_at = from + len / 2;
        pindex_walk(mm->index, from, from + len, remap_cb, &c);
        if (c.kill_at) /* no entry held content from the middle on: the injection's count stays the same */
                kill_point("with an mremap's entries moved, none past the middle of its range");
        kill_point("with an mremap's entries moved, its ranges not yet");
        if (c.errors)
                log_error("pid %d: out of memory moving %d entries on mremap", (int)mmclient_pid(mm), c.errors);
        mmclient_region_move(mm, from, to, len);
}

/* No memory to hold a page for the forked child (its index or a pool
 * object): give the child the page now, resident, from origin (a STORED or
 * SAME entry of `from`'s) or from len bytes at src. Out of memory then
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
                r = codec_decompress(ft->dctx, src, len, ft->page);
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
        /* seq_cst, as serve_slot(): either the manager sees us before it
         * releases the lane, or we see the entry changed */
        atomic_fetch_add_explicit(&lane->users, 1, memory_order_seq_cst);
        if (atomic_load_explicit(e, memory_order_seq_cst) != v) {
                atomic_fetch_sub_explicit(&lane->users, 1, memory_order_release);
                return fork_cb(c, addr, e);
        }
        if (fork_copy_async(c, addr, slot, lane))
                return 0; /* the retry holds the pin */
        r = mmclient_read(mm, mmclient_slot_addr(mm, slot), c->ft->page, ZSWAP_PAGE_SIZE);
        atomic_fetch_sub_explicit(&lane->users, 1, memory_order_release);
        if (r == 0)
                r = uffd_copy(c->child->uffd, addr, c->ft->page, UFFDIO_COPY_MODE_DONTWAKE);
        if (r == -EEXIST)
                r = 0; /* the child has its own */
        c->inflight++;
        if (r < 0) {
                c->errors++;
                if (!c->install_err)
                        c->install_err = r;
        }
        return 0;
}

static int fork_cb(void *ud, uint64_t addr, _Atomic uint64_t *e) {
        RangeCtx *c = ud;
        Pool *pool = c->child->pool;
        uint64_t v = atomic_load_explicit(e, memory_order_acquire), nv = 0;
        const void *src = NULL;
        uint32_t len = 0;
        uint64_t tier = 0;
        TierStub stub;

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
                src = pool_map(c->mm->pool, pe_handle(v));
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
                bool paid = mmclient_quota_take(c->mm, len), resident = false;
                int r = !paid ? -EDQUOT : core_pool_room(c->mm->core, len) ? pool_alloc(pool, len, &h) : -ENOSPC;
                if (r < 0 && paid)
                        mmclient_quota_give(c->mm, len);
                if (r == -EDQUOT || (r == -ENOSPC && paid)) {
                        int err = c->install_err;
                        resident = tier ? fork_install(c, addr, c->mm, v, NULL, 0) : fork_install(c, addr, NULL, 0, src, len);
                        c->install_err = err; /* not an error yet */
                        if (resident && tier)
                                tier_put(c->mm->core->tier, &stub);
                        c->resident += resident;
                        r = resident ? -EDQUOT : pool_alloc(pool, len, &h);
                        c->over += r == 0;
                }
                if (r == 0) {
                        memcpy(pool_map(pool, h), src, len);
                        nv = pe_make_stored(h, len) | tier;
                        if (tier)
                                mmclient_count_tier(c->child, stub.len, 1);
                        atomic_fetch_add_explicit(&c->child->st.stored_pages, 1, memory_order_relaxed);
                        atomic_fetch_add_explicit(&c->child->st.compressed_bytes, len, memory_order_relaxed);
                        /* relaxed: a counter the manager sums (users.c) */
                        atomic_fetch_add_explicit(&c->mm->fork_bytes, len, memory_order_relaxed);
                } else if (resident) {
                        /* installed above */
                } else if (tier) {
                        tier_put(c->mm->core->tier, &stub);
                        c->errors += !fork_install(c, addr, c->mm, v, NULL, 0);
                } else
                        c->errors += !fork_install(c, addr, NULL, 0, src, len);
                if (pe_state(v) == PE_STORED && !tier)
                        atomic_store_explicit(e, v & ~PE_WB, memory_order_release); /* copied: the parent's again */
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

static void fault_thread_own(FaultThread *ft, MMClient *mm);

static void event_fork(FaultThread *ft, MMClient *mm, int child_fd) {
        MMClient *child = NULL;
        int r;

        /* this fork's instant is past: a daemon that adopts the parent from
         * now on must not take it as still to come (do_adopt()) */
        if (atomic_load_explicit(&mm->fork_announced, memory_order_relaxed))
                mmclient_fork_evented(mm, atomic_load_explicit(&mm->next_fork_token, memory_order_relaxed));
        fd_set_nonblock(child_fd, true);
        r = mmclient_new(mm->core, child_fd, &child);
        if (r < 0) {
                log_error("pid %d: cannot track forked child: %s", (int)mmclient_pid(mm), strerror(-r));
                /* closing the only reference would unregister the child's
                 * memory and turn its evicted pages into zeros; keep it */
                return;
        }
        RangeCtx c = { .ft = ft, .mm = mm, .child = child };
        child->wp_async = mm->wp_async; /* the child's vmas keep the parent's registration */
        /* the child process shares the parent's sync page (MAP_SHARED survives fork) */
        if (mm->sync_fd >= 0) {
                int fd = fcntl(mm->sync_fd, F_DUPFD_CLOEXEC, 0);
                if (fd < 0 || mmclient_set_sync(child, fd) < 0)
                        log_warn("pid %d: forked child runs without the move/unmap handshake", (int)mmclient_pid(mm));
        }
        mmclient_regions_copy(child, mm);
        pindex_walk(mm->index, 0, PINDEX_MAX_ADDR, fork_cb, &c);
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
        if (c.errors)
                log_error("pid %d: %d pages could not be copied to a forked child (%d were in flight; "
                          "installing: %s)", (int)mmclient_pid(mm), c.errors, c.inflight,
                          c.install_err ? strerror(-c.install_err) : "no error");
        /* the token of this fork was read at FORK_PREPARE: reading it now
         * could see the next fork's already */
        child->fork_token = atomic_load_explicit(&mm->next_fork_token, memory_order_relaxed);
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
        /* its parent may exit before it attaches (daemon(3) does at once):
         * then it is matched by its token and its user alone */
        int pidfd = mmclient_pidfd(mm);
        child->parent_pidfd = pidfd >= 0 ? fcntl(pidfd, F_DUPFD_CLOEXEC, 0) : -1;
        child->uid = mm->uid; /* mm's was written before mm was published */
        /* what is left of its user's share until the manager counts it
         * (users.c): it may fork before it attaches. relaxed: a budget */
        atomic_store_explicit(&child->quota_left, atomic_load_explicit(&mm->quota_left, memory_order_relaxed),
                              memory_order_relaxed);
        /* which of the parent's clients it copies. If mm is a fork child
         * whose ATTACH the manager is handling, mm_set_staging() writes
         * mm->staging_addr meanwhile, unsynchronised: a data race
         * (MMClient.staging_addr) */
        child->origin_staging = mm->staging_addr;
        child->ft = ft;
        fault_thread_own(ft, child);
        for (unsigned i = 0; mm->core->cfg.fault_shared && i < mm->core->nfts; i++)
                if (mm->core->fts[i] != ft)
                        fault_post_mm(mm->core->fts[i], FW_ADOPT, child);
        core_adopt_orphan(mm->core, child); /* hands over our reference */
        /* the child's copies are counted as an orphan's now (users.c);
         * relaxed: a counter, and only this thread builds children of mm */
        atomic_store_explicit(&mm->fork_bytes, 0, memory_order_relaxed);
}

static void handle_msg(FaultThread *ft, MMClient *mm, const struct uffd_msg *msg) {
        switch (msg->event) {
        case UFFD_EVENT_PAGEFAULT:
                serve(ft, mm, msg->arg.pagefault.address & ~(ZSWAP_PAGE_SIZE - 1),
                      msg->arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WRITE, true);
                break;
        case UFFD_EVENT_FORK:
                event_fork(ft, mm, (int)msg->arg.fork.ufd);
                break;
        case UFFD_EVENT_REMAP:
                event_remap(ft, mm, msg->arg.remap.from, msg->arg.remap.to, msg->arg.remap.len);
                break;
        case UFFD_EVENT_REMOVE:
                event_remove(ft, mm, msg->arg.remove.start, msg->arg.remove.end, false);
                break;
        case UFFD_EVENT_UNMAP:
                event_remove(ft, mm, msg->arg.remove.start, msg->arg.remove.end, true);
                break;
        default:
                break;
        }
}

/* Read and handle messages until the uffd is empty. */
/* ---- a parent held for its forked child ---- */

/*
 * A fork the library announced (FORK_PREPARE) gives its child an address
 * space whose evicted pages this daemon holds, through a uffd only this
 * daemon has until the child attaches (CHILD_ATTACH hands it over). Should
 * the daemon die before, the kernel unregisters the child's memory, and
 * the child restores those pages itself from its parent's store, which it
 * inherited (libzswap.c, child_lost()). That store must then be as it was
 * at the fork, so until the child attaches nothing of it changes: the
 * parent's uffd is not read and its retries wait (here), nothing of it is
 * evicted (evict.c, reclaim.c), and it is kept if the parent goes first
 * (mmclient.c). Only the parent waits, and for FORK_HOLD_NS at most; a
 * hold that ends so writes the fork's token in the store (fork_served)
 * before anything changes, and the child then knows not to use it.
 * Under serve_lock. True: held, look again later.
 */
static bool fork_held(FaultThread *ft, MMClient *mm) {
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

/* ---- revoking the agent's moves ---- */

/*
 * A move the agent began before we raised `reading` has not ended: its
 * thread is descheduled, stopped, traced or throttled by a CPU quota, or
 * it waits for a system call of its own process that waits for this very
 * read (valgrind runs one thread of a process at a time). Waiting for it
 * lets it hold its client's faults as long as it stays stuck; reading the
 * uffd while it may still run lets an munmap() return and the move take a
 * page of a new mapping at the same address. So the move is revoked: every
 * slot of every lane the agent may be moving into is read through
 * /proc/PID/mem. A read of an empty slot maps the zero page there, so the
 * move fails (EEXIST) when it runs and the page stays where it is
 * (evict.c, lane_moved(): slot filled, source still there); a slot the
 * move filled already is read and left as it is. The read is of the
 * client's memory, so it goes through the thread's queue (memread.h) and
 * only this client waits for it. Its lanes' slots are released with the
 * lane (the zero pages with the rest).
 */
typedef struct RevokeRead {
        MMClient *mm; /* a reference until the read is back */
        MemReadOp op;
} RevokeRead;

#define REVOKE_LEN ((size_t)LANE_SLOTS * ZSWAP_PAGE_SIZE)

/* Read lane li of mm for a revocation; false: not now. Under serve_lock. */
static bool revoke_submit(FaultThread *ft, MMClient *mm, unsigned li) {
        uint64_t off = mmclient_slot_addr(mm, li * LANE_SLOTS);

        if (mmclient_mem_fd(mm) < 0)
                return false; /* nothing to read it with: the agent is waited for */
        if (!ft->reads) {
                /* no io_uring: a read bounded by the read bound (memread.h) */
                const uint8_t *p;
                int r = memread_view(mmclient_mem_fd(mm), off, REVOKE_LEN, mm->uid, &p);
                if (r < 0)
                        log_debug("pid %d: reading lane %u to revoke a move: %s", (int)mmclient_pid(mm), li,
                                  strerror(-r));
                return true;
        }
        if (!memread_queue_has_room(ft->reads))
                return false;
        if (!ft->revoke_buf && !(ft->revoke_buf = INJECT_ALLOC(malloc(REVOKE_LEN))))
                return false;
        RevokeRead *rr = INJECT_ALLOC(malloc(sizeof(*rr)));
        if (!rr)
                return false;
        rr->mm = mmclient_ref(mm);
        atomic_fetch_add_explicit(&mm->revoke_reads, 1, memory_order_relaxed);
        if (!read_submit(ft, mm, &rr->op, off, ft->revoke_buf, REVOKE_LEN, READ_REVOKE)) {
                atomic_fetch_sub_explicit(&mm->revoke_reads, 1, memory_order_relaxed);
                mmclient_unref(mm);
                free(rr);
                return false;
        }
        return true;
}

/* A revocation's read is back (or given up at exit). A read that failed
 * did so because the slots are not memory the agent can move into (the
 * client unmapped or replaced its staging area, or is gone). */
static void revoke_read_done(FaultThread *ft, MemReadOp *op) {
        RevokeRead *rr = container_of(op, RevokeRead, op);

        close(op->fd);
        if (op->res < 0 && op->res != -ECANCELED)
                log_debug("pid %d: reading a lane at %#llx to revoke a move: %s", (int)mmclient_pid(rr->mm),
                          (unsigned long long)op->off, strerror(-op->res));
        /* release: to drain_uffd(), which reads the uffd once it sees 0 */
        atomic_fetch_sub_explicit(&rr->mm->revoke_reads, 1, memory_order_release);
        ft->retry_due = true; /* run_due_retries() looks at the read put off */
        mmclient_unref(rr->mm);
        free(rr);
}

/* Are the moves the agent may still make revoked? The first call after a
 * read of the uffd starts the revocation; under serve_lock, with our
 * `reading` raised, so the lanes seen here are all a move under way can
 * go to (zsync.h: the agent began it before it saw `reading`, and the
 * lane's bit was set before it was told to). */
static bool revoke_moves(FaultThread *ft, MMClient *mm) {
        if (!mm->revoking) {
                mm->revoking = true;
                mm->revoke_left = atomic_load_explicit(&mm->lanes_moving, memory_order_acquire);
                /* counted as it begins: before any move it revokes can
                 * fail, so before the pageout that made the move returns */
                atomic_fetch_add_explicit(&ft->core->moves_revoked, 1, memory_order_relaxed);
        }
        while (mm->revoke_left) {
                unsigned li = (unsigned)__builtin_ctz(mm->revoke_left);
                if (li < mm->nlanes && !revoke_submit(ft, mm, li))
                        return false;
                mm->revoke_left &= ~(1u << li);
        }
        /* acquire: the kernel's read is done before we read the uffd */
        return atomic_load_explicit(&mm->revoke_reads, memory_order_acquire) == 0;
}

static void run_read_done(FaultThread *ft, MemReadOp *op) {
        if (op->tag == READ_REVOKE)
                revoke_read_done(ft, op);
        else
                slot_read_done(ft, op);
}

/* Read and handle messages until the uffd is empty. One message per read:
 * the kernel lets a munmap() or madvise() return once its event is read,
 * so an event must be handled right after it is read, not after a batch
 * of faults read with it. */
static void drain_messages(FaultThread *ft, MMClient *mm, uint64_t now) {
        struct uffd_msg msg;

        for (;;) {
                if (mm->has_stash) {
                        /* read by fault-around, handled now, in order */
                        msg = mm->stash;
                        mm->has_stash = false;
                        ft->fault_t0 = ft->stash_t0;
                        ft->stash_t0 = 0;
                        now = 0;
                        handle_msg(ft, mm, &msg);
                        /* an event stays in the journal while stashed,
                         * also one fault-around just stashed */
                        if (!mm->has_stash)
                                journal_done(mm);
                        ft->fault_t0 = 0;
                        continue;
                }
                ssize_t n = uffd_read_msg(mm, &msg);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return; /* EAGAIN: empty */
                }
                if (n != sizeof(msg))
                        return;
                TRACE(TR_READ, msg.arg.pagefault.address, msg.event, msg.arg.pagefault.flags);
                /* the fault's latency starts here (the kernel's message
                 * carries no time of its own); for the first message, at
                 * the clock read drain_uffd() made just before, which
                 * saves the fault path a read */
                ft->fault_t0 = msg.event == UFFD_EVENT_PAGEFAULT ? (now ? now : now_ns()) : 0;
                now = 0;
                handle_msg(ft, mm, &msg);
                /* a fault's fault-around may have read an event (mm->stash):
                 * it stays in the journal until it is handled */
                if (!mm->has_stash)
                        journal_done(mm);
                ft->fault_t0 = 0; /* a zero fill or an EEXIST: not timed */
        }
}

/* Every read of the uffd happens in here (fault-around's look-ahead
 * too), so no agent move runs between a read and the handling of what it
 * read (zsync.h): an UNMAP is handled before the program can map anew. */
#define READ_RECHECK_NS 50000 /* how soon a read put off for a move looks again */

static void drain_uffd(FaultThread *ft, MMClient *mm) {
        /* A fault thread never sleeps for a client's agent. A read that
         * finds a move under way is put off, our `reading` raised so that
         * the agent starts no other move, and looked at again every
         * READ_RECHECK_NS while this thread serves the others. A move
         * still under way after 2 ms is revoked (revoke_moves()), and the
         * uffd is read once the revocation's reads are back
         * (run_due_retries() looks every millisecond, and when they come).
         * No grace at all where no lane is moving (a move then has
         * nowhere to go), or for an agent that was this slow at the last
         * read: it is revoked at once. */
        if (fork_held(ft, mm))
                return;
        atomic_store_explicit(&mm->fork_unread, false, memory_order_relaxed);
        uint64_t now = now_ns();
        bool held = atomic_load_explicit(&mm->read_deferred, memory_order_relaxed);
        bool may_wait = !mm->revoking && !mm->agent_slow && atomic_load_explicit(&mm->lanes_moving, memory_order_relaxed);

        if (!zsync_read_begin(mm->sync, 0, held)) {
                if (!held)
                        mm->read_wait_t0 = now;
                if (may_wait && now - mm->read_wait_t0 < ZSYNC_READ_WAIT_NS) {
                        atomic_store_explicit(&mm->read_deferred, true, memory_order_relaxed);
                        ft->read_soon = true;
                        return;
                }
                if (may_wait && !mm->sync_warned) {
                        log_warn("pid %d: its agent left a page move unfinished for over %llu ms: such moves are revoked "
                                 "(their pages stay resident)",
                                 (int)mmclient_pid(mm), ZSYNC_READ_WAIT_NS / 1000000);
                        mm->sync_warned = true;
                }
                if (!revoke_moves(ft, mm)) {
                        atomic_store_explicit(&mm->read_deferred, true, memory_order_relaxed);
                        ft->retry_due = true;
                        return;
                }
                mm->agent_slow = true;
        } else
                mm->agent_slow = false;
        /* `reading` is raised, and no move can take a page any more */
        mm->revoking = false;
        mm->revoke_left = 0;
        atomic_store_explicit(&mm->read_deferred, false, memory_order_relaxed);
        drain_messages(ft, mm, now);
        if (mm->npoison && !poisons_run(mm)) {
                /* the events before them are read, but their waiters have
                 * not run yet (the kernel counts them out then): our
                 * `reading` stays raised, so no move starts, and we look
                 * again in a millisecond, as for a read put off */
                atomic_store_explicit(&mm->read_deferred, true, memory_order_relaxed);
                mm->revoking = true; /* nothing to revoke: nothing began since */
                ft->retry_due = true;
                return;
        }
        zsync_read_end(mm->sync);
}

/* ---- retries, installs from workers, restores ---- */

/* Under mm->serve_lock. A copy that fails again goes back on the list. */
static void run_retries(FaultThread *ft, MMClient *mm) {
        if (fork_held(ft, mm))
                return; /* an install would change the held store */
        Retry *list = mm->retries;
        mm->retries = NULL;
        atomic_store_explicit(&mm->has_retries, false, memory_order_relaxed);

        while (list) {
                Retry *r = list;
                list = r->next;
                /* acquire: the page the read put there (slot_read_done()) */
                if (atomic_load_explicit(&r->state, memory_order_acquire) == RS_READING) {
                        /* its read is still in flight: it stays */
                        r->next = mm->retries;
                        mm->retries = r;
                        continue;
                }
                ft->fault_t0 = r->t0;
                if (!r->loading)
                        serve(ft, mm, r->addr, true, false);
                else if (r->tier) {
                        /* the pump's read is back: the page, or why not */
                        _Atomic uint64_t *e = pindex_entry(mm->index, r->addr, false);
                        if (e && atomic_load_explicit(e, memory_order_acquire) == r->loading) {
                                if (r->tj.res < 0) {
                                        tier_failed(ft, mm, r->addr, e, pe_loading_origin(r->loading), r->loading,
                                                    r->tj.res);
                                } else {
                                        install(ft, mm, r->addr, e, r->loading, r->page, 0, false, r->refault);
                                        tier_around(ft, mm, r->addr, &r->tj.win);
                                }
                        }
                } else if (r->op.res < 0) {
                        /* the slot read failed: the client is gone or broke
                         * its staging area; nothing to install */
                        _Atomic uint64_t *e = pindex_entry(mm->index, r->addr, false);
                        if (e && atomic_load_explicit(e, memory_order_acquire) == r->loading) {
                                mmclient_release_payload(mm, r->loading);
                                atomic_store_explicit(e, 0, memory_order_release);
                                uffd_wake(mm->uffd, r->addr);
                        }
                } else {
                        _Atomic uint64_t *e = pindex_entry(mm->index, r->addr, false);
                        Lane *pin = r->pin;
                        r->pin = NULL;
                        if (e && atomic_load_explicit(e, memory_order_acquire) == r->loading)
                                install(ft, mm, r->addr, e, r->loading, r->page,
                                        (r->loading & PE_FLAG_INCOMPRESSIBLE) ? PE_FLAG_INCOMPRESSIBLE : 0, false,
                                        r->refault);
                        /* put off again: the new retry keeps the slot */
                        if (!retry_keep_pin(mm, r->addr, r->loading, pin))
                                retry_unpin(pin);
                }
                ft->fault_t0 = 0;
                retry_free(ft, r);
        }
}

static void serve_unlock(FaultThread *ft, MMClient *mm);

/*
 * Read and handle mm's messages if no other thread holds serve_lock. A
 * thread that finds the lock taken walks away after leaving a kick: the
 * holder, which may be a fault thread busy with something else or the
 * manager, reads the uffd again (or has it read) once it lets go. The edge
 * this thread consumed is not needed after that.
 */
static void service(FaultThread *ft, MMClient *mm) {
        /* kick first, then try: if the lock is taken, its holder lets go
         * after our store and sees the kick (serve_unlock). seq_cst: a
         * store-buffering handshake (we store the kick, then look at the
         * lock; the holder lets the lock go, then loads the kick), where
         * neither store may pass the load after it, which release and
         * acquire allow. The lock's half is the mutex's own acquire and
         * release, so C11 alone does not promise it; glibc's mutex keeps
         * it (x86: locked instructions; ARMv8: no load-acquire passes an
         * earlier store-release) */
        atomic_store_explicit(&mm->kick, true, memory_order_seq_cst);
        if (pthread_mutex_trylock(&mm->serve_lock) != 0)
                return;
        /* seq_cst: the clear must not pass the read of the uffd after it,
         * or it could erase a kick left for a message that read missed;
         * not argued weaker */
        atomic_store_explicit(&mm->kick, false, memory_order_seq_cst);
        drain_uffd(ft, mm);
        if (mm->retries)
                run_retries(ft, mm);
        serve_unlock(ft, mm);
}

/*
 * Let go of mm->serve_lock, then read what a thread that found it taken
 * left for us (service()'s kick). A copy that met EAGAIN waits for an
 * event still unread, so retries also read the uffd first.
 */
static void serve_unlock(FaultThread *ft, MMClient *mm) {
        for (;;) {
                pthread_mutex_unlock(&mm->serve_lock);
                /* seq_cst: the other half of service()'s handshake, the
                 * load after our unlock */
                if (!atomic_load_explicit(&mm->kick, memory_order_seq_cst))
                        return;
                if (pthread_mutex_trylock(&mm->serve_lock) != 0)
                        return; /* the new holder sees the kick when it lets go */
                /* seq_cst: before the read of the uffd, as in service() */
                atomic_store_explicit(&mm->kick, false, memory_order_seq_cst);
                drain_uffd(ft, mm);
                if (mm->retries)
                        run_retries(ft, mm);
        }
}

/* Retries this thread left behind, and reads it put off (drain_uffd()),
 * on whichever mm they are. */
static void run_due_retries(FaultThread *ft) {
        ft->retry_due = false;
        ft->read_soon = false;
        for (size_t i = 0; i < ft->nowned; i++) {
                MMClient *mm = ft->owned[i];
                if (!atomic_load_explicit(&mm->has_retries, memory_order_relaxed) &&
                    !atomic_load_explicit(&mm->read_deferred, memory_order_relaxed) &&
                    !atomic_load_explicit(&mm->fork_unread, memory_order_relaxed))
                        continue;
                if (pthread_mutex_trylock(&mm->serve_lock) != 0) {
                        ft->retry_due = true; /* the holder may leave them; look again */
                        continue;
                }
                drain_uffd(ft, mm);
                if (mm->retries)
                        run_retries(ft, mm);
                serve_unlock(ft, mm);
        }
}

/* False if another thread holds serve_lock: the caller tries again later
 * (run_deferred()), since its holder may be in a second tier's read. */
static bool work_install(FaultThread *ft, Work *w) {
        MMClient *mm = w->mm;
        _Atomic uint64_t *e = pindex_entry(mm->index, w->a, false);
        uint64_t v = w->v;

        if (mmclient_serve_trylock(mm) != 0)
                return false;
        if (e && atomic_load_explicit(e, memory_order_acquire) == v) {
                /* the worker found the page incompressible (or the pool full):
                 * it goes back where it was, marked so we do not retry it on
                 * every pass */
                uint64_t final = (w->status == -E2BIG) ? PE_FLAG_INCOMPRESSIBLE : 0;
                serve_slot(ft, mm, w->a, e, v, final, false);
        }
        serve_unlock(ft, mm);
        /* the worker pinned the lane for us until now */
        atomic_fetch_sub_explicit(&mm->lanes[w->lane].users, 1, memory_order_release);
        return true;
}

/* FW_SYNC: every uffd message read before it was posted has been handled
 * completely once serve_lock is ours (a reader holds it from its read
 * until the message is handled). False: taken, try again later. */
static bool work_sync(FaultThread *ft, Work *w) {
        if (mmclient_serve_trylock(w->mm) != 0)
                return false;
        serve_unlock(ft, w->mm);
        w->type = MW_SYNC_DONE;
        core_post(ft->core, w);
        return true;
}

/* FW_SYNC_SWAP: the manager found serve_lock taken. False: still taken. */
static bool work_sync_swap(FaultThread *ft, Work *w) {
        if (mmclient_serve_trylock(w->mm) != 0)
                return false;
        mmclient_swap_sync(w->mm, (ZSync *)(uintptr_t)w->v, (int)w->a);
        w->v = 0;
        /* release: the planner that sees it clear sees the new page */
        atomic_store_explicit(&w->mm->sync_swap, false, memory_order_release);
        serve_unlock(ft, w->mm);
        work_free(w);
        return true;
}

/* A work item dropped undone (the thread is going away): what it holds. */
static void work_discard(Work *w) {
        if (w->type == FW_SYNC_SWAP && w->v) {
                munmap((void *)(uintptr_t)w->v, ZSWAP_SYNC_SIZE);
                close((int)w->a);
        }
        work_free(w);
}

/* Run an install or a sync, or keep it for later: no fault thread waits
 * for a serve_lock another thread holds, so one client's slow page (a
 * second tier's read) never stops the clients this thread serves. */
static void work_locked(FaultThread *ft, Work *w) {
        int type = w->type;
        if (type == FW_INSTALL ? work_install(ft, w) : type == FW_SYNC ? work_sync(ft, w) : work_sync_swap(ft, w)) {
                if (type == FW_INSTALL)
                        work_free(w);
                return;
        }
        /* at the tail: installs and syncs keep the order they came in */
        Work **p = &ft->deferred;
        while (*p)
                p = &(*p)->next;
        w->next = NULL;
        *p = w;
}

static void run_deferred(FaultThread *ft) {
        Work *list = ft->deferred;
        ft->deferred = NULL;
        while (list) {
                Work *w = list;
                list = w->next;
                work_locked(ft, w);
        }
}

typedef struct RestoreCtx {
        FaultThread *ft;
        MMClient *mm;
        unsigned budget;
        uint64_t next;
        int busy;
} RestoreCtx;

static int restore_cb(void *ud, uint64_t addr, _Atomic uint64_t *e) {
        RestoreCtx *c = ud;
        uint64_t v = atomic_load_explicit(e, memory_order_acquire);

        if (c->budget == 0) {
                c->next = addr;
                return 1;
        }
        switch (pe_state(v)) {
        case PE_STORED:
        case PE_SAME:
        case PE_MOVING:
        case PE_STAGED:
                c->budget--;
                serve(c->ft, c->mm, addr, false, false);
                v = atomic_load_explicit(e, memory_order_acquire);
                /* LOADING: in a retry; on the second tier still: it could
                 * not be read, and is tried again */
                if (pe_state(v) == PE_LOADING || (pe_state(v) == PE_STORED && pe_is_tier(v)))
                        c->busy++;
                break;
        case PE_LOADING:
                c->busy++;
                break;
        case PE_CLEAN:
                /* resident: the kept copy has no use once unregistered */
                mmclient_entry_drop(c->mm, e);
                break;
        default:
                break;
        }
        return 0;
}

/* Restore a slice of the range; true when the whole range is done. */
static bool work_restore(FaultThread *ft, Work *w) {
        RestoreCtx c = { .ft = ft, .mm = w->mm, .budget = 256 };

        /* w->v is the cursor: a and b stay what the manager asked for;
         * w->lane counts the pages of this pass, slice by slice, that are
         * not back yet */
        if (w->v < w->a)
                w->v = w->a;
        if (mmclient_serve_trylock(w->mm) != 0)
                return false; /* its holder may be in a slow read: the next pass */
        int more = pindex_walk(w->mm->index, w->v, w->b, restore_cb, &c);
        serve_unlock(ft, w->mm);
        w->lane += (uint32_t)c.busy;
        if (more) {
                w->v = c.next;
                return false;
        }
        w->v = w->a;
        bool busy = w->lane > 0;
        w->lane = 0;
        if (busy && !atomic_load_explicit(&w->mm->dead, memory_order_relaxed)) {
                /* pages still held in retries, or on a second tier that
                 * could not be read: a new pass after they are in (the
                 * range is unregistered only once a whole pass found
                 * nothing left, else those pages would read as zeros) */
                return false;
        }
        return true;
}

static void fault_thread_own(FaultThread *ft, MMClient *mm) {
        struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.ptr = mmclient_ref(mm) };
        MMClient **n = INJECT_ALLOC(realloc(ft->owned, (ft->nowned + 1) * sizeof(*n)));

        /* an address space nobody watches has its faults wait forever (a
         * forked child has no other reader): wait for memory a while */
        for (int i = 0; !n && i < 1000; i++) {
                usleep(1000);
                n = INJECT_ALLOC(realloc(ft->owned, (ft->nowned + 1) * sizeof(*n)));
        }
        if (!n || epoll_ctl(ft->epfd, EPOLL_CTL_ADD, mm->uffd, &ev) < 0) {
                log_error("cannot watch a client uffd: %m");
                if (n)
                        ft->owned = n;
                mmclient_unref(mm);
                return;
        }
        ft->owned = n;
        ft->owned[ft->nowned++] = mm;
}

static void fault_thread_disown(FaultThread *ft, MMClient *mm) {
        for (size_t i = 0; i < ft->nowned; i++) {
                if (ft->owned[i] != mm)
                        continue;
                epoll_ctl(ft->epfd, EPOLL_CTL_DEL, mm->uffd, NULL);
                ft->owned[i] = ft->owned[--ft->nowned];
                mmclient_unref(mm); /* its retries go with it (mmclient_unref) */
                return;
        }
}

static void restore_done(FaultThread *ft, Work *w) {
        w->type = MW_RESTORE_DONE;
        core_post(ft->core, w);
}

static void run_inbox(FaultThread *ft) {
        inbox_clear(&ft->inbox);
        Work *w = inbox_take(&ft->inbox);

        while (w) {
                Work *next = w->next;
                switch (w->type) {
                case FW_REMOVE:
                        fault_thread_disown(ft, w->mm);
                        work_free(w);
                        break;
                case FW_ADOPT:
                        fault_thread_own(ft, w->mm);
                        /* edges that came before we watched are not ours:
                         * look once */
                        service(ft, w->mm);
                        work_free(w);
                        break;
                case FW_INSTALL:
                case FW_SYNC:
                case FW_SYNC_SWAP:
                        work_locked(ft, w);
                        break;
                case FW_KICK:
                        service(ft, w->mm);
                        work_free(w);
                        break;
                case FW_RESTORE:
                        w->next = ft->restores;
                        ft->restores = w;
                        break;
                default:
                        work_free(w);
                        break;
                }
                w = next;
        }
}

static void run_restores(FaultThread *ft) {
        Work *list = ft->restores;
        ft->restores = NULL;

        while (list) {
                Work *w = list;
                list = w->next;
                if (atomic_load_explicit(&w->mm->fork_hold, memory_order_acquire)) {
                        /* its store is held for a forked child (fork_held()):
                         * the restore waits until the child attached */
                        w->next = ft->restores;
                        ft->restores = w;
                        ft->retry_due = true;
                        continue;
                }
                if (work_restore(ft, w))
                        restore_done(ft, w);
                else {
                        w->next = ft->restores;
                        ft->restores = w;
                }
        }
}

/*
 * One fault thread per CPU, each pinned to its CPU: the thread on the
 * faulting CPU is woken there, runs as soon as the faulting thread sleeps,
 * and wakes it on the same CPU again (3-7 us here). An unpinned thread is
 * woken on whichever CPU is idle, which is the other one, and a wake-up
 * across vCPUs costs ~60 us on this kind of machine (tests/bench/bench-wake,
 * docs/benchmarks.md). The CPUs are those the daemon may run on, in order.
 */
static void pin_to_cpu(FaultThread *ft) {
        cpu_set_t allowed, one;
        unsigned k = 0;

        if (!ft->core->cfg.fault_pin || !ft->core->cfg.fault_shared || sched_getaffinity(0, sizeof(allowed), &allowed) < 0)
                return;
        if ((unsigned)CPU_COUNT(&allowed) != ft->core->cfg.fault_threads)
                return; /* not one thread per CPU: let the scheduler place them */
        for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
                if (!CPU_ISSET(cpu, &allowed) || k++ != ft->idx)
                        continue;
                CPU_ZERO(&one);
                CPU_SET(cpu, &one);
                if (sched_setaffinity(0, sizeof(one), &one) < 0)
                        log_warn("fault thread %u: cannot pin to CPU %d: %m", ft->idx, cpu);
                else
                        log_debug("fault thread %u serves CPU %d", ft->idx, cpu);
                return;
        }
}

static char reads_tag; /* epoll: the slot read queue's fd (the inbox's is NULL) */
static char pump_tag;  /* epoll: the tier pump's eventfd */

/* The second tier's reads that are back. */
static void run_pump(FaultThread *ft) {
        uint64_t n;
        (void)!read(ft->pump_fd, &n, sizeof(n)); /* before the take: a later push writes again */
        for (TierJob *j = tier_pump_done(ft->pump); j;) {
                TierJob *next = j->next;
                tier_read_done(ft, j);
                j = next;
        }
}

/* Slot reads that are back, and those past their bound (memread.h): a
 * client whose read waits that long loses its process, and its user is
 * refused while the read waits; the fault stays LOADING until the read
 * is back, as it waits for nothing of ours. */
static void run_reads(FaultThread *ft, bool ready) {
        if (!ft->reads)
                return;
        for (MemReadOp *op = ready ? memread_queue_complete(ft->reads) : NULL; op;) {
                MemReadOp *next = op->next;
                run_read_done(ft, op);
                op = next;
        }
        for (MemReadOp *op; (op = memread_queue_overdue(ft->reads, now_ns()));) {
                if (op->tag == READ_REVOKE)
                        mmclient_read_overdue(container_of(op, RevokeRead, op)->mm, op->off);
                else
                        mmclient_read_overdue(container_of(op, Retry, op)->mm, container_of(op, Retry, op)->addr);
        }
}

/* epoll_pwait2() where it exists (timeouts finer than a millisecond for
 * a read put off: READ_RECHECK_NS); epoll_wait() where it does not (a
 * kernel before 5.11, valgrind before 3.21), whose put-off reads then look
 * again every millisecond. */
static atomic_bool no_pwait2;

static int wait_events(FaultThread *ft, struct epoll_event *evs, int n, int timeout_ms) {
        bool soon = ft->read_soon && timeout_ms != 0;
        if (!atomic_load_explicit(&no_pwait2, memory_order_relaxed)) {
                struct timespec ts = { timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000 };
                if (soon)
                        ts = (struct timespec){ 0, READ_RECHECK_NS };
                int r = epoll_pwait2(ft->epfd, evs, n, timeout_ms < 0 && !soon ? NULL : &ts, NULL);
                if (r >= 0 || errno != ENOSYS)
                        return r;
                atomic_store_explicit(&no_pwait2, true, memory_order_relaxed);
        }
        return epoll_wait(ft->epfd, evs, n, soon ? 1 : timeout_ms);
}

static void *fault_thread_main(void *arg) {
        FaultThread *ft = arg;
        struct epoll_event evs[16];
        uint64_t spin_until = 0, spin_ns = ft->core->cfg.fault_spin_us * 1000ull;

        pin_to_cpu(ft);
        memread_thread_init();
        if (ft->core->cfg.fault_rt_prio > 0) {
                /* a fault is served before any time-shared thread runs on
                 * this CPU (a CPU hog, a low-priority client), as the
                 * kernel serves a fault in the faulting task's own context */
                struct sched_param sp = { .sched_priority = (int)ft->core->cfg.fault_rt_prio };
                if (sched_setscheduler(0, SCHED_FIFO, &sp) < 0)
                        log_warn("fault thread %u: cannot switch to SCHED_FIFO %u: %m", ft->idx,
                                 ft->core->cfg.fault_rt_prio);
        }

        while (!atomic_load_explicit(&ft->stop, memory_order_relaxed)) {
                /* After a fault, poll for a while before sleeping: a program
                 * reading through evicted memory faults again within
                 * microseconds, and waking a thread on an idle vCPU costs
                 * ~60 us here (KERNEL.md). Bounded by fault_spin_us per
                 * fault; 0 turns it off. */
                bool spinning = spin_ns && now_ns() < spin_until;
                int timeout = spinning ? 0 : (ft->retry_due || ft->restores || ft->deferred) ? 1 : -1;
                int reads_due = ft->reads ? memread_queue_timeout_ms(ft->reads, now_ns()) : -1;
                if (reads_due >= 0 && (timeout < 0 || reads_due < timeout))
                        timeout = reads_due;
                int n = wait_events(ft, evs, ELEMENTSOF(evs), timeout);
                bool inbox = false, reads = false, pump = false;

                if (n > 0 && spin_ns)
                        spin_until = now_ns() + spin_ns;
                else if (n == 0 && spinning)
                        continue;

                for (int i = 0; i < n; i++) {
                        if (evs[i].data.ptr == NULL) {
                                inbox = true;
                                continue;
                        }
                        if (evs[i].data.ptr == &reads_tag) {
                                reads = true;
                                continue;
                        }
                        if (evs[i].data.ptr == &pump_tag) {
                                pump = true;
                                continue;
                        }
                        service(ft, evs[i].data.ptr);
                }
                if (ft->reads)
                        run_reads(ft, reads);
                if (pump)
                        run_pump(ft);
                /* an mm may be disowned by the inbox: only after this batch
                 * of events, whose pointers refer to it, is done */
                if (inbox)
                        run_inbox(ft);
                if (ft->retry_due || ft->read_soon)
                        run_due_retries(ft);
                if (ft->restores)
                        run_restores(ft);
                if (ft->deferred)
                        run_deferred(ft);
        }
        return NULL;
}

int fault_thread_new(Core *core, unsigned idx, FaultThread **ret) {
        FaultThread *ft = calloc(1, sizeof(*ft));
        struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
        int r;

        if (!ft)
                return -ENOMEM;
        ft->core = core;
        ft->idx = idx;
        ft->pump_fd = -1;
        ft->epfd = epoll_create1(EPOLL_CLOEXEC);
        if (ft->epfd < 0 || inbox_init(&ft->inbox) < 0) {
                r = negative_errno();
                goto fail;
        }
        r = codec_dctx_new(core->cfg.codec, &ft->dctx);
        if (r < 0)
                goto fail;
        if (core->tier && (r = tier_reader_new(core->tier, false, &ft->tier)) < 0)
                goto fail;
        if (core->tier) {
                struct epoll_event pev = { .events = EPOLLIN, .data.ptr = &pump_tag };
                ft->pump_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
                if (ft->pump_fd < 0 || epoll_ctl(ft->epfd, EPOLL_CTL_ADD, ft->pump_fd, &pev) < 0) {
                        r = negative_errno();
                        goto fail;
                }
                if ((r = tier_pump_new(core->tier, core->cfg.codec, ft->pump_fd, &ft->pump)) < 0)
                        goto fail;
        }
        for (int i = 0; i < RETRY_RESERVE; i++) {
                Retry *rr = calloc(1, sizeof(*rr));
                if (!rr) {
                        r = -ENOMEM;
                        goto fail;
                }
                rr->reserved = true;
                rr->next = ft->reserve;
                ft->reserve = rr;
        }
        if (epoll_ctl(ft->epfd, EPOLL_CTL_ADD, ft->inbox.efd, &ev) < 0) {
                r = negative_errno();
                goto fail;
        }
        /* without io_uring, slot reads are made in this thread (memread.h) */
        r = memread_queue_new(SLOT_READS_DEPTH, &ft->reads);
        if (r < 0 && r != -ENOSYS)
                goto fail;
        if (ft->reads) {
                struct epoll_event rev = { .events = EPOLLIN, .data.ptr = &reads_tag };
                if (epoll_ctl(ft->epfd, EPOLL_CTL_ADD, memread_queue_fd(ft->reads), &rev) < 0) {
                        r = negative_errno();
                        goto fail;
                }
        }
        r = -pthread_create(&ft->thread, NULL, fault_thread_main, ft);
        if (r < 0)
                goto fail;
        ft->started = true;
        *ret = ft;
        return 0;
fail:
        fault_thread_free(ft);
        return r;
}

void fault_thread_latency(const FaultThread *ft, LatencySnapshot *s) {
        latency_add(s, &ft->lat);
}

void fault_thread_stop(FaultThread *ft) {
        if (!ft || !ft->started)
                return;
        Work *w = work_new(0, NULL);
        /* relaxed: the inbox push that follows publishes it */
        atomic_store_explicit(&ft->stop, true, memory_order_relaxed);
        if (w)
                fault_thread_post(ft, w);
        else
                /* no memory for the item: wake the thread anyway, or it
                 * sleeps on and the daemon never exits */
                (void)!write(ft->inbox.efd, &(uint64_t){ 1 }, sizeof(uint64_t));
        pthread_join(ft->thread, NULL);
        ft->started = false;
}

FaultThread *fault_thread_free(FaultThread *ft) {
        if (!ft)
                return NULL;
        fault_thread_stop(ft);
        /* the second tier's reads: the one under way ends within the
         * tier's timeout, the rest come back cancelled */
        if (ft->pump) {
                tier_pump_stop(ft->pump);
                run_pump(ft);
                ft->pump = tier_pump_free(ft->pump);
        }
        for (Work *w = inbox_take(&ft->inbox); w;) {
                Work *n = w->next;
                work_discard(w);
                w = n;
        }
        while (ft->restores) {
                Work *n = ft->restores->next;
                work_free(ft->restores);
                ft->restores = n;
        }
        while (ft->deferred) {
                Work *n = ft->deferred->next;
                work_discard(ft->deferred);
                ft->deferred = n;
        }
        /* the slot reads still in flight come back (or are left to the
         * kernel, with what they hold, if a client's file system keeps
         * them): their retries become READY or are freed, as any read's */
        MemReadOp *left;
        memread_queue_free(ft->reads, &left);
        ft->reads = NULL;
        while (left) {
                MemReadOp *next = left->next;
                run_read_done(ft, left);
                left = next;
        }
        free(ft->revoke_buf); /* no read is left to write it */
        while (ft->reserve) {
                Retry *r = ft->reserve;
                ft->reserve = r->next;
                free(r);
        }
        while (ft->nowned)
                fault_thread_disown(ft, ft->owned[0]);
        free(ft->owned);
        codec_dctx_free(ft->dctx);
        tier_reader_free(ft->tier);
        safe_close(ft->pump_fd);
        safe_close(ft->epfd);
        safe_close(ft->inbox.efd);
        free(ft);
        return NULL;
}
