/*
 * stages.c: the fault stage clocks (stages.h). Compiled into every build,
 * empty unless ZSWAP_FAULT_STAGES is defined.
 */
#include "stages.h"

#ifdef ZSWAP_FAULT_STAGES
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define STAGE_SAMPLES 65536u

static _Thread_local uint64_t marks[ST_N];
static _Thread_local uint32_t *samples[ST_N];
static _Thread_local unsigned nsamples;

void stage_mark(unsigned s) {
        marks[s] = now_ns();
}

/* A loop that read a page fault and copied it in: file the differences
 * between consecutive marks (a mark missing: the loop served nothing). */
void stage_loop_end(void) {
        marks[ST_LOOP_END] = now_ns();
        for (unsigned s = 0; s < ST_N; s++)
                if (!marks[s])
                        goto out;
        for (unsigned s = 1; s < ST_N; s++) {
                if (!samples[s] && !(samples[s] = calloc(STAGE_SAMPLES, sizeof(uint32_t))))
                        goto out;
                uint64_t d = marks[s] >= marks[s - 1] ? marks[s] - marks[s - 1] : 0;
                samples[s][nsamples % STAGE_SAMPLES] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
        }
        nsamples++;
out:
        memset(marks, 0, sizeof(marks));
}

static int cmp_u32(const void *a, const void *b) {
        uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
        return x < y ? -1 : x > y;
}

void stage_report(unsigned thread) {
        static const char *const names[ST_N] = { "wake", "epoll to lock", "lock to read", "read to decoded",
                                                 "decoded to copied", "copied to service end", "service end to wait" };
        unsigned n = nsamples < STAGE_SAMPLES ? nsamples : STAGE_SAMPLES;
        if (!n)
                return;
        for (unsigned s = 1; s < ST_N; s++) {
                qsort(samples[s], n, sizeof(uint32_t), cmp_u32);
                fprintf(stderr, "fault stages: thread %u: %-22s median %7.2f us  p90 %7.2f us  (%u faults)\n", thread,
                        names[s], samples[s][n / 2] / 1e3, samples[s][n * 9 / 10] / 1e3, nsamples);
                free(samples[s]);
                samples[s] = NULL;
        }
}
#endif
