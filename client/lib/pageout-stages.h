/*
 * pageout-stages.h: where one zswap_pageout()'s time goes, for the small
 * pageout table of docs/benchmarks.md. Built only with `meson configure
 * -Dpageout_stages=true`; otherwise every mark is nothing at all.
 *
 * The caller stamps the clock when it sends PAGEOUT and when the answer
 * wakes it; the agent when it reads MOVE, has moved, reads RELEASE, has
 * released, and reads an answer. A call that took exactly one MOVE and one
 * RELEASE (one lane: a small pageout) files the differences between
 * consecutive marks; zswap_disconnect() prints the median and p90 of each
 * to stderr. Meant for one pageout at a time: calls that overlap mix their
 * marks, and a call whose marks are out of order is not filed.
 */
#pragma once

enum {
        PS_SENT,         /* caller: PAGEOUT about to be sent */
        PS_MOVE_READ,    /* agent: MOVE read */
        PS_MOVED,        /* agent: UFFDIO_MOVE done, MOVE_DONE about to be sent */
        PS_RELEASE_READ, /* agent: RELEASE read */
        PS_RELEASED,     /* agent: slots emptied, RELEASE_DONE about to be sent */
        PS_ANSWER_READ,  /* agent: an answer read */
        PS_RETURNED,     /* caller: woken with the answer */
        PS_N
};

#ifdef ZSWAP_PAGEOUT_STAGES
void pageout_stage(unsigned s);
void pageout_stages_file(void);
void pageout_stages_report(void);
#define PAGEOUT_STAGE(s) pageout_stage(s)
#define PAGEOUT_STAGES_FILE() pageout_stages_file()
#define PAGEOUT_STAGES_REPORT() pageout_stages_report()
#else
#define PAGEOUT_STAGE(s) ((void)0)
#define PAGEOUT_STAGES_FILE() ((void)0)
#define PAGEOUT_STAGES_REPORT() ((void)0)
#endif
