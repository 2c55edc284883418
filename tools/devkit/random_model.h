/* SPDX-License-Identifier: MIT */
/* Random-weight checkpoints of any supported shape, for benchmarks, demos and tests. */
#ifndef PFX_RANDOM_MODEL_H
#define PFX_RANDOM_MODEL_H

#include <stdint.h>

#include "model.h"

/*
 * Writes dir/config.json and dir/model.safetensors (creating dir) for a
 * model of config c (c->arch names the architecture), weights drawn from
 * seed and stored as dtype "F32", "F16" or "BF16". Returns 0 or -errno.
 */
int pfx_random_checkpoint(const char *dir, const struct pfx_config *c, const char *dtype,
			  uint64_t seed, struct pfx_error *err);

/* The shape of SmolLM-135M (Llama, hidden 576, 30 layers, 9 heads, 3 KV
 * heads, intermediate 1536, vocab 49152, tied embeddings). */
struct pfx_config pfx_config_smollm135m(void);

#endif
