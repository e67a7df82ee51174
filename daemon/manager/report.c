/*
 * report.c: what the daemon tells about itself.
 *
 * Three requests read the daemon's state: STATS (libzswap's
 * zswap_get_stats(), the public struct zswap_stats, one client or all),
 * STATUS (zswapctl status and metrics: those global counters plus what only
 * the daemon as a whole knows: fault latency, rates, the codec) and
 * CLIENTS (zswapctl clients: one record per client, paged). Everything
 * here runs on the manager thread and only reads: the clients' counters
 * are relaxed atomics their fault threads and workers bump
 * (mmclient.h), the latency histograms are each fault thread's own
 * (latency.h), summed here on demand; the rates come from the samples
 * report_tick() keeps.
 *
 * Who sees what: STATS and STATUS are sums over every client, open to any
 * connection, as `free` is. CLIENTS shows a user its own clients only, and
 * root and the admin group all of them: a client's compressed size says
 * how compressible its memory is, which is a side channel on its content
 * (CRIME, BREACH) that no other user should get, per process and live.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fault.h"
#include "log.h"
#include "manager-internal.h"
#include "manager.h"
#include "reclaim.h"
#include "report.h"
#include "tier.h"
#include "util.h"

/* A reply, unless the connection is already going (conn.c's rule, reply_send()). */
static void report_send(Conn *c, const void *msg, size_t len) {
        if (c->dying)
                return;
        int r = zmsg_send(c->fd, msg, len, NULL, 0);
        if (r < 0)
                conn_kill(c, r == -EAGAIN ? "client not reading its socket" : "cannot send");
}

/* ---- counters ---- */

static void stats_add_mm(struct zswap_stats *s, MMClient *mm) {
        uint64_t stored = atomic_load_explicit(&mm->st.stored_pages, memory_order_relaxed);
        uint64_t same = atomic_load_explicit(&mm->st.same_pages, memory_order_relaxed);
        s->stored_pages += stored;
        s->same_pages += same;
        s->staged_pages += atomic_load_explicit(&mm->st.staged_pages, memory_order_relaxed);
        s->incompressible_pages += atomic_load_explicit(&mm->st.incompressible_pages, memory_order_relaxed);
        s->compressed_bytes += atomic_load_explicit(&mm->st.compressed_bytes, memory_order_relaxed);
        s->original_bytes += (stored + same) * ZSWAP_PAGE_SIZE;
        s->evictions += atomic_load_explicit(&mm->st.evictions, memory_order_relaxed);
        s->faults += atomic_load_explicit(&mm->st.faults, memory_order_relaxed);
        s->faults_zero += atomic_load_explicit(&mm->st.faults_zero, memory_order_relaxed);
        s->prefetches += atomic_load_explicit(&mm->st.prefetches, memory_order_relaxed);
        s->resident_bytes += atomic_load_explicit(&mm->st.resident_pages, memory_order_relaxed) * ZSWAP_PAGE_SIZE;
        s->limit_bytes += atomic_load_explicit(&mm->st.limit_bytes, memory_order_relaxed);
        s->refaults += atomic_load_explicit(&mm->st.refaults, memory_order_relaxed);
        s->clean_pages += atomic_load_explicit(&mm->st.clean_pages, memory_order_relaxed);
        s->clean_bytes += atomic_load_explicit(&mm->st.clean_bytes, memory_order_relaxed);
        s->clean_reevictions += atomic_load_explicit(&mm->st.clean_reevictions, memory_order_relaxed);
        s->reclaim_evictions += atomic_load_explicit(&mm->st.reclaim_evictions, memory_order_relaxed);
        s->thrash_backoffs += atomic_load_explicit(&mm->st.thrash_backoffs, memory_order_relaxed);
        pthread_mutex_lock(&mm->regions_lock);
        s->registered_bytes += mm->registered_bytes;
        pthread_mutex_unlock(&mm->regions_lock);
}

void report_stats_collect(Manager *m, MMClient *only, struct zswap_stats *s) {
        PoolStats ps;

        memset(s, 0, sizeof(*s));
        /* a client's own statistics are counted now (its own cost); the
         * global ones may be up to 100 ms old */
        if (!only)
                for (MMClient *mm = m->mms; mm; mm = mm->next)
                        reclaim_measure(&m->reclaim, mm);
        if (only) {
                stats_add_mm(s, only);
                s->clients = 1;
                return;
        }
        for (MMClient *mm = m->mms; mm; mm = mm->next) {
                stats_add_mm(s, mm);
                s->clients++;
        }
        for (MMClient *mm = manager_orphans(m); mm; mm = mm->next)
                stats_add_mm(s, mm);
        /* releases are deferred (the fault path never takes the pool's
         * locks): settle them so the figures are current */
        manager_pool_reclaim(m);
        pool_shared_stats(m->core.pools, &ps);
        s->pool_bytes = ps.pool_bytes;
        /* global counters outlive the clients they counted */
        s->refaults += m->report.retired.refaults;
        s->clean_reevictions += m->report.retired.clean_reevictions;
        s->reclaim_evictions += m->report.retired.reclaim_evictions;
        s->thrash_backoffs += m->report.retired.thrash_backoffs;
        s->evictions = atomic_load_explicit(&m->core.evictions, memory_order_relaxed);
        s->faults = atomic_load_explicit(&m->core.faults, memory_order_relaxed);
        s->faults_zero = atomic_load_explicit(&m->core.faults_zero, memory_order_relaxed);
        s->prefetches = atomic_load_explicit(&m->core.prefetches, memory_order_relaxed);
        s->pool_full_events = atomic_load_explicit(&m->core.pool_full_events, memory_order_relaxed);
}

void report_retire(Manager *m, MMClient *mm) {
        m->report.retired.refaults += atomic_load_explicit(&mm->st.refaults, memory_order_relaxed);
        m->report.retired.clean_reevictions += atomic_load_explicit(&mm->st.clean_reevictions, memory_order_relaxed);
        m->report.retired.reclaim_evictions += atomic_load_explicit(&mm->st.reclaim_evictions, memory_order_relaxed);
        m->report.retired.thrash_backoffs += atomic_load_explicit(&mm->st.thrash_backoffs, memory_order_relaxed);
}

static void stats_send(Manager *m, Conn *c, uint32_t id, uint32_t scope) {
        ZMsgStatsReply rep = { .status = 0 };

        report_stats_collect(m, scope == ZSWAP_STATS_CLIENT ? c->mm : NULL, &rep.stats);
        zmsg_init(&rep.hdr, ZMSG_STATS_REPLY, id, sizeof(rep));
        report_send(c, &rep, sizeof(rep));
}

int report_stats_reply(Manager *m, Conn *c, uint32_t id, uint32_t scope) {
        if (scope == ZSWAP_STATS_CLIENT && !c->mm)
                return -ENOTCONN;
        if (scope != ZSWAP_STATS_CLIENT && scope != ZSWAP_STATS_GLOBAL)
                return -EINVAL;
        /* a client's own statistics: counted as of its request (a count
         * of ours, answered when it is back: report_stats_counted()) */
        if (scope == ZSWAP_STATS_CLIENT && reclaim_measure_for(&m->reclaim, c->mm, c->serial, id))
                return 1;
        stats_send(m, c, id, scope);
        return 1;
}

void report_stats_counted(Manager *m, uint64_t serial, uint32_t id) {
        Conn *c = conn_find(m, serial);
        if (c && c->mm)
                stats_send(m, c, id, ZSWAP_STATS_CLIENT);
}

/* ---- rates ---- */

void report_tick(Manager *m) {
        ReportState *r = &m->report;
        uint64_t ms = now_ns() / 1000000;

        if (r->nsamples && ms - r->last_ms < 1000)
                return;
        r->sample[r->next].ms = ms;
        r->sample[r->next].evictions = atomic_load_explicit(&m->core.evictions, memory_order_relaxed);
        r->sample[r->next].faults = atomic_load_explicit(&m->core.faults, memory_order_relaxed);
        r->next = (r->next + 1) % REPORT_SAMPLES;
        if (r->nsamples < REPORT_SAMPLES)
                r->nsamples++;
        r->last_ms = ms;
}

/* Growth since the oldest sample kept (up to 5 s ago; at least 1 s, so
 * that one busy moment right after a sample does not read as a rate). */
static void status_rates(Manager *m, ZMsgStatusReply *rep) {
        ReportState *r = &m->report;
        uint64_t ms = now_ns() / 1000000;

        if (r->nsamples == 0)
                return;
        unsigned oldest = (r->next + REPORT_SAMPLES - r->nsamples) % REPORT_SAMPLES;
        if (ms - r->sample[oldest].ms < 1000)
                return; /* just started: no rate yet */
        rep->rate_window_ms = ms - r->sample[oldest].ms;
        rep->rate_evictions = rep->stats.evictions - r->sample[oldest].evictions;
        rep->rate_faults = rep->stats.faults - r->sample[oldest].faults;
}

/* ---- status ---- */

static void status_latency(Manager *m, ZMsgStatusReply *rep) {
        LatencySnapshot s = { 0 };

        for (unsigned i = 0; i < m->core.nfts; i++)
                fault_thread_latency(m->core.fts[i], &s);
        rep->lat_count = s.count;
        rep->lat_sum_ns = s.sum_ns;
        rep->lat_max_ns = s.max_ns;
        rep->lat_p50_ns = latency_quantile(&s, 0.50);
        rep->lat_p90_ns = latency_quantile(&s, 0.90);
        rep->lat_p99_ns = latency_quantile(&s, 0.99);
        rep->lat_p999_ns = latency_quantile(&s, 0.999);
        for (unsigned i = 0; i < ZSWAP_LAT_LE_N; i++)
                rep->lat_le[i] = latency_count_le(&s, 1ull << (ZSWAP_LAT_LE_MIN_SHIFT + i));
}
static void status_tier(Manager *m, ZMsgStatusReply *rep) {
        TierStats ts;

        rep->tier_state = -1;
        if (!m->core.tier)
                return;
        tier_get_stats(m->core.tier, &ts);
        rep->tier_state = ts.state;
        snprintf(rep->tier_backing, sizeof(rep->tier_backing), "%s", tier_describe(m->core.tier));
        rep->tier_capacity = ts.capacity;
        rep->tier_used_bytes = ts.used_blocks * TIER_BLOCK;
        rep->tier_pages = ts.pages;
        rep->tier_bytes = ts.bytes;
        rep->tier_written = ts.written;
        rep->tier_writes = ts.writes;
        rep->tier_written_pages = ts.written_pages;
        rep->tier_reads = ts.reads;
        rep->tier_read_bytes = ts.read_bytes;
        rep->tier_prefetched = ts.prefetched;
        rep->tier_read_errors = ts.read_errors;
        rep->tier_write_errors = ts.write_errors;
        rep->tier_corrupt = ts.corrupt;
        rep->tier_full_events = ts.full_events;
        rep->tier_reconnects = ts.reconnects;
}

static void status_strong(Manager *m, ZMsgStatusReply *rep) {
        for (MMClient *mm = m->mms; mm; mm = mm->next) {
                rep->strong_pages += atomic_load_explicit(&mm->st.strong_pages, memory_order_relaxed);
                rep->strong_bytes += atomic_load_explicit(&mm->st.strong_bytes, memory_order_relaxed);
                rep->dict_pages += atomic_load_explicit(&mm->st.dict_pages, memory_order_relaxed);
                rep->dedup_pages += atomic_load_explicit(&mm->st.shared_pages, memory_order_relaxed);
                rep->dict_bytes += atomic_load_explicit(&mm->st.dict_bytes, memory_order_relaxed);
                const CodecDict *d = mmclient_dict(mm);
                rep->dicts += d != NULL;
                rep->dict_mem += d ? d->len : 0;
        }
        rep->dicts_trained = atomic_load_explicit(&m->core.dicts_trained, memory_order_relaxed);
        rep->dicts_refused = atomic_load_explicit(&m->core.dicts_refused, memory_order_relaxed);
        rep->dict_train_cpu_ns = atomic_load_explicit(&m->core.dict_train_cpu_ns, memory_order_relaxed);
        rep->recompressed = atomic_load_explicit(&m->core.recompressed, memory_order_relaxed);
        rep->recompress_saved = atomic_load_explicit(&m->core.recompress_saved, memory_order_relaxed);
        rep->recompress_cpu_ns = atomic_load_explicit(&m->core.recompress_cpu_ns, memory_order_relaxed);
        rep->strong_rescued = atomic_load_explicit(&m->core.strong_rescued, memory_order_relaxed);
        rep->pool_corrupt = atomic_load_explicit(&m->core.pool_corrupt, memory_order_relaxed);
        rep->recompress_age_ms = m->reclaim.tun.recompress_age_ms;
        rep->recompress_level = (int32_t)m->reclaim.tun.recompress_level;
        DedupStats ds;
        dedups_stats(m, &ds);
        rep->dedup_objects = ds.objects;
        rep->dedup_bytes = ds.bytes;
        rep->dedup_pool_bytes = ds.pool_bytes;
        rep->dedup_hits = ds.hits;
        rep->dedup_stored = ds.stored;
        rep->dedup_swept = ds.swept;
}

int report_status(Manager *m, Conn *c, const ZMsgHeader *q) {
        ZMsgStatusReply rep = { .status = 0 };

        report_stats_collect(m, NULL, &rep.stats);
        snprintf(rep.codec, sizeof(rep.codec), "%s", codec_to_string(m->cfg.codec));
        rep.level = m->cfg.level;
        rep.fault_threads = m->core.nfts;
        rep.fault_service = ZSTATUS_FAULT_KNOWN | (m->core.cfg.fault_shared ? 0 : ZSTATUS_FAULT_HOME) |
                            (m->core.cfg.fault_wake_one ? ZSTATUS_FAULT_WAKE_ONE : 0) |
                            (MIN(m->core.cfg.fault_spin_us, ZSTATUS_FAULT_SPIN_MASK));
        rep.workers = m->cfg.workers;
        rep.pool_bound = atomic_load_explicit(&m->core.pool_bound, memory_order_relaxed);
        rep.protocol_errors = atomic_load_explicit(&m->core.protocol_errors, memory_order_relaxed);
        rep.moves_revoked = atomic_load_explicit(&m->core.moves_revoked, memory_order_relaxed);
        rep.zero_ahead = atomic_load_explicit(&m->core.zero_ahead, memory_order_relaxed);
        rep.write_scans = atomic_load_explicit(&m->core.write_scans, memory_order_relaxed);
        rep.write_zones_out = atomic_load_explicit(&m->core.write_zones_out, memory_order_relaxed);
        PoolStats ps;
        pool_shared_stats(m->core.pools, &ps);
        rep.compactions = ps.compactions;
        rep.compact_moved = ps.compact_moved;
        rep.compact_freed = ps.compact_freed;
        rep.refilled = atomic_load_explicit(&m->core.refilled, memory_order_relaxed);
        rep.history_prefetched = atomic_load_explicit(&m->core.history_prefetched, memory_order_relaxed);
        rep.history_right = atomic_load_explicit(&m->core.history_right, memory_order_relaxed);
        rep.history_wrong = atomic_load_explicit(&m->core.history_wrong, memory_order_relaxed);
        rep.calls_held = atomic_load_explicit(&m->core.calls_held, memory_order_relaxed);
        rep.work_taken = atomic_load_explicit(&m->core.work_taken, memory_order_relaxed);
        status_strong(m, &rep);
        status_rates(m, &rep);
        status_latency(m, &rep);
        status_tier(m, &rep);
        zmsg_init(&rep.hdr, ZMSG_STATUS_REPLY, q->id, sizeof(rep));
        report_send(c, &rep, sizeof(rep));
        return 1;
}

/* ---- clients ---- */

/* /proc/PID/comm, read now (a program may rename itself); "" if gone. */
static void read_comm(pid_t pid, char *buf, size_t len) {
        char path[64];
        ssize_t n = -1;

        snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
                n = read(fd, buf, len - 1);
                close(fd);
        }
        if (n < 0)
                n = 0;
        buf[n] = 0;
        buf[strcspn(buf, "\n")] = 0;
}

static bool client_visible(Manager *m, Conn *c, bool admin, MMClient *mm) {
        if (atomic_load_explicit(&mm->dead, memory_order_relaxed) || mmclient_pid(mm) <= 0)
                return false;
        return admin || mm->uid == c->uid;
}

static void client_record(Manager *m, MMClient *mm, ZClientRecord *rec) {
        struct zswap_stats s = { 0 };

        reclaim_measure(&m->reclaim, mm);
        stats_add_mm(&s, mm);
        *rec = (ZClientRecord){
                .id = mm->id,
                .pid = mmclient_pid(mm),
                .uid = mm->uid,
                .registered_bytes = s.registered_bytes,
                .resident_bytes = s.resident_bytes,
                .stored_pages = s.stored_pages,
                .same_pages = s.same_pages,
                .staged_pages = s.staged_pages,
                .incompressible_pages = s.incompressible_pages,
                .compressed_bytes = s.compressed_bytes,
                .faults = s.faults,
                .refaults = s.refaults,
                .limit_bytes = s.limit_bytes,
                .tier_pages = atomic_load_explicit(&mm->st.tier_pages, memory_order_relaxed),
                .tier_bytes = atomic_load_explicit(&mm->st.tier_bytes, memory_order_relaxed),
                .strong_pages = atomic_load_explicit(&mm->st.strong_pages, memory_order_relaxed),
                .strong_bytes = atomic_load_explicit(&mm->st.strong_bytes, memory_order_relaxed),
                .recompressed = atomic_load_explicit(&mm->st.recompressed, memory_order_relaxed),
                .recompress_age_ms = recompress_age(mm, &(RecompConf){ .age_ms = m->reclaim.tun.recompress_age_ms }),
                .group_limit = !mm->rc.group[0]       ? 0
                               : mm->rc.group_op_limit ? mm->rc.group_op_limit
                                                       : mm->rc.group_limit,
        };
        memcpy(rec->group, mm->rc.group, sizeof(rec->group));
        read_comm(mmclient_pid(mm), rec->comm, sizeof(rec->comm));
}

/*
 * The next page of clients after id q->after, in id order. The list is
 * newest first and ids grow, but a fork child gets its id when it attaches,
 * so nothing is assumed about the order: each record is the smallest id
 * above the previous one (ZSWAP_CLIENTS_PER_MSG passes over at most
 * max_clients clients, on request only).
 */
int report_clients(Manager *m, Conn *c, const ZMsgClientsReq *q) {
        ZMsgClientsReply rep = { .status = 0 };
        bool admin = conn_admin(m, c);
        uint64_t after = q->after;

        if (c->role != ZROLE_CONTROL)
                return -EPROTO;
        for (;;) {
                MMClient *next = NULL;
                for (MMClient *mm = m->mms; mm; mm = mm->next)
                        if (mm->id > after && (!next || mm->id < next->id) && client_visible(m, c, admin, mm))
                                next = mm;
                if (!next)
                        break;
                if (rep.count == ZSWAP_CLIENTS_PER_MSG) {
                        rep.more = 1;
                        break;
                }
                client_record(m, next, &rep.rec[rep.count++]);
                after = next->id;
        }
        zmsg_init(&rep.hdr, ZMSG_CLIENTS_REPLY, q->hdr.id, sizeof(rep));
        report_send(c, &rep, sizeof(rep));
        return 1;
}
