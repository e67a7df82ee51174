/*
 * zswapctl-tunables.c: `set` and `get`, the daemon's tunables or a
 * client's own (--pid). They travel as text and the daemon parses them
 * (daemon/conf/tunables.c), so only their names are known here
 * (common/tunable-keys.h); output is "key = value" lines, as the
 * configuration file has them, or one JSON object.
 */
#include <stdio.h>
#include <string.h>

#include "macro.h"
#include "protocol.h"
#include "tunable-keys.h"
#include "zswapctl.h"

/* One TUNABLE_SET (value != NULL) or TUNABLE_GET; the reply's value (the
 * value in force, or why not) goes to out. Returns the daemon's status. */
static int tunable_request(int fd, int32_t pid, const char *key, const char *value, char *out, size_t len) {
        /* the next request id: zswapctl is one thread, nothing else
         * writes it */
        static uint32_t id = 2;
        ZMsgTunable q = { .pid = pid };
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX] = { 0 };
        const ZMsgTunable *rep = (const ZMsgTunable *)buf;
        size_t n = 0;

        snprintf(q.key, sizeof(q.key), "%s", key);
        snprintf(q.value, sizeof(q.value), "%s", value ? value : "");
        zmsg_init(&q.hdr, value ? ZMSG_TUNABLE_SET : ZMSG_TUNABLE_GET, id++, sizeof(q));
        int r = ctl_request(fd, &q, sizeof(q), buf, sizeof(buf));
        if (r != -EPROTO && rep->hdr.type == ZMSG_TUNABLE_REPLY)
                n = MIN(strnlen(rep->value, sizeof(rep->value)), len - 1);
        memcpy(out, rep->value, n);
        out[n] = 0;
        return r;
}

/* "key = value" lines, as the configuration file has them, or one JSON
 * object key -> value string. */
static void print_pairs(const char *const *keys, char (*values)[ZSWAP_TUNABLE_VALUE_MAX], size_t n, bool json) {
        int width = 0;

        for (size_t i = 0; i < n; i++)
                width = MAX(width, (int)strlen(keys[i]));
        for (size_t i = 0; i < n; i++) {
                if (!json) {
                        printf("%-*s = %s\n", width, keys[i], values[i]);
                        continue;
                }
                printf(i ? ", " : "{");
                json_string(keys[i]);
                printf(": ");
                json_string(values[i]);
        }
        if (json)
                printf(n ? "}\n" : "{}\n");
}

static bool tunable_args_fit(const char *key, const char *value) {
        if (strlen(key) >= ZSWAP_TUNABLE_KEY_MAX) {
                fprintf(stderr, "zswapctl: unknown key '%s' (zswapctl get lists them)\n", key);
                return false;
        }
        if (value && strlen(value) >= ZSWAP_TUNABLE_VALUE_MAX) {
                fprintf(stderr, "zswapctl: %s: value too long (%d bytes at most)\n", key, ZSWAP_TUNABLE_VALUE_MAX - 1);
                return false;
        }
        return true;
}

/* set [--pid PID] KEY VALUE, or KEY=VALUE as zswapd --set takes it:
 * prints the value now in force */
int cmd_set(const char *path, int32_t pid, int argc, char **argv, bool json) {
        char value[1][ZSWAP_TUNABLE_VALUE_MAX], key[ZSWAP_TUNABLE_KEY_MAX + 1];
        char *pair[2];
        const char *eq = argc == 1 ? strchr(argv[0], '=') : NULL;

        if (eq && (size_t)(eq - argv[0]) < sizeof(key)) {
                snprintf(key, sizeof(key), "%.*s", (int)(eq - argv[0]), argv[0]);
                pair[0] = key;
                pair[1] = (char *)eq + 1;
                argv = pair;
                argc = 2;
        }
        if (argc != 2) {
                fprintf(stderr, "zswapctl: usage: zswapctl set [--pid PID] KEY VALUE (or KEY=VALUE)\n");
                return 2;
        }
        if (!tunable_args_fit(argv[0], argv[1]))
                return 2;
        _cleanup_close_ int fd = ctl_connect(path);
        if (fd < 0)
                return 1;
        int r = tunable_request(fd, pid, argv[0], argv[1], value[0], sizeof(value[0]));
        if (r < 0)
                return refused(r, pid, true, argv[0], value[0]);
        print_pairs((const char *const *)argv, value, 1, json);
        return 0;
}

/* get [--pid PID] [KEY]: every key (the daemon's, or a client's own) or one */
int cmd_get(const char *path, int32_t pid, int argc, char **argv, bool json) {
        const char *const *keys = pid ? tunable_client_names : tunable_names;
        size_t n = _TUNABLE_KEY_MAX;
        char values[_TUNABLE_KEY_MAX][ZSWAP_TUNABLE_VALUE_MAX];

        if (argc > 1) {
                fprintf(stderr, "zswapctl: usage: zswapctl get [--pid PID] [KEY]\n");
                return 2;
        }
        if (argc == 1) {
                if (!tunable_args_fit(argv[0], NULL))
                        return 2;
                keys = (const char *const *)argv;
                n = 1;
        } else if (pid)
                for (n = 0; tunable_client_names[n] && n < _TUNABLE_KEY_MAX; n++)
                        ;
        _cleanup_close_ int fd = ctl_connect(path);
        if (fd < 0)
                return 1;
        for (size_t i = 0; i < n; i++) {
                int r = tunable_request(fd, pid, keys[i], NULL, values[i], sizeof(values[i]));
                if (r < 0)
                        return refused(r, pid, false, keys[i], values[i]);
        }
        print_pairs(keys, values, n, json);
        return 0;
}
