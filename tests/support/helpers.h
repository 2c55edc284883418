/* SPDX-License-Identifier: MIT */
/* Shared helpers for the Criterion suites: fixtures, models, comparisons. */
#ifndef PFX_TEST_HELPERS_H
#define PFX_TEST_HELPERS_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "session.h"

/* Tolerances against the float32 transformers references (fixtures/README):
 * transformers itself differs from its own cached path by up to 4.2e-5.
 * The README promises logits within TOL_LOGITS; measured worst 7.7e-5
 * (llama-tiny-gqa, uncached), 2.9e-5 on the NeoX fixtures. */
#define TOL_LOGITS 1e-4
#define TOL_KV 1e-5
/* Cached vs uncached inside prefixd: same kernels, different split. */
#define TOL_SELF 1e-4

/* Loads tests/fixtures/<name> or fails the test. */
struct pfx_model *load_fixture_model(const char *name);
struct pfx_model *load_model_dir(const char *dir, int threads);
/* A fixture model with KV blocks of block_tokens tokens. */
struct pfx_model *load_fixture_model_bt(const char *name, int block_tokens);
/* The model in dir (a fixture's name, or a path with a '/') loaded with o. */
struct pfx_model *load_model_opts(const char *dir, const struct pfx_model_opts *o);
/* Loading a fixture with o must fail with -EINVAL and a message naming why. */
void expect_opts_refused(const struct pfx_model_opts *o, const char *why);
/* n token ids below V, malloc'd, from an LCG seeded with seed (the same
 * tokens for the same seed). */
int32_t *random_tokens(size_t n, int V, uint64_t seed);
/* The first largest of n logits: greedy decoding. */
int argmax(const float *x, int n);
/* A tensor of expected.safetensors as a fresh malloc'd copy (aligned). */
float *expected_f32(const char *name, const char *tensor, size_t *n);
int32_t *expected_i32(const char *name, const char *tensor, size_t *n);
float max_abs_diff(const float *a, const float *b, size_t n);
/* Runs tokens uncached in a fresh session; returns n x vocab logits. */
float *logits_uncached(struct pfx_model *m, const int32_t *t, size_t n);
const char *fixtures_dir(void);
/* dst (made if need be): the f32 checkpoint in src rewritten with dtype
 * "F16" or "BF16", rounded to nearest even as torch's .to() does; returns
 * dst. Fails the test on any error. */
const char *write_16bit_checkpoint(const char *src, const char *dst, const char *dtype);

/* prefix-run as a user calls it. */
struct cmd_result {
	int status;
	char out[16384];
};
/* Runs PREFIX_RUN with args (shell words); stdout and stderr captured
 * unless args redirect 2> themselves. */
struct cmd_result run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "1,2,...,n" into out. */
void count_csv(char *out, size_t cap, int n);
/* "1,2,3" for tokens (malloc'd). */
char *tokens_csv(const int32_t *t, size_t n);
/* Reads a (rows, cols) float32 .npy written by prefix-run (malloc'd). */
float *read_npy(const char *path, size_t rows, size_t cols);

#endif
