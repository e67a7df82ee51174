/*
 * recompress.c: the strong tier of compression; recompress.h says how the
 * work is shared between a worker and the manager, docs/page-lifecycle.md
 * how the entries change.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <zdict.h>

#include "age.h"
#include "evict-internal.h"
#include "fault.h"
#include "log.h"
#include "pindex.h"
#include "pool.h"
#include "recompress.h"
#include "store.h"
#include "util.h"

/* items swapped in under one hold of serve_lock: a fault of the client
 * that finds it taken waits for at most this many copies */
#define SWAP_GROUP 16
/* a client whose walk reached the end is walked again this much later at
 * the soonest: objects grow cold slowly */
#define REWALK_MS 1000
/* a job that does not yield to faults, at most this often, and for at
 * most this much of the thread's CPU: while it runs, a fault thread
 * waking on its CPU costs an interrupt, so it must stay well under 1 % of
 * the time for other clients' p99 not to see it (128 pages at zstd 9
 * took 14 ms, and raised another client's fault p99 1.18x) */
#define FORCE_MS 1000
#define FORCE_MAX_NS (2 * 1000 * 1000)
/* the budget is kept for at most this long of idleness: a burst after a
 * quiet hour must not take a CPU for minutes */
#define TOKENS_MAX_NS (500 * 1000 * 1000LL)

static uint64_t thread_cpu_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint32_t units(uint32_t len) {
        return (len + (1u << STORE_UNIT_SHIFT) - 1) >> STORE_UNIT_SHIFT;
}

void recompress_init(Recompressor *r, Core *core) {
        *r = (Recompressor){ .core = core, .tokens_ms = now_ms() };
        pthread_mutex_init(&r->lock, NULL);
        pthread_cond_init(&r->cond, NULL);
}

/* ---- the thread's part ---- */

typedef struct RunCtx {
        MMClient *mm;
        RecompJob *j;
        CodecCCtx *strong;
        const CodecCDict *cdict; /* the client's dictionary, digested: made with it */
        CodecDCtx *dctx;
        uint8_t *page, *copy;
        uint64_t t0;    /* the thread's CPU time when the job started */
        uint32_t tried; /* objects compressed again, kept or not */
} RunCtx;

/* Is entry value v an object the strong tier may take? Only a STORED
 * object in the pool that nobody marked, not found to gain nothing
 * before, and not of the strong tier already, unless the job has a
 * dictionary and the object was made without one. */
static bool candidate(uint64_t v, bool dict) {
        if (pe_state(v) != PE_STORED || (v & (PE_TIER | PE_MARKS | PE_NOGAIN | PE_DICT | PE_SHARED)))
                return false;
        return !(v & PE_STRONG) || dict;
}

static bool cold(RunCtx *c, uint64_t addr) {
        PageMeta *pm = pindex_meta(c->mm->index, addr, false);
        /* relaxed: a stamp is a hint, as reclaim reads it */
        uint32_t stamp = pm ? atomic_load_explicit(&pm->stamp[pmeta_idx(addr)], memory_order_relaxed) : 0;
        return stamp ? stamp <= c->j->cold : c->j->unstamped_cold;
}

/* Take the mark back (the value we marked, if it is still that). */
static void unmark(_Atomic uint64_t *e, uint64_t marked, uint64_t to) {
        /* relaxed: nothing was published under the mark */
        atomic_compare_exchange_strong_explicit(e, &marked, to, memory_order_relaxed, memory_order_relaxed);
}

static int run_cb(void *ud, uint64_t addr, _Atomic uint64_t *e) {
        RunCtx *c = ud;
        RecompJob *j = c->j;

        /* relaxed: counters and a hint */
        bool fault = j->yield ? atomic_load_explicit(&c->mm->core->faults, memory_order_relaxed) != j->faults
                              : c->tried && thread_cpu_ns() - c->t0 > FORCE_MAX_NS;
        if (j->scanned++ >= RECOMP_SCAN || j->n == RECOMP_PAGES || fault ||
            j->used + ZSWAP_PAGE_SIZE > sizeof(j->buf) || atomic_load_explicit(&c->mm->dead, memory_order_relaxed)) {
                j->next = addr;
                return 1;
        }
        /* acquire: the object's bytes, written before the entry named it */
        uint64_t v = atomic_load_explicit(e, memory_order_acquire);
        if (!candidate(v, c->cdict != NULL) || !cold(c, addr))
                return 0;
        uint64_t marked = v | PE_RC;
        /* acquire again (the object as of this value); whoever takes the
         * entry from now on drops the mark, and nobody but us sets it:
         * while the entry still holds `marked`, the object is unchanged */
        if (!atomic_compare_exchange_strong_explicit(e, &v, marked, memory_order_acquire, memory_order_relaxed))
                return 0;
        uint32_t clen = pe_clen(v);
        const uint8_t *src = pool_map(c->mm->pool, pe_handle(v));
        int r;
        /* decoded from a copy of our own: a fault may take the entry and
         * the slot be reused while we read it (the swap's CAS then fails;
         * the decoder meanwhile sees bytes that hold still) */
        if (src)
                memcpy(c->copy, src, clen);
        if (!src)
                r = -EBADMSG;
        else if (clen == ZSWAP_PAGE_SIZE)
                r = (memcpy(c->page, c->copy, ZSWAP_PAGE_SIZE), 0);
        else
                r = pe_decompress(c->dctx, mmclient_dict(c->mm), v, c->copy, clen, c->page);
        if (r < 0) {
                /* taken and rewritten while we read (the entry tells: the
                 * CAS fails), or bad: leave it as it is */
                unmark(e, marked, v);
                return 0;
        }
        c->tried++;
        /* worth it only in a smaller size class of the pool */
        uint32_t cap = (units(clen) - 1) << STORE_UNIT_SHIFT;
        int n = !cap      ? -ENOSPC
                : c->cdict ? codec_compress_cdict(c->strong, c->cdict, c->page, j->buf + j->used, cap)
                           : codec_compress(c->strong, c->page, j->buf + j->used, cap);
        if (n <= 0 || units((uint32_t)n) >= units(clen)) {
                unmark(e, marked, v | PE_NOGAIN);
                return 0;
        }
        j->items[j->n++] = (RecompItem){ .addr = addr, .v = marked, .off = j->used, .len = (uint32_t)n };
        j->used += (uint32_t)n;
        return 0;
}

/* ---- training a dictionary ---- */

typedef struct TrainCtx {
        MMClient *mm;
        CodecDCtx *dctx;
        uint8_t *copy;
        /* DICT_SAMPLES pages: the training samples from the front, every
         * fourth page held out to measure the dictionary, from the back */
        uint8_t *buf;
        uint32_t ntrain, nhold;
        uint64_t stride, seen;
} TrainCtx;

static int train_cb(void *ud, uint64_t addr, _Atomic uint64_t *e) {
        TrainCtx *c = ud;
        (void)addr;

        if (c->ntrain + c->nhold >= DICT_SAMPLES || atomic_load_explicit(&c->mm->dead, memory_order_relaxed))
                return 1;
        /* acquire: the object's bytes, written before the entry named it.
         * Nothing is marked: a sample read while a fault takes the entry
         * and the slot is reused is another page of the same client's (its
         * own pool), which only makes the sample less even */
        uint64_t v = atomic_load_explicit(e, memory_order_acquire);
        if (pe_state(v) != PE_STORED || (v & (PE_TIER | PE_DICT | PE_SHARED)) || c->seen++ % c->stride)
                return 0;
        uint32_t clen = pe_clen(v);
        const uint8_t *src = pool_map(c->mm->pool, pe_handle(v));
        if (!src)
                return 0;
        bool hold = (c->ntrain + c->nhold) % 4 == 3;
        uint8_t *dst = c->buf + (size_t)(hold ? DICT_SAMPLES - 1 - c->nhold : c->ntrain) * ZSWAP_PAGE_SIZE;
        memcpy(c->copy, src, clen);
        int r = clen == ZSWAP_PAGE_SIZE ? (memcpy(dst, c->copy, ZSWAP_PAGE_SIZE), 0)
                                        : pe_decompress(c->dctx, NULL, v, c->copy, clen, dst);
        if (r == 0)
                *(hold ? &c->nhold : &c->ntrain) += 1;
        return 0;
}

/* Pool units of a page compressed to n bytes (or stored raw). */
static uint64_t page_units(int n) {
        return units(n > 0 ? (uint32_t)n : ZSWAP_PAGE_SIZE);
}

/* Train a dictionary on a sample of the client's pages and measure it on
 * the pages held out: j->trained if it pays (DICT_GAIN_PCT, and twice its
 * size over all the client's objects). */
static void train(Recompressor *r, RecompJob *j, MMClient *mm) {
        TrainCtx c = { .mm = mm, .dctx = r->dctx, .copy = r->copy, .stride = MAX(1, j->stored / DICT_SAMPLES) };
        _cleanup_free_ uint8_t *dict = malloc(CODEC_DICT_MAX);
        _cleanup_free_ size_t *sizes = malloc(DICT_SAMPLES * sizeof(*sizes));
        CodecDict *d = NULL;
        CodecCDict *cd = NULL;

        c.buf = malloc((size_t)DICT_SAMPLES * ZSWAP_PAGE_SIZE);
        if (!c.buf || !dict || !sizes)
                goto out;
        (void)pindex_walk(mm->index, 0, PINDEX_MAX_ADDR, train_cb, &c);
        j->samples = c.ntrain + c.nhold;
        if (c.ntrain < DICT_SAMPLES / 4 || c.nhold == 0)
                goto out;
        for (uint32_t i = 0; i < c.ntrain; i++)
                sizes[i] = ZSWAP_PAGE_SIZE;
        size_t n = ZDICT_trainFromBuffer(dict, CODEC_DICT_MAX, c.buf, sizes, c.ntrain);
        if (ZDICT_isError(n) || codec_dict_new(dict, n, &d) < 0)
                goto out;
        if (codec_cctx_set_level(r->strong, j->level) < 0 || codec_cdict_new(d, j->level, &cd) < 0)
                goto out;
        for (uint32_t i = 0; i < c.nhold; i++) {
                const uint8_t *pg = c.buf + (size_t)(DICT_SAMPLES - 1 - i) * ZSWAP_PAGE_SIZE;
                j->plain_units += page_units(codec_compress(r->strong, pg, j->buf, ZSWAP_PAGE_SIZE));
                j->dict_units += page_units(codec_compress_cdict(r->strong, cd, pg, j->buf, ZSWAP_PAGE_SIZE));
        }
        /* what it would save over every object the client has, against
         * what it costs (its pool objects) */
        uint64_t saved = j->plain_units > j->dict_units
                                 ? ((j->plain_units - j->dict_units) << STORE_UNIT_SHIFT) * j->stored / c.nhold
                                 : 0;
        if (j->dict_units * 100 <= j->plain_units * (100 - DICT_GAIN_PCT) && saved >= 2 * n) {
                j->trained = d;
                d = NULL;
        }
out:
        codec_cdict_free(cd);
        codec_dict_unref(d);
        free(c.buf);
}

/* The thread's digest of dictionary d at level, made anew when either
 * changes: NULL if it cannot be made. */
static const CodecCDict *thread_cdict(Recompressor *r, const CodecDict *d, int level) {
        if (r->cdict && r->cdict_of == d && r->cdict_level == level)
                return r->cdict;
        r->cdict = codec_cdict_free(r->cdict);
        codec_dict_unref(r->cdict_of);
        r->cdict_of = NULL;
        if (codec_cdict_new(d, level, &r->cdict) < 0)
                return NULL;
        /* the job's client holds d; the reference keeps it (and its
         * address) ours for as long as the digest is kept */
        r->cdict_of = codec_dict_ref((CodecDict *)d);
        r->cdict_level = level;
        return r->cdict;
}

static void run(Recompressor *r, Work *w) {
        RecompJob *j = w->data;
        uint64_t t0 = thread_cpu_ns();
        RunCtx c = { .mm = w->mm, .j = j, .strong = r->strong, .dctx = r->dctx, .page = r->page, .copy = r->copy,
                     .t0 = t0 };

        j->next = 0;
        if (j->train) {
                train(r, j, w->mm);
                j->cpu_ns = thread_cpu_ns() - t0;
                return;
        }
        if (j->dict && !(c.cdict = thread_cdict(r, j->dict, j->level)))
                j->dict = NULL; /* without it this time */
        if (codec_cctx_set_level(r->strong, j->level) == 0)
                (void)pindex_walk(w->mm->index, j->start, PINDEX_MAX_ADDR, run_cb, &c);
        j->cpu_ns = thread_cpu_ns() - t0;
}

static void *thread_main(void *arg) {
        Recompressor *r = arg;
        struct sched_param sp = { 0 };

        /* below everything, the compression workers included: a CPU that
         * anything else wants preempts it at once (a nice value only
         * shares the CPU less; here a fault thread's wake-up waited for
         * it) */
        if (sched_setscheduler((pid_t)syscall(SYS_gettid), SCHED_IDLE, &sp) < 0)
                log_warn("recompressor: cannot switch to SCHED_IDLE: %m");
        /* its own name, from itself: naming another thread opens its
         * comm file, which the sandbox refuses */
        (void)pthread_setname_np(pthread_self(), "zswapd-recomp");
        for (;;) {
                pthread_mutex_lock(&r->lock);
                while (!r->slot && !r->stop)
                        pthread_cond_wait(&r->cond, &r->lock);
                Work *w = r->stop ? NULL : r->slot;
                if (w)
                        r->slot = NULL; /* else recompress_fini() frees it */
                pthread_mutex_unlock(&r->lock);
                if (!w)
                        break;
                run(r, w);
                w->type = MW_RECOMP_DONE;
                core_post(r->core, w);
        }
        return NULL;
}

int recompress_start(Recompressor *r) {
        int e = codec_cctx_new(CODEC_ZSTD, 3, &r->strong);
        if (e == 0)
                e = codec_dctx_new(r->core->cfg.codec, &r->dctx);
        if (e == 0)
                e = -pthread_create(&r->thread, NULL, thread_main, r);
        if (e < 0)
                return e;
        r->started = true;
        return 0;
}

void recompress_fini(Recompressor *r) {
        if (r->started) {
                pthread_mutex_lock(&r->lock);
                r->stop = true;
                pthread_cond_broadcast(&r->cond);
                pthread_mutex_unlock(&r->lock);
                pthread_join(r->thread, NULL);
                r->started = false;
        }
        /* a job never taken is freed with its Work (the buffer with it):
         * it marked nothing. One posted back is the inbox's, whose
         * recompress_done() swaps or unmarks what it marked */
        work_free(r->slot);
        r->slot = NULL;
        if (!r->busy)
                free(r->job); /* else it is the job's, out */
        r->job = NULL;
        r->strong = codec_cctx_free(r->strong);
        r->dctx = codec_dctx_free(r->dctx);
        r->cdict = codec_cdict_free(r->cdict);
        codec_dict_unref(r->cdict_of);
        r->cdict_of = NULL;
        pthread_mutex_destroy(&r->lock);
        pthread_cond_destroy(&r->cond);
}

/* ---- the manager's part ---- */

/* Is mm's store free to change? Not while a fork child may have to
 * restore itself from it (tier-writer.c tier_fork_held()'s reasons). */
static bool fork_held(MMClient *mm) {
        return mm->fork_paused || atomic_load_explicit(&mm->fork_announced, memory_order_acquire) ||
               atomic_load_explicit(&mm->fork_hold, memory_order_acquire) != 0;
}

/* Swap one new object in, under serve_lock. */
static void swap_in(MMClient *mm, const RecompJob *j, const RecompItem *it) {
        _Atomic uint64_t *e = pindex_entry(mm->index, it->addr, false);
        PoolHandle nh;

        if (!e || atomic_load_explicit(e, memory_order_relaxed) != it->v)
                return; /* taken meanwhile: the mark went with it */
        /* past the pool's bound if need be: the object is smaller than the
         * one it replaces, and the bound is when that matters most */
        if (pool_alloc_over(mm->pool, it->len, &nh) < 0) {
                unmark(e, it->v, it->v & ~PE_RC);
                return;
        }
        memcpy(pool_map(mm->pool, nh), j->buf + it->off, it->len);
        uint64_t v = it->v, nv = pe_make_stored(nh, it->len) | PE_STRONG | (j->dict ? PE_DICT : 0);
        if (mm->store)
                store_mark_strong(mm->store);
        /* release: the new object's bytes before the entry naming it */
        if (!atomic_compare_exchange_strong_explicit(e, &v, nv, memory_order_release, memory_order_relaxed)) {
                pool_release(mm->pool, nh);
                return;
        }
        uint64_t old = it->v & ~PE_RC;
        pool_release(mm->pool, pe_handle(old));
        mmclient_count_stored(mm, old, -1);
        mmclient_count_stored(mm, nv, 1);
        /* counters: relaxed */
        atomic_fetch_add_explicit(&mm->st.recompressed, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&mm->core->recompressed, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&mm->core->recompress_saved, pe_clen(old) - it->len, memory_order_relaxed);
}

/* A training job back: its dictionary becomes the client's, or is
 * refused (and tried again once the client has twice the objects). */
static void train_done(MMClient *mm, RecompJob *j) {
        Core *core = mm->core;
        double gain = j->plain_units ? 100.0 * (1.0 - (double)j->dict_units / (double)j->plain_units) : 0;
        int r = -ECANCELED;

        mm->rc.dict_tried = MAX(j->stored, 1);
        if (j->trained && !atomic_load_explicit(&mm->dead, memory_order_relaxed))
                r = mmclient_dict_set(mm, j->trained);
        /* counters: relaxed */
        atomic_fetch_add_explicit(&core->dict_train_cpu_ns, j->cpu_ns, memory_order_relaxed);
        if (r == 0) {
                atomic_fetch_add_explicit(&core->dicts_trained, 1, memory_order_relaxed);
                log_info("pid %d: a %u-byte zstd dictionary trained on %u of its pages makes the others %.1f%% "
                         "smaller: recompression uses it (%.0f ms of CPU)",
                         (int)mmclient_pid(mm), j->trained->len, j->samples, gain, (double)j->cpu_ns / 1e6);
                j->trained = NULL; /* mm's */
                return;
        }
        if (j->trained && r != -ECANCELED)
                log_warn("pid %d: no room for its dictionary: %s", (int)mmclient_pid(mm), strerror(-r));
        else if (!j->trained) {
                atomic_fetch_add_explicit(&core->dicts_refused, 1, memory_order_relaxed);
                log_info("pid %d: a dictionary trained on %u of its pages would save %.1f%%: not kept",
                          (int)mmclient_pid(mm), j->samples, gain);
        }
        codec_dict_unref(j->trained);
        j->trained = NULL;
}

void recompress_done(Recompressor *r, Work *w) {
        RecompJob *j = w->data;
        MMClient *mm = w->mm;
        uint64_t t0 = thread_cpu_ns();

        if (j->train) {
                train_done(mm, j);
                r->tokens_ns -= (int64_t)j->cpu_ns;
                r->busy = false;
                r->last_ms = now_ms();
                if (r->started)
                        w->data = NULL;
                work_free(w);
                return;
        }

        for (uint32_t i = 0; i < j->n; i += SWAP_GROUP) {
                uint32_t end = MIN(j->n, i + SWAP_GROUP);
                /* trylock, as the manager always does (compaction's
                 * reasons, clients.c compact_cb(): an event handler holds
                 * it while an entry is at two places) */
                /* a fork announced meanwhile: its child may restore itself
                 * from this store, which stays as it is (fork_held()) */
                if (atomic_load_explicit(&mm->dead, memory_order_relaxed) || fork_held(mm) ||
                    pthread_mutex_trylock(&mm->serve_lock) != 0) {
                        for (uint32_t k = i; k < end; k++) {
                                _Atomic uint64_t *e = pindex_entry(mm->index, j->items[k].addr, false);
                                if (e)
                                        unmark(e, j->items[k].v, j->items[k].v & ~PE_RC);
                        }
                        continue;
                }
                for (uint32_t k = i; k < end; k++)
                        swap_in(mm, j, &j->items[k]);
                pthread_mutex_unlock(&mm->serve_lock);
                /* seq_cst: the load after the unlock in events.c service()'s handshake */
                if (atomic_load_explicit(&mm->kick, memory_order_seq_cst) && fault_post_mm(mm->ft, FW_KICK, mm) < 0)
                        log_error("pid %d: cannot wake a fault thread (out of memory)", (int)mmclient_pid(mm));
        }
        pool_reclaim(mm->pool);
        uint64_t cpu = j->cpu_ns + (thread_cpu_ns() - t0);
        r->tokens_ns -= (int64_t)cpu;
        atomic_fetch_add_explicit(&mm->core->recompress_cpu_ns, cpu, memory_order_relaxed);
        /* the walk goes on where it stopped, or (at the end) later:
         * walk_due() */
        mm->rc.recompress_cursor = j->next;
        mm->rc.recompress_pass_taken += j->n;
        if (j->next == 0) {
                mm->rc.recompress_walked_ms = now_ms();
                mm->rc.recompress_walk_took = mm->rc.recompress_pass_taken != 0;
                mm->rc.recompress_pass_taken = 0;
        }
        r->busy = false;
        r->last_ms = now_ms();
        /* the buffer is kept for the next job; after recompress_fini()
         * (the daemon stopping) it goes with the item */
        if (r->started)
                w->data = NULL;
        work_free(w);
}

/* A whole pass ended: the next is due a second later if it took
 * something, else once a quarter of the age in force has passed (nothing
 * grows cold faster; a big client whose objects zstd cannot shrink is not
 * walked every second). The age now, not the pass's: one made shorter
 * (zswapctl set, a reload) applies at once. */
static bool walk_due(const MMClient *mm, uint64_t age, uint64_t now) {
        uint64_t wait = mm->rc.recompress_walk_took ? REWALK_MS : MAX(REWALK_MS, age / 4);
        return mm->rc.recompress_walked_ms == 0 || now >= mm->rc.recompress_walked_ms + wait;
}

/* Has the recompressor known mm for age? Until then none of its pages
 * can be that old, stamped or not. */
static bool known_for(const MMClient *mm, uint64_t age, uint64_t now) {
        return now - mm->rc.recompress_seen_ms >= age;
}

/* Should mm's next job train its dictionary? Not before the client has
 * been here for its recompression age: none of its pages can be cold
 * before, and a client that leaves or takes its pages back sooner costs
 * no training (ZDICT over 1024 pages: ~0.4 s of CPU) */
static bool wants_dict(MMClient *mm, const RecompConf *conf, uint64_t now) {
        /* relaxed: a counter, a hint */
        uint64_t stored = atomic_load_explicit(&mm->st.stored_pages, memory_order_relaxed);
        return conf->dict && mm->dict_ok && !mmclient_dict(mm) && stored >= DICT_MIN_PAGES &&
               stored >= 2 * mm->rc.dict_tried && known_for(mm, recompress_age(mm, conf), now);
}

/* quiet: no fault served since the last tick (a training may start) */
static bool wants_work(MMClient *mm, const RecompConf *conf, uint64_t now, bool quiet) {
        uint64_t age = recompress_age(mm, conf);
        if (!mm->pool || !mm->strong_ok || mm->rc.off || atomic_load_explicit(&mm->dead, memory_order_relaxed) ||
            fork_held(mm) || age == 0)
                return false;
        if (quiet && wants_dict(mm, conf, now))
                return true;
        if (!walk_due(mm, age, now))
                return false;
        /* relaxed: counters, a hint */
        uint64_t stored = atomic_load_explicit(&mm->st.stored_pages, memory_order_relaxed);
        uint64_t done = mmclient_dict(mm) && conf->dict ? atomic_load_explicit(&mm->st.dict_pages, memory_order_relaxed)
                                                        : atomic_load_explicit(&mm->st.strong_pages, memory_order_relaxed);
        uint64_t tier = atomic_load_explicit(&mm->st.tier_pages, memory_order_relaxed);
        return stored > done + tier;
}

/* The next client by id after the last one taken, wrapping around. */
static MMClient *next_client(Recompressor *r, MMClient *mms, const RecompConf *conf, uint64_t now, bool quiet) {
        MMClient *after = NULL, *first = NULL;
        for (MMClient *mm = mms; mm; mm = mm->next) {
                if (!wants_work(mm, conf, now, quiet))
                        continue;
                if (mm->id > r->last_id && (!after || mm->id < after->id))
                        after = mm;
                if (!first || mm->id < first->id)
                        first = mm;
        }
        return after ? after : first;
}

void recompress_tick(Recompressor *r, MMClient *mms, const RecompConf *conf) {
        uint64_t now = now_ms();
        bool lz4 = r->core->cfg.codec != CODEC_ZSTD;

        for (MMClient *mm = mms; mm; mm = mm->next) {
                uint64_t age = recompress_age(mm, conf);
                if (mm->rc.recompress_seen_ms == 0)
                        mm->rc.recompress_seen_ms = now;
                /* relaxed: a setting the workers read per page */
                atomic_store_explicit(&mm->strong_rescue, lz4 && age != 0 && mm->strong_ok, memory_order_relaxed);
        }
        /* the budget: cpu percent of the wall time since the last tick */
        r->tokens_ns += (int64_t)((double)(now - r->tokens_ms) * 1e6 * conf->cpu / 100.0);
        r->tokens_ns = MIN(r->tokens_ns, TOKENS_MAX_NS);
        r->tokens_ms = now;
        /* relaxed: a counter */
        uint64_t faults = atomic_load_explicit(&r->core->faults, memory_order_relaxed);
        bool quiet = faults == r->faults_seen, force = now >= r->last_ms + FORCE_MS;
        r->faults_seen = faults;
        if (r->busy || r->tokens_ns < 0 || !r->started || !(quiet || force))
                return;
        MMClient *mm = next_client(r, mms, conf, now, quiet);
        if (!mm)
                return;
        /* the thread holds the lock only to take a job, but it is
         * SCHED_IDLE: on a saturated machine it may sit on it for long,
         * and the manager never waits for it */
        if (pthread_mutex_trylock(&r->lock) != 0)
                return;
        Work *w = NULL;
        if (r->job || (r->job = malloc(sizeof(*r->job))))
                w = work_new(JOB_RECOMPRESS, mm);
        if (!w) {
                pthread_mutex_unlock(&r->lock);
                return;
        }
        uint64_t age = recompress_age(mm, conf);
        uint32_t stamp = age_stamp(), back = (uint32_t)MIN(age / AGE_STAMP_MS, (uint64_t)UINT32_MAX);
        RecompJob *j = r->job;
        j->start = mm->rc.recompress_cursor;
        j->cold = stamp > back ? stamp - back : 0;
        j->unstamped_cold = known_for(mm, age, now);
        j->level = conf->level;
        j->age_ms = age;
        j->yield = !force;
        j->faults = faults;
        j->n = j->used = 0;
        j->scanned = 0;
        /* training is one piece (ZDICT): only in a quiet tick */
        j->train = quiet && wants_dict(mm, conf, now);
        j->stored = atomic_load_explicit(&mm->st.stored_pages, memory_order_relaxed); /* relaxed: a hint */
        j->dict = conf->dict ? mmclient_dict(mm) : NULL;
        j->trained = NULL;
        j->samples = 0;
        j->plain_units = j->dict_units = 0;
        w->data = j;
        r->busy = true;
        r->last_id = mm->id;
        r->slot = w;
        pthread_cond_signal(&r->cond);
        pthread_mutex_unlock(&r->lock);
}
