/* SPDX-License-Identifier: MIT */
/*
 * The prefix index: exact confirmation of hits, namespaces and roots,
 * dedup, leases against eviction, leaf-first LRU eviction under a budget,
 * and collisions from a deliberately tiny hash that are never served.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "index.h"

enum { B = 4 };

/* A store of `cap` slots that records which prompt's block each slot holds. */
struct store {
	int cap, used;
	uint8_t taken[4096];
	uint32_t owner[4096];      /* what fill() wrote: a tag of the block */
};

static int st_alloc(void *ctx, struct idx_loc *loc)
{
	struct store *s = ctx;
	if (s->used == s->cap)
		return -ENOSPC;
	for (uint32_t i = 0; i < 4096; i++)
		if (!s->taken[i]) {
			s->taken[i] = 1;
			s->used++;
			*loc = (struct idx_loc){ 1, i };
			return 0;
		}
	return -ENOSPC;
}

static void st_free(void *ctx, struct idx_loc loc)
{
	struct store *s = ctx;
	cr_assert(s->taken[loc.offset], "double free of slot %lu", (unsigned long)loc.offset);
	s->taken[loc.offset] = 0;
	s->used--;
}

struct fill_ctx {
	struct store *s;
	const uint32_t *tags;
};

static int fill(void *ctx, uint32_t i, struct idx_loc loc)
{
	struct fill_ctx *f = ctx;
	f->s->owner[loc.offset] = f->tags[i];
	return 0;
}

static struct pd_index *index_with(struct store *s, int cap, int key_bytes)
{
	memset(s, 0, sizeof(*s));
	s->cap = cap;
	struct idx_store ops = { st_alloc, st_free, s };
	struct pd_index *x;
	cr_assert_eq(idx_new(B, key_bytes, &ops, &x), 0);
	return x;
}

/* A prompt: blocks of tokens seed*100 + j, hashes from its token prefix. */
struct prompt {
	uint32_t tokens[64 * B];
	uint8_t hashes[64 * 32];
	uint32_t tags[64];
	uint32_t n;
};

static void make_prompt(struct prompt *p, uint32_t seed, uint32_t n, uint32_t shared_with, uint32_t shared)
{
	p->n = n;
	for (uint32_t i = 0; i < n * B; i++)
		p->tokens[i] = (i < shared * B ? shared_with : seed) * 1000 + i;
	/* A toy chain hash: FNV over all tokens so far (collision-prone only
	 * when the index truncates keys). */
	uint64_t h = 1469598103934665603ull;
	for (uint32_t b = 0; b < n; b++) {
		for (uint32_t t = 0; t < B; t++)
			h = (h ^ p->tokens[b * B + t]) * 1099511628211ull;
		for (int k = 0; k < 32; k++)
			p->hashes[b * 32 + k] = (uint8_t)(h >> (8 * (k % 8))) ^ (uint8_t)k;
		p->tags[b] = (b < shared ? shared_with : seed) * 100 + b;
	}
}

static uint32_t publish(struct pd_index *x, struct store *s, const struct idx_root *r, uint64_t lease,
			const struct prompt *p, uint32_t from, uint32_t n, int *rc)
{
	struct fill_ctx f = { s, p->tags + from };
	uint32_t stored, dedup;
	*rc = idx_publish(x, r, lease, p->hashes + from * 32, p->tokens + from * B, n, fill, &f, &stored,
			  &dedup);
	return stored;
}

static uint32_t match(struct pd_index *x, const struct idx_root *r, const struct prompt *p, uint64_t *lease,
		      struct idx_loc *locs)
{
	uint32_t hit;
	cr_assert_eq(idx_match(x, r, p->hashes, p->tokens, p->n, lease, locs, &hit), 0);
	return hit;
}

static const struct idx_root root1 = { 1, { 1 } }, root1b = { 1, { 2 } }, root2 = { 2, { 1 } };

Test(index, hits_are_confirmed_exactly)
{
	struct store s;
	struct pd_index *x = index_with(&s, 100, 32);
	struct prompt a, b;
	make_prompt(&a, 1, 3, 0, 0);
	int rc;
	cr_assert_eq(publish(x, &s, &root1, 0, &a, 0, 3, &rc), 3);
	cr_assert_eq(rc, 0);
	uint64_t lease;
	struct idx_loc locs[64];
	cr_expect_eq(match(x, &root1, &a, &lease, locs), 3);
	for (int i = 0; i < 3; i++)
		cr_expect_eq(s.owner[locs[i].offset], a.tags[i], "block %d served from the right slot", i);
	cr_expect_eq(idx_release(x, lease), 0);
	cr_expect_eq(idx_release(x, lease), -ENOENT, "a lease ends once");
	/* The same hashes with one token changed in block 1: only block 0 hits. */
	b = a;
	b.tokens[B + 2]++;
	cr_expect_eq(match(x, &root1, &b, &lease, locs), 1);
	idx_release(x, lease);
	/* Another namespace or another root (model, layout, salt) never hits. */
	cr_expect_eq(match(x, &root2, &a, &lease, locs), 0);
	cr_expect_eq(lease, 0);
	cr_expect_eq(match(x, &root1b, &a, &lease, locs), 0);
	/* Publishing the same blocks again is a dedup. */
	uint32_t stored, dedup;
	struct fill_ctx f = { &s, a.tags };
	cr_expect_eq(idx_publish(x, &root1, 0, a.hashes, a.tokens, 3, fill, &f, &stored, &dedup), 0);
	cr_expect_eq(stored, 0);
	cr_expect_eq(dedup, 3);
	struct idx_stats st;
	idx_get_stats(x, &st);
	cr_expect_eq(st.blocks, 3);
	cr_expect_eq(st.dedup, 3);
	idx_free(x);
	cr_expect_eq(s.used, 0, "every slot returned to the store");
}

Test(index, publish_continues_a_lease)
{
	struct store s;
	struct pd_index *x = index_with(&s, 100, 32);
	struct prompt a, b;
	make_prompt(&a, 1, 2, 0, 0);
	make_prompt(&b, 2, 4, 1, 2); /* shares a's two blocks, then its own */
	int rc;
	publish(x, &s, &root1, 0, &a, 0, 2, &rc);
	uint64_t lease;
	struct idx_loc locs[64];
	cr_assert_eq(match(x, &root1, &b, &lease, locs), 2);
	cr_expect_eq(publish(x, &s, &root1, lease, &b, 2, 2, &rc), 2);
	cr_expect_eq(rc, 0);
	idx_release(x, lease);
	cr_expect_eq(match(x, &root1, &b, &lease, locs), 4);
	cr_expect_eq(s.owner[locs[3].offset], b.tags[3]);
	idx_release(x, lease);
	uint32_t stored, dedup;
	struct fill_ctx f = { &s, b.tags };
	cr_expect_eq(idx_publish(x, &root1, 12345, b.hashes, b.tokens, 1, fill, &f, &stored, &dedup),
		     -ENOENT);
	idx_free(x);
}

Test(index, leases_block_eviction_and_budget_holds)
{
	struct store s;
	struct pd_index *x = index_with(&s, 3, 32);
	struct prompt a, b;
	make_prompt(&a, 1, 3, 0, 0);
	make_prompt(&b, 2, 1, 0, 0);
	int rc;
	publish(x, &s, &root1, 0, &a, 0, 3, &rc);
	uint64_t lease;
	struct idx_loc locs[64];
	cr_assert_eq(match(x, &root1, &a, &lease, locs), 3);
	cr_expect_eq(publish(x, &s, &root1, 0, &b, 0, 1, &rc), 0);
	cr_expect_eq(rc, -ENOSPC, "everything is leased: refused, not evicted");
	cr_expect_eq(s.used, 3);
	idx_release(x, lease);
	cr_expect_eq(publish(x, &s, &root1, 0, &b, 0, 1, &rc), 1);
	cr_expect_eq(rc, 0);
	cr_expect_eq(s.used, 3, "the budget is never exceeded");
	/* The leaf went, not the root or the middle block. */
	cr_expect_eq(match(x, &root1, &a, &lease, locs), 2);
	idx_release(x, lease);
	struct idx_stats st;
	idx_get_stats(x, &st);
	cr_expect_eq(st.evictions, 1);
	idx_free(x);
}

Test(index, eviction_is_lru_among_leaves)
{
	struct store s;
	struct pd_index *x = index_with(&s, 3, 32);
	struct prompt p[4];
	int rc;
	for (uint32_t i = 0; i < 3; i++) {
		make_prompt(&p[i], i + 1, 1, 0, 0);
		publish(x, &s, &root1, 0, &p[i], 0, 1, &rc);
	}
	uint64_t lease;
	struct idx_loc locs[64];
	/* Use prompt 0 again: prompt 1 becomes the least recently used. */
	cr_assert_eq(match(x, &root1, &p[0], &lease, locs), 1);
	idx_release(x, lease);
	make_prompt(&p[3], 9, 1, 0, 0);
	cr_expect_eq(publish(x, &s, &root1, 0, &p[3], 0, 1, &rc), 1);
	cr_expect_eq(match(x, &root1, &p[1], &lease, locs), 0, "LRU block evicted");
	cr_expect_eq(match(x, &root1, &p[0], &lease, locs), 1);
	idx_release(x, lease);
	idx_free(x);
}

/* With one-byte keys, hundreds of prompts collide; none is ever served
 * another prompt's block. */
Test(index, tiny_hash_collisions_are_never_served)
{
	struct store s;
	struct pd_index *x = index_with(&s, 4000, 1);
	static struct prompt p[300];
	int rc;
	for (uint32_t i = 0; i < 300; i++) {
		/* Every third prompt shares its first block with prompt 0. */
		make_prompt(&p[i], i + 1, 3, 1, i % 3 == 0 ? 1 : 0);
		publish(x, &s, &root1, 0, &p[i], 0, 3, &rc);
		cr_assert(rc == 0 || rc == -EEXIST, "rc %d", rc);
	}
	struct idx_stats st;
	idx_get_stats(x, &st);
	cr_expect_gt(st.collisions, 100, "the tiny hash must collide (%lu)", (unsigned long)st.collisions);
	for (uint32_t i = 0; i < 300; i++) {
		uint64_t lease;
		struct idx_loc locs[64];
		uint32_t hit = match(x, &root1, &p[i], &lease, locs);
		for (uint32_t b = 0; b < hit; b++)
			cr_assert_eq(s.owner[locs[b].offset], p[i].tags[b],
				     "prompt %u block %u served another prompt's KV", i, b);
		cr_expect_geq(hit, i % 3 == 0 ? 1 : 0);
		if (lease)
			idx_release(x, lease);
	}
	idx_free(x);
}
