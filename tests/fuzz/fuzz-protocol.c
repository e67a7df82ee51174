/*
 * fuzz-protocol.c: what the daemon does with a packet before its logic
 * sees it.
 *
 * Every input is used three ways:
 *
 *  1. As one packet: zmsg_validate() must accept exactly the messages
 *     protocol.h describes (magic, version, size == header size == the
 *     size the type declares; MOVE: 1..64 runs whose pages add up to
 *     npages, 1..512) and refuse everything else with -EPROTO.
 *
 *  2. If it is a valid ZMSG_TUNABLE_SET or _GET: key and value as
 *     do_tunable() in daemon/manager/requests.c takes them (copied into arrays one
 *     byte longer, so an unterminated field still ends in NUL), then
 *     tunable_set() on the daemon's Tunables. The per-message checks of
 *     manager.c (range_check, staging_check, do_pageout_pid's) are static
 *     there and are not reached from here; see docs/fuzzing.md.
 *
 *  3. As text: the first byte picks a tunable key, the rest (up to a NUL)
 *     is its value, as `zswapctl set` would send it; and the whole input,
 *     as a string, goes through every conf_parse_*() of common/conf.h.
 *
 * The tunable checks: tunable_set() returns 0, -ENOENT or -EINVAL; on
 * error the Tunables are unchanged and err holds one line (the value is
 * quoted in it: a newline in the value is the caller's); on success
 * tunable_get() formats the value in fewer than ZSWAP_TUNABLE_VALUE_MAX
 * bytes (it must fit a reply), and setting that text again gives the same
 * Tunables and formats the same (what `zswapctl get` shows can be set).
 *
 * Percentages must read back exactly; ZSWAP_FUZZ_STRICT=0 tolerates a
 * read-back within 1e-14 relative (tests/fuzz/crashes/README.md).
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "conf.h"
#include "fuzz.h"
#include "protocol.h"
#include "tunable-keys.h"
#include "tunables.h"

static bool strict(void) {
        static int s = -1;

        if (s < 0) {
                const char *e = getenv("ZSWAP_FUZZ_STRICT");
                s = !(e && strcmp(e, "0") == 0);
        }
        return s;
}

static bool same_percent(double a, double b) {
        if (a == b)
                return true;
        double m = fabs(a) > fabs(b) ? fabs(a) : fabs(b);

        return !strict() && fabs(a - b) <= 1e-14 * m;
}

/* Field by field: Tunables has padding that struct copies need not keep. */
static bool tunables_equal(const Tunables *a, const Tunables *b) {
        return a->limit == b->limit && a->idle_age_ms == b->idle_age_ms &&
               same_percent(a->pressure_target, b->pressure_target) && a->min_free == b->min_free &&
               same_percent(a->pressure_step, b->pressure_step) && a->pressure_period_ms == b->pressure_period_ms &&
               a->pool_max == b->pool_max && same_percent(a->pool_accept, b->pool_accept) &&
               a->thrash_refaults == b->thrash_refaults && a->thrash_backoff_ms == b->thrash_backoff_ms &&
               a->keep_clean == b->keep_clean && same_percent(a->clean_max, b->clean_max) &&
               a->write_scan_ms == b->write_scan_ms && a->interval_ms == b->interval_ms;
}

static void check_tunable(const char *key, const char *value) {
        char err[ZSWAP_TUNABLE_VALUE_MAX] = "", out[512] = "", out2[512] = "";
        Tunables t, before, again;
        int r;

        tunables_default(&t);
        before = t;
        r = tunable_set(&t, key, value, err, sizeof(err));
        FUZZ_CHECK(r == 0 || r == -ENOENT || r == -EINVAL, "tunable_set(%s, '%s') = %d", key, value, r);
        if (r < 0) {
                FUZZ_CHECK(tunables_equal(&t, &before), "tunable_set(%s, '%s') failed but changed Tunables", key,
                           value);
                /* one line, unless the caller's own text brought a newline */
                FUZZ_CHECK(err[0] && (strchr(err, '\n') == NULL || strchr(key, '\n') || strchr(value, '\n')),
                           "tunable_set(%s, '%s'): bad error '%s'", key, value, err);
                return;
        }
        FUZZ_CHECK(tunable_get(&t, key, out, sizeof(out)) == 0, "tunable_get(%s) after a set", key);
        FUZZ_CHECK(strlen(out) > 0 && strlen(out) < ZSWAP_TUNABLE_VALUE_MAX, "%s: '%s' does not fit a reply", key,
                   out);
        /* known issue (tests/fuzz/crashes/README.md): "%.15g" writes small
         * percentages as "1e-05", which the grammar has no room for */
        if (!strict() && (strstr(out, "e-") || strstr(out, "e+")))
                return;
        again = before;
        r = tunable_set(&again, key, out, err, sizeof(err));
        FUZZ_CHECK(r == 0, "%s = '%s' reads back as '%s', which is refused: %s", key, value, out, err);
        FUZZ_CHECK(tunables_equal(&t, &again), "%s = '%s' reads back as '%s', which sets another value", key, value,
                   out);
        FUZZ_CHECK(tunable_get(&again, key, out2, sizeof(out2)) == 0 && strcmp(out, out2) == 0,
                   "%s: '%s' formats as '%s', then as '%s'", key, value, out, out2);
}

/* The value grammar alone; sizes, durations and counts format back exactly. */
static void check_values(const char *s) {
        char buf[64];
        uint64_t u, u2;
        double d;
        bool b;
        int r;

        r = conf_parse_size(s, 0, &u);
        FUZZ_CHECK(r == 0 || r == -EINVAL || r == -ERANGE, "conf_parse_size('%s') = %d", s, r);
        if (r == 0) {
                conf_format_size(u, buf, sizeof(buf));
                FUZZ_CHECK(conf_parse_size(buf, 0, &u2) == 0 && u2 == u, "size '%s' -> %llu -> '%s'", s,
                           (unsigned long long)u, buf);
        }
        r = conf_parse_size(s, conf_ram_bytes(), &u);
        FUZZ_CHECK(r == 0 || r == -EINVAL || r == -ERANGE, "conf_parse_size('%s', ram) = %d", s, r);
        if (r == 0 && strchr(s, '%'))
                FUZZ_CHECK(u <= conf_ram_bytes() && u % 4096 == 0, "'%s' is %llu bytes", s, (unsigned long long)u);

        r = conf_parse_duration(s, &u);
        FUZZ_CHECK(r == 0 || r == -EINVAL || r == -ERANGE, "conf_parse_duration('%s') = %d", s, r);
        if (r == 0) {
                conf_format_duration(u, buf, sizeof(buf));
                FUZZ_CHECK(conf_parse_duration(buf, &u2) == 0 && u2 == u, "duration '%s' -> %llu ms -> '%s'", s,
                           (unsigned long long)u, buf);
        }
        r = conf_parse_decimal(s, &d);
        FUZZ_CHECK(r == 0 || r == -EINVAL || r == -ERANGE, "conf_parse_decimal('%s') = %d", s, r);
        if (r == 0)
                FUZZ_CHECK(d >= 0 && isfinite(d), "decimal '%s' is %g", s, d);
        r = conf_parse_uint(s, &u);
        FUZZ_CHECK(r == 0 || r == -EINVAL || r == -ERANGE, "conf_parse_uint('%s') = %d", s, r);
        if (r == 0) {
                snprintf(buf, sizeof(buf), "%llu", (unsigned long long)u);
                FUZZ_CHECK(conf_parse_uint(buf, &u2) == 0 && u2 == u, "uint '%s' -> '%s'", s, buf);
        }
        r = conf_parse_bool(s, &b);
        FUZZ_CHECK(r == 0 || r == -EINVAL, "conf_parse_bool('%s') = %d", s, r);
}

static void check_message(const uint8_t *data, size_t size) {
        const ZMsgHeader *h = (const void *)data;
        int r = zmsg_validate(data, size);

        FUZZ_CHECK(r == 0 || r == -EPROTO, "zmsg_validate = %d", r);
        if (r < 0)
                return;
        FUZZ_CHECK(size >= sizeof(*h) && size <= ZSWAP_MSG_MAX && h->size == size && h->magic == ZSWAP_PROTO_MAGIC &&
                           h->version == ZSWAP_PROTO_VERSION,
                   "accepted a bad header (type %u, size %zu)", h->type, size);
        if (h->type == ZMSG_MOVE) {
                const ZMsgMove *m = (const void *)data;
                uint64_t sum = 0;

                FUZZ_CHECK(m->nruns >= 1 && m->nruns <= ZSWAP_MOVE_RUNS_MAX && size == zmsg_move_size(m->nruns),
                           "accepted MOVE with %u runs in %zu bytes", m->nruns, size);
                for (uint32_t i = 0; i < m->nruns; i++)
                        sum += m->runs[i].npages;
                FUZZ_CHECK(sum == m->npages && sum >= 1 && sum <= ZSWAP_BATCH_MAX, "accepted MOVE of %llu pages",
                           (unsigned long long)sum);
                return;
        }
        FUZZ_CHECK(zmsg_expected_size(h->type) == size, "accepted type %u in %zu bytes", h->type, size);
        if (h->type == ZMSG_TUNABLE_SET || h->type == ZMSG_TUNABLE_GET) {
                const ZMsgTunable *q = (const void *)data;
                char key[ZSWAP_TUNABLE_KEY_MAX + 1] = "", value[ZSWAP_TUNABLE_VALUE_MAX + 1] = "";

                /* as do_tunable(): the fields need not be NUL-terminated */
                memcpy(key, q->key, sizeof(q->key));
                memcpy(value, q->value, sizeof(q->value));
                check_tunable(key, value);
        }
}

/* Every type's declared size fits a packet; unknown types declare none. */
static void check_sizes_once(void) {
        static bool done;

        if (done)
                return;
        done = true;
        for (unsigned t = 0; t <= UINT16_MAX; t++) {
                size_t n = zmsg_expected_size((uint16_t)t);
                FUZZ_CHECK(n == 0 || (n >= sizeof(ZMsgHeader) && n <= ZSWAP_MSG_MAX), "type %u: size %zu", t, n);
        }
        FUZZ_CHECK(zmsg_move_size(ZSWAP_MOVE_RUNS_MAX) <= ZSWAP_MSG_MAX, "a full MOVE does not fit");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char *text;

        check_sizes_once();
        if (size > 4 * ZSWAP_MSG_MAX)
                return 0;
        /* libFuzzer's buffer is malloc()ed; keep the alignment the daemon's receive buffer has */
        check_message(data, size);

        text = malloc(size + 1);
        if (!text)
                return 0;
        memcpy(text, data, size);
        text[size] = 0;
        check_values(text);
        if (size > 0)
                check_tunable(tunable_names[data[0] % _TUNABLE_KEY_MAX], text + 1);
        free(text);
        return 0;
}
