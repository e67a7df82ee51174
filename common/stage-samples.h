/*
 * stage-samples.h: the samples of a stage clock (the daemon's fault
 * stages, daemon/fault/stages.h; libzswap's pageout stages,
 * client/lib/pageout-stages.h), and their report.
 *
 * A clock stamps marks 0..n-1 of one event (a fault served, a pageout
 * answered); stage_samples_file() keeps the differences between
 * consecutive marks, the last STAGE_SAMPLES events' of each, and
 * stage_samples_report() prints the median and p90 of each to stderr.
 * One owner at a time: no locking.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#define STAGE_SAMPLES 65536u /* events kept per stage (a ring) */
#define STAGE_MAX 8u         /* marks per event, at most */

typedef struct StageSamples {
        uint32_t *v[STAGE_MAX]; /* v[s][i]: ns from mark s-1 to mark s of event i; v[0] unused */
        unsigned filed;         /* events filed since the last report */
} StageSamples;

/* File an event's n marks (CLOCK_MONOTONIC ns): false, and nothing
 * filed, when one is missing (0) or out of order, or without memory. */
bool stage_samples_file(StageSamples *ss, const uint64_t *marks, unsigned n);
/* "<what>: <names[s]> median .. us  p90 .. us  (<filed> <events>)" for
 * each stage s in 1..n-1, then forget them all. Nothing if none filed. */
void stage_samples_report(StageSamples *ss, const char *what, const char *const *names, unsigned n,
                          const char *events);
