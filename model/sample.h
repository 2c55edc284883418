/* SPDX-License-Identifier: MIT */
/*
 * Choosing the next token from logits: greedy, or seeded sampling with
 * temperature, top-k and top-p applied in that order (as transformers does).
 */
#ifndef PFX_SAMPLE_H
#define PFX_SAMPLE_H

#include <stdint.h>

#include "pfx_error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct pfx_sampler_opts {
	float temperature;     /* <= 0: greedy */
	int top_k;             /* 0: off */
	float top_p;           /* >= 1: off */
	uint64_t seed;
};

struct pfx_sampler;

/* Returns 0 and *out, or -EINVAL for options out of range (message in err). */
int pfx_sampler_new(const struct pfx_sampler_opts *o, int vocab, struct pfx_sampler **out,
		    struct pfx_error *err);
void pfx_sampler_free(struct pfx_sampler *s);
/* The next token id. Greedy picks the first maximum, like argmax. */
int32_t pfx_sample(struct pfx_sampler *s, const float *logits);

#ifdef __cplusplus
}
#endif

#endif
