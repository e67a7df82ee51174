/*
 * corpus.c: load the heap dumps and lay them over benchmark buffers.
 *
 * The dumps are standard zstd frames of exactly CORPUS_FILE_PAGES pages each;
 * anything else is rejected rather than padded, so every run of the benchmark
 * on any machine compresses the same bytes. The decompressed corpus (24 MiB)
 * lives in one malloc'ed block, file after file.
 *
 * A buffer of any size is filled by cycling through the 6144 corpus pages,
 * taking python, node and java pages in turn, so that every stretch of the
 * buffer holds the same mix (a pageout or fault pass that stops early still
 * saw representative data) and neighbouring pages come from different heaps
 * (no help from the data's locality for whoever prefetches neighbours).
 *
 * Verification compares per-page checksums with the ones computed at load
 * time: reading the pages back is what the benchmark needs to prove, and a
 * checksum costs one pass over the page, like a memcmp, without keeping a
 * second copy of the buffer.
 *
 * Single-threaded; nothing here keeps state outside the Corpus object.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "corpus.h"

#define FILE_BYTES ((size_t)CORPUS_FILE_PAGES * ZSWAP_PAGE_SIZE)

/* In the order the fill takes them. */
static const char *const corpus_names[CORPUS_FILES] = {
        "pyheap-8M.bin.zst",
        "nodeheap-8M.bin.zst",
        "javaheap-8M.bin.zst",
};

static bool corpus_dir_ok(const char *dir) {
        _cleanup_free_ char *p = NULL;

        if (!dir || asprintf(&p, "%s/%s", dir, corpus_names[0]) < 0)
                return false;
        return access(p, R_OK) == 0;
}

int corpus_find_dir(const char *exe_dir, char **ret) {
        _cleanup_free_ char *beside_build = NULL;
        const char *candidates[4] = { getenv("ZSWAP_CORPUS") };
        size_t n = 1;

#ifdef BENCH_CORPUS_DIR
        candidates[n++] = BENCH_CORPUS_DIR;
#endif
        /* exe_dir is <repo>/<builddir>/bench; the corpus is <repo>/../shared/corpus */
        if (exe_dir && asprintf(&beside_build, "%s/../../../shared/corpus", exe_dir) >= 0)
                candidates[n++] = beside_build;
        candidates[n++] = "../shared/corpus";

        for (size_t i = 0; i < n; i++) {
                if (!corpus_dir_ok(candidates[i]))
                        continue;
                *ret = realpath(candidates[i], NULL);
                return *ret ? 0 : -ENOMEM;
        }
        return -ENOENT;
}

static int read_file(const char *path, void **ret, size_t *ret_size) {
        _cleanup_close_ int fd = -1;
        _cleanup_free_ void *buf = NULL;
        struct stat st;
        size_t done = 0;

        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0)
                return -errno;
        buf = malloc(st.st_size ? (size_t)st.st_size : 1);
        if (!buf)
                return -ENOMEM;
        while (done < (size_t)st.st_size) {
                ssize_t k = read(fd, (uint8_t *)buf + done, st.st_size - done);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return -errno;
                if (k == 0)
                        return -EIO; /* shrank under us */
                done += k;
        }
        *ret = TAKE_PTR(buf);
        *ret_size = done;
        return 0;
}

/* Decompress one whole file of frames into dst, which must end up exactly full. */
static int decompress_exact(const void *src, size_t src_size, void *dst, size_t dst_size) {
        ZSTD_DCtx *dctx = ZSTD_createDCtx();
        ZSTD_inBuffer in = { src, src_size, 0 };
        ZSTD_outBuffer out = { dst, dst_size, 0 };
        size_t r = 1;
        int ret = 0;

        if (!dctx)
                return -ENOMEM;
        /* Streaming copes with frames that do not record their content size. */
        while (in.pos < in.size && out.pos < out.size) {
                r = ZSTD_decompressStream(dctx, &out, &in);
                if (ZSTD_isError(r)) {
                        ret = -EBADMSG;
                        break;
                }
        }
        /* Full output, all input consumed, last frame complete: nothing more, nothing less. */
        if (ret == 0 && (out.pos != out.size || in.pos != in.size || r != 0))
                ret = -EBADMSG;
        ZSTD_freeDCtx(dctx);
        return ret;
}

int corpus_load(const char *dir, Corpus **ret) {
        Corpus *c;
        int r = 0;

        c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        c->data = aligned_alloc(ZSWAP_PAGE_SIZE, CORPUS_FILES * FILE_BYTES);
        if (!c->data) {
                corpus_free(c);
                return -ENOMEM;
        }
        for (size_t f = 0; f < CORPUS_FILES && r == 0; f++) {
                _cleanup_free_ char *path = NULL;
                _cleanup_free_ void *src = NULL;
                size_t src_size = 0;

                if (asprintf(&path, "%s/%s", dir, corpus_names[f]) < 0) {
                        r = -ENOMEM;
                        break;
                }
                r = read_file(path, &src, &src_size);
                if (r == 0)
                        r = decompress_exact(src, src_size, c->data + f * FILE_BYTES, FILE_BYTES);
        }
        if (r < 0) {
                corpus_free(c);
                return r;
        }
        for (size_t i = 0; i < CORPUS_PAGES; i++)
                c->sums[i] = corpus_checksum(c->data + i * ZSWAP_PAGE_SIZE);
        *ret = c;
        return 0;
}

Corpus *corpus_free(Corpus *c) {
        if (!c)
                return NULL;
        free(c->data);
        free(c);
        return NULL;
}

size_t corpus_index(size_t i) {
        size_t file = i % CORPUS_FILES;
        size_t page = (i / CORPUS_FILES) % CORPUS_FILE_PAGES;

        return file * CORPUS_FILE_PAGES + page;
}

void corpus_fill(const Corpus *c, void *buf, size_t n_pages) {
        for (size_t i = 0; i < n_pages; i++)
                memcpy((uint8_t *)buf + i * ZSWAP_PAGE_SIZE,
                       c->data + corpus_index(i) * ZSWAP_PAGE_SIZE, ZSWAP_PAGE_SIZE);
}

size_t corpus_verify(const Corpus *c, const void *buf, size_t n_pages, size_t *first_bad) {
        size_t bad = 0;

        for (size_t i = 0; i < n_pages; i++) {
                if (corpus_checksum((const uint8_t *)buf + i * ZSWAP_PAGE_SIZE) ==
                    c->sums[corpus_index(i)])
                        continue;
                if (bad++ == 0 && first_bad)
                        *first_bad = i;
        }
        return bad;
}

static inline uint64_t rotl64(uint64_t x, unsigned r) {
        return (x << r) | (x >> (64 - r));
}

/*
 * FNV-1a over 64-bit words in four independent lanes (so the multiplies
 * overlap), with a rotation after each multiply: plain FNV on words never
 * moves a high bit down, so two flips of the same high bit would cancel. The
 * lanes are folded together and finished with the splitmix64 mixer.
 */
uint64_t corpus_checksum(const void *page) {
        const uint64_t prime = 0x100000001b3ULL;
        uint64_t h[4] = {
                0xcbf29ce484222325ULL, 0x84222325cbf29ce4ULL,
                0x9e3779b97f4a7c15ULL, 0xbf58476d1ce4e5b9ULL,
        };
        const uint8_t *p = page;
        uint64_t x = 0;

        for (size_t off = 0; off < ZSWAP_PAGE_SIZE; off += 4 * sizeof(uint64_t)) {
                for (size_t l = 0; l < 4; l++) {
                        uint64_t w;

                        memcpy(&w, p + off + l * sizeof(w), sizeof(w));
                        h[l] = rotl64((h[l] ^ w) * prime, 29);
                }
        }
        for (size_t l = 0; l < 4; l++)
                x = rotl64((x ^ h[l]) * prime, 31);
        x ^= x >> 30;
        x *= 0xbf58476d1ce4e5b9ULL;
        x ^= x >> 27;
        x *= 0x94d049bb133111ebULL;
        return x ^ (x >> 31);
}

/* Fisher-Yates driven by splitmix64: the same order on every machine. */
void corpus_shuffle(size_t *perm, size_t n, uint64_t seed) {
        for (size_t i = 0; i < n; i++)
                perm[i] = i;
        for (size_t i = n ? n - 1 : 0; i > 0; i--) {
                uint64_t x = (seed += 0x9e3779b97f4a7c15ULL);
                size_t j, t;

                x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
                x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
                j = (x ^ (x >> 31)) % (i + 1);
                t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
        }
}
