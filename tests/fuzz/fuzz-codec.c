/*
 * fuzz-codec.c: the page codecs (common/codec.c), both ways.
 *
 * Input: byte 0 picks the codec (bit 0: lz4 or zstd), byte 1 the level
 * (0..22, as zswapd.conf allows), byte 2 the room for the compressed page
 * (0: 3/4 of a page, the daemon's own bound; else 16 bytes a step); the
 * rest is the material. The page is the material repeated over 4096
 * bytes (all zeros if there is none); a seed of 3 + 4096 bytes is one
 * exact page, such as a real heap page from shared/corpus.
 *
 *  - Round trip: codec_compress() into a buffer of exactly that room
 *    returns a size in (0, room] or -ENOSPC, and if it fits,
 *    codec_decompress() gives back the same page.
 *  - Corruption: the material, as it is, is handed to both decompressors
 *    as a stored object (what a flipped bit in the pool would be): the
 *    answer is 0 or -EBADMSG, and neither the object nor the 4096-byte
 *    page is read or written past (guard pages, below). A real compressed page as the
 *    material makes a seed whose mutations reach deep into the decoders.
 *
 * lz4 and zstd are the system's shared libraries, built without ASan: a
 * write or read past a buffer from inside them is invisible to it. So
 * every buffer a codec touches ends where an inaccessible page begins
 * (guarded()), and the page written by the decoder has one before it too:
 * an overrun faults whatever built the code. (Nor does libFuzzer see
 * their branches: coverage guides only through codec.c; docs/fuzzing.md.)
 *
 * Contexts are made once per codec and level and reused, as the daemon's
 * workers and fault threads reuse theirs.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "codec.h"
#include "fuzz.h"
#include "macro.h"

#define LEVELS 23

static CodecCCtx *cctx[2][LEVELS];
static CodecDCtx *dctx[2];

/* Guarded areas, made once: [guard][cap bytes][guard], cap a page multiple. */
enum { AREA_SRC, AREA_DST, AREA_PAGE, _AREA_MAX };
static uint8_t *area[_AREA_MAX];
static const size_t area_cap[_AREA_MAX] = { 2 * ZSWAP_PAGE_SIZE, ZSWAP_PAGE_SIZE, ZSWAP_PAGE_SIZE };

/* size bytes that end where the second guard page begins */
static uint8_t *guarded(int a, size_t size) {
        if (!area[a]) {
                uint8_t *p = mmap(NULL, area_cap[a] + 2 * ZSWAP_PAGE_SIZE, PROT_READ | PROT_WRITE,
                                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                FUZZ_CHECK(p != MAP_FAILED, "mmap: %m");
                FUZZ_CHECK(mprotect(p, ZSWAP_PAGE_SIZE, PROT_NONE) == 0 &&
                                   mprotect(p + ZSWAP_PAGE_SIZE + area_cap[a], ZSWAP_PAGE_SIZE, PROT_NONE) == 0,
                           "mprotect: %m");
                area[a] = p + ZSWAP_PAGE_SIZE;
        }
        FUZZ_CHECK(size <= area_cap[a], "area %d: %zu bytes", a, size);
        return area[a] + area_cap[a] - size;
}

static CodecCCtx *cctx_get(CodecKind k, int level) {
        if (!cctx[k][level])
                FUZZ_CHECK(codec_cctx_new(k, level, &cctx[k][level]) == 0, "codec_cctx_new(%d, %d)", k, level);
        return cctx[k][level];
}

static CodecDCtx *dctx_get(CodecKind k) {
        if (!dctx[k])
                FUZZ_CHECK(codec_dctx_new(k, &dctx[k]) == 0, "codec_dctx_new(%d)", k);
        return dctx[k];
}

static void round_trip(CodecKind k, int level, size_t room, const uint8_t *page) {
        uint8_t *dst = guarded(AREA_DST, room), *back = guarded(AREA_PAGE, ZSWAP_PAGE_SIZE);
        int n;

        n = codec_compress(cctx_get(k, level), page, dst, room);
        FUZZ_CHECK(n == -ENOSPC || (n > 0 && (size_t)n <= room), "%s level %d: compress into %zu = %d",
                   codec_to_string(k), level, room, n);
        if (n > 0) {
                int r = codec_decompress(dctx_get(k), dst, (size_t)n, back);
                FUZZ_CHECK(r == 0, "%s level %d: its own %d bytes do not decompress: %d", codec_to_string(k), level,
                           n, r);
                FUZZ_CHECK(memcmp(back, page, ZSWAP_PAGE_SIZE) == 0, "%s level %d: the round trip changed the page",
                           codec_to_string(k), level);
        }
}

static void corrupt(CodecKind k, const uint8_t *src, size_t len) {
        uint8_t *page = guarded(AREA_PAGE, ZSWAP_PAGE_SIZE);
        int r;

        r = codec_decompress(dctx_get(k), src, len, page);
        FUZZ_CHECK(r == 0 || r == -EBADMSG, "%s: decompress of %zu raw bytes = %d", codec_to_string(k), len, r);
        FUZZ_CHECK(r == -EBADMSG || (len > 0 && len <= ZSWAP_PAGE_SIZE), "%s: accepted %zu bytes",
                   codec_to_string(k), len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        uint8_t page[ZSWAP_PAGE_SIZE] = { 0 };
        const uint8_t *mat = data + 3;
        size_t nmat, room;
        CodecKind k;
        int level;
        uint8_t *copy;

        if (size < 3 || size > 3 + 2 * ZSWAP_PAGE_SIZE)
                return 0;
        k = data[0] & 1 ? CODEC_ZSTD : CODEC_LZ4;
        level = data[1] % LEVELS;
        room = data[2] ? (size_t)data[2] * 16 : ZSWAP_PAGE_SIZE * 3 / 4;
        nmat = size - 3;
        for (size_t i = 0; nmat && i < ZSWAP_PAGE_SIZE; i += MIN(nmat, ZSWAP_PAGE_SIZE - i))
                memcpy(page + i, mat, MIN(nmat, ZSWAP_PAGE_SIZE - i));
        round_trip(k, level, room, page);

        /* the object ends at a guard page: a read past it faults */
        copy = guarded(AREA_SRC, nmat);
        memcpy(copy, mat, nmat);
        corrupt(CODEC_LZ4, copy, nmat);
        corrupt(CODEC_ZSTD, copy, nmat);
        return 0;
}
