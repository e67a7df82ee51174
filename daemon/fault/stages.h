/*
 * stages.h: where a fault thread's time goes between its wake-up and its
 * next sleep, for the fault cost table of docs/benchmarks.md. Built only
 * with `meson configure -Dfault_stages=true`; otherwise every mark is
 * nothing at all. Each fault thread stamps the clock at the marks below
 * (thread-local, no sharing); a loop that served a page fault files the
 * differences between consecutive marks, and at its end the thread prints
 * the median and p90 of each to stderr.
 */
#pragma once

enum {
        ST_WAKE,        /* epoll returned */
        ST_LOCK,        /* service(): serve_lock taken */
        ST_READ,        /* the page fault's message read from the uffd */
        ST_DECODED,     /* index walked, page decompressed */
        ST_COPIED,      /* UFFDIO_COPY returned: the program may run */
        ST_SERVICE_END, /* service() returned: the last read (EAGAIN) and the unlock */
        ST_LOOP_END,    /* the loop's other work done, about to wait again */
        ST_N
};

#ifdef ZSWAP_FAULT_STAGES
void stage_mark(unsigned s);
void stage_loop_end(void);
void stage_report(unsigned thread);
#define STAGE(s) stage_mark(s)
#define STAGE_LOOP_END() stage_loop_end()
#define STAGE_REPORT(t) stage_report(t)
#else
#define STAGE(s) ((void)0)
#define STAGE_LOOP_END() ((void)0)
#define STAGE_REPORT(t) ((void)0)
#endif
