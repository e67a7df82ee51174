/*
 * pageout-stages.c: the pageout stage clocks (pageout-stages.h). Compiled
 * into every build, empty unless ZSWAP_PAGEOUT_STAGES is defined.
 */
#include "pageout-stages.h"

#ifdef ZSWAP_PAGEOUT_STAGES
#include <stdatomic.h>
#include <stdint.h>

#include "stage-samples.h"
#include "util.h"

_Static_assert(PS_N <= STAGE_MAX, "more pageout stages than StageSamples keeps");

/* written by the caller and the agent in turn (the socket and the
 * answer's hand-over order them): relaxed */
static _Atomic uint64_t marks[PS_N];
static _Atomic unsigned moves, releases;
/* filed by the caller only */
static StageSamples samples;

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
        for (unsigned s = 0; s < PS_N; s++)
                m[s] = atomic_load_explicit(&marks[s], memory_order_relaxed);
        stage_samples_file(&samples, m, PS_N);
}

void pageout_stages_report(void) {
        static const char *const names[PS_N] = { "", "sent to MOVE read", "UFFDIO_MOVE", "moved to RELEASE read",
                                                 "RELEASE (slots emptied)", "released to answer read",
                                                 "answer to caller" };
        stage_samples_report(&samples, "pageout stages", names, PS_N, "calls");
}
#endif
