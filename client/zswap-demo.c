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
#include <zstd.h>

#include "macro.h"
#include "util.h"
#include "zswap.h"

static uint8_t *load(const char *dir, const char *name, size_t *len) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        FILE *f = fopen(path, "re");
        if (!f)
                return NULL;
        fseek(f, 0, SEEK_END);
        size_t n = (size_t)ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *in = malloc(n), *out = malloc(8 << 20);
        if (!in || !out || fread(in, 1, n, f) != n) {
                fclose(f);
                return NULL;
        }
        fclose(f);
        size_t r = ZSTD_decompress(out, 8 << 20, in, n);
        free(in);
        if (ZSTD_isError(r))
                return NULL;
        *len = r;
        return out;
}

static uint64_t hash(const uint8_t *p) {
        uint64_t h = 0xcbf29ce484222325ull;
        for (size_t i = 0; i < ZSWAP_PAGE_SIZE; i += 8) {
                h ^= *(const uint64_t *)(p + i);
                h *= 0x100000001b3ull;
        }
        return h;
}

int main(int argc, char **argv) {
        static const struct option opts[] = { { "socket", required_argument, NULL, 's' },
                                              { "size", required_argument, NULL, 'm' },
                                              { "corpus", required_argument, NULL, 'c' },
                                              {} };
        const char *sock = NULL, *dir = "../shared/corpus";
        const char *names[] = { "pyheap-8M.bin.zst", "nodeheap-8M.bin.zst", "javaheap-8M.bin.zst" };
        size_t mb = 1024, lens[3];
        uint8_t *parts[3];
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
        for (int i = 0; i < 3; i++)
                if (!(parts[i] = load(dir, names[i], &lens[i]))) {
                        fprintf(stderr, "cannot load %s/%s\n", dir, names[i]);
                        return 1;
                }
        size_t len = mb << 20, npages = len / ZSWAP_PAGE_SIZE;
        uint8_t *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        uint64_t *h = malloc(npages * sizeof(uint64_t));
        if (buf == MAP_FAILED || !h)
                return 1;
        for (size_t i = 0; i < npages; i++) {
                int k = (int)(i % 3);
                size_t src = (i / 3) % (lens[k] / ZSWAP_PAGE_SIZE);
                memcpy(buf + i * ZSWAP_PAGE_SIZE, parts[k] + src * ZSWAP_PAGE_SIZE, ZSWAP_PAGE_SIZE);
                h[i] = hash(buf + i * ZSWAP_PAGE_SIZE);
        }
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
        size_t bad = 0;
        t0 = now_ns();
        for (size_t i = 0; i < npages; i++)
                bad += hash(buf + i * ZSWAP_PAGE_SIZE) != h[i];
        double secs = (double)(now_ns() - t0) / 1e9;
        proc_status_kb(0, "RssAnon", &rss2);
        printf("read back %zu pages in %.2f s (%.0f MB/s): %zu differ; RssAnon %llu MiB\n", npages, secs,
               (double)len / 1e6 / secs, bad, (unsigned long long)(rss2 >> 20));
        zswap_disconnect(c);
        return bad ? 1 : 0;
}
