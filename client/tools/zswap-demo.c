/*
 * zswap-demo: the main job. Loads real heap pages (the corpus) into memory,
 * hands them to zswapd, pages them out, shows what was saved, reads every
 * page back and checks it.
 *
 * zswap-demo [--socket PATH] [--size MiB] [--corpus DIR]
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "corpus.h"
#include "macro.h"
#include "util.h"
#include "zswap.h"

int main(int argc, char **argv) {
        static const struct option opts[] = { { "socket", required_argument, NULL, 's' },
                                              { "size", required_argument, NULL, 'm' },
                                              { "corpus", required_argument, NULL, 'c' },
                                              {} };
        const char *sock = NULL, *dir = NULL;
        _cleanup_free_ char *found = NULL;
        _cleanup_corpus_ Corpus *corpus = NULL;
        size_t mb = 1024;
        struct zswap_client *c;
        struct zswap_stats s;
        int o, r;

        while ((o = getopt_long(argc, argv, "s:m:c:", opts, NULL)) >= 0) {
                if (o == 's')
                        sock = optarg;
                else if (o == 'm')
                        mb = strtoul(optarg, NULL, 10);
                else if (o == 'c')
                        dir = optarg;
                else
                        return 2;
        }
        if (!dir && corpus_find_dir(NULL, &found) == 0)
                dir = found;
        r = dir ? corpus_load(dir, &corpus) : -ENOENT;
        if (r < 0) {
                fprintf(stderr, "cannot load the corpus (%s): give --corpus DIR\n", strerror(-r));
                return 1;
        }
        size_t len = mb << 20, npages = len / ZSWAP_PAGE_SIZE;
        uint8_t *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (buf == MAP_FAILED)
                return 1;
        /* python, node and java pages, interleaved */
        corpus_fill(corpus, buf, npages);
        r = zswap_connect(sock, &c);
        if (r < 0) {
                fprintf(stderr, "cannot connect to zswapd: %s\n", strerror(-r));
                return 1;
        }
        uint64_t rss0 = 0, rss1 = 0, rss2 = 0;
        proc_status_kb(0, "RssAnon", &rss0);
        if ((r = zswap_register(c, buf, len)) < 0 || (r = zswap_pageout(c, buf, len)) < 0) {
                fprintf(stderr, "zswap: %s\n", strerror(-r));
                return 1;
        }
        uint64_t t0 = now_ns();
        proc_status_kb(0, "RssAnon", &rss1);
        zswap_get_stats(c, ZSWAP_STATS_CLIENT, &s);
        printf("%zu MiB of python/node/java heap pages handed to zswapd and paged out\n", mb);
        printf("  RssAnon of this process: %llu MiB -> %llu MiB\n", (unsigned long long)(rss0 >> 20),
               (unsigned long long)(rss1 >> 20));
        printf("  held by zswapd: %llu pages compressed, %llu same-filled, %llu incompressible kept resident\n",
               (unsigned long long)s.stored_pages, (unsigned long long)s.same_pages,
               (unsigned long long)s.incompressible_pages);
        zswap_get_stats(c, ZSWAP_STATS_GLOBAL, &s);
        printf("  compressed objects: %.1f MiB; pool chunks: %.1f MiB (packing overhead %.1f %%)\n",
               (double)s.compressed_bytes / 1048576, (double)s.pool_bytes / 1048576,
               s.compressed_bytes ? 100.0 * ((double)s.pool_bytes - (double)s.compressed_bytes) / (double)s.compressed_bytes : 0.0);
        printf("  pool: %llu MiB for %llu MiB of pages (ratio %.2f); saved %llu MiB\n",
               (unsigned long long)(s.pool_bytes >> 20), (unsigned long long)(s.original_bytes >> 20),
               s.pool_bytes ? (double)s.original_bytes / (double)s.pool_bytes : 0.0,
               (unsigned long long)((s.original_bytes - s.pool_bytes) >> 20));
        t0 = now_ns();
        size_t bad = corpus_verify(corpus, buf, npages, NULL);
        double secs = (double)(now_ns() - t0) / 1e9;
        proc_status_kb(0, "RssAnon", &rss2);
        printf("read back %zu pages in %.2f s (%.0f MB/s): %zu differ; RssAnon %llu MiB\n", npages, secs,
               (double)len / 1e6 / secs, bad, (unsigned long long)(rss2 >> 20));
        zswap_disconnect(c);
        return bad ? 1 : 0;
}
