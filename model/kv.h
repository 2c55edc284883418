/* SPDX-License-Identifier: MIT */
/* KV blocks and the session state that forward.c reads and writes. */
#ifndef PFX_KV_H
#define PFX_KV_H

#include <stdatomic.h>

#include "model_impl.h"
#include "session.h"

/* One block: its floats are [layer][k|v][kv_head][token][head_dim]. Shared
 * between sessions only while every token in it is frozen (immutable). */
struct kv_block {
	atomic_int refs;
	float *data;     /* (kv_block_floats) */
};

struct pfx_session {
	struct pfx_model *m;
	struct kv_block **blocks; /* (nblocks); block i holds positions [iB, (i+1)B) */
	size_t nblocks, cap;
	size_t len;               /* committed tokens */
	size_t frozen;            /* tokens that can no longer change */
};

/* Makes sure blocks exist for positions [0, upto). Blocks past the frozen
 * length are private to s, so the forward pass may write them. */
int kv_reserve(struct pfx_session *s, size_t upto);

#endif
