/*
 * codec.c: lz4 and zstd page codecs.
 *
 * Compression contexts belong to one worker thread each. Decompression is
 * on the fault path: lz4 decompression is stateless, so every thread uses
 * LZ4_decompress_safe() directly with no context and no lock (the design
 * of the kernel's shared zram decompression streams). zstd keeps a
 * ZSTD_DCtx per thread. Both decoders are bounds-checked: a corrupted
 * object yields -EBADMSG, never a wild read or write.
 */
#include <lz4.h>
#include <stdlib.h>
#include <string.h>
/* ZSTD_createDCtx_advanced(): a context in memory of the caller's */
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include "codec.h"
#include "macro.h"

struct CodecCCtx {
        CodecKind kind;
        int level;
        ZSTD_CCtx *zc;
        void *lz4_state;
};

struct CodecDCtx {
        CodecKind kind;
        ZSTD_DCtx *zd;
        const CodecAlloc *a; /* NULL: malloc() */
};

int codec_from_string(const char *s, CodecKind *ret) {
        if (strcmp(s, "lz4") == 0)
                *ret = CODEC_LZ4;
        else if (strcmp(s, "zstd") == 0)
                *ret = CODEC_ZSTD;
        else
                return -EINVAL;
        return 0;
}

const char *codec_to_string(CodecKind k) {
        return k == CODEC_ZSTD ? "zstd" : "lz4";
}

CodecCCtx *codec_cctx_free(CodecCCtx *c) {
        if (!c)
                return NULL;
        ZSTD_freeCCtx(c->zc);
        free(c->lz4_state);
        free(c);
        return NULL;
}

int codec_cctx_new(CodecKind kind, int level, CodecCCtx **ret) {
        CodecCCtx *c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        c->kind = kind;
        c->level = level;
        if (kind == CODEC_ZSTD) {
                c->zc = ZSTD_createCCtx();
                if (!c->zc || ZSTD_isError(ZSTD_CCtx_setParameter(c->zc, ZSTD_c_compressionLevel, level ? level : 1))) {
                        codec_cctx_free(c);
                        return -ENOMEM;
                }
                /* a page is a whole frame; drop what we never read back */
                ZSTD_CCtx_setParameter(c->zc, ZSTD_c_contentSizeFlag, 0);
                ZSTD_CCtx_setParameter(c->zc, ZSTD_c_checksumFlag, 0);
                ZSTD_CCtx_setParameter(c->zc, ZSTD_c_dictIDFlag, 0);
        } else {
                c->lz4_state = malloc(LZ4_sizeofState());
                if (!c->lz4_state) {
                        codec_cctx_free(c);
                        return -ENOMEM;
                }
        }
        *ret = c;
        return 0;
}

int codec_compress(CodecCCtx *c, const void *page, void *dst, size_t dst_cap) {
        if (c->kind == CODEC_ZSTD) {
                size_t n = ZSTD_compress2(c->zc, dst, dst_cap, page, ZSWAP_PAGE_SIZE);
                if (ZSTD_isError(n))
                        return -ENOSPC;
                return (int)n;
        }
        int n = LZ4_compress_fast_extState(c->lz4_state, page, dst, (int)ZSWAP_PAGE_SIZE, (int)dst_cap,
                                           c->level > 1 ? c->level : 1);
        return n > 0 ? n : -ENOSPC;
}

CodecDCtx *codec_dctx_free(CodecDCtx *d) {
        if (!d)
                return NULL;
        ZSTD_freeDCtx(d->zd);
        if (d->a)
                d->a->free(d);
        else
                free(d);
        return NULL;
}

static void *zstd_alloc(void *opaque, size_t n) {
        return ((const CodecAlloc *)opaque)->alloc(n);
}

static void zstd_free(void *opaque, void *p) {
        if (p)
                ((const CodecAlloc *)opaque)->free(p);
}

int codec_dctx_new_in(CodecKind kind, const CodecAlloc *a, CodecDCtx **ret) {
        CodecDCtx *d = a ? a->alloc(sizeof(*d)) : calloc(1, sizeof(*d));
        if (!d)
                return -ENOMEM;
        d->kind = kind;
        d->a = a;
        if (kind == CODEC_ZSTD) {
                /* the const is zstd's to keep: it only passes opaque back */
                d->zd = a ? ZSTD_createDCtx_advanced((ZSTD_customMem){ zstd_alloc, zstd_free, (void *)a })
                          : ZSTD_createDCtx();
                if (!d->zd) {
                        codec_dctx_free(d);
                        return -ENOMEM;
                }
        }
        *ret = d;
        return 0;
}

int codec_dctx_new(CodecKind kind, CodecDCtx **ret) {
        return codec_dctx_new_in(kind, NULL, ret);
}

int codec_decompress(CodecDCtx *d, const void *src, size_t len, void *page) {
        if (len == 0 || len > ZSWAP_PAGE_SIZE)
                return -EBADMSG;
        if (d->kind == CODEC_ZSTD) {
                size_t n = ZSTD_decompressDCtx(d->zd, page, ZSWAP_PAGE_SIZE, src, len);
                return !ZSTD_isError(n) && n == ZSWAP_PAGE_SIZE ? 0 : -EBADMSG;
        }
        int n = LZ4_decompress_safe(src, page, (int)len, (int)ZSWAP_PAGE_SIZE);
        return n == (int)ZSWAP_PAGE_SIZE ? 0 : -EBADMSG;
}

bool page_same_filled(const void *page, uint32_t *fill) {
        const uint64_t *w = page;
        uint64_t first = w[0];

        if ((uint32_t)first != (uint32_t)(first >> 32))
                return false;
        /* compare the last word first: most pages differ there, cheaply */
        if (w[ZSWAP_PAGE_SIZE / 8 - 1] != first)
                return false;
        for (size_t i = 1; i < ZSWAP_PAGE_SIZE / 8 - 1; i++)
                if (w[i] != first)
                        return false;
        *fill = (uint32_t)first;
        return true;
}

void page_fill(void *page, uint32_t fill) {
        uint64_t v = (uint64_t)fill << 32 | fill, *w = page;
        for (size_t i = 0; i < ZSWAP_PAGE_SIZE / 8; i++)
                w[i] = v;
}
