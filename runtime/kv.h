/* SPDX-License-Identifier: MIT */
/* KV blocks and the session state that forward.c reads; kv.c alone
 * writes the lengths. */
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
	/* Leading blocks published through the cache numbered pub_cache
	 * (its id: a pointer could name a later cache at the same address)
	 * by pfx_session_publish, or attached from it: the next publish sends
	 * only the ones after. 0: none. */
	uint64_t pub_cache;
	size_t pub_blocks;
};

/* Fills m's spare blocks (kv.c; m->spare.lock initialised), their pages
 * written once, so that the first pass after the load, a short suffix
 * after an attach, does not take its new block's page faults. 0 or
 * -ENOMEM. */
int kv_spare_fill(struct pfx_model *m);
/* Frees the spare blocks and the lock (at pfx_model_free: no session is
 * left). */
void kv_spare_free(struct pfx_model *m);
/* How many spare blocks m holds now (tests). */
int kv_spare_count(struct pfx_model *m);

/* Fills the page tables of n attached blocks (populate.c) on m's workers,
 * unless a pass holds them or PFX_NO_POPULATE is set. Returns the blocks
 * populated (n or 0). */
int kv_populate(struct pfx_model *m, const void *const *blocks, size_t n);

/* Makes sure blocks exist for positions [0, upto). Blocks past the frozen
 * length are private to s, so the forward pass may write them. */
int kv_reserve(struct pfx_session *s, size_t upto);

/* A frozen block of someone else's memory, held by lease (one reference
 * taken). NULL when out of memory. */
struct kv_block *kv_block_attached(const void *data, struct kv_lease *lease);
/* Appends a frozen block to a session whose tokens are all frozen and fill
 * whole blocks: its length and frozen length grow by a block. The session
 * takes b. -EINVAL when the session is not so, -ENOMEM. */
int kv_attach_frozen(struct pfx_session *s, struct kv_block *b);
/* The forward pass wrote n more positions: they are committed. */
void kv_commit(struct pfx_session *s, size_t n);
/* Keeps the first len tokens (frozen <= len <= length, checked by the
 * caller) and the blocks that hold them. */
void kv_rewind(struct pfx_session *s, size_t len);
/* Every committed token becomes frozen. */
void kv_freeze(struct pfx_session *s);
/* Drops every block and the table. */
void kv_free(struct pfx_session *s);
/* Gives the empty session c s's tokens: the frozen blocks shared, the rest
 * copied. -ENOMEM (c then holds some blocks: free it). */
int kv_copy(struct pfx_session *c, const struct pfx_session *s);
/* Gives the empty session c the first len tokens of s (len a multiple of
 * the block size, at most s's frozen length): their blocks shared.
 * -ENOMEM (c is then still empty). */
int kv_share_prefix(struct pfx_session *c, const struct pfx_session *s, size_t len);
/* Freezes the first len tokens (frozen <= len <= length, checked by the
 * caller). */
void kv_freeze_at(struct pfx_session *s, size_t len);
/* Lease references, kept by attached blocks (cache.c). */
void kv_lease_put(struct kv_lease *l);

#endif
