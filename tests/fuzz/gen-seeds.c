/*
 * gen-seeds.c: writes the seed corpora of fuzz-protocol and fuzz-codec
 * (tests/fuzz/corpus/, docs/fuzzing.md). Not a test; built on demand:
 *
 *   ninja -C BUILD tests/fuzz/fuzz-gen-seeds
 *   BUILD/tests/fuzz/fuzz-gen-seeds tests/fuzz/corpus
 *
 * protocol/: one valid message of every type, a MOVE of two runs, a
 * TUNABLE_SET of every key with a typical value, and the same values as
 * text (first byte: the key's index). codec/: real heap pages from
 * shared/corpus (python, node, java) with a codec and level each, and real
 * compressed pages of both codecs as material for the corruption check.
 * store/: small valid stores (fuzz-store.h), lz4 and zstd, with real
 * compressed heap pages as objects and an entry of every state.
 * Fixed picks, so a rerun writes the same files.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/userfaultfd.h>

#include "codec.h"
#include "corpus.h"
#include "fuzz-store.h"
#include "pentry.h"
#include "protocol.h"
#include "store.h"
#include "tunable-keys.h"

static int write_seed(const char *dir, const char *name, const void *a, size_t na, const void *b, size_t nb) {
        char path[4096];
        FILE *f;

        snprintf(path, sizeof(path), "%s/%s", dir, name);
        f = fopen(path, "we");
        if (!f || fwrite(a, 1, na, f) != na || (nb && fwrite(b, 1, nb, f) != nb) || fclose(f) != 0) {
                perror(path);
                return -EIO;
        }
        return 0;
}

static const char *const sample_values[_TUNABLE_KEY_MAX] = {
        [TUNABLE_LIMIT] = "64M",          [TUNABLE_IDLE_AGE] = "30s",       [TUNABLE_PRESSURE_TARGET] = "0.5",
        [TUNABLE_MIN_FREE] = "10%",       [TUNABLE_PRESSURE_STEP] = "2",    [TUNABLE_PRESSURE_PERIOD] = "2s",
        [TUNABLE_POOL_MAX] = "1.5G",      [TUNABLE_POOL_ACCEPT] = "90%",    [TUNABLE_THRASH_REFAULTS] = "128",
        [TUNABLE_THRASH_BACKOFF] = "250ms", [TUNABLE_KEEP_CLEAN] = "yes",   [TUNABLE_CLEAN_MAX] = "2.25",
        [TUNABLE_WRITE_SCAN] = "off",     [TUNABLE_INTERVAL] = "1m",        [TUNABLE_POOL_COMPACT] = "5",
        [TUNABLE_REFILL] = "yes",         [TUNABLE_REFILL_QUIET] = "10s",   [TUNABLE_RECOMPRESS_AGE] = "2m",
        [TUNABLE_RECOMPRESS_LEVEL] = "3", [TUNABLE_RECOMPRESS_CPU] = "10",
};

static int protocol_seeds(const char *dir) {
        static const uint16_t types[] = {
                ZMSG_HELLO, ZMSG_ATTACH, ZMSG_REGISTER, ZMSG_UNREGISTER, ZMSG_PAGEOUT, ZMSG_STATS,
                ZMSG_FORK_PREPARE, ZMSG_FORK_DONE, ZMSG_CHILD_ATTACH, ZMSG_PAGEOUT_PID, ZMSG_SET_LIMIT,
                ZMSG_TUNABLE_GET, ZMSG_STATUS, ZMSG_CLIENTS, ZMSG_REPLY, ZMSG_STATS_REPLY, ZMSG_TUNABLE_REPLY,
                ZMSG_STATUS_REPLY, ZMSG_CLIENTS_REPLY, ZMSG_RELEASE, ZMSG_MOVE_DONE, ZMSG_RELEASE_DONE,
                ZMSG_REGIONS, ZMSG_REGIONS_REPLY,
        };
        uint8_t buf[ZSWAP_MSG_MAX];
        char name[64];
        int r = 0;

        for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
                size_t n = zmsg_expected_size(types[i]);
                memset(buf, 0, sizeof(buf));
                zmsg_init((ZMsgHeader *)buf, types[i], 1, n);
                if (types[i] == ZMSG_REGISTER || types[i] == ZMSG_PAGEOUT) {
                        ZMsgRange *rg = (ZMsgRange *)buf;
                        rg->addr = 0x7f0000000000;
                        rg->len = 1 << 20;
                }
                snprintf(name, sizeof(name), "msg-%u", types[i]);
                r |= write_seed(dir, name, buf, n, NULL, 0);
        }

        ZMsgMove mv = { .slot0 = 0, .npages = 3, .nruns = 2 };
        mv.runs[0] = (ZMoveRun){ .addr = 0x7f0000000000, .npages = 1 };
        mv.runs[1] = (ZMoveRun){ .addr = 0x7f0000100000, .npages = 2 };
        zmsg_init(&mv.hdr, ZMSG_MOVE, 7, zmsg_move_size(2));
        r |= write_seed(dir, "msg-move", &mv, zmsg_move_size(2), NULL, 0);

        for (size_t k = 0; k < _TUNABLE_KEY_MAX; k++) {
                ZMsgTunable t = { .pid = 0 };
                uint8_t idx = (uint8_t)k;

                if (!sample_values[k]) {
                        fprintf(stderr, "no sample value for %s: add one to sample_values[]\n", tunable_names[k]);
                        return -EINVAL;
                }

                zmsg_init(&t.hdr, ZMSG_TUNABLE_SET, 2, sizeof(t));
                snprintf(t.key, sizeof(t.key), "%s", tunable_names[k]);
                snprintf(t.value, sizeof(t.value), "%s", sample_values[k]);
                snprintf(name, sizeof(name), "set-%s", tunable_names[k]);
                r |= write_seed(dir, name, &t, sizeof(t), NULL, 0);
                snprintf(name, sizeof(name), "text-%s", tunable_names[k]);
                r |= write_seed(dir, name, &idx, 1, sample_values[k], strlen(sample_values[k]));
        }
        ZMsgTunable st = { .pid = 0 };
        zmsg_init(&st.hdr, ZMSG_TUNABLE_GET, 3, sizeof(st));
        snprintf(st.key, sizeof(st.key), "status");
        r |= write_seed(dir, "get-status", &st, sizeof(st), NULL, 0);
        return r ? -EIO : 0;
}

static int codec_seeds(const char *dir, const Corpus *c) {
        uint8_t obj[ZSWAP_PAGE_SIZE];
        CodecCCtx *cc[2] = { NULL, NULL };
        char name[64];
        int r = 0;

        if (codec_cctx_new(CODEC_LZ4, 0, &cc[0]) < 0 || codec_cctx_new(CODEC_ZSTD, 3, &cc[1]) < 0)
                return -ENOMEM;
        /* 10 pages of each heap, spread over the file */
        for (size_t f = 0; f < CORPUS_FILES; f++)
                for (size_t i = 0; i < 10; i++) {
                        size_t idx = f * CORPUS_FILE_PAGES + 37 + i * 199;
                        uint8_t hdr[3] = { (uint8_t)(i & 1), (uint8_t)(i % 4 == 0 ? 0 : i % 4 == 2 ? 9 : i), 0 };
                        snprintf(name, sizeof(name), "page-%zu", idx);
                        r |= write_seed(dir, name, hdr, 3, c->data + idx * ZSWAP_PAGE_SIZE, ZSWAP_PAGE_SIZE);
                }
        /* compressed pages: the material of the corruption check */
        for (size_t k = 0; k < 2; k++)
                for (size_t f = 0; f < CORPUS_FILES; f++)
                        for (size_t i = 0; i < 2; i++) {
                                size_t idx = f * CORPUS_FILE_PAGES + 101 + i * 977;
                                uint8_t hdr[3] = { (uint8_t)k, 1, 0 };
                                int n = codec_compress(cc[k], c->data + idx * ZSWAP_PAGE_SIZE, obj, sizeof(obj));
                                if (n <= 0)
                                        continue;
                                snprintf(name, sizeof(name), "%s-object-%zu", k ? "zstd" : "lz4", idx);
                                r |= write_seed(dir, name, hdr, 3, obj, (size_t)n);
                        }
        codec_cctx_free(cc[0]);
        codec_cctx_free(cc[1]);
        return r ? -EIO : 0;
}

/* ---- store/: inputs of fuzz-store (fuzz-store.h) ---- */

typedef struct Seed {
        uint8_t b[64 << 10];
        size_t n;
        uint32_t next_chunk; /* the next free chunk id */
} Seed;

static void put(Seed *s, const void *p, size_t n) {
        if (s->n + n > sizeof(s->b)) {
                fprintf(stderr, "store seed too big\n");
                exit(1);
        }
        memcpy(s->b + s->n, p, n);
        s->n += n;
}

static void put_n(Seed *s, uint64_t v, size_t n) {
        put(s, &v, n); /* little endian */
}

static void seed_init(Seed *s, const FuzzStoreHdr *h) {
        s->n = 0;
        s->next_chunk = 1;
        put(s, h, sizeof(*h));
}

static void rec_range(Seed *s, unsigned copy, unsigned idx, uint64_t start, uint64_t end) {
        put_n(s, FS_OP_RANGE, 1);
        put_n(s, copy, 1);
        put_n(s, idx, 2);
        put_n(s, start, 8);
        put_n(s, end, 8);
}

static void rec_dir(Seed *s, uint32_t slot, uint64_t zone) {
        put_n(s, FS_OP_DIR, 1);
        put_n(s, slot, 4);
        put_n(s, zone | STORE_DIR_USED, 8);
}

static void rec_entry(Seed *s, uint32_t leaf, unsigned j, uint64_t e) {
        put_n(s, FS_OP_ENTRY, 1);
        put_n(s, leaf, 4);
        put_n(s, j, 2);
        put_n(s, e, 8);
}

/* A chunk of class k (its slot of the class table written); its id. */
static void rec_journal(Seed *s, uint8_t event, uint64_t a, uint64_t b, uint64_t c) {
        put_n(s, FS_OP_JOURNAL_BYTE, 1);
        put_n(s, event, 1);
        put_n(s, a, 8);
        put_n(s, b, 8);
        put_n(s, c, 8);
}

/* count ranges (or, with FS_FILL_ENTRIES in what, leaf entries) in one record */
static void rec_fill(Seed *s, unsigned what, unsigned count, uint32_t first, uint64_t base, uint32_t stride,
                     uint32_t len) {
        put_n(s, FS_OP_FILL_BYTE, 1);
        put_n(s, what, 1);
        put_n(s, count, 2);
        put_n(s, first, 4);
        put_n(s, base, 8);
        put_n(s, stride, 4);
        put_n(s, len, 4);
}

static uint32_t new_chunk(Seed *s, unsigned k) {
        uint32_t id = s->next_chunk++;
        put_n(s, FS_OP_CLASS, 1);
        put_n(s, id, 4);
        put_n(s, k + 1, 2);
        return id;
}

/* len bytes as the object in slot `slot` of chunk id (of class k); its entry. */
static uint64_t put_object(Seed *s, uint32_t id, unsigned k, unsigned slot, const void *obj, size_t len) {
        uint32_t handle = id << (STORE_SPAN_SHIFT - STORE_UNIT_SHIFT) | (slot * (k + 1));
        put_n(s, FS_OP_POOL, 1);
        put_n(s, handle, 4);
        put_n(s, len, 2);
        put(s, obj, len);
        return pe_make_stored(handle, (uint32_t)len);
}

/* The same as one FS_OP_OBJECT record: class slot, object and entry at
 * (leaf, j), as how says (0 STORED, 1 LOADING, 2 CLEAN). */
static void put_object_entry(Seed *s, uint32_t leaf, unsigned j, unsigned how, uint32_t id, unsigned k,
                             unsigned slot, const void *obj, size_t len) {
        put_n(s, FS_OP_OBJECT, 1);
        put_n(s, leaf, 4);
        put_n(s, j, 2);
        put_n(s, how, 1);
        put_n(s, id, 4);
        put_n(s, k + 1, 2);
        put_n(s, slot, 2);
        put_n(s, 0, 1);
        put_n(s, len, 2);
        put_n(s, len, 2);
        put(s, obj, len);
}

static unsigned class_of(size_t len) {
        return (unsigned)((len + 15) / 16 - 1);
}

static int store_seeds(const char *dir, const Corpus *c) {
        static Seed s;
        uint8_t obj[3][ZSWAP_PAGE_SIZE];
        int nobj[3];
        CodecCCtx *cc = NULL;
        int r = 0;

        /* an empty, valid lz4 store: the all-zero header */
        FuzzStoreHdr h = { 0 };
        seed_init(&s, &h);
        r |= write_seed(dir, "empty-lz4", s.b, s.n, NULL, 0);

        for (unsigned codec = CODEC_LZ4; codec <= CODEC_ZSTD; codec++) {
                const uint64_t base = 0x7f0000000000ull, zone = STORE_LEAF_ENTRIES * ZSWAP_PAGE_SIZE;
                char name[64];

                if (codec_cctx_new((CodecKind)codec, codec == CODEC_ZSTD ? 3 : 0, &cc) < 0)
                        return -ENOMEM;
                /* three heap pages, one of each file: the one of 64 that
                 * compresses best (small seeds mutate faster) */
                for (size_t f = 0; f < CORPUS_FILES; f++) {
                        size_t best = 0;
                        nobj[f] = -1;
                        for (size_t i = 0; i < 64; i++) {
                                int n = codec_compress(cc, c->data + (f * CORPUS_FILE_PAGES + 300 + i) * ZSWAP_PAGE_SIZE,
                                                       obj[f], ZSWAP_PAGE_SIZE - 1);
                                if (n > 0 && (nobj[f] < 0 || n < nobj[f])) {
                                        nobj[f] = n;
                                        best = i;
                                }
                        }
                        if (nobj[f] > 0)
                                nobj[f] = codec_compress(cc, c->data + (f * CORPUS_FILE_PAGES + 300 + best) * ZSWAP_PAGE_SIZE,
                                                         obj[f], ZSWAP_PAGE_SIZE - 1);
                        if (nobj[f] <= 0) {
                                codec_cctx_free(cc);
                                return -EIO;
                        }
                }
                codec_cctx_free(cc);
                cc = NULL;

                h = (FuzzStoreHdr){ .codec = codec, .daemon_id = 0x1111, .nslots = 4,
                                    .flags = codec == CODEC_ZSTD ? FS_F_DAEMON_ZSTD : 0 };
                h.nranges[0] = 2;
                h.nranges[1] = 1;
                h.leaves = 3;
                seed_init(&s, &h);
                /* the current table and the one before it */
                rec_range(&s, 0, 0, base, base + 2 * zone);
                rec_range(&s, 0, 1, base + 3 * zone, base + 4 * zone);
                rec_range(&s, 1, 0, base, base + zone);
                rec_dir(&s, 0, base);
                rec_dir(&s, 1, base + zone);
                rec_dir(&s, 2, base + 3 * zone);
                /* leaf 0: a compressed object of each heap, one entry of every state */
                uint64_t e[3];
                for (int f = 0; f < 3; f++) {
                        unsigned k = class_of((size_t)nobj[f]);
                        e[f] = put_object(&s, new_chunk(&s, k), k, 0, obj[f], (size_t)nobj[f]);
                        rec_entry(&s, 0, (unsigned)f, e[f]);
                }
                rec_entry(&s, 0, 3, pe_make_same(0));
                rec_entry(&s, 0, 4, pe_make_same(0xdeadbeef));
                rec_entry(&s, 0, 5, pe_make_slot(PE_MOVING, 1));
                rec_entry(&s, 0, 6, pe_make_slot(PE_STAGED, 2));
                rec_entry(&s, 0, 7, pe_make_loading(e[1]));
                rec_entry(&s, 0, 8, pe_make_clean(e[2]));
                rec_entry(&s, 0, 9, pe_make_removed());
                rec_entry(&s, 0, 10, PE_EMPTY | PE_FLAG_INCOMPRESSIBLE);
                rec_entry(&s, 0, 11, pe_make_loading(pe_make_same(7)));
                rec_entry(&s, 0, 12, pe_make_clean(pe_make_same(9)));
                rec_entry(&s, 0, 13, pe_make_loading(pe_make_slot(PE_STAGED, 3)));
                /* the strong tier: a zstd object of the first page, as
                 * STORED, its CLEAN copy, and a mark left by a daemon that
                 * died recompressing; in the lz4 store also an lz4 object
                 * that claims to be zstd (it must fail as bad) */
                {
                        CodecCCtx *zc;
                        uint8_t zobj[ZSWAP_PAGE_SIZE];
                        if (codec_cctx_new(CODEC_ZSTD, 3, &zc) < 0)
                                return -ENOMEM;
                        int zn = codec_compress(zc, c->data + 300 * ZSWAP_PAGE_SIZE, zobj, ZSWAP_PAGE_SIZE - 1);
                        codec_cctx_free(zc);
                        if (zn <= 0)
                                return -EIO;
                        unsigned k = class_of((size_t)zn);
                        uint64_t z = put_object(&s, new_chunk(&s, k), k, 0, zobj, (size_t)zn) | PE_STRONG;
                        rec_entry(&s, 0, 14, z);
                        rec_entry(&s, 0, 15, pe_make_clean(z));
                        rec_entry(&s, 0, 16, e[0] | PE_RC | PE_NOGAIN);
                        if (codec == CODEC_LZ4)
                                rec_entry(&s, 0, 17, e[1] | PE_STRONG);
                }
                /* leaf 1: a raw (incompressible) page, and two objects sharing a chunk */
                {
                        unsigned k = STORE_NR_CLASSES - 1;
                        rec_entry(&s, 1, 0, put_object(&s, new_chunk(&s, k), k, 0, c->data + 5 * ZSWAP_PAGE_SIZE,
                                                       ZSWAP_PAGE_SIZE));
                        k = class_of((size_t)MAX(nobj[0], nobj[2]));
                        uint32_t id = new_chunk(&s, k);
                        rec_entry(&s, 1, 1, put_object(&s, id, k, 0, obj[0], (size_t)nobj[0]));
                        rec_entry(&s, 1, 511, put_object(&s, id, k, 1, obj[2], (size_t)nobj[2]));
                }
                /* leaf 2: the second range's first page, and objects as
                 * FS_OP_OBJECT writes them: several slots of one chunk */
                rec_entry(&s, 2, 0, pe_make_same(0x01010101));
                {
                        unsigned k = class_of((size_t)nobj[1]);
                        uint32_t id = s.next_chunk++;
                        put_object_entry(&s, 2, 1, 0, id, k, 0, obj[1], (size_t)nobj[1]);
                        put_object_entry(&s, 2, 2, 1, id, k, 1, obj[1], (size_t)nobj[1]);
                        put_object_entry(&s, 2, 3, 2, id, k, store_class(k)->nr_slots - 1, obj[1], (size_t)nobj[1]);
                }
                snprintf(name, sizeof(name), "%s-every-state", codec_to_string((CodecKind)codec));
                r |= write_seed(dir, name, s.b, s.n, NULL, 0);
                /* and a daemon that died handling an event: half the first
                 * range moved elsewhere (mremap), or its first zone dropped
                 * (MADV_DONTNEED) */
                size_t n0 = s.n;
                rec_journal(&s, UFFD_EVENT_REMAP, base + zone, base + 16 * zone, zone);
                snprintf(name, sizeof(name), "%s-journal-remap", codec_to_string((CodecKind)codec));
                r |= write_seed(dir, name, s.b, s.n, NULL, 0);
                s.n = n0;
                rec_journal(&s, UFFD_EVENT_REMOVE, base, base + zone, 0);
                snprintf(name, sizeof(name), "%s-journal-remove", codec_to_string((CodecKind)codec));
                r |= write_seed(dir, name, s.b, s.n, NULL, 0);
        }

        /* at the limits: a full range table, and the journal's event over
         * all of it (moved: 3 * STORE_RANGES_MAX pieces before they merge;
         * moved but for one head: one range more than a store holds;
         * unmapped: none left); 4096 entries naming one object */
        {
                const uint64_t P = ZSWAP_PAGE_SIZE, base = 0x100000, span = 2ull * STORE_RANGES_MAX;
                h = (FuzzStoreHdr){ .daemon_id = 0x4444, .leaves = 16 };
                seed_init(&s, &h);
                rec_fill(&s, FS_FILL_COUNT, STORE_RANGES_MAX, 0, base, 2, 1);
                size_t n0 = s.n;
                rec_journal(&s, UFFD_EVENT_REMAP, base * P, 0x400000000000ull, span * P);
                r |= write_seed(dir, "limit-ranges-remap", s.b, s.n, NULL, 0);
                s.n = n0;
                rec_journal(&s, UFFD_EVENT_UNMAP, base * P, (base + span) * P, 0);
                r |= write_seed(dir, "limit-ranges-unmap", s.b, s.n, NULL, 0);
                s.n = n0 - 24;
                rec_fill(&s, FS_FILL_COUNT, STORE_RANGES_MAX, 0, base, 3, 2);
                rec_journal(&s, UFFD_EVENT_REMAP, (base + 1) * P, 0x400000000000ull, (3ull * STORE_RANGES_MAX - 1) * P);
                r |= write_seed(dir, "limit-ranges-remap-head", s.b, s.n, NULL, 0);
                /* a count one past what a table holds: refused */
                seed_init(&s, &h);
                rec_fill(&s, FS_FILL_COUNT, STORE_RANGES_MAX + 1, 0, base, 2, 1);
                r |= write_seed(dir, "limit-ranges-past", s.b, s.n, NULL, 0);

                h = (FuzzStoreHdr){ .daemon_id = 0x4545, .leaves = 8, .nranges = { 1, 0 } };
                seed_init(&s, &h);
                rec_range(&s, 0, 0, 0x10000000ull, 0x10000000ull + 8 * 512 * P);
                for (unsigned i = 0; i < 8; i++)
                        rec_dir(&s, i, 0x10000000ull + i * 512 * P);
                uint32_t id = new_chunk(&s, 1);
                uint8_t same[32];
                memset(same, 0x5a, sizeof(same));
                uint64_t e = put_object(&s, id, 1, 0, same, sizeof(same));
                rec_fill(&s, FS_FILL_ENTRIES, 8 * 512, 0, e, 0, 0);
                r |= write_seed(dir, "limit-entries-one-object", s.b, s.n, NULL, 0);
        }

        /* a store whose daemon gave every page back */
        h = (FuzzStoreHdr){ .state_x = STORE_ACTIVE ^ STORE_RELEASED, .daemon_id = 0x2222 };
        seed_init(&s, &h);
        r |= write_seed(dir, "released", s.b, s.n, NULL, 0);

        /* write tracking, the second copy current, sixteen ranges, leaves
         * spread over the directory holding same-filled pages */
        h = (FuzzStoreHdr){ .features = STORE_F_WP_ASYNC, .daemon_id = 0x3333, .ranges_cur = 1,
                            .leaves = 40, .flags = FS_F_DAEMON_WP_ASYNC };
        h.nranges[1] = 16;
        seed_init(&s, &h);
        for (unsigned i = 0; i < 16; i++)
                rec_range(&s, 1, i, 0x10000000ull + i * 0x1000000ull, 0x10000000ull + i * 0x1000000ull + 0x400000);
        for (unsigned i = 0; i < 8; i++) {
                rec_dir(&s, i * 5, 0x10000000ull + i * 0x1000000ull);
                rec_entry(&s, i * 5, i * 60, pe_make_same(i));
        }
        r |= write_seed(dir, "wp-ranges", s.b, s.n, NULL, 0);
        return r ? -EIO : 0;
}

int main(int argc, char **argv) {
        char dir[4096], *corpus_dir = NULL;
        Corpus *c = NULL;
        int r;

        if (argc != 2) {
                fprintf(stderr, "usage: %s tests/fuzz/corpus\n", argv[0]);
                return 2;
        }
        snprintf(dir, sizeof(dir), "%s/protocol", argv[1]);
        if (protocol_seeds(dir) < 0)
                return 1;
        r = corpus_find_dir(NULL, &corpus_dir);
        if (r == 0)
                r = corpus_load(corpus_dir, &c);
        if (r < 0) {
                fprintf(stderr, "shared/corpus: %s\n", strerror(-r));
                return 1;
        }
        snprintf(dir, sizeof(dir), "%s/codec", argv[1]);
        r = codec_seeds(dir, c);
        if (r == 0) {
                snprintf(dir, sizeof(dir), "%s/store", argv[1]);
                r = store_seeds(dir, c);
        }
        corpus_free(c);
        free(corpus_dir);
        return r < 0 ? 1 : 0;
}
