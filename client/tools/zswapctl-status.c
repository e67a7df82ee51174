/*
 * zswapctl-status.c: `zswapctl status`, the daemon's figures (what it
 * holds and saves, fault latency, rates, the second tier) as name/value
 * lines, values only (--no-headings), a subset (-o) or one JSON object.
 * status_fetch() is metrics' source too.
 */
#include <string.h>
#include <strings.h>
#include <stdio.h>

#include "macro.h"
#include "protocol.h"
#include "zswapctl.h"

/* tier.h's states (the daemon's TIER_* order) */
static const char *tier_state_text(int32_t state) {
        static const char *const names[] = { "idle", "writing", "full", "error", "disconnected", "grace" };
        if (state < 0)
                return "none";
        return (size_t)state < ELEMENTSOF(names) ? names[state] : "?";
}

static size_t status_fields(const ZMsgStatusReply *st, Field *f) {
        const struct zswap_stats *s = &st->stats;
        double window = (double)st->rate_window_ms / 1000.0;
        size_t n = 0;

#define ADD(nm, k, val) f[n++] = (Field){ .name = nm, .kind = k, .v = (val) }
#define ADD_REAL(nm, val, unk) f[n++] = (Field){ .name = nm, .kind = K_REAL, .d = (val), .unknown = (unk) }
        f[n++] = (Field){ .name = "compressor", .kind = K_TEXT, .text = st->codec };
        f[n++] = (Field){ .name = "level", .kind = K_COUNT, .v = (uint64_t)(int64_t)st->level, .is_signed = true };
        ADD("pool_bytes", K_SIZE, s->pool_bytes);
        ADD("pool_limit_bytes", K_SIZE, st->pool_bound);
        ADD("compressed_bytes", K_SIZE, s->compressed_bytes);
        ADD("original_bytes", K_SIZE, s->original_bytes);
        /* what memory the pool takes, its free slots included (pages that
         * came back leave them until compaction) */
        ADD_REAL("ratio", s->pool_bytes ? (double)s->original_bytes / (double)s->pool_bytes : 0, !s->pool_bytes);
        /* what the codec made of the pages held: clients' RATIO, summed */
        ADD_REAL("compression_ratio", s->compressed_bytes ? (double)s->original_bytes / (double)s->compressed_bytes : 0,
                 !s->compressed_bytes);
        ADD("stored_pages", K_COUNT, s->stored_pages);
        ADD("same_filled_pages", K_COUNT, s->same_pages);
        ADD("incompressible_pages", K_COUNT, s->incompressible_pages);
        ADD("staged_pages", K_COUNT, s->staged_pages);
        ADD("evictions", K_COUNT, s->evictions);
        ADD_REAL("evictions_per_s", window > 0 ? (double)st->rate_evictions / window : 0, window <= 0);
        ADD("faults", K_COUNT, s->faults);
        ADD_REAL("faults_per_s", window > 0 ? (double)st->rate_faults / window : 0, window <= 0);
        ADD("faults_zero_fill", K_COUNT, s->faults_zero);
        ADD("prefetches", K_COUNT, s->prefetches);
        ADD("fault_latency_p50_ns", K_NS, st->lat_p50_ns);
        ADD("fault_latency_p90_ns", K_NS, st->lat_p90_ns);
        ADD("fault_latency_p99_ns", K_NS, st->lat_p99_ns);
        ADD("fault_latency_p999_ns", K_NS, st->lat_p999_ns);
        ADD("fault_latency_max_ns", K_NS, st->lat_max_ns);
        ADD("faults_timed", K_COUNT, st->lat_count);
        ADD("clients", K_COUNT, s->clients);
        ADD("registered_bytes", K_SIZE, s->registered_bytes);
        ADD("resident_bytes", K_SIZE, s->resident_bytes);
        ADD("refaults", K_COUNT, s->refaults);
        ADD("reclaim_evictions", K_COUNT, s->reclaim_evictions);
        ADD("clean_pages", K_COUNT, s->clean_pages);
        ADD("clean_bytes", K_SIZE, s->clean_bytes);
        ADD("clean_reevictions", K_COUNT, s->clean_reevictions);
        ADD("thrash_backoffs", K_COUNT, s->thrash_backoffs);
        ADD("pool_full_events", K_COUNT, s->pool_full_events);
        /* what packing costs: chunk memory not holding object bytes */
        ADD("pool_overhead_bytes", K_SIZE, s->pool_bytes > s->compressed_bytes ? s->pool_bytes - s->compressed_bytes : 0);
        ADD("fault_threads", K_COUNT, st->fault_threads);
        /* how a fault wakes the threads: as the daemon measured at start
         * (zswapd(8), FAULT SERVICE); "-" from a daemon that does not say */
        bool known = st->fault_service & ZSTATUS_FAULT_KNOWN;
        f[n++] = (Field){ .name = "fault_wake", .kind = K_TEXT,
                          .text = !known                                          ? "-"
                                  : st->fault_service & ZSTATUS_FAULT_HOME       ? "home"
                                  : st->fault_service & ZSTATUS_FAULT_WAKE_ONE   ? "one"
                                                                                 : "all" };
        ADD("fault_spin_us", K_COUNT, st->fault_service & ZSTATUS_FAULT_SPIN_MASK);
        ADD("workers", K_COUNT, st->workers);
        ADD("protocol_errors", K_COUNT, st->protocol_errors);
        ADD("moves_revoked", K_COUNT, st->moves_revoked);
        ADD("zero_ahead", K_COUNT, st->zero_ahead);
        ADD("write_scans", K_COUNT, st->write_scans);
        ADD("write_zones_out", K_COUNT, st->write_zones_out);
        ADD("compactions", K_COUNT, st->compactions);
        ADD("compact_moved", K_COUNT, st->compact_moved);
        ADD("compact_freed_bytes", K_SIZE, st->compact_freed);
        ADD("refilled", K_COUNT, st->refilled);
        ADD("history_prefetched", K_COUNT, st->history_prefetched);
        ADD("history_right", K_COUNT, st->history_right);
        ADD("history_wrong", K_COUNT, st->history_wrong);
        ADD("calls_held", K_COUNT, st->calls_held);
        ADD("work_taken", K_COUNT, st->work_taken);
        /* the pool's objects by codec: the compressor's, and the strong
         * tier's (zstd: recompressed, or stored by it when the compressor
         * found the page incompressible); stubs of the second tier are
         * neither */
        uint64_t strong = MIN(st->strong_pages, s->stored_pages);
        uint64_t fast = s->stored_pages - strong - MIN(st->tier_pages, s->stored_pages - strong);
        uint64_t fast_bytes = s->compressed_bytes - MIN(st->strong_bytes + st->tier_pages * 16, s->compressed_bytes);
        ADD("fast_pages", K_COUNT, fast);
        ADD("fast_bytes", K_SIZE, fast_bytes);
        ADD("strong_pages", K_COUNT, strong);
        ADD("strong_bytes", K_SIZE, st->strong_bytes);
        ADD("recompress_age_ms", K_COUNT, st->recompress_age_ms);
        f[n++] = (Field){ .name = "recompress_level", .kind = K_COUNT, .v = (uint64_t)(int64_t)st->recompress_level,
                          .is_signed = true };
        ADD("recompressed", K_COUNT, st->recompressed);
        ADD("recompress_saved_bytes", K_SIZE, st->recompress_saved);
        ADD("recompress_cpu_ns", K_NS, st->recompress_cpu_ns);
        ADD("strong_rescued", K_COUNT, st->strong_rescued);
        ADD("dicts", K_COUNT, st->dicts);
        ADD("dict_mem", K_SIZE, st->dict_mem);
        ADD("dict_pages", K_COUNT, st->dict_pages);
        ADD("dict_bytes", K_SIZE, st->dict_bytes);
        ADD("dicts_trained", K_COUNT, st->dicts_trained);
        ADD("dicts_refused", K_COUNT, st->dicts_refused);
        ADD("dict_train_cpu_ns", K_NS, st->dict_train_cpu_ns);
        ADD("dedup_pages", K_COUNT, st->dedup_pages);
        ADD("dedup_objects", K_COUNT, st->dedup_objects);
        ADD("dedup_bytes", K_SIZE, st->dedup_bytes);
        ADD("dedup_pool_bytes", K_SIZE, st->dedup_pool_bytes);
        ADD("dedup_hits", K_COUNT, st->dedup_hits);
        ADD("dedup_stored", K_COUNT, st->dedup_stored);
        ADD("dedup_swept", K_COUNT, st->dedup_swept);
        ADD("pool_corrupt", K_COUNT, st->pool_corrupt);
        /* the second tier: "none" and zeros when there is none */
        f[n++] = (Field){ .name = "tier_state", .kind = K_TEXT, .text = tier_state_text(st->tier_state) };
        f[n++] = (Field){ .name = "tier_backing", .kind = K_TEXT, .text = st->tier_state < 0 ? "-" : st->tier_backing };
        ADD("tier_capacity_bytes", K_SIZE, st->tier_capacity);
        ADD("tier_used_bytes", K_SIZE, st->tier_used_bytes);
        ADD("tier_pages", K_COUNT, st->tier_pages);
        ADD("tier_bytes", K_SIZE, st->tier_bytes);
        ADD("tier_written", K_SIZE, st->tier_written);
        ADD("tier_writes", K_COUNT, st->tier_writes);
        ADD("tier_written_pages", K_COUNT, st->tier_written_pages);
        ADD("tier_reads", K_COUNT, st->tier_reads);
        ADD("tier_read_bytes", K_SIZE, st->tier_read_bytes);
        ADD("tier_prefetched", K_COUNT, st->tier_prefetched);
        ADD("tier_errors", K_COUNT, st->tier_read_errors + st->tier_write_errors);
        ADD("tier_read_errors", K_COUNT, st->tier_read_errors);
        ADD("tier_write_errors", K_COUNT, st->tier_write_errors);
        ADD("tier_corrupt", K_COUNT, st->tier_corrupt);
        ADD("tier_full_events", K_COUNT, st->tier_full_events);
        ADD("tier_reconnects", K_COUNT, st->tier_reconnects);
#undef ADD
#undef ADD_REAL
        return n;
}

int status_fetch(int fd, ZMsgStatusReply *st) {
        ZMsgHeader q;
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX];

        zmsg_init(&q, ZMSG_STATUS, 2, sizeof(q));
        int r = ctl_expect(fd, &q, sizeof(q), buf, sizeof(buf), ZMSG_STATUS_REPLY);
        if (r == 0)
                memcpy(st, buf, sizeof(*st));
        return r;
}

int cmd_status(const Opts *o) {
        ZMsgStatusReply st;
        Field f[128];

        size_t n = status_fields(&(ZMsgStatusReply){ 0 }, f);
        if (o->columns) {
                const char *names[ELEMENTSOF(f)];
                for (size_t i = 0; i < n; i++)
                        names[i] = f[i].name;
                if (!columns_valid(o->columns, names, n, "status field"))
                        return 2;
        }
        _cleanup_close_ int fd = ctl_connect(o->path);
        if (fd < 0)
                return 1;
        int r = status_fetch(fd, &st);
        if (r < 0)
                return read_failed(r, "status");
        n = status_fields(&st, f);
        /* in the order -o names them, as clients -o keeps its columns */
        size_t order[ELEMENTSOF(f)], norder = 0;
        for (const char *p = o->columns; p && *p && norder < ELEMENTSOF(order);) {
                size_t l = strcspn(p, ",");
                for (size_t i = 0; i < n; i++)
                        if (strlen(f[i].name) == l && strncasecmp(p, f[i].name, l) == 0) {
                                order[norder++] = i;
                                break;
                        }
                p += l + (p[l] == ',');
        }
        for (size_t i = 0; !o->columns && i < n; i++)
                order[norder++] = i;
        if (o->json)
                printf("{");
        for (size_t k = 0, shown = 0; k < norder; k++) {
                size_t i = order[k];
                char buf[64];
                if (o->json) {
                        printf("%s\"%s\": ", shown++ ? ", " : "", f[i].name);
                        field_json(&f[i]);
                        continue;
                }
                field_text(&f[i], o->bytes, buf, sizeof(buf));
                if (o->no_headings)
                        printf("%s\n", buf);
                else
                        printf("%-22s %s\n", f[i].name, buf);
        }
        if (o->json)
                printf("}\n");
        return 0;
}
