/* SPDX-License-Identifier: MIT */
/*
 * The prefix index: (namespace, chain hash) -> stored block, for every
 * user and model of one daemon. A hit is only ever confirmed by exact
 * comparison: a block's tokens must equal the client's, and its parent
 * must be the block confirmed just before it (for the first block, the
 * group's root context). Blocks are grouped by chain root (a user's
 * namespace and h0: model, layout, salt); a group's blocks live in its
 * store. One memory budget for all stores, a quota per user and a bound on
 * pins (struct idx_limits).
 *
 * Eviction takes unleased, unpinned leaves, least recently used first,
 * across every group: a user at their quota gives up their own oldest
 * block, otherwise the oldest block of anyone goes.
 *
 * Thread-safe: one mutex guards the whole index (docs/DESIGN.md, "Locks").
 * Store callbacks run under it, so stores need no lock of their own; the
 * tier's callbacks take the tier's mutex under it. Its callers hold no
 * lock of the daemon's. Only PUBLISH and IMPORT drop it in the middle of
 * a call: to copy a block's bytes (fill) and to wait for the writer.
 */
#ifndef PD_INDEX_H
#define PD_INDEX_H

#include <stdbool.h>
#include <stdint.h>

#include "wire.h"

#define IDX_HASH_BYTES PD_HASH_SIZE

struct idx_loc {
	uint32_t arena;
	uint64_t offset;
};

/* Where a group's block bytes live. alloc takes a slot or fails with
 * -ENOSPC when the budget is full; free returns one, and with punch gives
 * its memory back to the budget (without, the store keeps it for its next
 * alloc). hold, if set, counts the groups using the store (+1 when one is
 * made, -1 when it goes), so that its owner knows when it is unused. */
struct idx_store {
	int (*alloc)(void *ctx, struct idx_loc *loc);
	void (*free)(void *ctx, struct idx_loc loc, bool punch);
	void *ctx;
	uint64_t slot_bytes;    /* what one block holds of the budget */
	void (*hold)(void *ctx, int delta);
	uint64_t block_bytes;   /* KV bytes of one block */
	uint64_t record_bytes;  /* what one block's record holds of the disk budget */
};

/* The disk tier as the index sees it (tier.h). Both run under the index
 * lock, so they only queue work (under the tier's own mutex, which thus
 * nests inside the index's): drop, a record to delete (the block left the
 * index); wake, blocks to write (idx_spill_take). */
struct idx_tier {
	void (*drop)(void *ctx, uint32_t ns, const uint8_t *hash);
	void (*wake)(void *ctx);
	void *ctx;
	bool sync;              /* a publish returns once its blocks are written */
};

/* The context every chain of one client starts from: namespace (from the
 * peer's credentials) and h0 (model fingerprint, KV layout, salt). */
struct idx_root {
	uint32_t ns;
	uint8_t h0[IDX_HASH_BYTES];
};

struct idx_limits {
	uint64_t quota;         /* most bytes one user's blocks may hold; none
				 * when it is the whole budget (the stores') */
	uint64_t pin_max;       /* most bytes pinned blocks may hold */
	uint64_t budget;        /* what the stores may hold in all */
	uint64_t disk_budget;   /* what records may hold on disk (with a tier) */
};

struct idx_stats {
	uint64_t blocks, bytes, hits, misses, hit_blocks, query_blocks, published, dedup,
		evictions, admin_evictions, collisions, leases, leased_bytes, pinned_bytes, pins,
		refused_blocks, pins_expired,
		/* the disk tier */
		disk_blocks, disk_bytes, spills, restores, restore_bytes, disk_corrupt,
		disk_evictions, disk_pending,
		unwritten_evictions; /* with a tier: left memory before their record was written */
};

/*
 * A block on its way to or from disk. The index fills it; ref names the
 * entry for the call that ends the transfer, which must come: until then
 * the entry is held (neither evicted nor removed) and tokens stay valid.
 */
struct idx_block {
	const void *ref;
	uint32_t ns, depth;           /* depth: blocks before this one */
	uint8_t hash[IDX_HASH_BYTES], parent[IDX_HASH_BYTES]; /* parent zero at depth 0 */
	uint8_t h0[IDX_HASH_BYTES], fp[PD_FP_SIZE];
	const uint32_t *tokens;       /* block_tokens ids, host order */
	struct idx_store store;       /* the slot is store.ctx's loc */
	struct idx_loc loc;
	uint64_t sum;                 /* the payload's checksum (restores) */
	uint32_t pos;                 /* restores: its place in the MATCH */
	bool resident;                /* exports: read it from its slot, not its record */
	/* Its use, which a graceful restart keeps (idx_each_record fills
	 * them, idx_load takes them back): */
	uint64_t hits;
	uint64_t use;                 /* LRU order (logical clock); 0: now */
	uint64_t idle_s;              /* seconds since its last use */
	bool pin_end;                 /* a pin ends at this block (idx_pin) */
	uint32_t pin_ttl_s;           /* that pin's TTL left, rounded up; 0: none */
};

struct idx;
struct idx_group;

/* key_bytes < 32 truncates keys (a test-only weak hash). 0 or -errno. */
int idx_new(uint32_t block_tokens, int key_bytes, const struct idx_limits *lim,
	    struct idx **out);
/* Gives the index a disk tier, before any block is stored: blocks are
 * then written out after they are published (idx_spill_take), evicted
 * from memory once written, and restored by MATCH. */
void idx_set_tier(struct idx *x, const struct idx_tier *tier);
/* Frees every block through its store, unpunched (the stores go next).
 * Groups must have been put. */
void idx_free(struct idx *x);

/* ==== Requests (index.c: each call takes the lock once) ==== */

/* The group of a root, made on first use, with the model's fingerprint
 * and the store of its blocks; one reference for the caller. 0 or
 * -ENOMEM. */
int idx_group_get(struct idx *x, const struct idx_root *root, const uint8_t *fingerprint,
		  const struct idx_store *store, struct idx_group **out);
/* Whether g's blocks live in store_ctx. A group is found by its root
 * alone, and a root commits to a block size (pd_chain_root), so a
 * different store means a forged root: records of an import, say. */
bool idx_group_has_store(const struct idx_group *g, const void *store_ctx);
/* Drops a reference; a group without references or blocks goes. */
void idx_group_put(struct idx *x, struct idx_group *g);

/*
 * Longest confirmed run of leading blocks. hashes: count x 32 bytes,
 * tokens: count x block_tokens u32 (host order). On a hit, *lease is a new
 * lease on the hit blocks and locs[0 .. *hit) their places; *lease is 0
 * when nothing hit. Returns 0 or -ENOMEM.
 *
 * Blocks held only on disk are part of the hit when fetch is not NULL
 * (count entries): each gets a slot and a fetch[] entry, *nfetch of them,
 * whose bytes the caller reads from disk and then hands to idx_restored,
 * which confirms the hit. With fetch NULL, the hit ends before them.
 */
int idx_match(struct idx *x, struct idx_group *g, const uint8_t *hashes,
	      const uint32_t *tokens, uint32_t count, uint64_t *lease, struct idx_loc *locs,
	      uint32_t *hit, struct idx_block *fetch, uint32_t *nfetch);
/* Ends the restores of an idx_match: ok[i] (0 or -errno) for fetch[i].
 * The hit ends before the first block that failed (its record is dropped
 * and counted corrupt when -EBADMSG); *hit and *lease are set anew (lease
 * 0 when nothing is left). */
void idx_restored(struct idx *x, uint64_t *lease, uint32_t *hit,
		  const struct idx_block *fetch, uint32_t nfetch, const int *ok);
/* Ends a lease: 0, or -ENOENT if there is no such lease. */
int idx_release(struct idx *x, uint64_t lease);
/* Takes back the miss an idx_match of count blocks in g counted: the
 * MATCH goes on in another namespace, which counts it. */
void idx_uncount_miss(struct idx *x, struct idx_group *g, uint32_t count);
/* Takes back what an idx_match of count blocks in g with hit blocks
 * counted (its lease released already): a MATCH that waits runs again,
 * and only its last run counts. */
void idx_uncount_match(struct idx *x, struct idx_group *g, uint32_t count, uint32_t hit);

/*
 * Stores blocks that continue the last block of `lease` (0: the root).
 * For each block already present with the same tokens and parent, counts a
 * dedup; otherwise takes a slot (evicting as needed) and calls
 * fill(ctx, i, loc), without the index lock, to copy its bytes before it
 * becomes visible (all the publish's blocks at once). Ends at the first
 * block that cannot be placed or copied, with its error: -ENOSPC when the
 * budget is full of leased or pinned blocks, -EDQUOT when the user's quota
 * is, -EEXIST when its key is taken by another prompt (a collision),
 * fill's error; -ENOENT for an unknown lease. *stored and *dedup count the
 * blocks before the end, which are all there now: blocks [0, *stored +
 * *dedup) of the chain.
 */
int idx_publish(struct idx *x, struct idx_group *g, uint64_t lease,
		const uint8_t *hashes, const uint32_t *tokens, uint32_t count,
		int (*fill)(void *ctx, uint32_t i, struct idx_loc loc), void *ctx,
		uint32_t *stored, uint32_t *dedup);

/* idx_publish, and *lease_out a new lease on the chain from the root to
 * the last block stored or already there (`lease`'s blocks, then those);
 * 0 when there is none. A publisher continues from it with its next
 * blocks, and releases it with idx_release. */
int idx_publish_leased(struct idx *x, struct idx_group *g, uint64_t lease,
		       const uint8_t *hashes, const uint32_t *tokens, uint32_t count,
		       int (*fill)(void *ctx, uint32_t i, struct idx_loc loc), void *ctx,
		       uint32_t *stored, uint32_t *dedup, uint64_t *lease_out);

/* The blocks one import stored or found, each held in the index (never
 * removed; out of memory only once written to disk) until idx_import_end,
 * so that a parent is still there when its children come: zeroed at the
 * start of an import. */
struct idx_held {
	void **e;
	uint32_t n, cap;
	bool no_wait;           /* a MATCH's import (remote tier): never waits for the disk writer */
};

/* Stores block b (ns, depth, hash, parent, tokens) of group g, as a
 * publish would, after its parent, found by hash, and holds it in h.
 * When memory is full of blocks not yet written, waits for the disk tier
 * to write some (not with h->no_wait: -ENOSPC then, as a restore would). 0 (*dedup: it was there), -ENOENT (no such parent), or
 * idx_publish's errors. */
int idx_import(struct idx *x, struct idx_group *g, const struct idx_block *b,
	       int (*fill)(void *ctx, uint32_t i, struct idx_loc loc), void *ctx, bool *dedup,
	       struct idx_held *h);
/* Lets go of what an import held (h is emptied). */
void idx_import_end(struct idx *x, struct idx_held *h);

/* ==== The disk tier (index.c; idx_each_record in index_admin.c) ==== */

/* Up to max blocks to write out, oldest published first, as many as
 * max_bytes of records hold (one at least), each held until idx_spilled;
 * and the disk budget charged for them (the least recently used blocks
 * held only on disk go to make room; a block that cannot fit stays in
 * memory only). A block comes only after its parent has a record or is
 * earlier in the same batch: the caller must not make a child's record
 * visible unless its parent's is. */
uint32_t idx_spill_take(struct idx *x, struct idx_block *out, uint32_t max,
			uint64_t max_bytes);
/* rc 0: the block's record is on disk. -ENOSPC: not written, try again
 * later (in its place in line). Anything else: not written, and not tried
 * again. Wakes the publishes that wait for memory or, with sync, for
 * their records. */
void idx_spilled(struct idx *x, const struct idx_block *b, int rc);
/* Blocks that wait to be written. */
uint64_t idx_dirty(struct idx *x);
/*
 * A block found on disk at start: b->ns, depth, hash, parent, tokens and
 * sum, in group g (its h0 and fp), with its hits, use and idle time as
 * idx_each_record gave them (zero: unknown). Its parent must be loaded
 * first.
 * 0, -ENOENT (no such parent in g), -EEXIST (there already), -ENOSPC (the
 * disk budget is full) or -ENOMEM.
 */
int idx_load(struct idx *x, struct idx_group *g, const struct idx_block *b);
/* Calls fn for every block with a record on disk (under the index lock:
 * for a daemon that stops) until fn returns non-zero, which it returns.
 * The blocks come with their hits, use and pin. */
int idx_each_record(struct idx *x, int (*fn)(void *ctx, const struct idx_block *b),
		    void *ctx);
/* The block (ns, hash) is in the remote tier: this daemon wrote it there
 * or read it from there (LIST's PD_CHAIN_REMOTE). Gone: nothing. */
void idx_mark_remote(struct idx *x, uint32_t ns, const uint8_t *hash);
/* Records found damaged elsewhere (at start), for the disk_corrupt count. */
void idx_count_corrupt(struct idx *x, uint64_t n);

/* ==== Admin (index_admin.c: LIST and EVICT run in rounds that step aside) ==== */

/* The blocks an export selects (flags of struct pd_export), parents
 * first, each held (neither evicted nor removed) until idx_export_done:
 * *out malloc'd. 0, -ENOENT (no such chain) or -ENOMEM. */
int idx_export_take(struct idx *x, const struct pd_export *sel, struct idx_block **out,
		    uint32_t *n);
void idx_export_done(struct idx *x, struct idx_block *b, uint32_t n);

/* The namespaces a peer that is not an admin may see (its own and, as a
 * member, the shared one); a NULL view is every namespace. */
struct idx_view {
	uint32_t ns[2];
	uint32_t n;
};

void idx_get_stats(struct idx *x, struct idx_stats *out);
/* One row per (user, model), malloc'd into *rows (free it). 0 or -ENOMEM. */
int idx_usage(struct idx *x, struct pd_usage **rows, uint32_t *n);
/* idx_usage of the namespaces of view only (NULL: all), so that the rows
 * others fill can never crowd the view's out of a reply. */
int idx_usage_in(struct idx *x, const struct idx_view *view, struct pd_usage **rows,
		 uint32_t *n);

/*
 * Up to req->max_rows chains ending at a leaf or at a pin, from req->cursor on; *next
 * is where the next page starts, 0 when there is none. Each call holds the
 * lock for a bounded number of entries, so listing never stalls MATCHes
 * for long; a listing is not a snapshot (blocks may come and go between
 * pages).
 */
void idx_list(struct idx *x, const struct pd_list *req, struct pd_chain_row *rows,
	      uint32_t *nrows, uint64_t *next);
/* idx_list of the chains of view's namespaces only (NULL: all): a page
 * ends after max_rows of them, so that where it ends tells nothing of
 * the chains of others. */
void idx_list_in(struct idx *x, const struct pd_list *req, const struct idx_view *view,
		 struct pd_chain_row *rows, uint32_t *nrows, uint64_t *next);
/* Evicts the unleased, unpinned blocks a selector names and counts the
 * ones kept. 0, or -ENOENT for an unknown chain id. */
int idx_evict(struct idx *x, const struct pd_evict *sel, struct pd_evict_reply *out);
/* idx_evict of the blocks of namespace *ns only (NULL: any). */
int idx_evict_ns(struct idx *x, const struct pd_evict *sel, const uint32_t *ns,
		 struct pd_evict_reply *out);
/* Pins a chain (the block id names and every block before it) against
 * eviction, for ttl_s seconds (0: until unpinned); pinning a pinned chain
 * sets its TTL anew. 0 and *pinned_bytes what pins hold now; -ENOENT; or
 * -E2BIG when that would pass pin_max (*pinned_bytes is then what pins
 * would hold with this one). */
int idx_pin(struct idx *x, const struct pd_id *id, uint32_t ttl_s, uint64_t *pinned_bytes);
/* idx_pin, and -EDQUOT when the pins of the chain's namespace would then
 * hold more than ns_max bytes. With ns_max other than UINT64_MAX (a
 * user's pin), *pinned_bytes is what the pins of the chain's namespace
 * hold (or would hold), never the others'. */
int idx_pin_ns(struct idx *x, const struct pd_id *id, uint32_t ttl_s, uint64_t ns_max,
	       uint64_t *pinned_bytes);
/* 0, or -ENOENT when no such chain is pinned. */
int idx_unpin(struct idx *x, const struct pd_id *id);
/* Ends the pins whose TTL has run out (also done by every admin call and
 * publish; the daemon calls it once a second). */
void idx_expire(struct idx *x);

#endif
