/* SPDX-License-Identifier: MIT */
/*
 * The warm path's pieces: the benchmarks' profile (runtime/profile.h) adds
 * every phase of a pass and changes no result; logits of the last position
 * alone equal the last row of all of them. (The KV prefetches of
 * attention.c run on attached blocks: test_share checks them.)
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "profile.h"

/* The logits of the last position of a suffix of n - p tokens after a
 * prefix of p, appended in two passes. */
static void suffix_logits(struct pfx_model *m, const int32_t *t, size_t p, size_t n,
			  enum pfx_logits want, float *out)
{
	struct pfx_session *s;
	struct pfx_error err;
	cr_assert_eq(pfx_session_new(m, &s, &err), 0);
	cr_assert_eq(pfx_session_append(s, t, p, PFX_LOGITS_NONE, NULL, &err), 0, "%s", err.msg);
	cr_assert_eq(pfx_session_append(s, t + p, n - p, want, out, &err), 0, "%s", err.msg);
	pfx_session_free(s);
}

Test(profile, a_set_profile_adds_every_phase_of_each_pass)
{
	struct pfx_model *m = load_fixture_model_bt("llama-tiny-gqa", 16);
	int V = pfx_model_config(m)->vocab;
	size_t p = 40, n = 72;
	int32_t *t = random_tokens(n, V, 7);
	float *plain = malloc((size_t)V * sizeof(float)), *prof = malloc((size_t)V * sizeof(float));
	suffix_logits(m, t, p, n, PFX_LOGITS_LAST, plain);

	struct pfx_profile pr = { 0 };
	pfx_model_set_profile(m, &pr);
	suffix_logits(m, t, p, n, PFX_LOGITS_LAST, prof);
	pfx_model_set_profile(m, NULL);
	cr_expect_eq(memcmp(plain, prof, (size_t)V * sizeof(float)), 0,
		     "the profile changed the logits");
	cr_expect_eq(pr.passes, 2);
	cr_expect_eq(pr.rows, n);
	cr_expect(pr.matmul_s > 0 && pr.attention_s > 0 && pr.head_s > 0, "a phase was not timed");
	cr_expect(pr.matmul_s + pr.attention_s + pr.head_s <= pr.forward_s,
		  "the phases (%g + %g + %g s) exceed the passes (%g s)", pr.matmul_s,
		  pr.attention_s, pr.head_s, pr.forward_s);
	cr_expect(pr.forward_cpu_s > 0 && pr.matmul_cpu_s > 0 && pr.attention_cpu_s > 0);
	cr_expect_eq(pr.attach_s, 0.0, "no cache, no attach");

	/* Unset, the next pass leaves it alone. */
	struct pfx_profile before = pr;
	suffix_logits(m, t, p, n, PFX_LOGITS_LAST, prof);
	cr_expect_eq(memcmp(&before, &pr, sizeof(pr)), 0, "an unset profile was written");
	free(plain);
	free(prof);
	free(t);
	pfx_model_free(m);
}

/* A suffix's prefill asks for the last row's logits alone: the head runs
 * on that row only, and must give the full computation's last row. */
Test(profile, the_last_positions_logits_equal_the_last_row_of_all)
{
	const char *models[] = { "llama-tiny-gqa", "neox-tiny", "gemma-tiny", "mistral-tiny-swa" };
	for (size_t mi = 0; mi < sizeof(models) / sizeof(models[0]); mi++) {
		struct pfx_model *m = load_fixture_model_bt(models[mi], 16);
		int V = pfx_model_config(m)->vocab;
		size_t p = 37, n = 70;
		int32_t *t = random_tokens(n, V, 11 + mi);
		float *all = malloc((n - p) * (size_t)V * sizeof(float));
		float *last = malloc((size_t)V * sizeof(float));
		suffix_logits(m, t, p, n, PFX_LOGITS_ALL, all);
		suffix_logits(m, t, p, n, PFX_LOGITS_LAST, last);
		float d = max_abs_diff(last, all + (n - p - 1) * (size_t)V, (size_t)V);
		cr_expect(d <= TOL_SELF, "%s: the last row differs by %g", models[mi], d);
		free(all);
		free(last);
		free(t);
		pfx_model_free(m);
	}
}
