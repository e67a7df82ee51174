/*
 * bench-util.h: small helpers bench-store and bench-scale share: clocks,
 * what /proc says about a process or its threads, option lists, medians,
 * and the raw codec speed the daemon's workers are measured against.
 *
 * Readers of /proc take the procfs root as their first argument (fixtures),
 * return 0 or a negative errno and never print.
 */
#pragma once

#include <signal.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "corpus.h"

/* CLOCK_MONOTONIC in ns: the same clock in every process, so a child's
 * timestamps compare with the parent's. */
uint64_t bench_now_ns(void);
void bench_sleep_us(long us);

/* RssAnon of pid from procfs/PID/status, in KiB. */
int bench_rss_anon_kib(const char *procfs, pid_t pid, long *ret);

/* utime and stime of pid (a process, all its threads) from procfs/PID/stat, in seconds. */
int bench_proc_times(const char *procfs, pid_t pid, double *ret_user, double *ret_sys);

/*
 * CPU time (seconds, from schedstat, all threads summed) of the threads of pid
 * that run at nice value `nice` or under SCHED_IDLE: the daemon's compression
 * workers, whose priority is what sets them apart from its other threads.
 * *ret_sys gets their stime (clock ticks, so coarser), *ret_threads how
 * many threads matched.
 */
int bench_worker_cpu_s(const char *procfs, pid_t pid, int nice, double *ret, double *ret_sys,
                       unsigned *ret_threads);

/* Parse "1,8,32" into v (at most max values, each in lo..hi). */
int bench_parse_list(const char *s, unsigned lo, unsigned hi, unsigned *v, unsigned max, unsigned *ret_n);

/* Median of n values (sorted in place); NAN for n == 0. NANs sort last and are not counted. */
double bench_median(double *v, size_t n);

/* Load the corpus from dir (NULL: corpus_find_dir() from the executable's directory). */
/* Nearest-rank percentile p (0..1] of n sorted nanosecond values, in
 * microseconds; NAN when n is 0. */
double bench_percentile_us(const uint64_t *sorted, size_t n, double p);

/* Run the zswapctl built beside this bench (<exe dir>/../client/tools)
 * against socket sock with args, and read its "name value" output lines
 * (`status --bytes` prints them) into values[i] for each names[i] it
 * prints. 0, or -errno (the command could not run, or failed). */
int bench_zswapctl(const char *sock, const char *args, const char *const *names, uint64_t *values, size_t n);

int bench_corpus_load(const char *dir, char **ret_dir, Corpus **ret);

typedef struct CodecSpeed {
        double cpu_mbs;  /* bytes / thread CPU time, median over runs and threads */
        double wall_mbs; /* bytes / wall time, median over runs and threads */
        double min_mbs, max_mbs; /* range of cpu_mbs */
        double ratio;    /* original / compressed, incompressible pages counted whole */
        size_t incompressible;
} CodecSpeed;

/*
 * Compress n_pages corpus pages (laid out as corpus_fill() does) one page at
 * a time with liblz4 or libzstd, exactly as a zswapd worker calls its codec
 * (lz4: LZ4_compress_fast_extState, acceleration `level` or 1; zstd:
 * ZSTD_compress2 at `level` or 1, no frame extras; output capped at 3/4 of a
 * page), `runs` times, in `threads` threads at once (each on its own copy;
 * 1: in the calling thread). With copies, each pass also does the worker's
 * memory traffic: every 512 pages are first copied into a bounce buffer
 * (its process_vm_readv) and every compressed page is appended to a fresh
 * mapping (the pool growing). compressor is "lz4" or "zstd".
 */
int bench_codec_speed(const Corpus *c, const char *compressor, int level, size_t n_pages, unsigned runs,
                      unsigned threads, bool copies, CodecSpeed *ret);

/* The first three fields of procfs/loadavg ("?" if unreadable), into buf; returns buf.
 * Other work on the machine shows there: the benches print it at start and end. */
const char *bench_loadavg(char *buf, size_t len);

/* "12.3", or "-" for a value that is not finite, into buf; returns buf. */
const char *bench_fmt(char *buf, size_t len, const char *fmt, double v);
/* a / b as "%.2f", or "-". */
const char *bench_ratio(char *buf, size_t len, double a, double b);

/* The signal that asked the benchmark to stop (SIGINT, SIGTERM, SIGHUP), or
 * 0. bench_install_signals() sets handlers for them without SA_RESTART, so
 * sleeps end early, and ignores SIGPIPE. */
extern volatile sig_atomic_t bench_interrupted;
void bench_install_signals(void);
