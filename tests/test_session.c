/* SPDX-License-Identifier: MIT */
/*
 * Sessions beyond the fixtures' own cases: any split point, fork, running
 * without committing, rewind and freeze rules, ragged batches with history,
 * and batch validation.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kernels.h"

static const char *models[] = { "neox-tiny", "neox-tiny-seq", "llama-tiny-gqa",
				"llama3-tiny-ropescaled", "qwen2-tiny", "mistral-tiny-swa",
				"phi3-tiny", "gemma-tiny" };
#define NMODELS (sizeof(models) / sizeof(models[0]))

static uint64_t rng_state = 12345;
static unsigned rnd(unsigned n)
{
	rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
	return (unsigned)(rng_state >> 33) % n;
}

/* Every K/V float of positions [0, len) of s, for before/after comparisons. */
static float *snapshot(const struct pfx_session *s, size_t len)
{
	const struct pfx_config *c = pfx_model_config(pfx_session_model(s));
	size_t hd = (size_t)c->head_dim, per = (size_t)c->n_layers * 2 * c->n_kv_heads * hd;
	float *out = malloc(len * per * sizeof(float) + 1), *p = out;
	for (size_t pos = 0; pos < len; pos++)
		for (int l = 0; l < c->n_layers; l++)
			for (int kv = 0; kv < 2; kv++)
				for (int h = 0; h < c->n_kv_heads; h++, p += hd)
					cr_assert_eq(pfx_session_kv(s, l, kv, h, pos, p), 0);
	return out;
}

static size_t snapshot_floats(const struct pfx_session *s, size_t len)
{
	const struct pfx_config *c = pfx_model_config(pfx_session_model(s));
	return len * c->n_layers * 2 * c->n_kv_heads * c->head_dim;
}

/* Block sizes 4, 16 and 64 put block edges everywhere relative to the cuts
 * (and, for mistral-tiny-swa's window of 16, blocks wholly before a row's
 * window). */
Test(session, random_splits_equal_uncached)
{
	for (size_t mi = 0; mi < 3 * NMODELS; mi++) {
		int bt = 4 << (2 * (mi / NMODELS));
		const char *name = models[mi % NMODELS];
		struct pfx_model *m = load_fixture_model_bt(name, bt);
		int V = pfx_model_config(m)->vocab;
		size_t n;
		int32_t *tok = expected_i32(name, "tokens", &n);
		float *full = logits_uncached(m, tok, n);
		float *got = malloc(n * V * sizeof(float));
		for (int trial = 0; trial < 8; trial++) {
			/* Up to three pieces at random cut points. */
			size_t a = 1 + rnd((unsigned)n - 2), b = a + rnd((unsigned)(n - a));
			struct pfx_session *s;
			struct pfx_error err;
			cr_assert_eq(pfx_session_new(m, &s, &err), 0);
			size_t cuts[4] = { 0, a, b, n };
			for (int i = 0; i < 3; i++) {
				if (cuts[i + 1] == cuts[i])
					continue;
				cr_assert_eq(pfx_session_append(s, tok + cuts[i], cuts[i + 1] - cuts[i],
								PFX_LOGITS_ALL, got + cuts[i] * V, &err),
					     0, "%s", err.msg);
				if (i == 0)
					pfx_session_freeze(s, &err);
			}
			float d = max_abs_diff(got, full, n * V);
			cr_expect(d <= TOL_SELF, "%s, blocks of %d: cuts %zu/%zu: cached differs by %g",
				  name, bt, a, b, d);
			pfx_session_free(s);
		}
		free(got);
		free(full);
		free(tok);
		pfx_model_free(m);
	}
}

Test(session, fork_leaves_original_unchanged)
{
	for (size_t mi = 0; mi < NMODELS; mi++) {
		/* Blocks of 8: the fork shares blocks 0-1 and copies block 2,
		 * which holds frozen 16-19 and private 20-23. */
		struct pfx_model *m = load_fixture_model_bt(models[mi], 8);
		int V = pfx_model_config(m)->vocab;
		size_t n;
		int32_t *tok = expected_i32(models[mi], "tokens", &n);
		float *full = logits_uncached(m, tok, n);
		struct pfx_session *s, *f;
		struct pfx_error err;
		cr_assert_eq(pfx_session_new(m, &s, &err), 0);
		/* 20 frozen tokens (a block boundary need not fall there), 10 private. */
		cr_assert_eq(pfx_session_append(s, tok, 20, PFX_LOGITS_NONE, NULL, &err), 0);
		pfx_session_freeze(s, &err);
		cr_assert_eq(pfx_session_append(s, tok + 20, 10, PFX_LOGITS_NONE, NULL, &err), 0);
		float *before = snapshot(s, 30);
		cr_assert_eq(pfx_session_fork(s, &f, &err), 0, "%s", err.msg);
		cr_expect_eq(pfx_session_length(f), 30);
		cr_expect_eq(pfx_session_frozen(f), 20);
		/* The fork rewinds into its private tail and goes elsewhere. */
		int32_t other[12];
		for (int i = 0; i < 12; i++)
			other[i] = (tok[i] + 7) % V;
		cr_assert_eq(pfx_session_rewind(f, 22, &err), 0, "%s", err.msg);
		float *fl = malloc(12 * V * sizeof(float));
		cr_assert_eq(pfx_session_append(f, other, 12, PFX_LOGITS_ALL, fl, &err), 0);
		float *after = snapshot(s, 30);
		cr_expect_eq(memcmp(before, after, snapshot_floats(s, 30) * sizeof(float)), 0,
			     "%s: fork changed the original's KV", models[mi]);
		/* The original continues exactly as if no fork happened. */
		float *l = malloc((n - 30) * V * sizeof(float));
		cr_assert_eq(pfx_session_append(s, tok + 30, n - 30, PFX_LOGITS_ALL, l, &err), 0);
		float d = max_abs_diff(l, full + 30 * V, (n - 30) * V);
		cr_expect(d <= TOL_SELF, "%s: original after fork differs by %g", models[mi], d);
		/* And the fork matches an uncached run of its own tokens. */
		int32_t seq[34];
		memcpy(seq, tok, 22 * sizeof(int32_t));
		memcpy(seq + 22, other, 12 * sizeof(int32_t));
		float *ref = logits_uncached(m, seq, 34);
		d = max_abs_diff(fl, ref + 22 * V, 12 * V);
		cr_expect(d <= TOL_SELF, "%s: fork's logits differ by %g", models[mi], d);
		pfx_session_free(f);
		pfx_session_free(s);
		free(fl);
		free(ref);
		free(l);
		free(before);
		free(after);
		free(full);
		free(tok);
		pfx_model_free(m);
	}
}

Test(session, run_without_commit_keeps_state)
{
	for (size_t mi = 0; mi < NMODELS; mi++) {
		struct pfx_model *m = load_fixture_model(models[mi]);
		int V = pfx_model_config(m)->vocab;
		size_t n;
		int32_t *tok = expected_i32(models[mi], "tokens", &n);
		float *full = logits_uncached(m, tok, n);
		struct pfx_session *s;
		struct pfx_error err;
		cr_assert_eq(pfx_session_new(m, &s, &err), 0);
		cr_assert_eq(pfx_session_append(s, tok, 30, PFX_LOGITS_NONE, NULL, &err), 0);
		float *before = snapshot(s, 30);
		float *l = malloc((n - 30) * V * sizeof(float));
		/* Several different suffixes on the same (unfrozen) prefix. */
		for (int round = 0; round < 3; round++) {
			int32_t junk[18];
			for (int i = 0; i < 18; i++)
				junk[i] = (int32_t)rnd((unsigned)V);
			cr_assert_eq(pfx_session_run(s, junk, 18, PFX_LOGITS_LAST, l, &err), 0);
			cr_assert_eq(pfx_session_length(s), 30);
			cr_assert_eq(pfx_session_run(s, tok + 30, n - 30, PFX_LOGITS_ALL, l, &err), 0);
			float d = max_abs_diff(l, full + 30 * V, (n - 30) * V);
			cr_expect(d <= TOL_SELF, "%s: suffix on a shared prefix differs by %g",
				  models[mi], d);
		}
		float *after = snapshot(s, 30);
		cr_expect_eq(memcmp(before, after, snapshot_floats(s, 30) * sizeof(float)), 0,
			     "%s: run without commit changed the KV", models[mi]);
		cr_expect_eq(pfx_session_length(s), 30);
		free(after);
		free(before);
		free(l);
		pfx_session_free(s);
		free(full);
		free(tok);
		pfx_model_free(m);
	}
}

Test(session, rewind_and_freeze_rules)
{
	struct pfx_model *m = load_fixture_model("llama-tiny-gqa");
	size_t n;
	int32_t *tok = expected_i32("llama-tiny-gqa", "tokens", &n);
	struct pfx_session *s;
	struct pfx_error err = { "" };
	cr_assert_eq(pfx_session_new(m, &s, &err), 0);
	cr_assert_eq(pfx_session_append(s, tok, 10, PFX_LOGITS_NONE, NULL, &err), 0);
	cr_expect_eq(pfx_session_rewind(s, 11, &err), -EINVAL, "rewind past the end");
	cr_expect_eq(pfx_session_rewind(s, 0, &err), 0);
	cr_assert_eq(pfx_session_append(s, tok, 10, PFX_LOGITS_NONE, NULL, &err), 0);
	cr_assert_eq(pfx_session_freeze(s, &err), 0);
	err.msg[0] = 0;
	cr_expect_eq(pfx_session_rewind(s, 9, &err), -EPERM, "rewind into the frozen prefix");
	cr_expect(strstr(err.msg, "frozen"), "message: %s", err.msg);
	cr_expect_eq(pfx_session_length(s), 10);
	cr_expect_eq(pfx_session_rewind(s, 10, &err), 0);
	pfx_session_free(s);
	free(tok);
	pfx_model_free(m);
}

/* A session frozen at a block boundary inside it: the part after stays
 * writable (rewind, append), forks of the frozen prefix share its KV and
 * continue exactly as an uncached run, and what the parent does after
 * the fork does not reach them. */
Test(session, freeze_at_and_fork_prefix)
{
	struct pfx_model *m = load_fixture_model_bt("llama-tiny-gqa", 4);
	int V = pfx_model_config(m)->vocab;
	size_t n;
	int32_t *tok = expected_i32("llama-tiny-gqa", "tokens", &n);
	float *full = logits_uncached(m, tok, n);
	struct pfx_session *s, *f, *g;
	struct pfx_error err = { "" };
	cr_assert_eq(pfx_session_new(m, &s, &err), 0);
	cr_assert_eq(pfx_session_append(s, tok, 14, PFX_LOGITS_NONE, NULL, &err), 0);
	cr_expect_eq(pfx_session_fork_prefix(s, 8, &f, &err), -EINVAL, "nothing frozen yet");
	cr_expect_eq(pfx_session_freeze_at(s, 15, &err), -EINVAL, "past the length");
	cr_assert_eq(pfx_session_freeze_at(s, 12, &err), 0, "%s", err.msg);
	cr_expect_eq(pfx_session_frozen(s), 12);
	cr_expect_eq(pfx_session_freeze_at(s, 8, &err), -EINVAL, "below the frozen length");
	cr_expect_eq(pfx_session_rewind(s, 11, &err), -EPERM);
	cr_expect_eq(pfx_session_rewind(s, 13, &err), 0, "the tail stays private");
	cr_expect_eq(pfx_session_fork_prefix(s, 10, &f, &err), -EINVAL, "not whole blocks");
	cr_expect_eq(pfx_session_fork_prefix(s, 16, &f, &err), -EINVAL, "past the frozen length");
	cr_assert_eq(pfx_session_fork_prefix(s, 12, &f, &err), 0, "%s", err.msg);
	cr_assert_eq(pfx_session_fork_prefix(s, 8, &g, &err), 0, "%s", err.msg);
	cr_expect_eq(pfx_session_length(f), 12);
	cr_expect_eq(pfx_session_frozen(f), 12);
	cr_expect_eq(pfx_session_length(g), 8);
	float *before = snapshot(f, 12);
	/* The parent goes on with other tokens after its frozen part. */
	int32_t other[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	cr_assert_eq(pfx_session_append(s, other, 8, PFX_LOGITS_NONE, NULL, &err), 0);
	pfx_session_free(s);
	float *after = snapshot(f, 12);
	cr_expect(!memcmp(before, after, snapshot_floats(f, 12) * sizeof(float)));
	float *l = malloc(n * V * sizeof(float));
	cr_assert_eq(pfx_session_append(f, tok + 12, n - 12, PFX_LOGITS_ALL, l, &err), 0);
	float d = max_abs_diff(l, full + 12 * V, (n - 12) * V);
	cr_expect(d <= TOL_SELF, "a fork of 12 continued: %g", d);
	cr_assert_eq(pfx_session_append(g, tok + 8, n - 8, PFX_LOGITS_ALL, l, &err), 0);
	d = max_abs_diff(l, full + 8 * V, (n - 8) * V);
	cr_expect(d <= TOL_SELF, "a fork of 8 continued: %g", d);
	free(l);
	free(before);
	free(after);
	pfx_session_free(f);
	pfx_session_free(g);
	free(full);
	free(tok);
	pfx_model_free(m);
}

/* Every position decoded one at a time (mistral-tiny-swa: past its window). */
Test(session, decode_equals_append)
{
	static const char *const names[] = { "neox-tiny", "mistral-tiny-swa" };
	for (size_t mi = 0; mi < 2; mi++) {
		struct pfx_model *m = load_fixture_model_bt(names[mi], 4);
		int V = pfx_model_config(m)->vocab;
		size_t n;
		int32_t *tok = expected_i32(names[mi], "tokens", &n);
		float *full = logits_uncached(m, tok, n);
		struct pfx_session *s;
		struct pfx_error err;
		float *l = malloc(V * sizeof(float));
		cr_assert_eq(pfx_session_new(m, &s, &err), 0);
		for (size_t i = 0; i < n; i++) {
			cr_assert_eq(pfx_session_decode(s, tok[i], l, &err), 0);
			float d = max_abs_diff(l, full + i * V, V);
			cr_expect(d <= TOL_SELF, "%s: decode step %zu differs by %g", names[mi], i, d);
		}
		free(l);
		pfx_session_free(s);
		free(full);
		free(tok);
		pfx_model_free(m);
	}
}

/* A ragged batch mixing a session with history, a fresh one and a decode. */
static void check_ragged_batch_with_history(const char *name)
{
	struct pfx_model *m = load_fixture_model_bt(name, 8);
	int V = pfx_model_config(m)->vocab;
	size_t n;
	int32_t *tok = expected_i32(name, "tokens", &n);
	float *full = logits_uncached(m, tok, n);
	struct pfx_session *a, *b, *c;
	struct pfx_error err;
	cr_assert_eq(pfx_session_new(m, &a, &err), 0);
	cr_assert_eq(pfx_session_new(m, &b, &err), 0);
	cr_assert_eq(pfx_session_new(m, &c, &err), 0);
	cr_assert_eq(pfx_session_append(a, tok, 25, PFX_LOGITS_NONE, NULL, &err), 0);
	cr_assert_eq(pfx_session_append(c, tok, 40, PFX_LOGITS_NONE, NULL, &err), 0);
	float *la = malloc((n - 25) * V * sizeof(float)), *lb = malloc(V * sizeof(float));
	float *lc = malloc(V * sizeof(float));
	struct pfx_batch_item items[3] = {
		{ a, tok + 25, n - 25, true, PFX_LOGITS_ALL, la },
		{ b, tok, 7, true, PFX_LOGITS_LAST, lb },
		{ c, tok + 40, 1, false, PFX_LOGITS_LAST, lc },
	};
	cr_assert_eq(pfx_forward(m, items, 3, &err), 0, "%s", err.msg);
	cr_expect(max_abs_diff(la, full + 25 * V, (n - 25) * V) <= TOL_SELF, "%s", name);
	cr_expect(max_abs_diff(lb, full + 6 * V, V) <= TOL_SELF, "%s", name);
	cr_expect(max_abs_diff(lc, full + 40 * V, V) <= TOL_SELF, "%s", name);
	cr_expect_eq(pfx_session_length(a), n);
	cr_expect_eq(pfx_session_length(b), 7);
	cr_expect_eq(pfx_session_length(c), 40, "an uncommitted item must not grow");
	free(la);
	free(lb);
	free(lc);
	pfx_session_free(a);
	pfx_session_free(b);
	pfx_session_free(c);
	free(full);
	free(tok);
	pfx_model_free(m);
}

Test(session, ragged_batch_with_history)
{
	for (size_t mi = 0; mi < NMODELS; mi++)
		check_ragged_batch_with_history(models[mi]);
}

Test(session, batch_validation)
{
	struct pfx_model *m = load_fixture_model("neox-tiny");
	struct pfx_session *s, *t;
	struct pfx_error err = { "" };
	cr_assert_eq(pfx_session_new(m, &s, &err), 0);
	cr_assert_eq(pfx_session_new(m, &t, &err), 0);
	int32_t ok[3] = { 1, 2, 3 }, bad[3] = { 1, 512, 3 }, neg[1] = { -1 };
	float l[512];
	struct pfx_batch_item twice[2] = {
		{ s, ok, 3, true, PFX_LOGITS_NONE, NULL }, { s, ok, 3, true, PFX_LOGITS_NONE, NULL },
	};
	cr_expect_eq(pfx_forward(m, twice, 2, &err), -EINVAL);
	/* One bad item fails the batch and commits nothing. */
	struct pfx_batch_item mixed[2] = {
		{ s, ok, 3, true, PFX_LOGITS_NONE, NULL }, { t, bad, 3, true, PFX_LOGITS_NONE, NULL },
	};
	cr_expect_eq(pfx_forward(m, mixed, 2, &err), -EINVAL);
	cr_expect(strstr(err.msg, "vocabulary"), "message: %s", err.msg);
	cr_expect_eq(pfx_session_length(s), 0);
	cr_expect_eq(pfx_session_append(s, neg, 1, PFX_LOGITS_NONE, NULL, &err), -EINVAL);
	cr_expect_eq(pfx_session_append(s, ok, 0, PFX_LOGITS_NONE, NULL, &err), -EINVAL);
	cr_expect_eq(pfx_session_append(s, ok, 3, PFX_LOGITS_LAST, NULL, &err), -EINVAL);
	/* Past max_position_embeddings (512). */
	int32_t *many = calloc(513, sizeof(int32_t));
	cr_expect_eq(pfx_session_append(s, many, 513, PFX_LOGITS_NONE, NULL, &err), -E2BIG);
	cr_expect_eq(pfx_session_append(s, many, 512, PFX_LOGITS_LAST, l, &err), 0);
	cr_expect_eq(pfx_session_decode(s, 1, l, &err), -E2BIG);
	free(many);
	pfx_session_free(s);
	pfx_session_free(t);
	pfx_model_free(m);
}

/* Thread count changes who computes what, never the result. */
Test(session, threads_do_not_change_results)
{
	char dir[512];
	snprintf(dir, sizeof(dir), "%s/llama-tiny-gqa", fixtures_dir());
	struct pfx_model *m1 = load_model_dir(dir, 1), *m3 = load_model_dir(dir, 3);
	size_t n;
	int32_t *tok = expected_i32("llama-tiny-gqa", "tokens", &n);
	float *a = logits_uncached(m1, tok, n), *b = logits_uncached(m3, tok, n);
	size_t V = (size_t)pfx_model_config(m1)->vocab;
	cr_expect(max_abs_diff(a, b, n * V) <= TOL_SELF);
	free(a);
	free(b);
	free(tok);
	pfx_model_free(m1);
	pfx_model_free(m3);
}

/* Past 256 keys a decode step splits its keys over several tasks and
 * merges their partial softmaxes (attention.c): still the uncached result. */
Test(session, decode_with_split_keys)
{
	for (size_t mi = 0; mi < NMODELS; mi++) {
		struct pfx_model *m = load_fixture_model(models[mi]);
		int V = pfx_model_config(m)->vocab;
		size_t n = 400;
		int32_t *tok = malloc(n * sizeof(int32_t));
		for (size_t i = 0; i < n; i++)
			tok[i] = (int32_t)rnd((unsigned)V);
		float *full = logits_uncached(m, tok, n);
		struct pfx_session *s;
		struct pfx_error err;
		float *l = malloc(V * sizeof(float));
		cr_assert_eq(pfx_session_new(m, &s, &err), 0);
		cr_assert_eq(pfx_session_append(s, tok, 380, PFX_LOGITS_NONE, NULL, &err), 0);
		for (size_t i = 380; i < n; i++) {
			cr_assert_eq(pfx_session_decode(s, tok[i], l, &err), 0, "%s", err.msg);
			float d = max_abs_diff(l, full + i * V, V);
			cr_expect(d <= TOL_SELF, "%s: decode at %zu differs by %g", models[mi], i, d);
		}
		pfx_session_free(s);
		free(l);
		free(full);
		free(tok);
		pfx_model_free(m);
	}
}

/* A short suffix on a long prefix, its attention over many KV blocks, gives
 * the uncached result (fixtures-portable runs it on the sgemm path too). */
Test(session, short_suffix_on_a_long_prefix)
{
	for (size_t mi = 0; mi < NMODELS; mi++) {
		struct pfx_model *m = load_fixture_model_bt(models[mi], 16);
		int V = pfx_model_config(m)->vocab;
		size_t n = 400, p = 360;
		int32_t *tok = malloc(n * sizeof(int32_t));
		for (size_t i = 0; i < n; i++)
			tok[i] = (int32_t)rnd((unsigned)V);
		float *full = logits_uncached(m, tok, n);
		float *l = malloc((n - p) * V * sizeof(float));
		struct pfx_session *s;
		struct pfx_error err;
		cr_assert_eq(pfx_session_new(m, &s, &err), 0);
		cr_assert_eq(pfx_session_append(s, tok, p, PFX_LOGITS_NONE, NULL, &err), 0);
		cr_assert_eq(pfx_session_append(s, tok + p, n - p, PFX_LOGITS_ALL, l, &err), 0);
		float d = max_abs_diff(l, full + p * V, (n - p) * V);
		cr_expect(d <= TOL_SELF, "%s: suffix differs by %g", models[mi], d);
		pfx_session_free(s);
		free(l);
		free(full);
		free(tok);
		pfx_model_free(m);
	}
}

/* A session computed in passes of at most 64 rows: the few-row products
 * (kernels.h, gemm_few) with their rows shared out between the threads
 * (ops.c). Returns the logits of every row of the last pass. */
static float *few_row_passes(struct pfx_model *m, const int32_t *tok, size_t prefix, size_t T)
{
	int V = pfx_model_config(m)->vocab;
	float *out = malloc(T * (size_t)V * sizeof(float));
	struct pfx_session *s;
	struct pfx_error err;
	cr_assert_eq(pfx_session_new(m, &s, &err), 0);
	for (size_t p = 0; p < prefix; p += 30) {
		size_t n = prefix - p < 30 ? prefix - p : 30;
		cr_assert_eq(pfx_session_append(s, tok + p, n, PFX_LOGITS_NONE, NULL, &err), 0, "%s",
			     err.msg);
	}
	cr_assert_eq(pfx_session_append(s, tok + prefix, T, PFX_LOGITS_ALL, out, &err), 0, "%s",
		     err.msg);
	pfx_session_free(s);
	return out;
}

/*
 * Who computes which rows of a few-row product depends on the thread count;
 * the result does not: each output is the same kernel's sum, so 1, 2 and 3
 * threads give the same bits, and the one-pass result (sgemm, more than 64
 * rows) to the tolerance. Suffixes of 5 to 64 rows; products of 128 and 160
 * outputs (llama-tiny-gqa: QKV, MLP) and 256 (neox-tiny), none a multiple
 * of the kernels' blocks or of the 24-row cuts between threads; f32 and
 * bf16 weights (widened in the kernel's registers).
 */
Test(session, few_row_products_split_over_threads_give_the_same_bits)
{
	char tmp[] = "/tmp/pfx-few-XXXXXX", bf[600], src[600], cmd[700];
	cr_assert_not_null(mkdtemp(tmp));
	snprintf(src, sizeof(src), "%s/llama-tiny-gqa", fixtures_dir());
	snprintf(bf, sizeof(bf), "%s/llama-tiny-gqa-bf16", tmp);
	write_16bit_checkpoint(src, bf, "BF16");
	char neox[600];
	snprintf(neox, sizeof(neox), "%s/neox-tiny", fixtures_dir());
	const char *dirs[] = { src, bf, neox };
	const size_t Ts[] = { 5, 17, 32, 33, 64 }, prefix = 70;
	bool bits = kern_gemm_few_ok(); /* else sgemm, whose splits may round differently */
	for (size_t d = 0; d < 3; d++) {
		struct pfx_model *m[3];
		for (int t = 0; t < 3; t++)
			m[t] = load_model_dir(dirs[d], t + 1);
		size_t V = (size_t)pfx_model_config(m[0])->vocab;
		for (size_t a = 0; a < sizeof(Ts) / sizeof(Ts[0]); a++) {
			size_t T = Ts[a];
			int32_t *tok = malloc((prefix + T) * sizeof(int32_t));
			for (size_t i = 0; i < prefix + T; i++)
				tok[i] = (int32_t)rnd((unsigned)V);
			float *one = logits_uncached(m[0], tok, prefix + T);
			float *r[3];
			for (int t = 0; t < 3; t++)
				r[t] = few_row_passes(m[t], tok, prefix, T);
			float dref = max_abs_diff(r[0], one + prefix * V, T * V);
			cr_expect(dref <= TOL_SELF, "%s, %zu rows: %g from the one-pass logits", dirs[d], T,
				  dref);
			for (int t = 1; t < 3; t++) {
				if (bits)
					cr_expect_eq(memcmp(r[0], r[t], T * V * sizeof(float)), 0,
						     "%s, %zu rows: %d threads differ from 1 by %g", dirs[d],
						     T, t + 1, max_abs_diff(r[0], r[t], T * V));
				else
					cr_expect(max_abs_diff(r[0], r[t], T * V) <= TOL_SELF);
				free(r[t]);
			}
			free(r[0]);
			free(one);
			free(tok);
		}
		for (int t = 0; t < 3; t++)
			pfx_model_free(m[t]);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	cr_expect_eq(system(cmd), 0);
}
