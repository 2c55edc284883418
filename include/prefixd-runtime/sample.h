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

/* Zero-initialised ({0}), these are greedy decoding. */
struct pfx_sampler_opts {
	float temperature;     /* 0: greedy */
	int top_k;             /* 0: off */
	float top_p;           /* 0 or >= 1: off; else keep that share of the mass */
	uint64_t seed;
};

struct pfx_sampler;

/* Returns 0 and *out, or -EINVAL for options out of range (a negative or
 * not finite temperature or top-p, a negative top-k, a NULL o, a vocab
 * below 1; message in err) and -ENOMEM; *out is NULL on failure. */
int pfx_sampler_new(const struct pfx_sampler_opts *o, int vocab, struct pfx_sampler **out,
		    struct pfx_error *err);
void pfx_sampler_free(struct pfx_sampler *s);
/* The next token id, or -EINVAL when s or logits is NULL (as s is after
 * pfx_sampler_new refused the options). Greedy picks the first maximum,
 * like argmax. */
int32_t pfx_sample(struct pfx_sampler *s, const float *logits);

#ifdef __cplusplus
}
#endif

#endif
