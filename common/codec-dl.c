/*
 * codec-dl.c: liblz4 and libzstd loaded when they are first needed, for
 * the LD_PRELOAD shim only.
 *
 * The shim is loaded into every process a program under zswap-run starts,
 * and most of them (a shell's commands, a compiler's passes) exit before
 * they would attach to the daemon: linked in, the two libraries cost each
 * of them their loading and relocation. The shim needs a codec only once
 * it is attached (to decompress its own store if the daemon dies), so it
 * links this file instead of the libraries: codec.c calls the functions
 * below, which forward to the libraries codec_load() opened. libzswap
 * calls codec_load() before it connects, so a process that cannot load
 * them is never managed (it runs as if there were no daemon). Until then
 * every function fails as the library would on a lack of memory; none is
 * called then.
 *
 * Every other binary (the daemon, libzswap.so, the tools, the tests) links
 * the libraries and has no codec_load() (codec.h declares it weak).
 */
#include <dlfcn.h>
#include <errno.h>
#include <lz4.h>
#include <pthread.h>
#include <string.h>
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include "codec.h"
#include "macro.h"

static struct {
        int (*lz4_sizeofState)(void);
        int (*lz4_compress_fast_extState)(void *, const char *, char *, int, int, int);
        int (*lz4_decompress_safe)(const char *, char *, int, int);
        ZSTD_CCtx *(*createCCtx)(void);
        size_t (*freeCCtx)(ZSTD_CCtx *);
        size_t (*CCtx_setParameter)(ZSTD_CCtx *, ZSTD_cParameter, int);
        size_t (*compress2)(ZSTD_CCtx *, void *, size_t, const void *, size_t);
        unsigned (*isError)(size_t);
        ZSTD_DCtx *(*createDCtx)(void);
        ZSTD_DCtx *(*createDCtx_advanced)(ZSTD_customMem);
        size_t (*freeDCtx)(ZSTD_DCtx *);
        size_t (*decompressDCtx)(ZSTD_DCtx *, void *, size_t, const void *, size_t);
} fn;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int load_status = -ELIBACC;

/* Each symbol or false; the handle stays open for the process's life. */
static bool sym(void *h, const char *name, void *ret) {
        void *p = dlsym(h, name);
        if (!p)
                return false;
        memcpy(ret, &p, sizeof(p));
        return true;
}

static void load(void) {
        /* NODELETE: nothing we hold may ever be unmapped under us */
        void *l = dlopen(CODEC_LZ4_SONAME, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
        void *z = dlopen(CODEC_ZSTD_SONAME, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);

        if (!l || !z)
                return;
        if (sym(l, "LZ4_sizeofState", &fn.lz4_sizeofState) &&
            sym(l, "LZ4_compress_fast_extState", &fn.lz4_compress_fast_extState) &&
            sym(l, "LZ4_decompress_safe", &fn.lz4_decompress_safe) && sym(z, "ZSTD_createCCtx", &fn.createCCtx) &&
            sym(z, "ZSTD_freeCCtx", &fn.freeCCtx) && sym(z, "ZSTD_CCtx_setParameter", &fn.CCtx_setParameter) &&
            sym(z, "ZSTD_compress2", &fn.compress2) && sym(z, "ZSTD_isError", &fn.isError) &&
            sym(z, "ZSTD_createDCtx", &fn.createDCtx) && sym(z, "ZSTD_createDCtx_advanced", &fn.createDCtx_advanced) &&
            sym(z, "ZSTD_freeDCtx", &fn.freeDCtx) && sym(z, "ZSTD_decompressDCtx", &fn.decompressDCtx))
                load_status = 0;
        else
                memset(&fn, 0, sizeof(fn));
}

int codec_load(void) {
        pthread_once(&load_once, load);
        return load_status;
}

/* ---- what codec.c calls ---- */

int LZ4_sizeofState(void) {
        return fn.lz4_sizeofState ? fn.lz4_sizeofState() : 0;
}

int LZ4_compress_fast_extState(void *state, const char *src, char *dst, int srclen, int dstcap, int accel) {
        return fn.lz4_compress_fast_extState ? fn.lz4_compress_fast_extState(state, src, dst, srclen, dstcap, accel) : 0;
}

int LZ4_decompress_safe(const char *src, char *dst, int len, int cap) {
        return fn.lz4_decompress_safe ? fn.lz4_decompress_safe(src, dst, len, cap) : -1;
}

ZSTD_CCtx *ZSTD_createCCtx(void) {
        return fn.createCCtx ? fn.createCCtx() : NULL;
}

size_t ZSTD_freeCCtx(ZSTD_CCtx *c) {
        return fn.freeCCtx && c ? fn.freeCCtx(c) : 0;
}

size_t ZSTD_CCtx_setParameter(ZSTD_CCtx *c, ZSTD_cParameter p, int v) {
        return fn.CCtx_setParameter ? fn.CCtx_setParameter(c, p, v) : (size_t)-1;
}

size_t ZSTD_compress2(ZSTD_CCtx *c, void *dst, size_t cap, const void *src, size_t len) {
        return fn.compress2 ? fn.compress2(c, dst, cap, src, len) : (size_t)-1;
}

unsigned ZSTD_isError(size_t code) {
        return fn.isError ? fn.isError(code) : code == (size_t)-1;
}

ZSTD_DCtx *ZSTD_createDCtx(void) {
        return fn.createDCtx ? fn.createDCtx() : NULL;
}

ZSTD_DCtx *ZSTD_createDCtx_advanced(ZSTD_customMem mem) {
        return fn.createDCtx_advanced ? fn.createDCtx_advanced(mem) : NULL;
}

size_t ZSTD_freeDCtx(ZSTD_DCtx *d) {
        return fn.freeDCtx && d ? fn.freeDCtx(d) : 0;
}

size_t ZSTD_decompressDCtx(ZSTD_DCtx *d, void *dst, size_t cap, const void *src, size_t len) {
        return fn.decompressDCtx ? fn.decompressDCtx(d, dst, cap, src, len) : (size_t)-1;
}
