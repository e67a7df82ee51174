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
 * Fixed picks, so a rerun writes the same files.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "codec.h"
#include "corpus.h"
#include "protocol.h"
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
        [TUNABLE_WRITE_SCAN] = "off",     [TUNABLE_INTERVAL] = "1m",
};

static int protocol_seeds(const char *dir) {
        static const uint16_t types[] = {
                ZMSG_HELLO, ZMSG_ATTACH, ZMSG_REGISTER, ZMSG_UNREGISTER, ZMSG_PAGEOUT, ZMSG_STATS,
                ZMSG_FORK_PREPARE, ZMSG_FORK_DONE, ZMSG_CHILD_ATTACH, ZMSG_PAGEOUT_PID, ZMSG_SET_LIMIT,
                ZMSG_TUNABLE_GET, ZMSG_STATUS, ZMSG_CLIENTS, ZMSG_REPLY, ZMSG_STATS_REPLY, ZMSG_TUNABLE_REPLY,
                ZMSG_STATUS_REPLY, ZMSG_CLIENTS_REPLY, ZMSG_RELEASE, ZMSG_MOVE_DONE, ZMSG_RELEASE_DONE,
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
        corpus_free(c);
        free(corpus_dir);
        return r < 0 ? 1 : 0;
}
