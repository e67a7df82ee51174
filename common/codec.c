/*
 * codec.c: lz4 and zstd page codecs.
 *
 * Compression contexts belong to one worker thread each. Decompression is
 * on the fault path: lz4 decompression is stateless, so every thread uses
 * LZ4_decompress_safe() directly with no context and no lock (the design
 * of the kernel's shared zram decompression streams). zstd keeps a
 * ZSTD_DCtx per thread. Both decoders are bounds-checked: a corrupted
 * object yields -EBADMSG, never a wild read or write.
 *
 * Built twice (common/meson.build). The daemon's and the tools' copy calls
 * liblz4 and libzstd as linked. The client library's (CODEC_DLOPEN) loads
 * them only when a client first makes a context (codec_load()): a program
 * under the preload shim that never attaches (a short-lived process: most
 * of what a shell runs) never maps them, which costs it about 0.3 ms of
 * page faults per exec here, and the program's own symbols of the same
 * names are never bound to ours nor ours to its (RTLD_LOCAL).
 */
#include <errno.h>
#include <lz4.h>
#include <stdlib.h>
#include <string.h>
/* ZSTD_createDCtx_advanced(): a context in memory of the caller's */
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include "codec.h"
#include "macro.h"

#ifdef CODEC_DLOPEN
#include <dlfcn.h>
#include <stdatomic.h>
#include <sys/mman.h>

/* the sonames of Debian 12's liblz4-1 and libzstd1 (and of every
 * distribution since 2017) */
#define LZ4_SONAME "liblz4.so.1"
#define ZSTD_SONAME "libzstd.so.1"

/* Each function of the two libraries this file calls, by its own name. */
typedef struct DlSyms {
        __typeof__(LZ4_sizeofState) *LZ4_sizeofState;
        __typeof__(LZ4_compress_fast_extState) *LZ4_compress_fast_extState;
        __typeof__(LZ4_decompress_safe) *LZ4_decompress_safe;
        __typeof__(ZSTD_createCCtx) *ZSTD_createCCtx;
        __typeof__(ZSTD_freeCCtx) *ZSTD_freeCCtx;
        __typeof__(ZSTD_CCtx_setParameter) *ZSTD_CCtx_setParameter;
        __typeof__(ZSTD_compress2) *ZSTD_compress2;
        __typeof__(ZSTD_isError) *ZSTD_isError;
        __typeof__(ZSTD_createDCtx) *ZSTD_createDCtx;
        __typeof__(ZSTD_createDCtx_advanced) *ZSTD_createDCtx_advanced;
        __typeof__(ZSTD_freeDCtx) *ZSTD_freeDCtx;
        __typeof__(ZSTD_decompressDCtx) *ZSTD_decompressDCtx;
        __typeof__(ZSTD_decompress_usingDict) *ZSTD_decompress_usingDict;
        __typeof__(ZSTD_createDDict_byReference) *ZSTD_createDDict_byReference;
        __typeof__(ZSTD_getDictID_fromDDict) *ZSTD_getDictID_fromDDict;
        __typeof__(ZSTD_freeDDict) *ZSTD_freeDDict;
        __typeof__(ZSTD_decompress_usingDDict) *ZSTD_decompress_usingDDict;
        __typeof__(ZSTD_createCCtxParams) *ZSTD_createCCtxParams;
        __typeof__(ZSTD_CCtxParams_init) *ZSTD_CCtxParams_init;
        __typeof__(ZSTD_CCtxParams_setParameter) *ZSTD_CCtxParams_setParameter;
        __typeof__(ZSTD_createCDict_advanced2) *ZSTD_createCDict_advanced2;
        __typeof__(ZSTD_freeCCtxParams) *ZSTD_freeCCtxParams;
        __typeof__(ZSTD_freeCDict) *ZSTD_freeCDict;
        __typeof__(ZSTD_CCtx_refCDict) *ZSTD_CCtx_refCDict;
        __typeof__(ZSTD_CCtx_reset) *ZSTD_CCtx_reset;
        bool dict_ok; /* every call above from ZSTD_createDDict_byReference on */
} DlSyms;

/*
 * Published once whole (release), in a mapping of its own: the client
 * library never uses the program's heap. No lock and no pthread_once():
 * a fork taken while another thread loads would leave either held for
 * ever in the child. Two threads that load at once both dlopen() (which
 * counts references) and fill a table each; one table is published, the
 * other unmapped. A failure is not remembered: the next context tries
 * again.
 */
static _Atomic(DlSyms *) dl_syms;

#define DL_SYM(t, lib, f) (*(void **)&(t)->f = lib ? dlsym(lib, #f) : NULL) != NULL

/* 0 once both libraries are loaded; -ELIBACC if either is missing. */
static int codec_load(void) {
        if (atomic_load_explicit(&dl_syms, memory_order_acquire))
                return 0;
        void *lz4 = dlopen(LZ4_SONAME, RTLD_NOW | RTLD_LOCAL);
        void *zstd = dlopen(ZSTD_SONAME, RTLD_NOW | RTLD_LOCAL);
        DlSyms *t = mmap(NULL, sizeof(*t), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (t == MAP_FAILED)
                return -ENOMEM;
        bool ok = DL_SYM(t, lz4, LZ4_sizeofState) && DL_SYM(t, lz4, LZ4_compress_fast_extState) &&
                  DL_SYM(t, lz4, LZ4_decompress_safe) && DL_SYM(t, zstd, ZSTD_createCCtx) &&
                  DL_SYM(t, zstd, ZSTD_freeCCtx) && DL_SYM(t, zstd, ZSTD_CCtx_setParameter) &&
                  DL_SYM(t, zstd, ZSTD_compress2) && DL_SYM(t, zstd, ZSTD_isError) &&
                  DL_SYM(t, zstd, ZSTD_createDCtx) && DL_SYM(t, zstd, ZSTD_createDCtx_advanced) &&
                  DL_SYM(t, zstd, ZSTD_freeDCtx) && DL_SYM(t, zstd, ZSTD_decompressDCtx) &&
                  DL_SYM(t, zstd, ZSTD_decompress_usingDict);
        /* what only makes dictionaries and compresses with them (the
         * daemon's work; a library restoring itself decodes from the
         * bytes alone): optional, codec_dict_new() and codec_cdict_new()
         * say -ENOSYS without them. Some are zstd's experimental API */
        bool dict_ok = DL_SYM(t, zstd, ZSTD_createDDict_byReference) && DL_SYM(t, zstd, ZSTD_getDictID_fromDDict) &&
                       DL_SYM(t, zstd, ZSTD_freeDDict) && DL_SYM(t, zstd, ZSTD_decompress_usingDDict) &&
                       DL_SYM(t, zstd, ZSTD_createCCtxParams) && DL_SYM(t, zstd, ZSTD_CCtxParams_init) &&
                       DL_SYM(t, zstd, ZSTD_CCtxParams_setParameter) &&
                       DL_SYM(t, zstd, ZSTD_createCDict_advanced2) && DL_SYM(t, zstd, ZSTD_freeCCtxParams) &&
                       DL_SYM(t, zstd, ZSTD_freeCDict) && DL_SYM(t, zstd, ZSTD_CCtx_refCDict) &&
                       DL_SYM(t, zstd, ZSTD_CCtx_reset);
        t->dict_ok = dict_ok;
        DlSyms *none = NULL;
        /* the handles stay open for the process's life: contexts made
         * from them may outlive any caller */
        if (!ok || !atomic_compare_exchange_strong_explicit(&dl_syms, &none, t, memory_order_acq_rel,
                                                            memory_order_acquire))
                munmap(t, sizeof(*t));
        return ok ? 0 : -ELIBACC;
}

/* after codec_load() succeeded: its table (acquire: filled before) */
#define CALL(f) atomic_load_explicit(&dl_syms, memory_order_acquire)->f

/* codec_load(), and the calls that make and use dictionaries too. */
static int codec_load_dict(void) {
        int r = codec_load();
        return r < 0 ? r : CALL(dict_ok) ? 0 : -ENOSYS;
}
#else
static int codec_load(void) {
        return 0;
}

static int codec_load_dict(void) {
        return 0;
}

#define CALL(f) f
#endif

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
        if (c->zc)
                CALL(ZSTD_freeCCtx)(c->zc);
        free(c->lz4_state);
        free(c);
        return NULL;
}

int codec_cctx_new(CodecKind kind, int level, CodecCCtx **ret) {
        int r = codec_load();
        if (r < 0)
                return r;
        CodecCCtx *c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        c->kind = kind;
        c->level = level;
        if (kind == CODEC_ZSTD) {
                c->zc = CALL(ZSTD_createCCtx)();
                if (!c->zc || CALL(ZSTD_isError)(CALL(ZSTD_CCtx_setParameter)(c->zc, ZSTD_c_compressionLevel, level ? level : 1))) {
                        codec_cctx_free(c);
                        return -ENOMEM;
                }
                /* a page is a whole frame; drop what we never read back */
                CALL(ZSTD_CCtx_setParameter)(c->zc, ZSTD_c_contentSizeFlag, 0);
                CALL(ZSTD_CCtx_setParameter)(c->zc, ZSTD_c_checksumFlag, 0);
                CALL(ZSTD_CCtx_setParameter)(c->zc, ZSTD_c_dictIDFlag, 0);
        } else {
                c->lz4_state = malloc((size_t)CALL(LZ4_sizeofState)());
                if (!c->lz4_state) {
                        codec_cctx_free(c);
                        return -ENOMEM;
                }
        }
        *ret = c;
        return 0;
}

int codec_cctx_set_level(CodecCCtx *c, int level) {
        if (c->level == level)
                return 0;
        if (c->kind == CODEC_ZSTD &&
            CALL(ZSTD_isError)(CALL(ZSTD_CCtx_setParameter)(c->zc, ZSTD_c_compressionLevel, level ? level : 1)))
                return -EINVAL;
        c->level = level;
        return 0;
}

int codec_compress(CodecCCtx *c, const void *page, void *dst, size_t dst_cap) {
        if (c->kind == CODEC_ZSTD) {
                size_t n = CALL(ZSTD_compress2)(c->zc, dst, dst_cap, page, ZSWAP_PAGE_SIZE);
                if (CALL(ZSTD_isError)(n))
                        return -ENOSPC;
                return (int)n;
        }
        int n = CALL(LZ4_compress_fast_extState)(c->lz4_state, page, dst, (int)ZSWAP_PAGE_SIZE, (int)dst_cap,
                                           c->level > 1 ? c->level : 1);
        return n > 0 ? n : -ENOSPC;
}

CodecDCtx *codec_dctx_free(CodecDCtx *d) {
        if (!d)
                return NULL;
        if (d->zd)
                CALL(ZSTD_freeDCtx)(d->zd);
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
        int r = codec_load();
        if (r < 0)
                return r;
        CodecDCtx *d = a ? a->alloc(sizeof(*d)) : calloc(1, sizeof(*d));
        if (!d)
                return -ENOMEM;
        d->kind = kind;
        d->zd = NULL; /* a->alloc() need not zero */
        d->a = a;
        /* every context decodes zstd too: the strong tier's objects
         * (PE_STRONG) are zstd whatever the store's codec. The const is
         * zstd's to keep: it only passes opaque back */
        d->zd = a ? CALL(ZSTD_createDCtx_advanced)((ZSTD_customMem){ zstd_alloc, zstd_free, (void *)a })
                  : CALL(ZSTD_createDCtx)();
        if (!d->zd) {
                codec_dctx_free(d);
                return -ENOMEM;
        }
        *ret = d;
        return 0;
}

int codec_dctx_new(CodecKind kind, CodecDCtx **ret) {
        return codec_dctx_new_in(kind, NULL, ret);
}

int codec_decompress(CodecDCtx *d, const void *src, size_t len, void *page) {
        return codec_decompress_as(d, d->kind, src, len, page);
}

int codec_decompress_as(CodecDCtx *d, CodecKind kind, const void *src, size_t len, void *page) {
        if (len == 0 || len > ZSWAP_PAGE_SIZE)
                return -EBADMSG;
        if (kind == CODEC_ZSTD) {
                size_t n = CALL(ZSTD_decompressDCtx)(d->zd, page, ZSWAP_PAGE_SIZE, src, len);
                return !CALL(ZSTD_isError)(n) && n == ZSWAP_PAGE_SIZE ? 0 : -EBADMSG;
        }
        int n = CALL(LZ4_decompress_safe)(src, page, (int)len, (int)ZSWAP_PAGE_SIZE);
        return n == (int)ZSWAP_PAGE_SIZE ? 0 : -EBADMSG;
}

int codec_decompress_dict(CodecDCtx *d, const CodecDict *dict, const void *src, size_t len, void *page) {
        if (len == 0 || len > ZSWAP_PAGE_SIZE || !dict)
                return -EBADMSG;
        size_t n;
        if (dict->ddict)
                n = CALL(ZSTD_decompress_usingDDict)(d->zd, page, ZSWAP_PAGE_SIZE, src, len, dict->ddict);
        else
                n = CALL(ZSTD_decompress_usingDict)(d->zd, page, ZSWAP_PAGE_SIZE, src, len, dict->bytes, dict->len);
        return !CALL(ZSTD_isError)(n) && n == ZSWAP_PAGE_SIZE ? 0 : -EBADMSG;
}

void codec_dict_init_ref(CodecDict *d, const void *bytes, size_t len) {
        atomic_store_explicit(&d->refs, 1, memory_order_relaxed);
        d->len = (uint32_t)len;
        d->bytes = bytes;
        d->ddict = NULL;
}

struct CodecCDict {
        ZSTD_CDict *cd;
};

int codec_dict_new(const void *bytes, size_t len, CodecDict **ret) {
        int r = codec_load_dict();
        if (r < 0)
                return r;
        if (len == 0 || len > CODEC_DICT_MAX)
                return -EINVAL;
        CodecDict *d = malloc(sizeof(*d) + len);
        if (!d)
                return -ENOMEM;
        memcpy(d->own, bytes, len);
        codec_dict_init_ref(d, d->own, len);
        /* by reference: d->own lives as long as the DDict */
        d->ddict = CALL(ZSTD_createDDict_byReference)(d->own, len);
        /* a dictionary zstd cannot parse (not ZDICT's, or raw content
         * under the dictionary magic) would fail every frame */
        if (!d->ddict || CALL(ZSTD_getDictID_fromDDict)(d->ddict) == 0) {
                CALL(ZSTD_freeDDict)(d->ddict);
                free(d);
                return -EINVAL;
        }
        *ret = d;
        return 0;
}

CodecDict *codec_dict_ref(CodecDict *d) {
        /* relaxed: the holder of a reference publishes the dictionary */
        atomic_fetch_add_explicit(&d->refs, 1, memory_order_relaxed);
        return d;
}

void codec_dict_unref(CodecDict *d) {
        /* acq_rel: every use of it before the last release */
        if (!d || atomic_fetch_sub_explicit(&d->refs, 1, memory_order_acq_rel) != 1)
                return;
        CALL(ZSTD_freeDDict)(d->ddict);
        free(d);
}

int codec_cdict_new(const CodecDict *d, int level, CodecCDict **ret) {
        int r = codec_load_dict();
        if (r < 0)
                return r;
        CodecCDict *c = malloc(sizeof(*c));
        if (!c)
                return -ENOMEM;
        ZSTD_CCtx_params *p = CALL(ZSTD_createCCtxParams)();
        c->cd = NULL;
        if (p && !CALL(ZSTD_isError)(CALL(ZSTD_CCtxParams_init)(p, level ? level : 1)) &&
            !CALL(ZSTD_isError)(CALL(ZSTD_CCtxParams_setParameter)(p, ZSTD_c_contentSizeFlag, 0)) &&
            !CALL(ZSTD_isError)(CALL(ZSTD_CCtxParams_setParameter)(p, ZSTD_c_checksumFlag, 0)) &&
            !CALL(ZSTD_isError)(CALL(ZSTD_CCtxParams_setParameter)(p, ZSTD_c_dictIDFlag, 0)))
                /* the parameters of a page: the window and tables sized
                 * for 4 KiB, not for the dictionary alone */
                c->cd = CALL(ZSTD_createCDict_advanced2)(d->bytes, d->len, ZSTD_dlm_byRef, ZSTD_dct_fullDict, p,
                                                   ZSTD_defaultCMem);
        CALL(ZSTD_freeCCtxParams)(p);
        if (!c->cd) {
                free(c);
                return -ENOMEM;
        }
        *ret = c;
        return 0;
}

CodecCDict *codec_cdict_free(CodecCDict *c) {
        if (c) {
                CALL(ZSTD_freeCDict)(c->cd);
                free(c);
        }
        return NULL;
}

int codec_compress_cdict(CodecCCtx *c, const CodecCDict *cd, const void *page, void *dst, size_t dst_cap) {
        if (c->kind != CODEC_ZSTD)
                return -EINVAL;
        /* the frame parameters stay the context's (no content size, no
         * checksum, no dictionary id: the entry says which dictionary) */
        size_t n = CALL(ZSTD_CCtx_refCDict)(c->zc, cd->cd);
        if (!CALL(ZSTD_isError)(n))
                n = CALL(ZSTD_compress2)(c->zc, dst, dst_cap, page, ZSWAP_PAGE_SIZE);
        /* a frame that did not fit (no gain: the usual case) leaves the
         * context mid-stream, where it refuses to drop the dictionary:
         * the session goes first, or the next plain compression would
         * use the dictionary (and it may be freed meanwhile) */
        (void)CALL(ZSTD_CCtx_reset)(c->zc, ZSTD_reset_session_only);
        if (CALL(ZSTD_isError)(CALL(ZSTD_CCtx_refCDict)(c->zc, NULL)))
                abort(); /* cannot be: the session was reset */
        if (CALL(ZSTD_isError)(n))
                return -ENOSPC;
        return (int)n;
}

CodecKind codec_dctx_kind(const CodecDCtx *d) {
        return d->kind;
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
