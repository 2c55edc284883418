/* SPDX-License-Identifier: MIT */
/*
 * The prefix index: (namespace, chain hash) -> stored block. A hit is only
 * ever confirmed by exact comparison: a block's tokens must equal the
 * client's, and its parent must be the block confirmed just before it (for
 * the first block, the namespace's root context). Leased blocks are never
 * evicted; eviction takes unleased leaves, least recently used first.
 *
 * Thread-safe: one mutex guards the whole index (see docs/DESIGN.md).
 */
#ifndef PD_INDEX_H
#define PD_INDEX_H

#include <stdint.h>

#define IDX_HASH_BYTES 32

struct idx_loc {
	uint32_t arena;
	uint64_t offset;
};

/* Where block bytes live. The index decides which slots are used; the
 * store owns the memory and the budget (alloc fails with -ENOSPC). */
struct idx_store {
	int (*alloc)(void *ctx, struct idx_loc *loc);
	void (*free)(void *ctx, struct idx_loc loc);
	void *ctx;
};

/* The context every chain of one client starts from: namespace (from the
 * peer's credentials) and h0 (model fingerprint, KV layout, salt). */
struct idx_root {
	uint32_t ns;
	uint8_t h0[IDX_HASH_BYTES];
};

struct idx_stats {
	uint64_t blocks, hits, misses, hit_blocks, published, dedup, evictions, collisions, leases;
};

struct pd_index;

/* key_bytes < 32 truncates keys (a test-only weak hash). 0 or -errno. */
int idx_new(uint32_t block_tokens, int key_bytes, const struct idx_store *store,
	    struct pd_index **out);
/* Frees every block through the store. Leases must have been released. */
void idx_free(struct pd_index *x);

/*
 * Longest confirmed run of leading blocks. hashes: count x 32 bytes,
 * tokens: count x block_tokens u32 (host order). On a hit, *lease is a new
 * lease on the hit blocks and locs[0 .. *hit) their places; *lease is 0
 * when nothing hit. Returns 0 or -ENOMEM.
 */
int idx_match(struct pd_index *x, const struct idx_root *root, const uint8_t *hashes,
	      const uint32_t *tokens, uint32_t count, uint64_t *lease, struct idx_loc *locs,
	      uint32_t *hit);
/* Ends a lease: 0, or -ENOENT if there is no such lease. */
int idx_release(struct pd_index *x, uint64_t lease);

/*
 * Stores blocks that continue the last block of `lease` (0: the root).
 * For each block already present with the same tokens and parent, counts a
 * dedup; otherwise takes a slot (evicting as needed) and calls
 * fill(ctx, i, loc) to copy its bytes before it becomes visible. Stops at
 * the first block that cannot be placed: -ENOSPC when every block left is
 * leased or a parent, -EEXIST when its key is taken by another prompt (a
 * collision), -ENOENT for an unknown lease. *stored and *dedup count what
 * was done before any stop.
 */
int idx_publish(struct pd_index *x, const struct idx_root *root, uint64_t lease,
		const uint8_t *hashes, const uint32_t *tokens, uint32_t count,
		int (*fill)(void *ctx, uint32_t i, struct idx_loc loc), void *ctx,
		uint32_t *stored, uint32_t *dedup);

void idx_get_stats(struct pd_index *x, struct idx_stats *out);

#endif
