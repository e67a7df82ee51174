/*
 * conf.c: the configuration file reader and the value grammar.
 *
 * The reader is deliberately small (systemd's own unit files are the
 * model): one assignment per line, comments only on lines of their own so
 * that a value may contain '#', no quoting, no continuation lines, no
 * includes. It knows nothing about keys; the callback decides, so each part
 * of the daemon can own a section.
 *
 * Numbers are parsed by hand rather than with strtod(): strtod also takes
 * signs, exponents, hex, "inf" and "nan", and follows the locale, none of
 * which belongs in a configuration value. The whole part is exact 64-bit
 * arithmetic; only a fraction ("1.5G") goes through a double, and it is
 * less than one unit.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "conf.h"
#include "macro.h"

static void fclosep(FILE **f) {
        if (*f)
                fclose(*f);
}

static char *strip(char *s) {
        size_t n;

        while (isspace((unsigned char)*s))
                s++;
        n = strlen(s);
        while (n > 0 && isspace((unsigned char)s[n - 1]))
                s[--n] = 0;
        return s;
}

static _printf_(6, 7) int conf_error(int r, char *err, size_t errlen, const char *path, unsigned line,
                                     const char *fmt, ...) {
        va_list ap;
        int n;

        if (!err || errlen == 0)
                return r;
        n = snprintf(err, errlen, "%s:%u: ", path, line);
        if (n >= 0 && (size_t)n < errlen) {
                va_start(ap, fmt);
                vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
                va_end(ap);
        }
        return r;
}

int conf_parse(const char *path, ConfCallback cb, void *userdata, char *err, size_t errlen) {
        _cleanup_(fclosep) FILE *f = fopen(path, "re");
        _cleanup_free_ char *buf = NULL, *section = NULL;
        size_t cap = 0;
        unsigned line = 0;

        if (!f) {
                int r = negative_errno();
                if (err && errlen)
                        snprintf(err, errlen, "%s: %s", path, strerror(-r));
                return r;
        }
        while (getline(&buf, &cap, f) >= 0) {
                char msg[256] = "", *s = strip(buf), *eq, *key, *value;
                size_t n = strlen(s);
                int r;

                line++;
                if (n == 0 || *s == '#' || *s == ';')
                        continue;
                if (*s == '[') {
                        if (n < 3 || s[n - 1] != ']')
                                return conf_error(-EINVAL, err, errlen, path, line, "expected [section], got '%s'", s);
                        free(section);
                        section = strndup(s + 1, n - 2);
                        if (!section)
                                return -ENOMEM;
                        continue;
                }
                eq = strchr(s, '=');
                if (!eq)
                        return conf_error(-EINVAL, err, errlen, path, line, "expected key = value, got '%s'", s);
                *eq = 0;
                key = strip(s);
                value = strip(eq + 1);
                if (!*key)
                        return conf_error(-EINVAL, err, errlen, path, line, "no key before '='");
                if (!section)
                        return conf_error(-EINVAL, err, errlen, path, line, "'%s' comes before any [section]", key);
                r = cb(section, key, value, line, userdata, msg, sizeof(msg));
                if (r < 0)
                        return conf_error(r, err, errlen, path, line, "%s", msg);
        }
        if (ferror(f))
                return conf_error(-EIO, err, errlen, path, line + 1, "read error");
        return 0;
}

/* Digits, optionally '.' and more digits; *p moves past them. An integer
 * part above 64 bits sets *overflow but still consumes the digits, so that
 * "99999999999999999999x" is reported as garbage, not as too large. */
static int parse_number(const char **p, uint64_t *ret, double *ret_frac, bool *overflow) {
        const char *s = *p;
        uint64_t v = 0;
        double frac = 0, scale = 0.1;

        if (!isdigit((unsigned char)*s))
                return -EINVAL;
        for (; isdigit((unsigned char)*s); s++)
                if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, (uint64_t)(*s - '0'), &v))
                        *overflow = true;
        if (*s == '.') {
                if (!isdigit((unsigned char)*++s))
                        return -EINVAL;
                for (; isdigit((unsigned char)*s); s++, scale /= 10)
                        frac += (*s - '0') * scale;
        }
        *p = s;
        *ret = v;
        *ret_frac = frac;
        return 0;
}

/* v.frac units of mult each, rounded down. */
static int scale_number(uint64_t v, double frac, uint64_t mult, bool overflow, uint64_t *ret) {
        uint64_t r, f = (uint64_t)(frac * (double)mult);

        if (overflow || __builtin_mul_overflow(v, mult, &r) || __builtin_add_overflow(r, MIN(f, mult - 1), &r))
                return -ERANGE;
        *ret = r;
        return 0;
}

int conf_parse_size(const char *s, uint64_t ram, uint64_t *ret) {
        const char *p = s;
        unsigned shift = 0;
        bool overflow = false;
        uint64_t v;
        double frac;

        if (strcmp(s, "none") == 0) {
                *ret = 0;
                return 0;
        }
        if (parse_number(&p, &v, &frac, &overflow) < 0)
                return -EINVAL;
        if (ram && strcmp(p, "%") == 0) {
                if (overflow || v > 100 || (v == 100 && frac > 0))
                        return -ERANGE;
                *ret = (uint64_t)((double)ram * ((double)v + frac) / 100) & ~(ZSWAP_PAGE_SIZE - 1);
                return 0;
        }
        if (*p) {
                const char *u = strchr("KMGT", toupper((unsigned char)*p));
                if (!u)
                        return -EINVAL;
                shift = 10 * (unsigned)(u - "KMGT" + 1);
                p++;
                if (strcmp(p, "B") == 0 || strcmp(p, "iB") == 0)
                        p += strlen(p);
        }
        if (*p)
                return -EINVAL;
        return scale_number(v, frac, 1ull << shift, overflow, ret);
}

int conf_parse_duration(const char *s, uint64_t *ret_ms) {
        static const struct {
                const char *suffix;
                uint64_t ms;
        } units[] = {
                { "", 1000 }, { "s", 1000 }, { "ms", 1 }, { "m", 60 * 1000 }, { "h", 3600 * 1000 },
        };
        const char *p = s;
        bool overflow = false;
        uint64_t v;
        double frac;

        if (strcmp(s, "off") == 0) {
                *ret_ms = 0;
                return 0;
        }
        if (parse_number(&p, &v, &frac, &overflow) < 0)
                return -EINVAL;
        for (size_t i = 0; i < ELEMENTSOF(units); i++)
                if (strcmp(p, units[i].suffix) == 0)
                        return scale_number(v, frac, units[i].ms, overflow, ret_ms);
        return -EINVAL;
}

int conf_parse_decimal(const char *s, double *ret) {
        const char *p = s;
        bool overflow = false;
        uint64_t v;
        double frac;

        if (parse_number(&p, &v, &frac, &overflow) < 0 || (*p && strcmp(p, "%") != 0))
                return -EINVAL;
        if (overflow)
                return -ERANGE;
        /* the grammar is checked: strtod() rounds correctly, so what
         * conf_format_decimal() writes reads back as the same double (a
         * sum of digit * 0.1^k does not) */
        *ret = strtod(s, NULL);
        (void)frac;
        return 0;
}

void conf_format_decimal(double v, char *buf, size_t len) {
        /* as many digits as the value needs, up to what the buffer holds:
         * a value of 1e-18 needs 35 after the point (its 17 significant
         * ones, after 18 zeros); only values under about 1e-130 fail to
         * fit a reply's 160 bytes */
        for (int digits = 0; (size_t)digits + 24 < len; digits++) {
                double back;
                snprintf(buf, len, "%.*f", digits, v);
                if (conf_parse_decimal(buf, &back) == 0 && back == v)
                        return;
        }
        /* no form that fits reads back exactly: the closest one stays */
}

int conf_parse_uint(const char *s, uint64_t *ret) {
        const char *p = s;
        bool overflow = false;
        uint64_t v;
        double frac;

        if (parse_number(&p, &v, &frac, &overflow) < 0 || *p || strchr(s, '.'))
                return -EINVAL;
        if (overflow)
                return -ERANGE;
        *ret = v;
        return 0;
}

int conf_parse_bool(const char *s, bool *ret) {
        static const char *const words[][2] = {
                { "yes", "no" }, { "on", "off" }, { "true", "false" }, { "1", "0" },
        };

        for (size_t i = 0; i < ELEMENTSOF(words); i++)
                for (size_t j = 0; j < 2; j++)
                        if (strcasecmp(s, words[i][j]) == 0) {
                                *ret = j == 0;
                                return 0;
                        }
        return -EINVAL;
}

void conf_format_size(uint64_t bytes, char *buf, size_t len) {
        for (unsigned i = 4; bytes && i > 0; i--)
                if (bytes % (1ull << (10 * i)) == 0) {
                        snprintf(buf, len, "%llu%c", (unsigned long long)(bytes >> (10 * i)), "KMGT"[i - 1]);
                        return;
                }
        snprintf(buf, len, "%llu", (unsigned long long)bytes);
}

void conf_format_duration(uint64_t ms, char *buf, size_t len) {
        static const struct {
                const char *suffix;
                uint64_t ms;
        } units[] = {
                { "h", 3600 * 1000 }, { "m", 60 * 1000 }, { "s", 1000 },
        };

        for (size_t i = 0; ms && i < ELEMENTSOF(units); i++)
                if (ms % units[i].ms == 0) {
                        snprintf(buf, len, "%llu%s", (unsigned long long)(ms / units[i].ms), units[i].suffix);
                        return;
                }
        snprintf(buf, len, ms ? "%llums" : "%llu", (unsigned long long)ms);
}

uint64_t conf_ram_bytes(void) {
        long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);

        return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}
