/*
 * tier-writer.c: the second tier's writer thread (tier.c has the rest;
 * docs/tier.md).
 *
 * Writing. The writer thread gets, every manager tick while the pool is
 * over its resume mark and the writer is idle, the list of clients. One
 * pass: a histogram of the reclaim stamps (last use) of every object in RAM
 * gives the stamp under which the pass takes objects, enough of the
 * oldest to bring the pool under its mark; then each client's entries are
 * walked in address order (neighbours land in the same blocks, which is
 * what makes the fault's read bring the next pages in too). An entry taken
 * is marked PE_WB with a CAS, its object copied into the extent, and the
 * entry stays servable all along: a fault takes a WB entry as it takes
 * any STORED one (and drops the mark), so no fault ever waits for a write.
 * Once the extents are written (and, on an NBD export that does not
 * promise consistency across connections, flushed), each entry still
 * carrying the WB value it got becomes STORED|PE_TIER naming a new stub;
 * one a fault or an event took in between fails that CAS and its blocks
 * lose the reference the pass gave them. A failed write leaves every
 * entry as it was (the WB mark is taken back): nothing is lost, the
 * writer backs off.
 *
 * The thread owns the fields of struct Tier marked "writer thread only"
 * (tier-internal.h); tier_tick() runs on the manager thread and only
 * hands it a Job under t->lock.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "inject.h"
#include "log.h"
#include "macro.h"
#include "core.h"
#include "mmclient.h"
#include "nbd.h"
#include "pentry.h"
#include "pindex.h"
#include "pool.h"
#include "age.h"
#include "tier-writer.h"
#include "tier.h"
#include "tier-internal.h"
#include "util.h"

#define BACKOFF_MAX_MS 30000
#define HIST 1024

/* A job and the client references tier_tick() took for it. Accepts NULL. */
void tier_job_free(Job *j) {
        if (!j)
                return;
        for (size_t i = 0; i < j->n; i++)
                mmclient_unref(j->mms[i]);
        free(j->mms);
        free(j);
}

/* A client whose announced fork is under way (fork_announced) or held
 * for a fork child (fork_hold): its store must stay as at the fork, for
 * a child that has to restore itself from it should this daemon die, and
 * a child cannot read the second tier. tier_tick() also leaves out one
 * that asked to fork and has no answer yet (fork_paused, the manager's). */
static bool tier_fork_held(MMClient *mm) {
        /* fork_announced: from the FORK_PREPARE answer until its event is
         * read; fork_hold from the end of that event's handling */
        return atomic_load_explicit(&mm->fork_announced, memory_order_acquire) ||
               atomic_load_explicit(&mm->fork_hold, memory_order_acquire) != 0;
}

void tier_tick(Tier *t, MMClient *mms) {
        uint64_t bound = atomic_load_explicit(&t->core->pool_bound, memory_order_relaxed);
        uint64_t resume = atomic_load_explicit(&t->core->pool_resume, memory_order_relaxed);
        PoolStats ps;

        if (bound == 0)
                return;
        pool_shared_stats(t->core->pools, &ps);
        /* start under the mark where eviction resumes, so that eviction
         * never has to stop; write down to 90 % of it */
        uint64_t lo = resume - resume / 10;
        uint64_t start = resume - resume / 20;
        if (ps.pool_bytes < start)
                return;
        pthread_mutex_lock(&t->lock);
        bool idle = !t->busy && !t->job;
        pthread_mutex_unlock(&t->lock);
        if (!idle)
                return;
        Job *j = calloc(1, sizeof(*j));
        size_t n = 0;
        for (MMClient *mm = mms; mm; mm = mm->next)
                n++;
        if (!j || !(j->mms = calloc(n ? n : 1, sizeof(*j->mms)))) {
                free(j);
                return;
        }
        for (MMClient *mm = mms; mm; mm = mm->next)
                if (mm->pool && atomic_load_explicit(&mm->st.stored_pages, memory_order_relaxed) &&
                    !atomic_load_explicit(&mm->dead, memory_order_relaxed) && !mm->fork_paused && !tier_fork_held(mm))
                        j->mms[j->n++] = mmclient_ref(mm);
        /* object bytes: the pool's own bytes come down as its chunks empty */
        j->want = ps.pool_bytes - lo;
        pthread_mutex_lock(&t->lock);
        t->job = j;
        pthread_cond_signal(&t->cond);
        pthread_mutex_unlock(&t->lock);
}

/* A run of up to EXTENT_BLOCKS free blocks, next fit from the cursor,
 * reserved (each block one reference, the extent's own). A short run is
 * taken where it comes first: allocation costs the distance to a hole.
 * false: no free block at all. */
static bool extent_alloc(Tier *t, Extent *x) {
        uint64_t n = t->nblocks, lowest = 1, now = now_ns();

        if (t->grace_until_ns && now >= t->grace_until_ns) {
                t->grace_until_ns = 0;
                log_info("second tier: grace over, the free blocks of the earlier daemon are reused");
        }
        if (t->grace_until_ns)
                lowest = t->old_hwm;
        if (now < t->full_until_ns || lowest >= n)
                return false;
        uint64_t span = n - lowest;
        uint64_t first = t->cursor >= lowest && t->cursor < n ? t->cursor - lowest : 0;
        for (uint64_t i = 0; i < span; i++) {
                uint64_t b = lowest + (first + i) % span;
                /* acquire: pairs with tier_unref_block()'s release */
                if (atomic_load_explicit(&t->refs[b], memory_order_acquire) != 0)
                        continue;
                uint64_t e = b;
                while (e < n && e - b < EXTENT_BLOCKS && atomic_load_explicit(&t->refs[e], memory_order_acquire) == 0)
                        e++;
                x->block = b;
                x->nblocks = (unsigned)(e - b);
                x->fill = 0;
                x->nobjs = 0;
                for (uint64_t k = b; k < e; k++)
                        tier_ref_block(t, k);
                t->cursor = e;
                return true;
        }
        /* a whole scan found nothing: look again in a second, not on
         * every tick */
        t->full_until_ns = now + 1000000000ull;
        return false;
}

static void extent_unreserve(Tier *t, Extent *x) {
        for (unsigned i = 0; i < x->nblocks; i++)
                tier_unref_block(t, x->block + i);
        x->nblocks = 0;
}

static void obj_unref(Tier *t, const WbObj *o) {
        TierStub s = { .off = o->off, .len = (uint16_t)o->len, .magic = TIER_STUB_MAGIC };
        uint64_t b0, b1;
        block_range(&s, &b0, &b1);
        for (uint64_t b = b0; b <= b1; b++)
                tier_unref_block(t, b);
}

/* Write failed (or the pass gave up): every entry goes back as it was. */
static void extent_abandon(Tier *t, Extent *x) {
        for (unsigned i = 0; i < x->nobjs; i++) {
                WbObj *o = &x->objs[i];
                _Atomic uint64_t *e = pindex_entry(o->mm->index, o->addr, false);
                uint64_t v = o->v;
                if (e)
                        atomic_compare_exchange_strong_explicit(e, &v, v & ~PE_WB, memory_order_relaxed,
                                                                memory_order_relaxed);
                obj_unref(t, o);
        }
        x->nobjs = 0;
        extent_unreserve(t, x);
}

/* Written: each entry still as the pass left it takes its stub. */
static void extent_publish(Tier *t, Extent *x) {
        for (unsigned i = 0; i < x->nobjs; i++) {
                WbObj *o = &x->objs[i];
                MMClient *mm = o->mm;
                _Atomic uint64_t *e = pindex_entry(mm->index, o->addr, false);
                PoolHandle h;
                uint64_t v = o->v;

                if (!e || atomic_load_explicit(e, memory_order_relaxed) != v || tier_fork_held(mm) ||
                    pool_alloc_over(mm->pool, sizeof(TierStub), &h) < 0) {
                        /* taken meanwhile, its client held for a fork
                         * child, or no room for a stub: it stays what it
                         * is; only our reference goes */
                        if (e)
                                atomic_compare_exchange_strong_explicit(e, &v, v & ~PE_WB, memory_order_relaxed,
                                                                        memory_order_relaxed);
                        obj_unref(t, o);
                        continue;
                }
                TierStub *s = pool_map(mm->pool, h);
                *s = (TierStub){ .off = o->off, .gen = o->gen, .len = (uint16_t)o->len, .magic = TIER_STUB_MAGIC };
                uint64_t nv = pe_make_stored(h, sizeof(TierStub)) | PE_TIER | (v & PE_CODEC);
                /* release: the stub's bytes before the entry naming it */
                if (!atomic_compare_exchange_strong_explicit(e, &v, nv, memory_order_release, memory_order_relaxed)) {
                        pool_release(mm->pool, h);
                        obj_unref(t, o);
                        continue;
                }
                /* the object in RAM is ours now: nobody else can reach it */
                pool_release(mm->pool, pe_handle(o->v));
                atomic_fetch_sub_explicit(&mm->st.compressed_bytes, pe_clen(o->v) - sizeof(TierStub),
                                          memory_order_relaxed);
                if (o->v & PE_STRONG)
                        mmclient_count_strong(mm, o->v, -1); /* now on the tier */
                mmclient_count_tier(mm, o->len, 1);
                stat_add(&t->st.pages, 1);
                stat_add(&t->st.bytes, o->len);
                stat_add(&t->st.written_pages, 1);
        }
        x->nobjs = 0;
        extent_unreserve(t, x);
}

static void backoff(Tier *t, int err, const char *what) {
        stat_add(&t->st.write_errors, 1);
        log_error("second tier: %s failed: %s; writeback stops for %" PRIu64 " ms, the pages stay in RAM", what,
                  strerror(-err), t->backoff_ms);
        t->backoff_until_ns = now_ns() + t->backoff_ms * 1000000;
        t->backoff_ms = MIN(t->backoff_ms * 2, (uint64_t)BACKOFF_MAX_MS);
        set_state(t, t->kind == BACKING_NBD && (!t->wconn || nbd_dead(t->wconn)) ? TIER_DISCONNECTED : TIER_ERROR);
}

/* Write the batch's extents (and the header first if they go past its
 * high-water mark), then publish or abandon them. 0 or -errno. */
static int batch_flush(Tier *t) {
        Extent *xs[NEXT];
        unsigned n = 0;
        int r = 0;

        /* an extent that took nothing (a short run too small for the
         * object at hand) is only given back */
        for (unsigned i = 0; i < t->next_ext; i++) {
                if (t->ext[i].fill == 0)
                        extent_unreserve(t, &t->ext[i]);
                else
                        xs[n++] = &t->ext[i];
        }
        t->next_ext = 0;
        if (n == 0)
                return 0;
        uint64_t top = 0;
        for (unsigned i = 0; i < n; i++)
                top = MAX(top, xs[i]->block + xs[i]->nblocks);
        if (top > t->hwm) {
                uint64_t old = t->hwm;
                t->hwm = MIN(t->nblocks, top + MAX(t->nblocks / 64, (uint64_t)256));
                r = tier_header_write(t);
                if (r < 0)
                        t->hwm = old;
        }
        if (r == 0)
                r = -INJECT(INJ_TIER_WRITE);
        if (r == 0 && t->kind == BACKING_NBD) {
                NbdWrite w[NEXT];
                for (unsigned i = 0; i < n; i++)
                        w[i] = (NbdWrite){ xs[i]->buf, ALIGN_TO(xs[i]->fill, TIER_BLOCK), xs[i]->block * TIER_BLOCK };
                r = t->wconn ? nbd_pwrite_batch(t->wconn, w, n) : -ENOTCONN;
                if (r == 0 && t->nbd_flush)
                        r = nbd_flush(t->wconn);
        } else if (r == 0) {
                int res[NEXT];
                for (unsigned i = 0; i < n; i++)
                        tier_ring_prep_rw(&t->ring, tier_ring_sqe(&t->ring, i), t->fd, true, xs[i]->buf,
                                     ALIGN_TO(xs[i]->fill, TIER_BLOCK), xs[i]->block * TIER_BLOCK);
                r = tier_ring_run(&t->ring, n, res, 0);
                for (unsigned i = 0; i < n && r == 0; i++)
                        if (res[i] < 0)
                                r = res[i];
                        else if ((uint32_t)res[i] != ALIGN_TO(xs[i]->fill, TIER_BLOCK))
                                r = -ENOSPC; /* a short write: the file system is full */
        }
        if (r < 0) {
                for (unsigned i = 0; i < n; i++)
                        extent_abandon(t, xs[i]);
                backoff(t, r, "a write");
                return r;
        }
        for (unsigned i = 0; i < n; i++) {
                stat_add(&t->st.written, ALIGN_TO(xs[i]->fill, TIER_BLOCK));
                stat_add(&t->st.writes, 1);
                extent_publish(t, xs[i]);
        }
        t->backoff_ms = BACKOFF_MIN_MS;
        return 0;
}

/* Wait until the rate allows len more bytes. false: stop. */
static bool rate_wait(Tier *t, uint64_t len) {
        if (!t->conf.rate)
                return true;
        for (;;) {
                uint64_t now = now_ns();
                t->tokens = MIN(t->tokens + (double)(now - t->tokens_ns) * 1e-9 * (double)t->conf.rate,
                                (double)t->conf.rate);
                t->tokens_ns = now;
                if (t->tokens >= (double)len) {
                        t->tokens -= (double)len;
                        return true;
                }
                if (atomic_load_explicit(&t->stop, memory_order_relaxed))
                        return false;
                uint64_t wait_ns = (uint64_t)(((double)len - t->tokens) / (double)t->conf.rate * 1e9);
                struct timespec ts = { (time_t)(wait_ns / 1000000000), (long)(wait_ns % 1000000000) };
                if (ts.tv_sec > 0)
                        ts = (struct timespec){ 0, 100000000 };
                nanosleep(&ts, NULL);
        }
}

typedef struct Pass {
        Tier *t;
        MMClient *mm;
        uint32_t now;
        uint32_t cutoff;    /* take stamps at or under this bucket */
        uint64_t hist[HIST];
        uint64_t want, taken;
        bool stop;          /* no room, an error, or done */
} Pass;

static unsigned bucket(const Pass *p, uint32_t stamp) {
        return (unsigned)((uint64_t)stamp * HIST / ((uint64_t)p->now + 1));
}

/* An object worth a stub: one of 32 bytes or less would save nothing. */
static bool takeable(uint64_t v) {
        return pe_state(v) == PE_STORED && !(v & (PE_TIER | PE_MARKS | PE_SHARED)) && pe_clen(v) > 2 * sizeof(TierStub);
}

static uint32_t stamp_of(MMClient *mm, uint64_t addr) {
        PageMeta *meta = pindex_meta(mm->index, addr, false);
        return meta ? atomic_load_explicit(&meta->stamp[pmeta_idx(addr)], memory_order_relaxed) : 0;
}

static int hist_cb(void *ud, uint64_t addr, _Atomic uint64_t *e) {
        Pass *p = ud;
        uint64_t v = atomic_load_explicit(e, memory_order_relaxed);

        if (takeable(v))
                p->hist[MIN(bucket(p, stamp_of(p->mm, addr)), HIST - 1)] += pe_clen(v);
        return 0;
}

/* Pack one more object into the current extent (a new one if it is full). */
static int take_cb(void *ud, uint64_t addr, _Atomic uint64_t *e) {
        Pass *p = ud;
        Tier *t = p->t;
        MMClient *mm = p->mm;
        uint64_t v = atomic_load_explicit(e, memory_order_acquire);

        if (p->taken >= p->want || atomic_load_explicit(&t->stop, memory_order_relaxed) ||
            atomic_load_explicit(&mm->dead, memory_order_relaxed) || tier_fork_held(mm))
                return 1;
        if (!takeable(v) || MIN(bucket(p, stamp_of(mm, addr)), HIST - 1) > p->cutoff)
                return 0;
        uint32_t len = pe_clen(v), rec = len + TIER_SEAL;
        Extent *x = t->next_ext ? &t->ext[t->next_ext - 1] : NULL;
        if (!x || x->nobjs == EXTENT_OBJS || x->fill + rec > x->nblocks * TIER_BLOCK) {
                if (t->next_ext == NEXT) {
                        if (batch_flush(t) < 0)
                                return p->stop = true, 1;
                }
                x = &t->ext[t->next_ext];
                if (!extent_alloc(t, x)) {
                        if (!t->full_logged)
                                log_warn("second tier: %s is full: writeback stops, the pages stay in RAM",
                                         t->describe);
                        t->full_logged = true;
                        stat_add(&t->st.full_events, 1);
                        set_state(t, TIER_FULL);
                        return p->stop = true, 1;
                }
                t->full_logged = false;
                t->next_ext++;
                if (!rate_wait(t, TIER_EXTENT))
                        return p->stop = true, 1;
                if (rec > x->nblocks * TIER_BLOCK)
                        return 0; /* a short run that cannot take it: the next object may fit */
        }
        /* mark it: a fault takes it all the same, and only this pass ever
         * sets the mark, so an entry that still has it at the end is the
         * page we copied (no ABA) */
        uint64_t wb = v | PE_WB;
        if (!atomic_compare_exchange_strong_explicit(e, &v, wb, memory_order_acquire, memory_order_relaxed))
                return 0;
        const void *src = pool_map(mm->pool, pe_handle(v));
        uint64_t off = x->block * TIER_BLOCK + x->fill;
        TierStub s = { .off = off, .gen = tier_gen_new(), .len = (uint16_t)len, .magic = TIER_STUB_MAGIC };
        /* sealed as read: the read may race with a fault that took the
         * page and a worker that reused its slot; the entry is then no
         * longer wb, and the publication fails */
        tier_seal(t, &s, mm->uid, x->buf + x->fill, src);
        x->objs[x->nobjs++] = (WbObj){ .mm = mm, .addr = addr, .v = wb, .off = off, .len = len, .gen = s.gen };
        uint64_t b0, b1;
        block_range(&s, &b0, &b1);
        for (uint64_t b = b0; b <= b1; b++)
                tier_ref_block(t, b);
        x->fill += rec;
        p->taken += len;
        return 0;
}

/* The writer's NBD connection, made again at most every RECONNECT_MS; the
 * header read once it first answers. true: connected and ready. */
static bool writer_connected(Tier *t) {
        char why[256];
        uint64_t now = now_ns();

        if (t->kind == BACKING_FILE || (t->wconn && !nbd_dead(t->wconn)))
                return true;
        t->wconn = tier_conn_close(t->wconn);
        if (now < t->next_reconnect_ns)
                return false;
        t->next_reconnect_ns = now + RECONNECT_MS * 1000000ull;
        if (tier_connect_nbd(t, &t->wconn, (int)t->conf.timeout_ms, why, sizeof(why)) < 0) {
                if (!t->unreachable_logged)
                        log_warn("second tier: cannot reach %s: %s; writeback waits", t->conf.backing, why);
                t->unreachable_logged = true;
                set_state(t, TIER_DISCONNECTED);
                return false;
        }
        t->unreachable_logged = false;
        t->nbd_flush = nbd_can_flush(t->wconn);
        if (!atomic_load_explicit(&t->ready, memory_order_relaxed)) {
                int r = tier_ready(t);
                if (r < 0) {
                        log_error("second tier: %s: cannot read or write its header: %s", t->conf.backing, strerror(-r));
                        t->wconn = tier_conn_close(t->wconn);
                        return false;
                }
                return true;
        }
        stat_add(&t->st.reconnects, 1);
        log_info("second tier: connected to %s again", t->conf.backing);
        set_state(t, t->grace_until_ns ? TIER_GRACE : TIER_IDLE);
        return true;
}

static void run_job(Tier *t, Job *j) {
        Pass *p = calloc(1, sizeof(*p));
        uint64_t now = now_ns();

        if (!p)
                return;
        if (now < t->backoff_until_ns || now < t->full_until_ns || now < t->idle_until_ns)
                goto out;
        if (!writer_connected(t))
                goto out;
        p->t = t;
        p->now = age_stamp();
        p->want = j->want;
        set_state(t, TIER_WRITING);
        for (size_t i = 0; i < j->n; i++) {
                p->mm = j->mms[i];
                pindex_walk(p->mm->index, 0, PINDEX_MAX_ADDR, hist_cb, p);
        }
        uint64_t sum = 0;
        p->cutoff = HIST - 1;
        for (unsigned b = 0; b < HIST; b++) {
                sum += p->hist[b];
                if (sum >= p->want) {
                        p->cutoff = b;
                        break;
                }
        }
        for (size_t i = 0; i < j->n && !p->stop && p->taken < p->want; i++) {
                p->mm = j->mms[i];
                if (atomic_load_explicit(&p->mm->dead, memory_order_relaxed))
                        continue;
                pindex_walk(p->mm->index, 0, PINDEX_MAX_ADDR, take_cb, p);
        }
        if (t->next_ext)
                batch_flush(t);
        log_debug("second tier: pass over %zu clients: %" PRIu64 " bytes wanted, %" PRIu64 " taken (stamps under bucket %u of %u)",
                  j->n, p->want, p->taken, p->cutoff, HIST);
        /* the objects let go are deferred releases: make the pool's bytes
         * show them before the next tick measures it */
        for (size_t i = 0; i < j->n; i++)
                pool_reclaim(j->mms[i]->pool);
        if (p->taken == 0)
                t->idle_until_ns = now_ns() + 250000000ull; /* all that is old is out or marked */
        int s = atomic_load_explicit(&t->st.state, memory_order_relaxed);
        if (s == TIER_WRITING)
                set_state(t, t->grace_until_ns ? TIER_GRACE : TIER_IDLE);
out:
        free(p);
}

static void *tier_writer_main(void *arg) {
        Tier *t = arg;

        pthread_setname_np(pthread_self(), "zswapd-tier");
        pthread_mutex_lock(&t->lock);
        while (!atomic_load_explicit(&t->stop, memory_order_relaxed)) {
                if (!t->job && !atomic_load_explicit(&t->ready, memory_order_relaxed)) {
                        /* started without its server: connect (and read the
                         * header, which faults wait for) without waiting for
                         * writeback to be wanted */
                        struct timespec ts;
                        clock_gettime(CLOCK_REALTIME, &ts);
                        ts.tv_sec += 1;
                        pthread_mutex_unlock(&t->lock);
                        writer_connected(t);
                        pthread_mutex_lock(&t->lock);
                        if (!t->job && !atomic_load_explicit(&t->ready, memory_order_relaxed) &&
                            !atomic_load_explicit(&t->stop, memory_order_relaxed))
                                pthread_cond_timedwait(&t->cond, &t->lock, &ts);
                        continue;
                }
                if (!t->job) {
                        pthread_cond_wait(&t->cond, &t->lock);
                        continue;
                }
                Job *j = t->job;
                t->busy = true;
                pthread_mutex_unlock(&t->lock);
                run_job(t, j);
                pthread_mutex_lock(&t->lock);
                t->job = NULL;
                t->busy = false;
                pthread_mutex_unlock(&t->lock);
                tier_job_free(j); /* the last reference to a client may go here */
                pthread_mutex_lock(&t->lock);
        }
        pthread_mutex_unlock(&t->lock);
        return NULL;
}

int tier_writer_start(Tier *t, Core *core, char *err, size_t errlen) {
        t->core = core;
        int r = -pthread_create(&t->thread, NULL, tier_writer_main, t);
        if (r < 0)
                return errorf(r, err, errlen, "cannot start the writer: %s", strerror(-r));
        t->started = true;
        return 0;
}
