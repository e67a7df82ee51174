/*
 * codec.h: page compression behind one interface (lz4, zstd).
 */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum CodecKind {
        CODEC_LZ4,
        CODEC_ZSTD,
} CodecKind;

typedef struct CodecCCtx CodecCCtx; /* one per compression worker */
typedef struct CodecDCtx CodecDCtx; /* one per decompressing thread */

int codec_from_string(const char *s, CodecKind *ret);
const char *codec_to_string(CodecKind k);

/* Contexts: 0, -ENOMEM, or (the client library's copy, which loads the
 * codec libraries with the first context: codec.c) -ELIBACC when liblz4
 * or libzstd cannot be loaded. */
int codec_cctx_new(CodecKind kind, int level, CodecCCtx **ret);
CodecCCtx *codec_cctx_free(CodecCCtx *c);
/* The level of the next compressions (as codec_cctx_new()'s): 0, or
 * -EINVAL if the codec refuses it. */
int codec_cctx_set_level(CodecCCtx *c, int level);
/* Compress one 4 KiB page into dst. Returns the compressed size (> 0), or
 * -ENOSPC when it does not fit in dst_cap (the page is incompressible). */
int codec_compress(CodecCCtx *c, const void *page, void *dst, size_t dst_cap);

/*
 * Decompression contexts, one per thread. lz4 decompression writes no
 * state: it needs nothing of the context and threads never wait for each
 * other. zstd writes its ZSTD_DCtx while decompressing, so each thread
 * has its own. Every context decodes both codecs (a store of either codec
 * holds zstd objects of the strong tier, pentry.h PE_STRONG); kind is the
 * one codec_decompress() assumes.
 */
int codec_dctx_new(CodecKind kind, CodecDCtx **ret);
CodecDCtx *codec_dctx_free(CodecDCtx *d);

/* Where a context's memory comes from: zeroed allocations of n bytes and
 * their release (libzswap: mappings of its own, never the program's
 * heap, which the shim may have managed). */
typedef struct CodecAlloc {
        void *(*alloc)(size_t n);
        void (*free)(void *p);
} CodecAlloc;
/* codec_dctx_new() with every byte of the context from a (zstd's own
 * allocations included); codec_dctx_free() gives them back there. */
int codec_dctx_new_in(CodecKind kind, const CodecAlloc *a, CodecDCtx **ret);
/* Decompress exactly one page. Returns 0, or -EBADMSG if src is not a valid
 * compressed page of exactly 4096 bytes (never reads or writes out of
 * bounds, whatever src holds). */
int codec_decompress(CodecDCtx *d, const void *src, size_t len, void *page);
/* codec_decompress() of an object of codec kind. */
int codec_decompress_as(CodecDCtx *d, CodecKind kind, const void *src, size_t len, void *page);
/* The codec the context was made for. */
CodecKind codec_dctx_kind(const CodecDCtx *d);

/*
 * A zstd dictionary (the strong tier's, one per client: docs/reclaim.md,
 * "Dictionaries"), read-only once made and shared by reference count.
 * bytes are the dictionary as ZDICT made it; ddict, where the daemon made
 * one (codec_dict_new()), is it digested for decoding, shared by every
 * thread (zstd only reads a DDict). The client library's copy decodes
 * from the bytes alone (codec_dict_init_ref()).
 */
#define CODEC_DICT_MAX 32768 /* bytes of a dictionary, at most */
typedef struct CodecDict {
        _Atomic uint32_t refs;
        uint32_t len;
        const uint8_t *bytes;
        void *ddict; /* ZSTD_DDict, or NULL */
        uint8_t own[]; /* codec_dict_new()'s copy of the bytes */
} CodecDict;
/* A dictionary of len bytes (at most CODEC_DICT_MAX, copied), with its
 * DDict: 0, -EINVAL if zstd does not take it, -ENOMEM (malloc(): the
 * daemon's). */
int codec_dict_new(const void *bytes, size_t len, CodecDict **ret);
CodecDict *codec_dict_ref(CodecDict *d);
void codec_dict_unref(CodecDict *d);
/* A dictionary over len bytes the caller keeps (no DDict, no allocation:
 * each decoding digests the bytes again; libzswap's restore). */
void codec_dict_init_ref(CodecDict *d, const void *bytes, size_t len);
/* codec_decompress() of a zstd frame made with dictionary dict. */
int codec_decompress_dict(CodecDCtx *d, const CodecDict *dict, const void *src, size_t len, void *page);
/* A compression dictionary digested at one level, for one thread. */
typedef struct CodecCDict CodecCDict;
int codec_cdict_new(const CodecDict *d, int level, CodecCDict **ret);
CodecCDict *codec_cdict_free(CodecCDict *c);
/* codec_compress() with a zstd context and a dictionary. */
int codec_compress_cdict(CodecCCtx *c, const CodecCDict *cd, const void *page, void *dst, size_t dst_cap);

/* True if the page is one 32-bit value repeated; *fill gets it. */
bool page_same_filled(const void *page, uint32_t *fill);
void page_fill(void *page, uint32_t fill);
