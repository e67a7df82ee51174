/*
 * report.h: what the daemon tells about itself (zswapctl status, clients,
 * metrics; zswap_get_stats()).
 */
#pragma once

#include <stdint.h>

#include "protocol.h"

typedef struct Manager Manager;
typedef struct Conn Conn;
typedef struct MMClient MMClient;

#define REPORT_SAMPLES 6 /* one a second: rates over up to 5 s */

/* The counters' recent past, for rates (manager thread only; zeroed by
 * the Manager's calloc, no set-up). */
typedef struct ReportState {
        struct {
                uint64_t ms, evictions, faults;
        } sample[REPORT_SAMPLES];
        unsigned next;    /* slot the next sample goes to */
        unsigned nsamples;
        uint64_t last_ms; /* when the last sample was taken */
        /* the event counters of the clients gone (report_retire()): the
         * daemon's totals count for its whole life, like evictions */
        struct {
                uint64_t refaults, clean_reevictions, reclaim_evictions, thrash_backoffs;
        } retired;
} ReportState;

/* mm leaves for good (mm_retire()): its event counters stay in the
 * daemon's totals. */
void report_retire(Manager *m, MMClient *mm);

/* Once per tick or so: samples the counters once a second. */
void report_tick(Manager *m);

/* Counters of one client (only) or of the whole daemon (only NULL). */
/* A count a client's STATS request (id, of the connection with this
 * serial) waited for is back: answered, if the connection still is. */
void report_stats_counted(Manager *m, uint64_t serial, uint32_t id);
void report_stats_collect(Manager *m, MMClient *only, struct zswap_stats *s);

/* Requests. Each replies itself and returns 1, or returns -errno for the
 * caller to reply with. */
int report_stats_reply(Manager *m, Conn *c, uint32_t id, uint32_t scope);
int report_status(Manager *m, Conn *c, const ZMsgHeader *q);
int report_clients(Manager *m, Conn *c, const ZMsgClientsReq *q);
