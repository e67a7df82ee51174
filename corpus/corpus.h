/*
 * corpus.h: the benchmark's workload, real heap pages.
 *
 * Three dumps of 2048 pages each (python, node, java heaps; see
 * shared/corpus/README.md) are loaded once and laid out page by page, in a
 * fixed interleaved order, over a buffer of any size. A 64-bit checksum per
 * corpus page lets a benchmark prove that what it reads back is what it wrote.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "macro.h"

#define CORPUS_FILES 3
#define CORPUS_FILE_PAGES 2048
#define CORPUS_PAGES (CORPUS_FILES * CORPUS_FILE_PAGES)

typedef struct Corpus {
        uint8_t *data;              /* CORPUS_PAGES pages, file after file */
        uint64_t sums[CORPUS_PAGES]; /* corpus_checksum() of each page of data */
} Corpus;

/*
 * Find the corpus directory when none was given: $ZSWAP_CORPUS, then
 * BENCH_CORPUS_DIR if the build defined it, then shared/corpus beside the
 * repository the executable in exe_dir was built in (build/bench/), then
 * ../shared/corpus from the working directory (the repository root). The
 * first one holding the corpus wins. Returns -ENOENT if none does.
 */
int corpus_find_dir(const char *exe_dir, char **ret);

/* Load and decompress the three dumps from dir. -ENOENT, -EBADMSG, -ENOMEM. */
int corpus_load(const char *dir, Corpus **ret);
Corpus *corpus_free(Corpus *c);
static inline void corpus_freep(Corpus **c) {
        corpus_free(*c);
}
#define _cleanup_corpus_ _cleanup_(corpus_freep)

/* Index into the corpus of page i of a filled buffer (python, node, java, ...). */
size_t corpus_index(size_t i);

/* Write n_pages corpus pages into buf in corpus_index() order. */
void corpus_fill(const Corpus *c, void *buf, size_t n_pages);

/*
 * Count the pages of buf (n_pages long, filled by corpus_fill()) whose
 * checksum differs from the corpus page that belongs there; *first_bad gets
 * the index of the first such page (unchanged if there is none).
 */
size_t corpus_verify(const Corpus *c, const void *buf, size_t n_pages, size_t *first_bad);

/* A 64-bit checksum of one 4 KiB page; not cryptographic, just thorough. */
uint64_t corpus_checksum(const void *page);

/* Fill perm with a permutation of 0..n-1 that depends on seed alone. */
void corpus_shuffle(size_t *perm, size_t n, uint64_t seed);
