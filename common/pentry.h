/*
 * pentry.h: the 64-bit page entry, as the daemon's page index and a
 * client's store (store.h) hold it. docs/page-lifecycle.md describes the
 * states and who may change them.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "codec.h"

/* Entry states (low 3 bits). */
enum {
        PE_EMPTY = 0,   /* the daemon holds nothing: page resident or zero */
        PE_MOVING = 1,  /* chosen for eviction; the agent may be moving it to slot */
        PE_STAGED = 2,  /* moved out to staging slot, not compressed yet */
        PE_STORED = 3,  /* compressed: pool handle + length */
        PE_SAME = 4,    /* same-filled page: 32-bit fill value */
        PE_LOADING = 5, /* STORED/SAME payload owned by a thread that is installing it */
        PE_REMOVED = 6, /* MADV_DONTNEED seen while the page was still mapped: that
                         * frame is about to be zapped and must not be moved out;
                         * the next fault on the page clears it */
        PE_CLEAN = 7,   /* resident, restored by a read and not written since (as
                         * far as the daemon knows): the STORED/SAME payload it
                         * came from is kept, so evicting it again costs no
                         * compression. Bit 4 set: the payload is SAME's */
};
static inline uint64_t pe_make_removed(void) { return PE_REMOVED; }
#define PE_FLAG_INCOMPRESSIBLE ((uint64_t)1 << 3) /* on EMPTY: last eviction found it incompressible */
/* On STORED: the second tier's writer (daemon/tier/tier.c) copied the object and
 * is writing it out. Nothing else changes: the page is served from the
 * pool as ever, and whoever takes the entry drops the mark (LOADING and
 * CLEAN never carry it, and whoever puts a STORED value back or moves it
 * to another address leaves it off), which is how the writer learns its
 * copy is stale: only the writer ever stores a value with the mark. */
#define PE_WB ((uint64_t)1 << 7)
/* On STORED (and on the LOADING and CLEAN made from it): the object is a
 * 16-byte TierStub naming where the compressed page lies on the second
 * tier; the entry's length is the stub's */
#define PE_TIER ((uint64_t)1 << 21)
/* On STORED (and the LOADING and CLEAN made from it, and on the stub of a
 * page on the second tier): the object is a zstd frame, the strong tier of
 * compression (recompressed when it grew cold, or first compressed by the
 * strong codec because the store's codec found the page incompressible),
 * whatever the store's codec is (pe_codec()). It stays with the object
 * wherever it goes, like the length. */
#define PE_STRONG ((uint64_t)1 << 22)
/* On STORED: the recompressor (daemon/evict/recompress.c) copied the object
 * and is compressing it again; the same contract as PE_WB, with a bit of
 * its own so that neither marker can take the other's mark for its own:
 * whoever takes the entry drops it, and only the recompressor stores a
 * value carrying it. */
#define PE_RC ((uint64_t)1 << 23)
/* On STORED (and what is made from it, while it names the same object):
 * the strong codec was tried on the object and would not put it in a
 * smaller size class; the recompressor leaves it alone. A hint: a value
 * made anew for the object (a fork's copy, an adoption) may lose it */
#define PE_NOGAIN ((uint64_t)1 << 24)
/* On STORED (and what is made from it, the tier's stub included), with
 * PE_STRONG: the zstd frame was made with its client's dictionary
 * (MMClient.dict, the store's StoreSuper.dict_*), which decodes it. */
#define PE_DICT ((uint64_t)1 << 25)
/* On STORED (and what is made from it, while it names the same object):
 * the object is in the pool of the client's user's shared store
 * (daemon/mm/dedup.h; the store's StoreSuper.shared_tag names it), which
 * other entries, of this client or of others, may name too: each entry
 * holds one reference. Never with PE_TIER or PE_DICT, and only on an
 * object of the store's codec. */
#define PE_SHARED ((uint64_t)1 << 26)
/* the bits that say how an object decodes, which go wherever it goes */
#define PE_CODEC (PE_STRONG | PE_DICT)
/* the markers' bits, which nobody but the marker ever carries forward */
#define PE_MARKS (PE_WB | PE_RC)

#define PINDEX_MAX_ADDR ((uint64_t)1 << 48)

static inline unsigned pe_state(uint64_t e) { return (unsigned)(e & 7); }
static inline uint64_t pe_make_stored(uint32_t handle, uint32_t clen) {
        return PE_STORED | (uint64_t)(clen & 0x1fff) << 8 | (uint64_t)handle << 32;
}
static inline uint64_t pe_make_same(uint32_t fill) { return PE_SAME | (uint64_t)fill << 32; }
static inline uint64_t pe_make_slot(unsigned state, uint32_t slot) { return state | (uint64_t)slot << 32; }
static inline uint64_t pe_with_state(uint64_t e, unsigned state) { return (e & ~(uint64_t)7) | state; }
static inline uint32_t pe_handle(uint64_t e) { return (uint32_t)(e >> 32); }
static inline uint32_t pe_fill(uint64_t e) { return (uint32_t)(e >> 32); }
/* the staging slot of MOVING and STAGED entries */
static inline uint32_t pe_slot(uint64_t e) { return (uint32_t)(e >> 32); }
static inline uint32_t pe_clen(uint64_t e) { return (uint32_t)(e >> 8) & 0x1fff; }
static inline bool pe_is_tier(uint64_t e) { return (e & PE_TIER) != 0; } /* of a STORED entry or its LOADING */
/* The codec of a STORED entry's object (or its LOADING's, CLEAN's) in a
 * store whose other objects are of codec base. */
static inline CodecKind pe_codec(uint64_t e, CodecKind base) { return (e & PE_STRONG) ? CODEC_ZSTD : base; }
/* Decompress the object of entry value e (len bytes at src) with d, made
 * for the codec of e's store: codec_decompress_as() of e's codec, or with
 * dict, the client's dictionary, if e says so (-EBADMSG without one). */
static inline int pe_decompress(CodecDCtx *d, const CodecDict *dict, uint64_t e, const void *src, size_t len,
                                void *page) {
        if (e & PE_DICT)
                return codec_decompress_dict(d, dict, src, len, page);
        return codec_decompress_as(d, pe_codec(e, codec_dctx_kind(d)), src, len, page);
}
/* LOADING keeps the payload of the entry it came from; bits 4-6 say which
 * state that was (STORED if none is set). */
#define PE_LOADING_SAME ((uint64_t)1 << 4)
#define PE_LOADING_SLOT ((uint64_t)1 << 5)   /* came from MOVING or STAGED */
#define PE_LOADING_STAGED ((uint64_t)1 << 6) /* with SLOT: it was STAGED */
#define PE_LOADING_BITS (PE_LOADING_SAME | PE_LOADING_SLOT | PE_LOADING_STAGED | PE_FLAG_INCOMPRESSIBLE)
static inline uint64_t pe_make_loading(uint64_t from) {
        from &= ~PE_MARKS;
        switch (pe_state(from)) {
        case PE_SAME:
                return pe_with_state(from, PE_LOADING) | PE_LOADING_SAME;
        case PE_MOVING:
                return pe_with_state(from, PE_LOADING) | PE_LOADING_SLOT;
        case PE_STAGED:
                return pe_with_state(from, PE_LOADING) | PE_LOADING_SLOT | PE_LOADING_STAGED;
        default:
                return pe_with_state(from, PE_LOADING);
        }
}
#define PE_CLEAN_SAME ((uint64_t)1 << 4)
/* CLEAN from the STORED/SAME entry it was restored from, and back */
static inline uint64_t pe_make_clean(uint64_t origin) {
        origin &= ~PE_MARKS;
        return pe_with_state(origin, PE_CLEAN) | (pe_state(origin) == PE_SAME ? PE_CLEAN_SAME : 0);
}
static inline uint64_t pe_clean_origin(uint64_t e) {
        return pe_with_state(e & ~PE_CLEAN_SAME, (e & PE_CLEAN_SAME) ? PE_SAME : PE_STORED);
}
static inline uint64_t pe_loading_origin(uint64_t e) {
        unsigned st = (e & PE_LOADING_SAME) ? PE_SAME
                      : (e & PE_LOADING_SLOT) ? ((e & PE_LOADING_STAGED) ? PE_STAGED : PE_MOVING)
                                              : PE_STORED;
        return pe_with_state(e & ~PE_LOADING_BITS, st);
}
