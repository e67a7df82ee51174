/*
 * reclaim-sim.h: the offline side of bench-reclaim. Page-granular access
 * traces (Zipf over a scattered hot set) and the replacement policies the
 * daemon's reclaim is scored against, each replayed on the very trace the
 * real run replays.
 *
 * A trace is an array of page indices 0..n_pages-1. Its first `warmup`
 * accesses fill the cache and are not counted; every policy starts with an
 * empty cache of `capacity` pages and takes each missed page in (demand
 * paging, no bypass: a faulted page is resident, as under the daemon).
 *
 * Pure computation: no global state, no I/O except sim_self_test()'s
 * report; every function may be called from any thread. Errors are 0 or a
 * negative errno.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* splitmix64: the traces' random numbers, the same on every machine. */
uint64_t sim_rand(uint64_t *state);

/*
 * Zipf(s) over ranks 0..n-1 (rank k drawn with probability proportional to
 * 1/(k+1)^s), sampled by inverting a precomputed CDF; a guide table
 * (Chen and Asau) narrows each binary search to a few entries.
 */
typedef struct Zipf Zipf;
int zipf_new(uint32_t n, double s, Zipf **ret);
Zipf *zipf_free(Zipf *z);
uint32_t zipf_sample(const Zipf *z, uint64_t *rng);

/* out[i] = perm[zipf_sample()] for i in 0..len-1: ranks land on pages scattered by perm. */
void trace_zipf(const Zipf *z, const size_t *perm, uint32_t *out, size_t len, uint64_t *rng);

typedef enum SimPolicy {
        SIM_LRU,   /* least recently used: a doubly linked list over the pages */
        SIM_FIFO,  /* first in, first out: a ring of frames */
        SIM_CLOCK, /* second chance: the ring with a reference bit, set on every access */
        SIM_OPT,   /* Belady: evict the page whose next use is furthest away */
        SIM_POLICIES,
} SimPolicy;

const char *sim_policy_name(SimPolicy p);

/*
 * Replay trace[0..len) through policy p with room for capacity pages
 * (capacity >= 1, pages < n_pages). *ret_misses gets the misses at
 * indices >= warmup. O(1) per access, O(log capacity) for SIM_OPT.
 * -EINVAL for bad arguments, -ENOMEM.
 */
int sim_run(SimPolicy p, const uint32_t *trace, size_t len, size_t warmup, uint32_t n_pages, uint32_t capacity,
            uint64_t *ret_misses);

/*
 * What any policy pays at least: *ret_distinct gets the distinct pages of
 * the whole trace, *ret_cold those first referenced at an index >= warmup
 * (compulsory misses of the counted part). -ENOMEM.
 */
int sim_cold(const uint32_t *trace, size_t len, size_t warmup, uint32_t n_pages, uint64_t *ret_distinct,
             uint64_t *ret_cold);

/*
 * The indices >= warmup at which the trace first references a page, in
 * increasing order, into a new array (*ret, *ret_n entries; as many as
 * sim_cold()'s cold misses). -ENOMEM.
 */
int sim_first_refs(const uint32_t *trace, size_t len, size_t warmup, uint32_t n_pages, uint32_t **ret,
                   size_t *ret_n);

/*
 * The same four policies the obvious way, O(capacity) per access, for
 * checking sim_run() on small traces (capacity <= 4096). -EINVAL, -ENOMEM.
 */
int sim_run_naive(SimPolicy p, const uint32_t *trace, size_t len, size_t warmup, uint32_t capacity,
                  uint64_t *ret_misses);

/*
 * Check all of the above: the textbook miss counts (Silberschatz's
 * reference string, Belady's anomaly), sim_run() against sim_run_naive()
 * on random traces, OPT below the others, LRU and OPT monotone in frames,
 * only cold misses with room for every page, the Zipf sampler's
 * frequencies. Prints each failure and a summary line to out; returns the
 * number of failed checks. The one function here that prints.
 */
unsigned sim_self_test(FILE *out);
