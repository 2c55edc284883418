/* SPDX-License-Identifier: MIT */
/* Token sampling with a seeded xoshiro256** generator: same seed, same output. */
#include "sample.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

struct cand {
	float logit;
	int32_t id;
};

struct pfx_sampler {
	struct pfx_sampler_opts o;
	int vocab;
	uint64_t st[4];
	struct cand *c;  /* (vocab) */
};

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t next_u64(uint64_t s[4])
{
	uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return r;
}

int pfx_sampler_new(const struct pfx_sampler_opts *o, int vocab, struct pfx_sampler **out,
		    struct pfx_error *err)
{
	if (out)
		*out = NULL;
	if (!o || !out)
		return pfx_errorf(err, -EINVAL, "no sampler options or no place for the sampler");
	if (vocab < 1)
		return pfx_errorf(err, -EINVAL, "vocabulary of %d tokens", vocab);
	if (!(o->temperature >= 0) || !isfinite(o->temperature))
		return pfx_errorf(err, -EINVAL, "temperature must be a finite number >= 0");
	if (o->top_k < 0)
		return pfx_errorf(err, -EINVAL, "top-k must be >= 0");
	if (!(o->top_p >= 0) || !isfinite(o->top_p))
		return pfx_errorf(err, -EINVAL, "top-p must be a finite number >= 0 (0 or >= 1: off)");
	struct pfx_sampler *s = calloc(1, sizeof(*s));
	if (!s || !(s->c = malloc((size_t)vocab * sizeof(*s->c)))) {
		free(s);
		return pfx_errorf(err, -ENOMEM, "out of memory");
	}
	s->o = *o;
	s->vocab = vocab;
	uint64_t x = o->seed;
	for (int i = 0; i < 4; i++)
		s->st[i] = splitmix64(&x);
	*out = s;
	return 0;
}

void pfx_sampler_free(struct pfx_sampler *s)
{
	if (s)
		free(s->c);
	free(s);
}

/* Descending by logit, ties by id, so the order never depends on qsort. */
static int by_logit_desc(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	if (x->logit != y->logit)
		return x->logit < y->logit ? 1 : -1;
	return (x->id > y->id) - (x->id < y->id);
}

int32_t pfx_sample(struct pfx_sampler *s, const float *logits)
{
	if (!s || !logits)
		return -EINVAL;
	int V = s->vocab;
	if (s->o.temperature <= 0) {
		int best = 0;
		for (int i = 1; i < V; i++)
			if (logits[i] > logits[best])
				best = i;
		return best;
	}
	for (int i = 0; i < V; i++)
		s->c[i] = (struct cand){ logits[i] / s->o.temperature, i };
	qsort(s->c, (size_t)V, sizeof(*s->c), by_logit_desc);
	int n = s->o.top_k > 0 && s->o.top_k < V ? s->o.top_k : V;
	double sum = 0, mx = s->c[0].logit;
	for (int i = 0; i < n; i++)
		sum += exp(s->c[i].logit - mx);
	if (s->o.top_p > 0 && s->o.top_p < 1) {
		/* Keep the smallest head whose mass reaches top_p (at least one). */
		double acc = 0;
		int keep = 0;
		while (keep < n) {
			acc += exp(s->c[keep].logit - mx) / sum;
			keep++;
			if (acc >= s->o.top_p)
				break;
		}
		n = keep;
		sum = 0;
		for (int i = 0; i < n; i++)
			sum += exp(s->c[i].logit - mx);
	}
	double u = (double)(next_u64(s->st) >> 11) * 0x1.0p-53 * sum, acc = 0;
	for (int i = 0; i < n; i++) {
		acc += exp(s->c[i].logit - mx);
		if (u < acc)
			return s->c[i].id;
	}
	return s->c[n - 1].id;
}
