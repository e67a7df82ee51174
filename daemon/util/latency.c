/*
 * latency.c: reading the fault latency histograms (latency.h).
 *
 * Only the manager thread calls these, on a copy it summed from the fault
 * threads' histograms; nothing here is on the fault path.
 */
#include "latency.h"

uint64_t latency_bucket_max(unsigned i) {
        if (i >= LAT_BUCKETS - 1)
                return UINT64_MAX; /* also holds everything longer */
        if (i < (1u << LAT_SUB_BITS))
                return i + 1; /* filed under ns - 1 */
        unsigned e = (i >> LAT_SUB_BITS) + 2, sub = i & ((1u << LAT_SUB_BITS) - 1);
        uint64_t lo = (uint64_t)((1u << LAT_SUB_BITS) + sub) << (e - LAT_SUB_BITS);
        return lo + (1ull << (e - LAT_SUB_BITS)); /* (lo + width - 1) + 1 */
}

void latency_add(LatencySnapshot *s, const LatencyHist *h) {
        uint64_t max = atomic_load_explicit(&h->max_ns, memory_order_relaxed);

        s->count += atomic_load_explicit(&h->count, memory_order_relaxed);
        s->sum_ns += atomic_load_explicit(&h->sum_ns, memory_order_relaxed);
        if (max > s->max_ns)
                s->max_ns = max;
        for (unsigned i = 0; i < LAT_BUCKETS; i++)
                s->bucket[i] += atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
}

uint64_t latency_quantile(const LatencySnapshot *s, double q) {
        uint64_t total = 0, seen = 0;

        /* the buckets, not s->count: the two may be a fault apart */
        for (unsigned i = 0; i < LAT_BUCKETS; i++)
                total += s->bucket[i];
        if (total == 0)
                return 0;
        uint64_t rank = (uint64_t)(q * (double)total + 0.5);
        if (rank < 1)
                rank = 1;
        if (rank > total)
                rank = total;
        for (unsigned i = 0; i < LAT_BUCKETS; i++) {
                seen += s->bucket[i];
                if (seen >= rank) {
                        uint64_t v = latency_bucket_max(i);
                        return v < s->max_ns ? v : s->max_ns;
                }
        }
        return s->max_ns;
}

uint64_t latency_count_le(const LatencySnapshot *s, uint64_t ns) {
        unsigned k = 63u - (unsigned)__builtin_clzll(ns | 1);
        unsigned end = k >= LAT_MAX_SHIFT ? LAT_BUCKETS : k < LAT_SUB_BITS ? (unsigned)ns : (k - 2) << LAT_SUB_BITS;
        uint64_t n = 0;

        for (unsigned i = 0; i < end; i++)
                n += s->bucket[i];
        return n;
}
