/* SPDX-License-Identifier: MIT */
/*
 * The shapes the benchmarks measure with: SmolLM-135M's (the random model
 * pfx_config_smollm135m() describes) and its KV blocks as prefixd caches
 * them, so that every benchmark's "block" is the same block.
 */
#ifndef PFX_BENCH_SHAPES_H
#define PFX_BENCH_SHAPES_H

#include <stdint.h>
#include <string.h>

#include "prefixd.h"

/* SmolLM-135M: 30 layers, 3 KV heads of 64 dims, a vocabulary of 49152. */
#define SMOLLM_LAYERS 30
#define SMOLLM_KV_HEADS 3
#define SMOLLM_HEAD_DIM 64
#define SMOLLM_VOCAB 49152u
/* Its KV in blocks of 64 tokens, f32, K and V: 2.9 MiB a block. */
#define SMOLLM_BLOCK_TOKENS 64
#define SMOLLM_BLOCK_BYTES \
	((uint64_t)2 * SMOLLM_LAYERS * SMOLLM_KV_HEADS * SMOLLM_BLOCK_TOKENS * SMOLLM_HEAD_DIM * 4)
/* A 2048-token prefix: 32 blocks. */
#define SMOLLM_PREFIX_BLOCKS 32

/* The layout of blocks of block_tokens tokens and block_bytes bytes of a
 * model whose fingerprint's bytes are all fp (models differ in fp). */
static inline struct prefixd_layout bench_layout(uint32_t block_tokens, uint64_t block_bytes,
						 uint8_t fp)
{
	struct prefixd_layout l = { .block_tokens = block_tokens, .block_bytes = block_bytes };
	memset(l.fingerprint, fp, sizeof(l.fingerprint));
	return l;
}

#endif
