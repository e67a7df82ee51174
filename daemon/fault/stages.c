/*
 * stages.c: the fault stage clocks (stages.h). Compiled into every build,
 * empty unless ZSWAP_FAULT_STAGES is defined.
 */
#include "stages.h"

#ifdef ZSWAP_FAULT_STAGES
#include <stdio.h>
#include <string.h>

#include "stage-samples.h"
#include "util.h"

static _Thread_local uint64_t marks[ST_N];
static _Thread_local StageSamples samples;

_Static_assert(ST_N <= STAGE_MAX, "more fault stages than StageSamples keeps");

void stage_mark(unsigned s) {
        marks[s] = now_ns();
}

/* A loop that read a page fault and copied it in: file the differences
 * between consecutive marks (a mark missing: the loop served nothing). */
void stage_loop_end(void) {
        marks[ST_LOOP_END] = now_ns();
        stage_samples_file(&samples, marks, ST_N);
        memset(marks, 0, sizeof(marks));
}

void stage_report(unsigned thread) {
        static const char *const names[ST_N] = { "wake", "epoll to lock", "lock to read", "read to decoded",
                                                 "decoded to copied", "copied to service end", "service end to wait" };
        char what[64];
        snprintf(what, sizeof(what), "fault stages: thread %u", thread);
        stage_samples_report(&samples, what, names, ST_N, "faults");
}
#endif
