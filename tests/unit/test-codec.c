/*
 * test-codec: the page codec on real heap pages and on hostile input.
 *
 * Every page of the corpus ($ZSWAP_CORPUS, three zstd-compressed heap
 * dumps; TEST_CORPUS_PAGES of each file when set, which the valgrind run
 * uses) goes through lz4 and zstd and comes back byte for byte. The
 * decoder is fed truncated, extended, bit-flipped, random, empty and
 * oversized input: it must fail on anything that is not one whole 4 KiB
 * page and never read or write out of bounds: inputs and outputs end
 * right before a PROT_NONE page, so an overrun faults even inside the
 * (uninstrumented) lz4 and zstd libraries; under ASan the rest is checked
 * too. Same-filled detection is checked at every byte position, and
 * incompressible data must give -ENOSPC.
 *
 * Dictionaries: one trained on the python heap round-trips its pages, a
 * frame made with it fails without it, one that does not fit leaves the
 * context as it was (the next plain frame decodes without the
 * dictionary, even once it is freed), and a dictionary zstd cannot parse
 * is refused.
 */
#include <zdict.h>
#include <lz4.h>
#include <sys/mman.h>
#include <zstd.h>

#include "codec.h"
#include "crc32c.h"
#include "corpus.h"
#include "macro.h"
#include "test.h"

#define PAGE ZSWAP_PAGE_SIZE

static uint64_t rng = 0x243f6a8885a308d3ull;

static uint64_t next_rand(void) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return rng;
}

static void fill_random(uint8_t *p, size_t n) {
        for (size_t i = 0; i < n; i++)
                p[i] = (uint8_t)next_rand();
}

/* A buffer of len bytes that ends where an inaccessible page begins. */
static uint8_t *guarded_new(size_t len) {
        size_t span = ALIGN_TO(len ? len : 1, PAGE);
        uint8_t *base = mmap(NULL, span + 2 * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        ASSERT_TRUE(base != MAP_FAILED);
        ASSERT_OK(mprotect(base + PAGE, span, PROT_READ | PROT_WRITE));
        return base + PAGE + span - len;
}

static void guarded_free(uint8_t *p, size_t len) {
        size_t span = ALIGN_TO(len ? len : 1, PAGE);
        ASSERT_OK(munmap(p + len - span - PAGE, span + 2 * PAGE));
}

/* ---- corpus ---- */

typedef struct Source {
        const char *name;
        uint8_t *data;
        size_t npages;
} Source;

static Source corpus[3] = { { .name = "pyheap-8M.bin.zst" },
                             { .name = "nodeheap-8M.bin.zst" },
                             { .name = "javaheap-8M.bin.zst" } };
static Corpus *shared;

static bool sources_load(void) {
        _cleanup_free_ char *dir = NULL;

        if (corpus_find_dir(NULL, &dir) < 0 || corpus_load(dir, &shared) < 0) {
                fprintf(stderr, "corpus missing: synthetic pages instead\n");
                return false;
        }
        /* the shared loader keeps the files one after the other */
        size_t npages = MIN(test_env_uint("TEST_CORPUS_PAGES", CORPUS_FILE_PAGES), CORPUS_FILE_PAGES);
        ASSERT_TRUE(npages > 0);
        for (size_t i = 0; i < ELEMENTSOF(corpus); i++) {
                corpus[i].npages = npages;
                corpus[i].data = malloc(CORPUS_FILE_PAGES * PAGE);
                ASSERT_TRUE(corpus[i].data);
                memcpy(corpus[i].data, shared->data + i * CORPUS_FILE_PAGES * PAGE, CORPUS_FILE_PAGES * PAGE);
        }
        shared = corpus_free(shared);
        return true;
}

static void corpus_synthesize(void) {
        for (size_t i = 0; i < ELEMENTSOF(corpus); i++) {
                corpus[i].npages = 256;
                corpus[i].data = malloc(corpus[i].npages * PAGE);
                for (size_t p = 0; p < corpus[i].npages * PAGE; p += 8) {
                        uint64_t w = next_rand() % 64; /* small integers, like pointers' low bits */
                        memcpy(corpus[i].data + p, &w, 8);
                }
        }
}

/* ---- round trips ---- */

/* Decode src[0..len) from a guarded copy; return the result. */
static int decode_exact(CodecDCtx *dc, const uint8_t *src, size_t len, uint8_t *out) {
        uint8_t *copy = guarded_new(len);
        memcpy(copy, src, len);
        int r = codec_decompress(dc, copy, len, out);
        guarded_free(copy, len);
        ASSERT_TRUE(r == 0 || r == -EBADMSG);
        return r;
}

static const struct {
        CodecKind kind;
        int level;
} codecs[] = { { CODEC_LZ4, 0 }, { CODEC_LZ4, 4 }, { CODEC_ZSTD, 1 }, { CODEC_ZSTD, 3 } };

static void round_trip_corpus(CodecKind kind, int level) {
        CodecCCtx *cc;
        CodecDCtx *dc;
        uint8_t *dst = guarded_new(PAGE), *out = guarded_new(PAGE), *src = malloc(PAGE + 1);

        ASSERT_OK(codec_cctx_new(kind, level, &cc));
        ASSERT_OK(codec_dctx_new(kind, &dc));
        for (size_t c = 0; c < ELEMENTSOF(corpus); c++) {
                uint64_t in = 0, outb = 0, fits = 0, nospc = 0;
                for (size_t p = 0; p < corpus[c].npages; p++) {
                        const uint8_t *page = corpus[c].data + p * PAGE;
                        int n = codec_compress(cc, page, dst, PAGE);
                        if (n == -ENOSPC) {
                                nospc++;
                                continue;
                        }
                        ASSERT_TRUE(n > 0 && (size_t)n <= PAGE);
                        memset(out, 0xcc, PAGE);
                        ASSERT_OK(codec_decompress(dc, dst, (size_t)n, out));
                        if (memcmp(out, page, PAGE) != 0)
                                test_fail("%s level %d: %s page %zu differs after round trip", codec_to_string(kind),
                                          level, corpus[c].name, p);
                        /* the object in a guarded buffer: a decoder that reads
                         * past its input faults */
                        memset(out, 0xcc, PAGE);
                        ASSERT_OK(decode_exact(dc, dst, (size_t)n, out));
                        ASSERT_EQ(memcmp(out, page, PAGE), 0);
                        /* one byte short, one byte long: never a page */
                        if (n > 1)
                                ASSERT_ERROR(decode_exact(dc, dst, (size_t)n - 1, out), EBADMSG);
                        memcpy(src, dst, (size_t)n);
                        src[n] = 0;
                        if ((size_t)n < PAGE)
                                ASSERT_ERROR(codec_decompress(dc, src, (size_t)n + 1, out), EBADMSG);
                        in += PAGE;
                        outb += (uint64_t)n;
                        fits += (size_t)n <= PAGE * 3 / 4;
                }
                ASSERT_TRUE(outb > 0);
                fprintf(stderr, "%-4s level %d  %-20s %5zu pages: ratio %.2f, %" PRIu64 " fit in 3/4 page, %" PRIu64
                                " incompressible\n",
                        codec_to_string(kind), level, corpus[c].name, corpus[c].npages, (double)in / (double)outb,
                        fits, nospc);
                /* heap pages compress; if most did not, the codec is broken */
                ASSERT_TRUE(fits * 2 > corpus[c].npages);
        }
        codec_cctx_free(cc);
        codec_dctx_free(dc);
        guarded_free(dst, PAGE);
        guarded_free(out, PAGE);
        free(src);
}

/* ---- hostile input ---- */

static void hostile(CodecKind kind) {
        CodecCCtx *cc;
        CodecDCtx *dc;
        uint8_t *obj = malloc(PAGE), *out = guarded_new(PAGE), *big = malloc(4 * PAGE), *garbage = malloc(2 * PAGE);
        uint64_t flips = 0, flips_undetected = 0; /* undetected: decoded to some page */

        ASSERT_OK(codec_cctx_new(kind, 1, &cc));
        ASSERT_OK(codec_dctx_new(kind, &dc));

        /* lengths that cannot be a page, whatever the bytes */
        fill_random(garbage, 2 * PAGE);
        ASSERT_ERROR(codec_decompress(dc, garbage, 0, out), EBADMSG);
        ASSERT_ERROR(codec_decompress(dc, garbage, PAGE + 1, out), EBADMSG);
        ASSERT_ERROR(codec_decompress(dc, garbage, 2 * PAGE, out), EBADMSG);
        ASSERT_ERROR(codec_decompress(dc, garbage, SIZE_MAX, out), EBADMSG);

        /* random garbage of every size class */
        for (int i = 0; i < 20000; i++) {
                size_t len = 1 + next_rand() % (i < 10000 ? 64 : PAGE);
                fill_random(garbage, len);
                ASSERT_ERROR(decode_exact(dc, garbage, len, out), EBADMSG);
        }

        /* valid frames of the wrong size: half a page, two pages */
        fill_random(big, 4 * PAGE);
        for (size_t i = 0; i < 4 * PAGE; i++)
                big[i] &= 7;
        for (size_t sz = PAGE / 2; sz <= 2 * PAGE; sz += PAGE / 2) {
                int n;
                if (kind == CODEC_ZSTD) {
                        size_t z = ZSTD_compress(garbage, 2 * PAGE, big, sz, 1);
                        ASSERT_TRUE(!ZSTD_isError(z));
                        n = (int)z;
                } else
                        n = LZ4_compress_default((const char *)big, (char *)garbage, (int)sz, 2 * PAGE);
                ASSERT_TRUE(n > 0);
                if ((size_t)n > PAGE)
                        continue;
                if (sz == PAGE)
                        ASSERT_OK(decode_exact(dc, garbage, (size_t)n, out));
                else
                        ASSERT_ERROR(decode_exact(dc, garbage, (size_t)n, out), EBADMSG);
        }

        /* real objects: every truncation fails, flips never go out of
         * bounds (TEST_CODEC_OBJECTS of them, 24) */
        unsigned nobj = test_env_uint("TEST_CODEC_OBJECTS", 24);
        for (size_t k = 0; k < nobj; k++) {
                const Source *c = &corpus[k % 3];
                const uint8_t *page = c->data + (next_rand() % c->npages) * PAGE;
                int n = codec_compress(cc, page, obj, PAGE);
                if (n <= 0)
                        continue;
                for (int len = 1; len < n; len++)
                        ASSERT_ERROR(decode_exact(dc, obj, (size_t)len, out), EBADMSG);
                for (int pos = 0; pos < n; pos++) {
                        uint8_t saved = obj[pos];
                        obj[pos] ^= (uint8_t)(1u << (next_rand() % 8));
                        int r = decode_exact(dc, obj, (size_t)n, out);
                        obj[pos] = saved;
                        flips++;
                        /* a flipped literal byte still decodes (neither lz4 nor
                         * checksum-less zstd can tell), into exactly one page */
                        flips_undetected += r == 0;
                        /* the zstd magic number is always checked */
                        if (kind == CODEC_ZSTD && pos < 4)
                                ASSERT_EQ(r, -EBADMSG);
                }
                ASSERT_OK(decode_exact(dc, obj, (size_t)n, out));
                ASSERT_EQ(memcmp(out, page, PAGE), 0);
        }
        fprintf(stderr, "%s: %" PRIu64 " single-bit flips, %" PRIu64 " decoded to a page (undetectable without a checksum)\n",
                codec_to_string(kind), flips, flips_undetected);
        codec_cctx_free(cc);
        codec_dctx_free(dc);
        free(obj);
        guarded_free(out, PAGE);
        free(big);
        free(garbage);
}

static void incompressible(CodecKind kind, int level) {
        CodecCCtx *cc;
        uint8_t *page = malloc(PAGE);

        ASSERT_OK(codec_cctx_new(kind, level, &cc));
        for (int i = 0; i < 64; i++) {
                fill_random(page, PAGE);
                /* guarded destinations: writing past dst_cap faults */
                static const size_t caps[] = { 3072, 2048, 16, 1 };
                for (size_t j = 0; j < ELEMENTSOF(caps); j++) {
                        uint8_t *dst = guarded_new(caps[j]);
                        ASSERT_ERROR(codec_compress(cc, page, dst, caps[j]), ENOSPC);
                        guarded_free(dst, caps[j]);
                }
        }
        /* a compressible page that still does not fit a tiny buffer */
        memset(page, 'x', PAGE);
        page[100] = 'y';
        uint8_t *tiny = guarded_new(4);
        ASSERT_ERROR(codec_compress(cc, page, tiny, 4), ENOSPC);
        guarded_free(tiny, 4);
        codec_cctx_free(cc);
        free(page);
}

/* ---- same-filled pages ---- */

static void same_filled(void) {
        uint64_t *w = malloc(PAGE);
        uint8_t *p = (uint8_t *)w;
        uint32_t fill;

        memset(p, 0, PAGE);
        fill = 1;
        ASSERT_TRUE(page_same_filled(p, &fill));
        ASSERT_EQ(fill, 0);
        memset(p, 0xa5, PAGE);
        ASSERT_TRUE(page_same_filled(p, &fill));
        ASSERT_EQ(fill, 0xa5a5a5a5);

        static const uint32_t patterns[] = { 0xdeadbeef, 1, 0x80000000, UINT32_MAX, 0x00ff00ff };
        for (size_t i = 0; i < ELEMENTSOF(patterns); i++) {
                page_fill(p, patterns[i]);
                for (size_t k = 0; k < PAGE / 4; k++)
                        ASSERT_EQ(((uint32_t *)p)[k], patterns[i]);
                fill = 0;
                ASSERT_TRUE(page_same_filled(p, &fill));
                ASSERT_EQ(fill, patterns[i]);
                /* one byte off anywhere (first, middle, last word and every
                 * other position) makes it a normal page */
                for (size_t pos = 0; pos < PAGE; pos++) {
                        p[pos] ^= 0x10;
                        if (page_same_filled(p, &fill))
                                test_fail("pattern %#x with byte %zu changed taken as same-filled", patterns[i], pos);
                        p[pos] ^= 0x10;
                }
                ASSERT_TRUE(page_same_filled(p, &fill));
        }
        /* a repeated 64-bit word whose halves differ is not a 32-bit fill */
        for (size_t k = 0; k < PAGE / 8; k++)
                w[k] = 0x1111111122222222ull;
        ASSERT_TRUE(!page_same_filled(p, &fill));
        /* nor is a repeated 16-byte pattern */
        for (size_t k = 0; k < PAGE / 8; k++)
                w[k] = k & 1 ? 0x3333333333333333ull : 0x4444444444444444ull;
        ASSERT_TRUE(!page_same_filled(p, &fill));
        free(w);
}

/* CRC-32C (the second tier's checksum): the standard check value, and
 * every length and alignment against the bitwise definition, in one call
 * and split in two (the hardware and table paths both see unaligned heads
 * and tails) */
static uint32_t crc_bitwise(uint32_t crc, const uint8_t *p, size_t len) {
        crc = ~crc;
        while (len--) {
                crc ^= *p++;
                for (int k = 0; k < 8; k++)
                        crc = crc & 1 ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
        }
        return ~crc;
}

static void crc(void) {
        uint8_t buf[600];
        uint64_t s = 1;

        ASSERT_EQ(crc32c(0, "123456789", 9), 0xe3069283u);
        ASSERT_EQ(crc32c(0, "", 0), 0);
        for (size_t i = 0; i < sizeof(buf); i++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                buf[i] = (uint8_t)(s >> 56);
        }
        for (size_t off = 0; off < 9; off++)
                for (size_t len = 0; off + len <= sizeof(buf); len += 1 + len / 8) {
                        uint32_t want = crc_bitwise(0x1234u, buf + off, len);
                        ASSERT_EQ(crc32c(0x1234u, buf + off, len), want);
                        ASSERT_EQ(crc32c(crc32c(0x1234u, buf + off, len / 3), buf + off + len / 3, len - len / 3), want);
                }
}

/* A context in memory of the caller's (codec_dctx_new_in(), what libzswap
 * uses so that no byte of it is on the program's heap): every allocation,
 * zstd's own included, comes from the allocator, and all go back. */
static int allocs_live, allocs_made;

static void *count_alloc(size_t n) {
        allocs_live++;
        allocs_made++;
        return calloc(1, n);
}

static void count_free(void *p) {
        allocs_live--;
        free(p);
}

static void dctx_in(CodecKind kind) {
        static const CodecAlloc a = { count_alloc, count_free };
        uint8_t page[ZSWAP_PAGE_SIZE], out[ZSWAP_PAGE_SIZE], c[2 * ZSWAP_PAGE_SIZE];
        CodecCCtx *cc;
        CodecDCtx *d;

        allocs_live = allocs_made = 0;
        fill_random(page, 512);
        memset(page + 512, 7, sizeof(page) - 512);
        ASSERT_OK(codec_cctx_new(kind, 1, &cc));
        int n = codec_compress(cc, page, c, sizeof(c));
        ASSERT_TRUE(n > 0);
        ASSERT_OK(codec_dctx_new_in(kind, &a, &d));
        ASSERT_TRUE(allocs_made >= (kind == CODEC_ZSTD ? 2 : 1)); /* the context, and zstd's */
        ASSERT_OK(codec_decompress(d, c, (size_t)n, out));
        ASSERT_TRUE(memcmp(page, out, sizeof(page)) == 0);
        ASSERT_TRUE(codec_dctx_free(d) == NULL);
        ASSERT_EQ(allocs_live, 0);
        codec_cctx_free(cc);
}

static void dictionaries(void) {
        const Source *py = &corpus[0];
        size_t n = MIN(py->npages, (size_t)256), *sizes = calloc(n, sizeof(*sizes));
        uint8_t *dict = malloc(CODEC_DICT_MAX), *out = malloc(2 * PAGE), *back = malloc(PAGE);
        CodecDict *d, *bad;
        CodecCDict *cd;
        CodecCCtx *cc;
        CodecDCtx *dc;

        ASSERT_TRUE(sizes && dict && out && back);
        for (size_t i = 0; i < n; i++)
                sizes[i] = PAGE;
        size_t dn = ZDICT_trainFromBuffer(dict, CODEC_DICT_MAX, py->data, sizes, (unsigned)n);
        if (ZDICT_isError(dn)) {
                fprintf(stderr, "dictionaries: no dictionary trained on %zu pages (%s): skipped\n", n,
                        ZDICT_getErrorName(dn));
                goto out;
        }
        ASSERT_OK(codec_dict_new(dict, dn, &d));
        ASSERT_OK(codec_cctx_new(CODEC_ZSTD, 9, &cc));
        ASSERT_OK(codec_dctx_new(CODEC_LZ4, &dc));
        ASSERT_OK(codec_cdict_new(d, 9, &cd));
        size_t with = 0, without = 0;
        for (size_t i = 0; i < py->npages; i++) {
                const uint8_t *pg = py->data + i * PAGE;
                int m = codec_compress_cdict(cc, cd, pg, out, PAGE);
                if (m < 0)
                        continue; /* incompressible */
                ASSERT_OK(codec_decompress_dict(dc, d, out, (size_t)m, back));
                ASSERT_TRUE(memcmp(back, pg, PAGE) == 0);
                /* the store's dictionary as the library reads it: the bytes */
                CodecDict ref;
                codec_dict_init_ref(&ref, d->bytes, d->len);
                ASSERT_OK(codec_decompress_dict(dc, &ref, out, (size_t)m, back));
                ASSERT_TRUE(memcmp(back, pg, PAGE) == 0);
                ASSERT_TRUE(codec_decompress_as(dc, CODEC_ZSTD, out, (size_t)m, back) < 0);
                ASSERT_TRUE(codec_decompress_dict(dc, NULL, out, (size_t)m, back) < 0);
                with += (size_t)m;
                int p = codec_compress(cc, pg, out, PAGE);
                without += p > 0 ? (size_t)p : PAGE;
        }
        fprintf(stderr, "dictionaries: %zu bytes with a %zu-byte dictionary, %zu without\n", with, dn, without);
        ASSERT_TRUE(with < without);

        /* a frame with the dictionary that does not fit (the recompressor's
         * "no gain"), then a plain one, with the dictionary freed between:
         * the plain frame must decode without it */
        const uint8_t *pg = py->data;
        ASSERT_TRUE(codec_compress_cdict(cc, cd, pg, out, 8) < 0);
        codec_cdict_free(cd);
        int m = codec_compress(cc, pg, out, PAGE);
        ASSERT_TRUE(m > 0);
        ASSERT_OK(codec_decompress_as(dc, CODEC_ZSTD, out, (size_t)m, back));
        ASSERT_TRUE(memcmp(back, pg, PAGE) == 0);

        /* what zstd cannot parse as a dictionary is refused */
        uint8_t junk[1024];
        memcpy(junk, dict, sizeof(junk)); /* the magic, then a cut entropy table */
        ASSERT_TRUE(codec_dict_new(junk, 12, &bad) < 0);
        ASSERT_TRUE(codec_dict_new(dict, 0, &bad) < 0);
        ASSERT_TRUE(codec_dict_new(dict, CODEC_DICT_MAX + 1, &bad) < 0);
        codec_dict_unref(codec_dict_ref(d));
        codec_dict_unref(d);
        codec_cctx_free(cc);
        codec_dctx_free(dc);
out:
        free(sizes);
        free(dict);
        free(out);
        free(back);
}

int main(void) {
        CodecKind k;

        crc();
        ASSERT_OK(codec_from_string("lz4", &k));
        ASSERT_EQ(k, CODEC_LZ4);
        ASSERT_OK(codec_from_string("zstd", &k));
        ASSERT_EQ(k, CODEC_ZSTD);
        ASSERT_ERROR(codec_from_string("gzip", &k), EINVAL);
        ASSERT_ERROR(codec_from_string("", &k), EINVAL);
        ASSERT_EQ(strcmp(codec_to_string(CODEC_ZSTD), "zstd"), 0);
        ASSERT_EQ(strcmp(codec_to_string(CODEC_LZ4), "lz4"), 0);

        if (!sources_load())
                corpus_synthesize();
        for (size_t i = 0; i < ELEMENTSOF(codecs); i++)
                round_trip_corpus(codecs[i].kind, codecs[i].level);
        hostile(CODEC_LZ4);
        hostile(CODEC_ZSTD);
        for (size_t i = 0; i < ELEMENTSOF(codecs); i++)
                incompressible(codecs[i].kind, codecs[i].level);
        same_filled();
        dctx_in(CODEC_LZ4);
        dctx_in(CODEC_ZSTD);
        dictionaries();
        ASSERT_TRUE(codec_cctx_free(NULL) == NULL);
        ASSERT_TRUE(codec_dctx_free(NULL) == NULL);
        for (size_t i = 0; i < ELEMENTSOF(corpus); i++)
                free(corpus[i].data);
        fprintf(stderr, "codec: ok\n");
        return 0;
}
