/*
 * latency.h: fault latency histograms.
 *
 * Log-linear buckets, HDR style: 8 per power of two, so a bucket is at most
 * 1/8 (12.5 %) of its value wide, from 1 ns to 2^40 ns (18 minutes; longer
 * waits land in the last bucket). Each fault thread owns one histogram and
 * is its only writer: latency_record() is a relaxed load and store per
 * field, no read-modify-write and no lock, so the fault path pays two
 * plain stores and a clock read. The manager reads the histograms of every
 * thread with relaxed loads and sums them (latency_collect); a sum taken
 * while a thread records may miss that one fault, never more.
 *
 * A value v is filed under v - 1, so that "at most 2^k ns" is a whole
 * number of buckets: the cumulative bounds a Prometheus histogram wants
 * (protocol.h, ZMsgStatusReply.lat_le) are then exact, not estimates.
 */
#pragma once

#include <stdatomic.h>
#include <stdint.h>

#define LAT_SUB_BITS 3                                  /* 8 buckets per power of two */
#define LAT_MAX_SHIFT 40                                /* values >= 2^40 ns share the last bucket */
#define LAT_BUCKETS ((LAT_MAX_SHIFT - 2) << LAT_SUB_BITS) /* 304 */

typedef struct LatencyHist {
        /* written by the owning fault thread only, read by the manager */
        _Atomic uint64_t count, sum_ns, max_ns;
        _Atomic uint64_t bucket[LAT_BUCKETS];
} LatencyHist;

/* A sum over every thread's histogram (manager thread). */
typedef struct LatencySnapshot {
        uint64_t count, sum_ns, max_ns;
        uint64_t bucket[LAT_BUCKETS];
} LatencySnapshot;

static inline unsigned latency_bucket(uint64_t ns) {
        uint64_t v = ns ? ns - 1 : 0;
        if (v < (1u << LAT_SUB_BITS))
                return (unsigned)v;
        unsigned e = 63u - (unsigned)__builtin_clzll(v); /* >= LAT_SUB_BITS */
        if (e >= LAT_MAX_SHIFT)
                return LAT_BUCKETS - 1;
        return ((e - 2) << LAT_SUB_BITS) | (unsigned)((v >> (e - LAT_SUB_BITS)) & ((1u << LAT_SUB_BITS) - 1));
}

/* The largest value (ns) filed in bucket i. */
uint64_t latency_bucket_max(unsigned i);

/* One fault that took ns (owning thread only). Relaxed, and no RMW: this
 * thread is the only writer, and readers only need each field to be a
 * value it once had. */
static inline void latency_record(LatencyHist *h, uint64_t ns) {
        _Atomic uint64_t *b = &h->bucket[latency_bucket(ns)];
        atomic_store_explicit(b, atomic_load_explicit(b, memory_order_relaxed) + 1, memory_order_relaxed);
        atomic_store_explicit(&h->count, atomic_load_explicit(&h->count, memory_order_relaxed) + 1,
                              memory_order_relaxed);
        atomic_store_explicit(&h->sum_ns, atomic_load_explicit(&h->sum_ns, memory_order_relaxed) + ns,
                              memory_order_relaxed);
        if (ns > atomic_load_explicit(&h->max_ns, memory_order_relaxed))
                atomic_store_explicit(&h->max_ns, ns, memory_order_relaxed);
}

/* Add h into s (any thread; s is the caller's). */
void latency_add(LatencySnapshot *s, const LatencyHist *h);

/* The q-quantile (0 < q <= 1) of s in ns: the largest value of the bucket
 * that holds it, never above s->max_ns; 0 if s is empty. */
uint64_t latency_quantile(const LatencySnapshot *s, double q);

/* How many values of s are at most ns, which must be a power of two
 * (exact, thanks to the v - 1 filing). */
uint64_t latency_count_le(const LatencySnapshot *s, uint64_t ns);
