/* SPDX-License-Identifier: MIT */
/* Token sampling: greedy, seeded reproducibility, temperature, top-k, top-p. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>

#include "sample.h"

static struct pfx_sampler *sampler(float t, int k, float p, uint64_t seed, int vocab)
{
	struct pfx_sampler_opts o = { t, k, p, seed };
	struct pfx_sampler *s;
	struct pfx_error err;
	cr_assert_eq(pfx_sampler_new(&o, vocab, &s, &err), 0, "%s", err.msg);
	return s;
}

Test(sample, greedy_takes_first_maximum)
{
	float l[5] = { 0.5f, 2.0f, -1.0f, 2.0f, 1.0f };
	struct pfx_sampler *s = sampler(0, 0, 1, 0, 5);
	cr_expect_eq(pfx_sample(s, l), 1);
	pfx_sampler_free(s);
}

Test(sample, same_seed_same_tokens)
{
	float l[64];
	for (int i = 0; i < 64; i++)
		l[i] = sinf((float)i);
	struct pfx_sampler *a = sampler(1.0f, 0, 1, 99, 64), *b = sampler(1.0f, 0, 1, 99, 64);
	struct pfx_sampler *c = sampler(1.0f, 0, 1, 100, 64);
	int differ = 0;
	for (int i = 0; i < 200; i++) {
		int x = pfx_sample(a, l), y = pfx_sample(b, l), z = pfx_sample(c, l);
		cr_assert_eq(x, y, "draw %d differs with the same seed", i);
		differ += x != z;
	}
	cr_expect_gt(differ, 50, "another seed should give another sequence");
	pfx_sampler_free(a);
	pfx_sampler_free(b);
	pfx_sampler_free(c);
}

Test(sample, temperature_matches_softmax)
{
	/* p(1) = 3/4 at temperature 1; at temperature 2 it is sqrt(3)/(1+sqrt(3)). */
	float l[2] = { 0.0f, logf(3.0f) };
	const struct { float t; double p; } cases[] = { { 1.0f, 0.75 }, { 2.0f, 0.6339746 } };
	for (int c = 0; c < 2; c++) {
		struct pfx_sampler *s = sampler(cases[c].t, 0, 1, 7, 2);
		int ones = 0, N = 40000;
		for (int i = 0; i < N; i++)
			ones += pfx_sample(s, l);
		double f = (double)ones / N;
		/* 5 standard deviations of a binomial at N = 40000 is ~0.011 */
		cr_expect(fabs(f - cases[c].p) < 0.012, "T=%g: frequency %f, want %f", cases[c].t, f,
			  cases[c].p);
		pfx_sampler_free(s);
	}
}

Test(sample, top_k_and_top_p_cut_the_tail)
{
	float l[6] = { 1.0f, 3.0f, 2.9f, 0.5f, 2.8f, -4.0f };
	struct pfx_sampler *k2 = sampler(5.0f, 2, 1, 3, 6);
	int seen[6] = { 0 };
	for (int i = 0; i < 5000; i++)
		seen[pfx_sample(k2, l)]++;
	cr_expect(seen[1] > 0 && seen[2] > 0, "both of the top 2 are drawn");
	cr_expect_eq(seen[0] + seen[3] + seen[4] + seen[5], 0, "nothing outside the top 2");
	pfx_sampler_free(k2);
	/* Softmax of l: token 1 alone holds < 0.4, tokens 1, 2, 4 hold > 0.9. */
	struct pfx_sampler *p = sampler(1.0f, 0, 0.9f, 3, 6);
	int seen_p[6] = { 0 };
	for (int i = 0; i < 5000; i++)
		seen_p[pfx_sample(p, l)]++;
	cr_expect(seen_p[1] && seen_p[2] && seen_p[4]);
	cr_expect_eq(seen_p[0] + seen_p[3] + seen_p[5], 0, "top-p 0.9 keeps tokens 1, 2 and 4");
	pfx_sampler_free(p);
	struct pfx_sampler *k1 = sampler(1.0f, 1, 1, 3, 6);
	for (int i = 0; i < 100; i++)
		cr_assert_eq(pfx_sample(k1, l), 1, "top-k 1 is greedy");
	pfx_sampler_free(k1);
}

Test(sample, rejects_bad_options)
{
	struct pfx_sampler *s;
	struct pfx_error err;
	struct pfx_sampler_opts bad[] = {
		{ -1.0f, 0, 1, 0 }, { NAN, 0, 1, 0 }, { 1.0f, -3, 1, 0 }, { 1.0f, 0, 0.0f, 0 },
		{ 1.0f, 0, 1.5f, 0 },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_expect_eq(pfx_sampler_new(&bad[i], 8, &s, &err), -EINVAL, "case %zu", i);
}
