/*
 * zswapctl-metrics.c: `zswapctl metrics`, every counter of status and
 * clients in the Prometheus text exposition format 0.0.4, in one format
 * only (no --json). test-man checks that every metric zswapctl(8)
 * names is one zswapctl prints.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "macro.h"
#include "protocol.h"
#include "zswapctl.h"

static void prom_family(const char *name, const char *type, const char *help) {
        printf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void prom_label_value(const char *s) {
        putchar('"');
        for (; *s; s++)
                if (*s == '"' || *s == '\\')
                        printf("\\%c", *s);
                else if (*s == '\n')
                        printf("\\n");
                else
                        putchar(*s);
        putchar('"');
}

static void prom_u64(const char *name, const char *type, const char *help, uint64_t v) {
        prom_family(name, type, help);
        printf("%s %llu\n", name, (unsigned long long)v);
}

static void prom_seconds(const char *name, const char *help, uint64_t ns) {
        prom_family(name, "gauge", help);
        printf("%s %.9f\n", name, (double)ns / 1e9);
}

static void metrics_daemon(const ZMsgStatusReply *st) {
        const struct zswap_stats *s = &st->stats;
        const struct {
                const char *name, *type, *help;
                uint64_t v;
        } plain[] = {
                { "zswapd_pool_bytes", "gauge", "Memory the compressed pool occupies.", s->pool_bytes },
                { "zswapd_pool_limit_bytes", "gauge", "Bytes the pool may take (0: no bound).", st->pool_bound },
                { "zswapd_compressed_bytes", "gauge", "Sum of the compressed pages' sizes.", s->compressed_bytes },
                { "zswapd_original_bytes", "gauge", "Original size of the pages held (stored and same-filled).",
                  s->original_bytes },
                { "zswapd_stored_pages", "gauge", "Pages held compressed.", s->stored_pages },
                { "zswapd_same_filled_pages", "gauge", "Pages held as one repeated value, without pool space.",
                  s->same_pages },
                { "zswapd_incompressible_pages", "gauge", "Pages found incompressible and kept resident.",
                  s->incompressible_pages },
                { "zswapd_staged_pages", "gauge", "Pages moved out and not yet compressed.", s->staged_pages },
                { "zswapd_clients", "gauge", "Connected client processes.", s->clients },
                { "zswapd_registered_bytes", "gauge", "Memory the clients handed to the daemon.", s->registered_bytes },
                { "zswapd_resident_bytes", "gauge", "Of the registered memory, what is resident.", s->resident_bytes },
                { "zswapd_clean_pages", "gauge", "Resident pages whose compressed copy is kept.", s->clean_pages },
                { "zswapd_clean_bytes", "gauge", "Pool bytes the kept copies take.", s->clean_bytes },
                { "zswapd_fault_threads", "gauge", "Threads serving faults.", st->fault_threads },
                { "zswapd_workers", "gauge", "Compression worker threads.", st->workers },
                { "zswapd_evictions_total", "counter", "Pages evicted.", s->evictions },
                { "zswapd_faults_total", "counter", "Faults served with content the daemon held.", s->faults },
                { "zswapd_zero_fill_faults_total", "counter", "Faults served with a zero page.", s->faults_zero },
                { "zswapd_prefetches_total", "counter",
                  "Pages installed ahead of use: of a sequential reader, or by fault history.", s->prefetches },
                { "zswapd_refaults_total", "counter", "Faults that brought back a page the daemon held.", s->refaults },
                { "zswapd_reclaim_evictions_total", "counter",
                  "Pages evicted by the daemon's own policies (limit, idle, pressure).", s->reclaim_evictions },
                { "zswapd_clean_reevictions_total", "counter", "Evictions that reused a kept copy.",
                  s->clean_reevictions },
                { "zswapd_thrash_backoffs_total", "counter", "Times a zone was backed off for refaulting too fast.",
                  s->thrash_backoffs },
                { "zswapd_pool_full_events_total", "counter", "Times eviction stopped at the pool bound.",
                  s->pool_full_events },
                { "zswapd_protocol_errors_total", "counter", "Malformed or unexpected messages received.",
                  st->protocol_errors },
                { "zswapd_moves_revoked_total", "counter",
                  "Page moves a client's agent left unfinished, revoked so its faults could be served.",
                  st->moves_revoked },
                { "zswapd_zero_ahead_pages_total", "counter",
                  "Fresh pages mapped to the zero page after a first touch (faults the programs did not take).",
                  st->zero_ahead },
                { "zswapd_write_scans_total", "counter", "Write-tracking scans of a client's memory.", st->write_scans },
                { "zswapd_write_zones_out_total", "counter",
                  "Zones (2 MiB) left out of a write scan because they are written all the time.", st->write_zones_out },
                { "zswapd_compactions_total", "counter", "Pool compaction passes that emptied chunks.", st->compactions },
                { "zswapd_compact_moved_objects_total", "counter", "Compressed objects moved by pool compaction.",
                  st->compact_moved },
                { "zswapd_compact_freed_bytes_total", "counter", "Pool chunk memory pool compaction gave back.",
                  st->compact_freed },
                { "zswapd_refilled_pages_total", "counter",
                  "Pages brought back ahead of use once room opened or an idle process woke.", st->refilled },
                { "zswapd_history_prefetched_pages_total", "counter",
                  "Pages a fault brought back because they faulted after it the last times.", st->history_prefetched },
                { "zswapd_history_right_total", "counter",
                  "Faults on the page the fault history foresaw after the one before.", st->history_right },
                { "zswapd_history_wrong_total", "counter",
                  "Faults on another page than the fault history foresaw after the one before.", st->history_wrong },
                { "zswapd_calls_held_total", "counter",
                  "Calls into a client that held a fault thread long enough for another to take its work.",
                  st->calls_held },
                { "zswapd_work_taken_total", "counter",
                  "Items handed to a held fault thread that another fault thread took and ran.", st->work_taken },
                { "zswapd_strong_pages", "gauge", "Pages held as objects of the strong tier (zstd) in the pool.",
                  st->strong_pages },
                { "zswapd_strong_bytes", "gauge", "Compressed bytes of the strong tier's objects in the pool.",
                  st->strong_bytes },
                { "zswapd_recompressed_pages_total", "counter", "Pages recompressed with the strong codec once cold.",
                  st->recompressed },
                { "zswapd_recompress_saved_bytes_total", "counter", "Pool bytes recompression saved, when it was done.",
                  st->recompress_saved },
                { "zswapd_strong_rescued_pages_total", "counter",
                  "Pages the compressor found incompressible that the strong codec stored.", st->strong_rescued },
                { "zswapd_dicts", "gauge", "Clients with a zstd dictionary of their own.", st->dicts },
                { "zswapd_dict_mem_bytes", "gauge", "Pool bytes the clients' dictionaries take.", st->dict_mem },
                { "zswapd_dict_pages", "gauge", "Pages held as objects made with their client's dictionary.",
                  st->dict_pages },
                { "zswapd_dict_bytes", "gauge", "Compressed bytes of the objects made with a dictionary.",
                  st->dict_bytes },
                { "zswapd_dicts_trained_total", "counter", "Dictionaries trained and kept.", st->dicts_trained },
                { "zswapd_dicts_refused_total", "counter", "Dictionaries trained and refused (they saved too little).",
                  st->dicts_refused },
                { "zswapd_dedup_pages", "gauge", "Held pages whose object is in their user's shared store.",
                  st->dedup_pages },
                { "zswapd_dedup_objects", "gauge", "Objects in the users' shared stores.", st->dedup_objects },
                { "zswapd_dedup_bytes", "gauge", "Compressed bytes of the objects in the users' shared stores.",
                  st->dedup_bytes },
                { "zswapd_dedup_hits_total", "counter", "Pages evicted that found their object in a shared store.",
                  st->dedup_hits },
                { "zswapd_tier_capacity_bytes", "gauge", "Bytes of the second tier's backing store for pages (0: none).",
                  st->tier_capacity },
                { "zswapd_tier_used_bytes", "gauge", "Blocks of the second tier holding live pages, in bytes.",
                  st->tier_used_bytes },
                { "zswapd_tier_pages", "gauge", "Pages whose data is on the second tier.", st->tier_pages },
                { "zswapd_tier_bytes", "gauge", "Compressed bytes of the pages on the second tier.", st->tier_bytes },
                { "zswapd_tier_written_bytes_total", "counter", "Bytes written to the second tier.", st->tier_written },
                { "zswapd_tier_written_pages_total", "counter", "Pages written to the second tier.",
                  st->tier_written_pages },
                { "zswapd_tier_reads_total", "counter", "Reads from the second tier (one per fault on it).",
                  st->tier_reads },
                { "zswapd_tier_read_bytes_total", "counter", "Bytes read from the second tier.", st->tier_read_bytes },
                { "zswapd_tier_prefetched_total", "counter", "Pages installed from another page's read of the second tier.",
                  st->tier_prefetched },
                { "zswapd_tier_read_errors_total", "counter", "Reads of the second tier that failed (the fault waits and retries).",
                  st->tier_read_errors },
                { "zswapd_tier_write_errors_total", "counter", "Writes to the second tier that failed (the pages stayed in RAM).",
                  st->tier_write_errors },
                { "zswapd_pool_corrupt_total", "counter",
                  "Pages whose pool object failed to decompress (lost, poisoned).", st->pool_corrupt },
                { "zswapd_tier_corrupt_total", "counter", "Pages whose second-tier data failed its checksum (lost, poisoned).",
                  st->tier_corrupt },
                { "zswapd_tier_full_events_total", "counter", "Times writeback stopped for want of free blocks.",
                  st->tier_full_events },
                { "zswapd_tier_reconnects_total", "counter", "Connections to the NBD server made again.",
                  st->tier_reconnects },
        };

        prom_family("zswapd_info", "gauge", "The running daemon's compressor and level, and zswapctl's version.");
        printf("zswapd_info{version=\"%s\",compressor=", ZSWAP_VERSION);
        prom_label_value(st->codec);
        printf(",level=\"%d\"} 1\n", (int)st->level);
        for (size_t i = 0; i < ELEMENTSOF(plain); i++)
                prom_u64(plain[i].name, plain[i].type, plain[i].help, plain[i].v);
        prom_family("zswapd_recompress_cpu_seconds_total", "counter",
                    "CPU time recompression took (the workers' and the manager's).");
        printf("zswapd_recompress_cpu_seconds_total %.9f\n", (double)st->recompress_cpu_ns / 1e9);
        /* no sample until the daemon has a rate (a second after start) */
        prom_family("zswapd_evictions_per_second", "gauge", "Pages evicted per second over the last 1-5 seconds.");
        if (st->rate_window_ms)
                printf("zswapd_evictions_per_second %.3f\n",
                       (double)st->rate_evictions * 1000.0 / (double)st->rate_window_ms);
}

static void metrics_latency(const ZMsgStatusReply *st) {
        prom_family("zswapd_fault_latency_seconds", "histogram",
                    "Fault service time, from the fault thread's read of the fault to the page installed.");
        for (unsigned i = 0; i < ZSWAP_LAT_LE_N; i++)
                printf("zswapd_fault_latency_seconds_bucket{le=\"%.9g\"} %llu\n",
                       (double)(1ull << (ZSWAP_LAT_LE_MIN_SHIFT + i)) / 1e9, (unsigned long long)st->lat_le[i]);
        printf("zswapd_fault_latency_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)st->lat_count);
        printf("zswapd_fault_latency_seconds_sum %.9f\n", (double)st->lat_sum_ns / 1e9);
        printf("zswapd_fault_latency_seconds_count %llu\n", (unsigned long long)st->lat_count);
        prom_seconds("zswapd_fault_latency_p50_seconds", "Median fault service time since start (within 12.5%).",
                     st->lat_p50_ns);
        prom_seconds("zswapd_fault_latency_p99_seconds", "99th percentile fault service time since start (within 12.5%).",
                     st->lat_p99_ns);
        prom_seconds("zswapd_fault_latency_max_seconds", "Longest fault service time since start.", st->lat_max_ns);
}

static void metrics_clients(const Client *v, size_t n) {
        static const struct {
                const char *name, *type, *help;
                int col;
        } per[] = {
                { "zswapd_client_registered_bytes", "gauge", "Memory the client handed to the daemon.", COL_REGISTERED },
                { "zswapd_client_resident_bytes", "gauge", "Of that, what is resident.", COL_RESIDENT },
                { "zswapd_client_evicted_bytes", "gauge", "Original size of the client's pages the daemon holds.",
                  COL_EVICTED },
                { "zswapd_client_pool_bytes", "gauge", "Compressed size of the client's pages.", COL_POOL },
                { "zswapd_client_tier_bytes", "gauge", "Original size of the client's pages on the second tier.",
                  COL_TIER },
                { "zswapd_client_strong_bytes", "gauge", "Original size of the client's pages held by the strong tier.",
                  COL_STRONG },
                { "zswapd_client_limit_bytes", "gauge", "The client's resident limit (0: none).", COL_LIMIT },
                { "zswapd_client_faults_total", "counter", "Faults served to the client.", COL_FAULTS },
                { "zswapd_client_refaults_total", "counter", "Faults that brought back a page the daemon held.",
                  COL_REFAULTS },
        };

        for (size_t k = 0; k < ELEMENTSOF(per); k++) {
                prom_family(per[k].name, per[k].type, per[k].help);
                for (size_t i = 0; i < n; i++) {
                        printf("%s{pid=\"%d\",user=", per[k].name, (int)v[i].r.pid);
                        prom_label_value(v[i].user);
                        printf(",command=");
                        prom_label_value(v[i].comm);
                        printf("} %llu\n", (unsigned long long)client_field(&v[i], per[k].col).v);
                }
        }
}

int cmd_metrics(const Opts *o) {
        ZMsgStatusReply st;
        _cleanup_free_ Client *v = NULL;
        char tmp[PATH_MAX];

        _cleanup_close_ int fd = ctl_connect(o->path);
        if (fd < 0)
                return 1;
        int r = status_fetch(fd, &st);
        if (r < 0)
                return read_failed(r, "status");
        int n = clients_fetch(fd, &v);
        if (n < 0)
                return read_failed(n, "clients");
        /* --textfile: node_exporter's textfile collector reads the file at
         * any moment; it sees the last one whole, never half of this one */
        if (o->textfile) {
                if (snprintf(tmp, sizeof(tmp), "%s.%d.tmp", o->textfile, (int)getpid()) >= (int)sizeof(tmp) ||
                    !freopen(tmp, "we", stdout)) {
                        fprintf(stderr, "zswapctl: %s: %s\n", o->textfile, strerror(errno ? errno : ENAMETOOLONG));
                        return 1;
                }
        }
        metrics_daemon(&st);
        metrics_latency(&st);
        metrics_clients(v, (size_t)n);
        if (o->textfile &&
            (fflush(stdout) != 0 || ferror(stdout) || fsync(fileno(stdout)) < 0 || rename(tmp, o->textfile) < 0)) {
                fprintf(stderr, "zswapctl: %s: %s\n", o->textfile, strerror(errno));
                unlink(tmp);
                return 1;
        }
        return 0;
}
