/*
 * stage-samples.c: a stage clock's samples and report (stage-samples.h).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "stage-samples.h"

bool stage_samples_file(StageSamples *ss, const uint64_t *marks, unsigned n) {
        for (unsigned s = 0; s < n; s++)
                if (!marks[s] || (s && marks[s] < marks[s - 1]))
                        return false;
        for (unsigned s = 1; s < n; s++)
                if (!ss->v[s] && !(ss->v[s] = calloc(STAGE_SAMPLES, sizeof(uint32_t))))
                        return false;
        for (unsigned s = 1; s < n; s++) {
                uint64_t d = marks[s] - marks[s - 1];
                ss->v[s][ss->filed % STAGE_SAMPLES] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
        }
        ss->filed++;
        return true;
}

static int cmp_u32(const void *a, const void *b) {
        uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
        return x < y ? -1 : x > y;
}

void stage_samples_report(StageSamples *ss, const char *what, const char *const *names, unsigned n,
                          const char *events) {
        unsigned k = ss->filed < STAGE_SAMPLES ? ss->filed : STAGE_SAMPLES;
        for (unsigned s = 1; s < n; s++) {
                if (k) {
                        qsort(ss->v[s], k, sizeof(uint32_t), cmp_u32);
                        fprintf(stderr, "%s: %-24s median %8.2f us  p90 %8.2f us  (%u %s)\n", what, names[s],
                                ss->v[s][k / 2] / 1e3, ss->v[s][k * 9 / 10] / 1e3, ss->filed, events);
                }
                free(ss->v[s]);
                ss->v[s] = NULL;
        }
        ss->filed = 0;
}
