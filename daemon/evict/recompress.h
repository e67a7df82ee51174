/*
 * recompress.h: the strong tier of compression (docs/reclaim.md,
 * "Recompression").
 *
 * Pages are compressed with the daemon's codec (lz4) when they leave.
 * Those whose page nobody has used for recompress_age are compressed again
 * in the background with zstd at recompress_level, and their entries say
 * so (PE_STRONG, pentry.h); a fault decodes either. The work is split in
 * two, as compaction's and the tier writer's:
 *
 * - the recompressor's own thread (zswapd-recomp, SCHED_IDLE: it runs
 *   only on a CPU nothing else wants, below the compression workers)
 *   walks one client's index from a cursor, marks each cold object it takes (STORED -> STORED|PE_RC, a
 *   CAS), decodes it, compresses it again into the job's buffer and keeps
 *   it only if it takes a smaller size class (else the entry gets
 *   PE_NOGAIN, and is not tried again). It never allocates from the pool
 *   and takes no lock but its job slot's.
 * - the manager (recompress_done()) swaps each new object in under the
 *   client's serve_lock, trylocked as compaction does: a CAS from the value
 *   it marked to the new object's, so that an entry a fault or an event
 *   took in between (which drops the mark) is left alone; the old object is
 *   released only by the CAS that replaced it.
 *
 * One job is out at a time, of at most RECOMP_PAGES pages, and jobs are
 * started only while the CPU budget (recompress_cpu percent of one CPU,
 * the thread's and the manager's time together) allows, and only while
 * the daemon serves no fault: a CPU busy with background work, at any
 * priority, makes the wake-up of a fault thread on it an interrupt, which
 * on a hypervisor is dear (docs/reclaim.md). A job started in a quiet
 * tick stops at the first fault served; one job a second runs all the
 * same, for at most 2 ms of CPU (FORCE_MS, FORCE_MAX_NS), so that a
 * daemon never quiet still recompresses. A client whose
 * store must stay as it is for a fork child is left alone, as the tier
 * writer does.
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "codec.h"
#include "core.h"
#include "mmclient.h"

#define RECOMP_PAGES 128    /* objects one job may take */
#define RECOMP_SCAN 65536   /* entries one job may look at */
/* Dictionaries (docs/reclaim.md, "Dictionaries"): a client holding at
 * least DICT_MIN_PAGES objects gets one trained from DICT_SAMPLES of its
 * pages spread over its index (a quarter held out to measure it), and
 * keeps it if it makes those pages' objects DICT_GAIN_PCT percent smaller
 * and saves, over all its objects, at least twice its own size. A client
 * refused is tried again once it has twice the objects. */
#define DICT_MIN_PAGES 2048
#define DICT_SAMPLES 1024
#define DICT_GAIN_PCT 3

typedef struct RecompItem {
        uint64_t addr;
        uint64_t v;        /* the entry's value with PE_RC, as the worker marked it */
        uint32_t off, len; /* the new object in the job's buffer */
} RecompItem;

/* One job: filled by recompress_tick() (in), the thread (out), read by
 * recompress_done(). Owned by whoever holds its Work. */
typedef struct RecompJob {
        /* in */
        uint64_t start;      /* the walk starts here */
        uint32_t cold;       /* pages whose stamp is at most this are cold */
        bool unstamped_cold; /* pages never stamped are cold too (the client is older than the age) */
        int level;           /* zstd level */
        uint64_t age_ms;     /* the client's recompress_age */
        bool yield;          /* stop at the first fault the daemon serves (Core.faults moves) */
        uint64_t faults;     /* Core.faults when the job started */
        const CodecDict *dict; /* the client's dictionary (its MMClient holds it): objects made with it */
        bool train;          /* a job that trains the client's dictionary instead (no dict) */
        uint64_t stored;     /* train: the client's objects, for the sampling stride */
        /* out of a training job: the dictionary (the manager's to give or
         * free), NULL if refused; the held-out pages' pool units without
         * and with it */
        CodecDict *trained;
        uint32_t samples;
        uint64_t plain_units, dict_units;
        /* out */
        uint64_t next;       /* where the next walk starts; 0: it reached the end */
        uint64_t cpu_ns;     /* the worker's CPU time */
        uint64_t scanned;    /* entries looked at */
        uint32_t n, used;    /* items, bytes of buf used */
        RecompItem items[RECOMP_PAGES];
        uint8_t buf[RECOMP_PAGES * ZSWAP_PAGE_SIZE];
} RecompJob;

/* The manager's state, and its thread's. */
typedef struct Recompressor {
        Core *core;
        RecompJob *job;     /* the buffer of the one job, made on first use */
        bool busy;          /* the job is out (with the thread or in the inbox) */
        uint64_t last_id;   /* the client taken last (round robin by id) */
        int64_t tokens_ns;  /* CPU time it may still use now */
        uint64_t tokens_ms; /* when tokens were last added */
        uint64_t faults_seen; /* Core.faults at the last tick */
        uint64_t last_ms;     /* when the last job ended */
        /* the thread: started by recompress_start(); its job slot and stop
         * are under lock, the rest is the thread's own */
        pthread_t thread;
        bool started;
        pthread_mutex_t lock;
        pthread_cond_t cond;  /* the thread waits on it for a job or stop */
        Work *slot;           /* the job handed over, taken by the thread */
        bool stop;
        CodecCCtx *strong;    /* the thread's zstd context */
        CodecDCtx *dctx;      /* the thread's decompression context */
        /* the thread's: the last dictionary it compressed with (a
         * reference: its address cannot be another's meanwhile), digested
         * at cdict_level */
        CodecDict *cdict_of;
        CodecCDict *cdict;
        int cdict_level;
        uint8_t page[ZSWAP_PAGE_SIZE], copy[ZSWAP_PAGE_SIZE];
} Recompressor;

/* Effective settings of one client (its own recompress_age, or the daemon's). */
typedef struct RecompConf {
        uint64_t age_ms; /* daemon-wide recompress_age, 0: off */
        int level;
        double cpu;      /* percent of one CPU */
        bool dict;       /* train dictionaries and use them */
} RecompConf;

void recompress_init(Recompressor *r, Core *core);
/* Start the thread (after the sandbox, as every thread): 0 or -errno. */
int recompress_start(Recompressor *r);
/* Stop the thread (after the job it runs, which it posts back; one it
 * never took is freed with its marks never made) and free what is left
 * but a job in the manager's inbox, whose recompress_done() frees it. */
void recompress_fini(Recompressor *r);

/* Manager tick: set each client's strong_rescue, and hand a worker the
 * next job if the budget allows and no job is out. */
void recompress_tick(Recompressor *r, MMClient *mms, const RecompConf *conf);

/* MW_RECOMP_DONE: the manager swaps the new objects in and frees w. */
void recompress_done(Recompressor *r, Work *w);

/* The client's effective age: 0 (off) while the daemon's is 0, whatever
 * the client set (the operator's off switch wins), else its own
 * (rc.recompress_age_ms >= 0) or the daemon's. */
static inline uint64_t recompress_age(const MMClient *mm, const RecompConf *conf) {
        if (conf->age_ms == 0)
                return 0;
        return mm->rc.recompress_age_ms >= 0 ? (uint64_t)mm->rc.recompress_age_ms : conf->age_ms;
}
