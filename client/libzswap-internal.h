/*
 * libzswap-internal.h: what the preload shim (preload.c), linked with
 * libzswap statically, needs beyond the public API. Not installed, not
 * exported from libzswap.so.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "zswap.h"

typedef struct ZswapSpan {
        uint64_t start, end;
} ZswapSpan;

/* Memory of the client itself that must never be managed: its staging
 * area and its agent thread's stack. Fills up to max spans; returns how
 * many. */
size_t zswap_client_own_memory(struct zswap_client *c, ZswapSpan *spans, size_t max);
