/* SPDX-License-Identifier: MIT */
/*
 * Golden tests: the runtime against reference outputs that Hugging Face
 * transformers computed for each fixture model (tests/fixtures/README.md).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>

#include "helpers.h"

static void check_logits_full(const char *name)
{
	struct pfx_model *m = load_fixture_model(name);
	size_t n, nl;
	int32_t *tok = expected_i32(name, "tokens", &n);
	float *ref = expected_f32(name, "logits_full", &nl);
	cr_assert_eq(nl, n * (size_t)pfx_model_config(m)->vocab);
	float *got = logits_uncached(m, tok, n);
	float d = max_abs_diff(got, ref, nl);
	cr_expect(d <= TOL_LOGITS, "%s: uncached logits differ by %g", name, d);
	free(got);
	free(ref);
	free(tok);
	pfx_model_free(m);
}

/* The fixture's split: 32 tokens, frozen, then 16 in one call on top. */
static void check_cached_split(const char *name)
{
	struct pfx_model *m = load_fixture_model(name);
	int V = pfx_model_config(m)->vocab;
	size_t n, nl, ns;
	int32_t *tok = expected_i32(name, "tokens", &n);
	float *full = expected_f32(name, "logits_full", &nl);
	float *suffix = expected_f32(name, "logits_suffix_cached", &ns);
	cr_assert_eq(ns, 16 * (size_t)V);
	struct pfx_session *s;
	struct pfx_error err;
	cr_assert_eq(pfx_session_new(m, &s, &err), 0);
	cr_assert_eq(pfx_session_append(s, tok, 32, PFX_LOGITS_NONE, NULL, &err), 0, "%s", err.msg);
	cr_assert_eq(pfx_session_freeze(s, &err), 0);
	float *got = malloc(ns * sizeof(float));
	cr_assert_eq(pfx_session_append(s, tok + 32, 16, PFX_LOGITS_ALL, got, &err), 0, "%s", err.msg);
	float d1 = max_abs_diff(got, suffix, ns), d2 = max_abs_diff(got, full + 32 * V, ns);
	cr_expect(d1 <= TOL_LOGITS, "%s: cached suffix vs logits_suffix_cached: %g", name, d1);
	cr_expect(d2 <= TOL_LOGITS, "%s: cached suffix vs logits_full: %g", name, d2);
	cr_expect_eq(pfx_session_length(s), 48);
	pfx_session_free(s);
	free(got);
	free(suffix);
	free(full);
	free(tok);
	pfx_model_free(m);
}

static void check_kv_layer0(const char *name)
{
	struct pfx_model *m = load_fixture_model(name);
	const struct pfx_config *c = pfx_model_config(m);
	size_t n, nk, nv;
	int32_t *tok = expected_i32(name, "tokens", &n);
	float *kref = expected_f32(name, "k_cache_l0", &nk);
	float *vref = expected_f32(name, "v_cache_l0", &nv);
	cr_assert_eq(nk, (size_t)c->n_kv_heads * 32 * c->head_dim);
	struct pfx_session *s;
	struct pfx_error err;
	cr_assert_eq(pfx_session_new(m, &s, &err), 0);
	cr_assert_eq(pfx_session_append(s, tok, 32, PFX_LOGITS_NONE, NULL, &err), 0, "%s", err.msg);
	float dk = 0, dv = 0, kh[1024], vh[1024];
	for (int h = 0; h < c->n_kv_heads; h++)
		for (size_t p = 0; p < 32; p++) {
			size_t off = ((size_t)h * 32 + p) * c->head_dim;
			cr_assert_eq(pfx_session_kv(s, 0, 0, h, p, kh), 0);
			cr_assert_eq(pfx_session_kv(s, 0, 1, h, p, vh), 0);
			float a = max_abs_diff(kh, kref + off, c->head_dim);
			float b = max_abs_diff(vh, vref + off, c->head_dim);
			dk = a > dk ? a : dk;
			dv = b > dv ? b : dv;
		}
	cr_expect(dk <= TOL_KV, "%s: layer-0 keys differ by %g", name, dk);
	cr_expect(dv <= TOL_KV, "%s: layer-0 values differ by %g", name, dv);
	cr_expect_eq(pfx_session_kv(s, 0, 0, 0, 32, kh), -EINVAL,
		     "position past the length must be refused");
	pfx_session_free(s);
	free(kref);
	free(vref);
	free(tok);
	pfx_model_free(m);
}

static void check_ragged_batch(const char *name)
{
	struct pfx_model *m = load_fixture_model(name);
	int V = pfx_model_config(m)->vocab;
	size_t na, nb, nra, nrb;
	int32_t *a = expected_i32(name, "batch_tokens_a", &na);
	int32_t *b = expected_i32(name, "batch_tokens_b", &nb);
	float *ra = expected_f32(name, "logits_last_a", &nra);
	float *rb = expected_f32(name, "logits_last_b", &nrb);
	struct pfx_session *sa, *sb;
	struct pfx_error err;
	cr_assert_eq(pfx_session_new(m, &sa, &err), 0);
	cr_assert_eq(pfx_session_new(m, &sb, &err), 0);
	float *la = malloc(V * sizeof(float)), *lb = malloc(V * sizeof(float));
	struct pfx_batch_item items[2] = {
		{ sa, a, na, true, PFX_LOGITS_LAST, la },
		{ sb, b, nb, true, PFX_LOGITS_LAST, lb },
	};
	cr_assert_eq(pfx_forward(m, items, 2, &err), 0, "%s", err.msg);
	float da = max_abs_diff(la, ra, V), db = max_abs_diff(lb, rb, V);
	cr_expect(da <= TOL_LOGITS, "%s: batch sequence A differs by %g", name, da);
	cr_expect(db <= TOL_LOGITS, "%s: batch sequence B differs by %g", name, db);
	cr_expect_eq(pfx_session_length(sa), na);
	cr_expect_eq(pfx_session_length(sb), nb);
	pfx_session_free(sa);
	pfx_session_free(sb);
	free(la);
	free(lb);
	free(ra);
	free(rb);
	free(a);
	free(b);
	pfx_model_free(m);
}

static void check_greedy(const char *name)
{
	struct pfx_model *m = load_fixture_model(name);
	int V = pfx_model_config(m)->vocab;
	size_t np, no;
	int32_t *prompt = expected_i32(name, "greedy_prompt", &np);
	int32_t *ref = expected_i32(name, "greedy_out", &no);
	struct pfx_session *s;
	struct pfx_error err;
	cr_assert_eq(pfx_session_new(m, &s, &err), 0);
	float *l = malloc(V * sizeof(float));
	cr_assert_eq(pfx_session_append(s, prompt, np, PFX_LOGITS_LAST, l, &err), 0, "%s", err.msg);
	for (size_t i = 0; i < no; i++) {
		int32_t t = argmax(l, V);
		cr_expect_eq(t, ref[i], "%s: greedy token %zu is %d, transformers says %d", name, i, t,
			     ref[i]);
		cr_assert_eq(pfx_session_decode(s, t, l, &err), 0, "%s", err.msg);
	}
	pfx_session_free(s);
	free(l);
	free(ref);
	free(prompt);
	pfx_model_free(m);
}

/* 40 tokens, rewind to 30, the same 10 again: logits at 39 as uncached. */
static void check_crop(const char *name)
{
	struct pfx_model *m = load_fixture_model(name);
	int V = pfx_model_config(m)->vocab;
	size_t n, nc, nl;
	int32_t *tok = expected_i32(name, "tokens", &n);
	float *crop = expected_f32(name, "crop_check", &nc);
	float *full = expected_f32(name, "logits_full", &nl);
	struct pfx_session *s;
	struct pfx_error err;
	cr_assert_eq(pfx_session_new(m, &s, &err), 0);
	float *l = malloc(V * sizeof(float));
	cr_assert_eq(pfx_session_append(s, tok, 40, PFX_LOGITS_NONE, NULL, &err), 0, "%s", err.msg);
	cr_assert_eq(pfx_session_rewind(s, 30, &err), 0, "%s", err.msg);
	cr_assert_eq(pfx_session_length(s), 30);
	cr_assert_eq(pfx_session_append(s, tok + 30, 10, PFX_LOGITS_LAST, l, &err), 0, "%s", err.msg);
	float d1 = max_abs_diff(l, crop, V), d2 = max_abs_diff(l, full + 39 * V, V);
	cr_expect(d1 <= TOL_LOGITS, "%s: after rewind vs crop_check: %g", name, d1);
	cr_expect(d2 <= TOL_LOGITS, "%s: after rewind vs logits_full[39]: %g", name, d2);
	pfx_session_free(s);
	free(l);
	free(full);
	free(crop);
	free(tok);
	pfx_model_free(m);
}

#define FIXTURE_SUITE(suite, name)                                          \
	Test(suite, logits_full) { check_logits_full(name); }               \
	Test(suite, cached_split) { check_cached_split(name); }             \
	Test(suite, kv_layer0) { check_kv_layer0(name); }                   \
	Test(suite, ragged_batch) { check_ragged_batch(name); }             \
	Test(suite, greedy) { check_greedy(name); }                         \
	Test(suite, rewind_crop) { check_crop(name); }

FIXTURE_SUITE(neox_tiny, "neox-tiny")
FIXTURE_SUITE(neox_tiny_seq, "neox-tiny-seq")
FIXTURE_SUITE(llama_tiny_gqa, "llama-tiny-gqa")
FIXTURE_SUITE(llama3_tiny_ropescaled, "llama3-tiny-ropescaled")
FIXTURE_SUITE(qwen2_tiny, "qwen2-tiny")
FIXTURE_SUITE(mistral_tiny_swa, "mistral-tiny-swa")
FIXTURE_SUITE(phi3_tiny, "phi3-tiny")
FIXTURE_SUITE(gemma_tiny, "gemma-tiny")
