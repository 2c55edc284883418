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
		{ -1.0f, 0, 1, 0 }, { NAN, 0, 1, 0 }, { 1.0f, -3, 1, 0 }, { 1.0f, 0, -0.5f, 0 },
		{ 1.0f, 0, NAN, 0 }, { INFINITY, 0, 1, 0 },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		s = (struct pfx_sampler *)&err; /* what an unchecked caller would pass on */
		cr_expect_eq(pfx_sampler_new(&bad[i], 8, &s, &err), -EINVAL, "case %zu", i);
		cr_expect_null(s, "case %zu: a refused sampler is NULL", i);
	}
	struct pfx_sampler_opts greedy = { 0 };
	cr_expect_eq(pfx_sampler_new(NULL, 8, &s, &err), -EINVAL);
	cr_expect_eq(pfx_sampler_new(&greedy, 0, &s, &err), -EINVAL);
}

/* A caller that does not check pfx_sampler_new's result gets an error
 * back from pfx_sample, not a crash. */
Test(sample, sampling_with_a_refused_sampler_is_an_error)
{
	struct pfx_sampler_opts bad = { .temperature = -1 };
	struct pfx_sampler *s;
	struct pfx_error err;
	(void)pfx_sampler_new(&bad, 4, &s, &err);
	float l[4] = { 0, 1, 2, 3 };
	cr_expect_eq(pfx_sample(s, l), -EINVAL);
	cr_expect_eq(pfx_sample(NULL, l), -EINVAL);
	struct pfx_sampler *g = sampler(0, 0, 0, 0, 4);
	cr_expect_eq(pfx_sample(g, NULL), -EINVAL);
	pfx_sampler_free(g);
}

/* {0} is greedy, as the header says: temperature 0, top-p 0 off. */
Test(sample, zero_initialised_options_are_greedy)
{
	struct pfx_sampler_opts o = { 0 };
	struct pfx_sampler *s;
	struct pfx_error err = { "" };
	cr_assert_eq(pfx_sampler_new(&o, 64, &s, &err), 0, "{0} refused: %s", err.msg);
	float l[64];
	for (int round = 0; round < 20; round++) {
		for (int i = 0; i < 64; i++)
			l[i] = sinf((float)(i * 7 + round * 13));
		int best = 0;
		for (int i = 1; i < 64; i++)
			if (l[i] > l[best])
				best = i;
		cr_expect_eq(pfx_sample(s, l), best, "round %d", round);
	}
	pfx_sampler_free(s);
}

/* top-p 0 and >= 1 are both "off": the same draws as top-p 1. */
Test(sample, top_p_zero_or_above_one_is_off)
{
	float l[6] = { 1.0f, 3.0f, 2.9f, 0.5f, 2.8f, -4.0f };
	struct pfx_sampler *one = sampler(1.0f, 0, 1, 5, 6), *zero = sampler(1.0f, 0, 0, 5, 6),
			   *above = sampler(1.0f, 0, 1.5f, 5, 6);
	for (int i = 0; i < 500; i++) {
		int want = pfx_sample(one, l);
		cr_assert_eq(pfx_sample(zero, l), want, "draw %d", i);
		cr_assert_eq(pfx_sample(above, l), want, "draw %d", i);
	}
	pfx_sampler_free(one);
	pfx_sampler_free(zero);
	pfx_sampler_free(above);
}
