/* SPDX-License-Identifier: MIT */
/* The tokenizer corpus (tests/tokenizers/corpus.jsonl: prose, code, digits,
 * emoji, CJK, RTL, whitespace runs), which the text benchmarks build their
 * inputs from. */
#ifndef PFX_BENCH_CORPUS_H
#define PFX_BENCH_CORPUS_H

#include <stddef.h>

/* Its lines, decoded, in order. */
struct bench_corpus {
	char **line; /* NUL-terminated (a line may hold a NUL of its own) */
	size_t *len;
	size_t n;
};

/* Reads dir/corpus.jsonl (one JSON string a line; other lines are left
 * out). Exits with a message when it cannot, or holds no line. */
void bench_corpus_read(const char *dir, struct bench_corpus *c);
void bench_corpus_free(struct bench_corpus *c);

#endif
