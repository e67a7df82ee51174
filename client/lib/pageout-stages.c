/*
 * pageout-stages.c: the pageout stage clocks (pageout-stages.h). Compiled
 * into every build, empty unless ZSWAP_PAGEOUT_STAGES is defined.
 */
#include "pageout-stages.h"

#ifdef ZSWAP_PAGEOUT_STAGES
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "util.h"

#define SAMPLES 65536u

/* written by the caller and the agent in turn (the socket and the
 * answer's hand-over order them): relaxed */
static _Atomic uint64_t marks[PS_N];
static _Atomic unsigned moves, releases;
/* filed by the caller only */
static uint32_t *samples[PS_N];
static unsigned nsamples;

void pageout_stage(unsigned s) {
        if (s == PS_SENT) {
                for (unsigned i = 0; i < PS_N; i++)
                        atomic_store_explicit(&marks[i], 0, memory_order_relaxed);
                atomic_store_explicit(&moves, 0, memory_order_relaxed);
                atomic_store_explicit(&releases, 0, memory_order_relaxed);
        }
        if (s == PS_MOVE_READ)
                atomic_fetch_add_explicit(&moves, 1, memory_order_relaxed);
        if (s == PS_RELEASE_READ)
                atomic_fetch_add_explicit(&releases, 1, memory_order_relaxed);
        atomic_store_explicit(&marks[s], now_ns(), memory_order_relaxed);
}

void pageout_stages_file(void) {
        uint64_t m[PS_N];

        pageout_stage(PS_RETURNED);
        if (atomic_load_explicit(&moves, memory_order_relaxed) != 1 ||
            atomic_load_explicit(&releases, memory_order_relaxed) != 1)
                return;
        for (unsigned s = 0; s < PS_N; s++) {
                m[s] = atomic_load_explicit(&marks[s], memory_order_relaxed);
                if (!m[s] || (s && m[s] < m[s - 1]))
                        return;
        }
        for (unsigned s = 1; s < PS_N; s++) {
                if (!samples[s] && !(samples[s] = calloc(SAMPLES, sizeof(uint32_t))))
                        return;
                uint64_t d = m[s] - m[s - 1];
                samples[s][nsamples % SAMPLES] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
        }
        nsamples++;
}

static int cmp_u32(const void *a, const void *b) {
        uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
        return x < y ? -1 : x > y;
}

void pageout_stages_report(void) {
        static const char *const names[PS_N] = { "", "sent to MOVE read", "UFFDIO_MOVE", "moved to RELEASE read",
                                                 "RELEASE (slots emptied)", "released to answer read",
                                                 "answer to caller" };
        unsigned n = nsamples < SAMPLES ? nsamples : SAMPLES;
        if (!n)
                return;
        for (unsigned s = 1; s < PS_N; s++) {
                qsort(samples[s], n, sizeof(uint32_t), cmp_u32);
                fprintf(stderr, "pageout stages: %-24s median %7.1f us  p90 %7.1f us  (%u calls)\n", names[s],
                        samples[s][n / 2] / 1e3, samples[s][n * 9 / 10] / 1e3, nsamples);
                free(samples[s]);
                samples[s] = NULL;
        }
        nsamples = 0;
}
#endif
