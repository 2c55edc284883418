/* SPDX-License-Identifier: MIT */
/*
 * Rotary inverse frequencies as transformers (modeling_rope_utils, 4.46)
 * computes them, step by step in float32 as torch does, so that angles and
 * the keys in the KV cache round the same way.
 */
#include <math.h>

#include "model_impl.h"

void rope_inv_freq(const struct pfx_config *c, float *out)
{
	const struct pfx_rope_scaling *s = &c->rope_scaling;
	int half = c->rotary_dim / 2;
	/* 1 / base^(2j / dim). */
	for (int j = 0; j < half; j++)
		out[j] = 1.0f / powf(c->rope_base, (float)(2 * j) / (float)c->rotary_dim);
	switch (s->type) {
	case PFX_ROPE_DEFAULT:
		return;
	case PFX_ROPE_DYNAMIC:
		/* NTK scaling changes the base only for a forward pass that
		 * reaches past max_position_embeddings, and then keeps it for
		 * later passes of the model (a state no shared KV cache can
		 * reproduce); a session never goes past it, where transformers
		 * computes exactly the frequencies above. */
		return;
	case PFX_ROPE_LINEAR:
		for (int j = 0; j < half; j++)
			out[j] /= s->factor;
		return;
	case PFX_ROPE_LLAMA3:
		break;
	}
	/* Llama 3: wavelengths shorter than original / high_freq_factor keep
	 * their frequency, longer than original / low_freq_factor are divided
	 * by factor, and the band between is interpolated. torch evaluates
	 * `scalar / tensor` as reciprocal(tensor) * scalar, and scalars in
	 * float32. */
	const float two_pi = (float)(2 * M_PI), orig = (float)s->original_max_positions;
	const float low_wl = (float)((double)s->original_max_positions / s->low_freq_factor);
	const float high_wl = (float)((double)s->original_max_positions / s->high_freq_factor);
	const float span = (float)((double)s->high_freq_factor - (double)s->low_freq_factor);
	for (int j = 0; j < half; j++) {
		float inv = out[j], wl = (1.0f / inv) * two_pi;
		if (wl > low_wl) {
			out[j] = inv / s->factor;
		} else if (!(wl < high_wl)) {
			float smooth = ((1.0f / wl) * orig - s->low_freq_factor) / span;
			out[j] = (1.0f - smooth) * inv / s->factor + smooth * inv;
		}
	}
}
