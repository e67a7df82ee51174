/*
 * zswapctl-output.c: what the output forms of the read commands share.
 * A Field prints as text for people (sizes in K/M/G unless --bytes,
 * latencies in ns/us/ms/s) or as JSON (raw numbers, null where a figure
 * is not known yet); -o lists are checked against the names that exist
 * before anything is sent.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "zswapctl.h"

static void human(uint64_t b, char *buf, size_t len) {
        const char *u[] = { "B", "K", "M", "G", "T" };
        double v = (double)b;
        int i = 0;
        while (v >= 1024 && i < 4) {
                v /= 1024;
                i++;
        }
        snprintf(buf, len, i ? "%.1f%s" : "%.0f%s", v, u[i]);
}

/* A duration in ns for people: 850ns, 12.3us, 4.1ms, 1.20s. */
static void human_ns(uint64_t ns, char *buf, size_t len) {
        if (ns < 1000)
                snprintf(buf, len, "%lluns", (unsigned long long)ns);
        else if (ns < 1000000)
                snprintf(buf, len, "%.1fus", (double)ns / 1e3);
        else if (ns < 1000000000)
                snprintf(buf, len, "%.1fms", (double)ns / 1e6);
        else
                snprintf(buf, len, "%.2fs", (double)ns / 1e9);
}

void json_string(const char *s) {
        putchar('"');
        for (; *s; s++)
                if (*s == '"' || *s == '\\')
                        printf("\\%c", *s);
                else if ((unsigned char)*s < 0x20)
                        printf("\\u%04x", *s);
                else
                        putchar(*s);
        putchar('"');
}

/* Is name in the comma-separated list (case-insensitive)? */
bool list_has(const char *list, const char *name) {
        size_t n = strlen(name);
        for (const char *p = list; *p;) {
                size_t l = strcspn(p, ",");
                if (l == n && strncasecmp(p, name, n) == 0)
                        return true;
                p += l + (p[l] == ',');
        }
        return false;
}

void field_text(const Field *f, bool bytes, char *buf, size_t len) {
        switch (f->kind) {
        case K_SIZE:
                if (!bytes) {
                        human(f->v, buf, len);
                        return;
                }
                break;
        case K_NS:
                if (!bytes) {
                        human_ns(f->v, buf, len);
                        return;
                }
                break;
        case K_REAL:
                if (f->unknown)
                        snprintf(buf, len, "-");
                else
                        snprintf(buf, len, "%.2f", f->d);
                return;
        case K_TEXT:
                snprintf(buf, len, "%s", f->text);
                return;
        case K_COUNT:
                if (f->is_signed) {
                        snprintf(buf, len, "%lld", (long long)(int64_t)f->v);
                        return;
                }
                break;
        }
        snprintf(buf, len, "%llu", (unsigned long long)f->v);
}

void field_json(const Field *f) {
        if (f->kind == K_TEXT)
                json_string(f->text);
        else if (f->kind == K_REAL && f->unknown)
                printf("null");
        else if (f->kind == K_REAL)
                printf("%.3f", f->d);
        else if (f->is_signed)
                printf("%lld", (long long)(int64_t)f->v);
        else
                printf("%llu", (unsigned long long)f->v);
}

/* Check -o names against what exists; false after saying which is not. */
bool columns_valid(const char *list, const char *const *names, size_t n, const char *what) {
        for (const char *p = list; *p;) {
                size_t l = strcspn(p, ",");
                bool ok = false;
                for (size_t i = 0; i < n && !ok; i++)
                        ok = strlen(names[i]) == l && strncasecmp(p, names[i], l) == 0;
                if (!ok || l == 0) {
                        fprintf(stderr, "zswapctl: unknown %s '%.*s'; there are:", what, (int)l, p);
                        for (size_t i = 0; i < n; i++)
                                fprintf(stderr, "%s%s", i ? "," : " ", names[i]);
                        fprintf(stderr, "\n");
                        return false;
                }
                p += l + (p[l] == ',');
        }
        return true;
}
