/*
 * fuzz.h: what every fuzzer in tests/fuzz/ shares.
 *
 * Each fuzz-*.c defines LLVMFuzzerTestOneInput() and nothing else that is
 * visible; it is linked either with libFuzzer (clang, -fsanitize=fuzzer,
 * run-fuzzers.sh) or with replay.c, a main() that runs it over the files
 * of the committed corpus, so that every build flavour (gcc plain, ASan,
 * TSan) replays the corpus as a unit test. A broken invariant aborts: both
 * libFuzzer and meson take that as a failure, with the message below.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* libFuzzer's entry point; 0 always (a failed check aborts instead). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond, ...)                                                   \
        do {                                                                    \
                if (!(cond)) {                                                  \
                        fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
                        fprintf(stderr, __VA_ARGS__);                           \
                        fprintf(stderr, "\n");                                  \
                        fflush(stderr);                                         \
                        abort();                                                \
                }                                                               \
        } while (0)
