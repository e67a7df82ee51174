/*
 * conf.h: the configuration file's syntax, shared by zswapd and zswapctl.
 *
 * conf_parse() reads an INI-style file and hands each assignment to a
 * callback; what the keys mean is the caller's business (daemon/conf/config.c,
 * whose table lists every setting). The conf_parse_*() functions are the value
 * grammar every key uses, in the file, on the wire and on zswapctl's
 * command line, so that "64M" or "250ms" means the same everywhere; the
 * conf_format_*() functions write values back in a form they accept.
 * Nothing here keeps state or logs; any thread may call it.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Called for every "key = value" line, key and value trimmed of blanks.
 * Returns 0, or -errno after writing one line saying why into err (without
 * a position: conf_parse() prefixes "path:line: ").
 */
typedef int (*ConfCallback)(const char *section, const char *key, const char *value, unsigned line,
                            void *userdata, char *err, size_t errlen);

/*
 * Read path: "[section]" headers, "key = value" lines, whole-line '#' and
 * ';' comments, blank lines. A line that is none of these, an assignment
 * before the first section or a failing callback stops the parse: returns
 * -EINVAL (or the callback's error, or -errno opening the file) and err (if
 * not NULL) gets "path:line: message". The callback may have been called
 * for earlier lines: parse into a copy to keep the target unchanged.
 */
int conf_parse(const char *path, ConfCallback cb, void *userdata, char *err, size_t errlen);

/*
 * A size: "4096", "64K", "1.5G", "2T" (K, M, G, T are powers of 1024, in
 * either case, optionally followed by B or iB; fractions round down to the
 * byte), "none" or "0" for 0. With ram != 0 also a percentage of it,
 * "10%", "0.5%", rounded down to a page. 0, -EINVAL if s is not a size,
 * -ERANGE if it is above 64 bits or 100 %.
 */
int conf_parse_size(const char *s, uint64_t ram, uint64_t *ret);

/* A duration in milliseconds: "250ms", "30s", "5m", "1h", a plain number
 * of seconds ("30", "0.5"), "off" or "0" for 0. 0, -EINVAL, -ERANGE. */
int conf_parse_duration(const char *s, uint64_t *ret_ms);

/* A plain decimal such as "0.5" or "90", optionally followed by '%'. No
 * sign, exponent, hex, inf or nan. 0, -EINVAL, -ERANGE. */
int conf_parse_decimal(const char *s, double *ret);

/* A whole number: digits only. 0, -EINVAL, -ERANGE. */
int conf_parse_uint(const char *s, uint64_t *ret);

/* yes/no, on/off, true/false, 1/0, in any case. 0 or -EINVAL. */
int conf_parse_bool(const char *s, bool *ret);

/* Sizes and durations in the largest unit that holds them exactly ("64M",
 * "1536M", "4097", "30s", "1500ms"); 0 as "0". */
void conf_format_size(uint64_t bytes, char *buf, size_t len);
/* A decimal in the fewest digits after the point that conf_parse_decimal()
 * reads back as exactly v (never an exponent: "0.00001", not "1e-05"). */
void conf_format_decimal(double v, char *buf, size_t len);
void conf_format_duration(uint64_t ms, char *buf, size_t len);

/* The machine's RAM in bytes (what "10%" is a percentage of), 0 if unknown. */
uint64_t conf_ram_bytes(void);
