/*
 * nbd-uri.c: NBD URIs (NetworkBlockDevice/nbd doc/uri.md) parsed into an
 * NbdAddr (nbd.h): nbd://HOST[:PORT]/EXPORT and
 * nbd+unix:///EXPORT?socket=PATH. The connection itself is nbd-connect.c,
 * nbd-handshake.c and nbd.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "nbd.h"
#include "util.h"

static int hex_value(char ch) {
        if (ch >= '0' && ch <= '9')
                return ch - '0';
        if (ch >= 'a' && ch <= 'f')
                return ch - 'a' + 10;
        if (ch >= 'A' && ch <= 'F')
                return ch - 'A' + 10;
        return -1;
}

/* Percent-decode s[0..n) into out (cap bytes, NUL included): -EINVAL for
 * a bad escape or an encoded NUL, -ENAMETOOLONG if it does not fit. */
static int pct_decode(const char *s, size_t n, char *out, size_t cap) {
        size_t o = 0;

        for (size_t i = 0; i < n; i++) {
                char ch = s[i];

                if (ch == '%') {
                        int hi = n - i >= 3 ? hex_value(s[i + 1]) : -1, lo = n - i >= 3 ? hex_value(s[i + 2]) : -1;
                        if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
                                return -EINVAL;
                        ch = (char)(hi << 4 | lo);
                        i += 2;
                }
                if (o + 1 >= cap)
                        return -ENAMETOOLONG;
                out[o++] = ch;
        }
        out[o] = 0;
        return 0;
}

static int parse_port(const char *s, size_t n, NbdAddr *a, char *err, size_t errlen) {
        unsigned long v = 0;

        if (n == 0)
                return 0; /* "host:" is the default port */
        if (n > 5)
                return errorf(-EINVAL, err, errlen, "bad port '%.*s'", (int)n, s);
        for (size_t i = 0; i < n; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return errorf(-EINVAL, err, errlen, "bad port '%.*s'", (int)n, s);
                v = v * 10 + (unsigned long)(s[i] - '0');
        }
        if (v == 0 || v > 65535)
                return errorf(-EINVAL, err, errlen, "port %lu out of range", v);
        snprintf(a->port, sizeof(a->port), "%lu", v);
        return 0;
}

static int parse_authority(const char *s, size_t n, bool unix_socket, NbdAddr *a, char *err, size_t errlen) {
        const char *end = s + n, *host = s, *host_end, *port = end;

        if (unix_socket) {
                if (n > 0)
                        return errorf(-EINVAL, err, errlen, "a Unix socket URI has no host: nbd+unix:///EXPORT?socket=PATH");
                return 0;
        }
        if (n == 0)
                return errorf(-EINVAL, err, errlen, "no host in the URI");
        if (memchr(s, '@', n))
                return errorf(-EINVAL, err, errlen, "user info in the URI is for TLS, which is not supported");
        if (s[0] == '[') {
                host = s + 1;
                host_end = memchr(host, ']', (size_t)(end - host));
                if (!host_end)
                        return errorf(-EINVAL, err, errlen, "unterminated '[' in the host");
                for (const char *p = host; p < host_end; p++)
                        if (hex_value(*p) < 0 && *p != ':' && *p != '.')
                                return errorf(-EINVAL, err, errlen, "bad IPv6 address '%.*s'",
                                            (int)(host_end - host), host);
                if (host_end + 1 < end && host_end[1] != ':')
                        return errorf(-EINVAL, err, errlen, "junk after ']' in the host");
                if (host_end + 1 < end)
                        port = host_end + 2;
        } else {
                host_end = memchr(s, ':', n);
                if (host_end)
                        port = host_end + 1;
                else
                        host_end = end;
        }
        if (host_end == host)
                return errorf(-EINVAL, err, errlen, "empty host in the URI");
        if (pct_decode(host, (size_t)(host_end - host), a->host, sizeof(a->host)) < 0)
                return errorf(-EINVAL, err, errlen, "bad or too long a host '%.*s'", (int)(host_end - host), host);
        return parse_port(port, (size_t)(end - port), a, err, errlen);
}

static int parse_query(const char *q, bool unix_socket, NbdAddr *a, char *err, size_t errlen) {
        while (q && *q) {
                size_t n = strcspn(q, "&");
                const char *eq = memchr(q, '=', n);

                if (n == 0) {
                        q++;
                        continue;
                }
                if (eq && eq - q == 6 && strncmp(q, "socket", 6) == 0) {
                        if (!unix_socket)
                                return errorf(-EINVAL, err, errlen, "socket= is for nbd+unix:// URIs");
                        if (a->path[0])
                                return errorf(-EINVAL, err, errlen, "more than one socket= in the URI");
                        if (pct_decode(eq + 1, n - (size_t)(eq + 1 - q), a->path, sizeof(a->path)) < 0 || !a->path[0])
                                return errorf(-EINVAL, err, errlen, "bad, empty, abstract or too long a socket path");
                } else if (strncmp(q, "tls-", 4) == 0)
                        return errorf(-EINVAL, err, errlen, "TLS is not supported ('%.*s')", (int)n, q);
                else
                        return errorf(-EINVAL, err, errlen, "unknown URI parameter '%.*s'", (int)n, q);
                q += n;
        }
        return 0;
}

int nbd_parse(const char *uri, NbdAddr *ret, char *err, size_t errlen) {
        NbdAddr a = { .port = NBD_DEFAULT_PORT };
        const char *p, *auth_end, *path, *path_end;
        bool unix_socket;
        int r;

        if (err && errlen > 0)
                err[0] = 0;
        if (!uri || !ret)
                return errorf(-EINVAL, err, errlen, "no URI");
        if (strncmp(uri, "nbd://", 6) == 0) {
                unix_socket = false;
                p = uri + 6;
        } else if (strncmp(uri, "nbd+unix://", 11) == 0) {
                unix_socket = true;
                p = uri + 11;
        } else if (strncmp(uri, "nbds://", 7) == 0 || strncmp(uri, "nbds+unix://", 12) == 0)
                return errorf(-EINVAL, err, errlen, "TLS (nbds) is not supported");
        else
                return errorf(-EINVAL, err, errlen, "not an NBD URI: nbd://HOST[:PORT]/EXPORT or nbd+unix:///EXPORT?socket=PATH");
        if (strchr(p, '#'))
                return errorf(-EINVAL, err, errlen, "a fragment ('#') in the URI");
        auth_end = p + strcspn(p, "/?");
        path = auth_end;
        path_end = path + strcspn(path, "?");
        r = parse_authority(p, (size_t)(auth_end - p), unix_socket, &a, err, errlen);
        if (r < 0)
                return r;
        /* the export name is the path without its leading '/' */
        if (*path == '/')
                path++;
        if (pct_decode(path, (size_t)(path_end - path), a.export_name, sizeof(a.export_name)) < 0)
                return errorf(-EINVAL, err, errlen, "bad or too long an export name");
        r = parse_query(*path_end == '?' ? path_end + 1 : NULL, unix_socket, &a, err, errlen);
        if (r < 0)
                return r;
        if (unix_socket && !a.path[0])
                return errorf(-EINVAL, err, errlen, "an nbd+unix:// URI needs ?socket=PATH");
        *ret = a;
        return 0;
}
