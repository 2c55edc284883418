/* SPDX-License-Identifier: MIT */
/* KV blocks and the session state that forward.c reads and writes. */
#ifndef PFX_KV_H
#define PFX_KV_H

#include <stdatomic.h>

#include "model_impl.h"
#include "session.h"

struct kv_lease;

/* One block: its elements (of the model's kv_type) are
 * [layer][k|v][kv_head][token][head_dim]. Shared between sessions only
 * while every token in it is frozen (immutable). */
struct kv_block {
	atomic_int refs;
	void *data;      /* (kv_block_bytes) */
	/* Attached from prefixd: data is the daemon's read-only memory, which
	 * the lease keeps in place; NULL for a block this process owns. */
	struct kv_lease *lease;
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

/* A frozen block of someone else's memory, held by lease (one reference
 * taken). NULL when out of memory. */
struct kv_block *kv_block_attached(const void *data, struct kv_lease *lease);
/* Appends a block to the session's table (the session takes b). */
int kv_push(struct pfx_session *s, struct kv_block *b);
/* Lease references, kept by attached blocks (cache.c). */
void kv_lease_put(struct kv_lease *l);

#endif
