/* SPDX-License-Identifier: MIT */
/*
 * The prefix index: exact confirmation of hits, namespaces and roots,
 * dedup, leases against eviction, leaf-first LRU eviction under a budget,
 * and collisions from a deliberately tiny hash that are never served.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "index.h"

enum { B = 4 };

/* Memory several stores share: cap slots at most are resident. */
struct pool {
	int cap, used;
};

/* A store that records which prompt's block each slot holds. A slot freed
 * without a punch stays resident (charged) and is the next one taken. */
struct fake_store {
	struct pool *pool;
	int used, resident;
	uint8_t taken[4096];
	uint32_t owner[4096];      /* what fill() wrote: a tag of the block */
};

static struct pool one_pool;

static int st_alloc(void *ctx, struct idx_loc *loc)
{
	struct fake_store *s = ctx;
	if (s->resident)
		s->resident--;
	else if (s->pool->used == s->pool->cap)
		return -ENOSPC;
	else
		s->pool->used++;
	for (uint32_t i = 0; i < 4096; i++)
		if (!s->taken[i]) {
			s->taken[i] = 1;
			s->used++;
			*loc = (struct idx_loc){ 1, i };
			return 0;
		}
	return -ENOSPC;
}

static void st_free(void *ctx, struct idx_loc loc, bool punch)
{
	struct fake_store *s = ctx;
	cr_assert(s->taken[loc.offset], "double free of slot %lu", (unsigned long)loc.offset);
	s->taken[loc.offset] = 0;
	s->used--;
	if (punch)
		s->pool->used--;
	else
		s->resident++;
}

struct fill_ctx {
	struct fake_store *s;
	const uint32_t *tags;
};

static int fill(void *ctx, uint32_t i, struct idx_loc loc)
{
	struct fill_ctx *f = ctx;
	f->s->owner[loc.offset] = f->tags[i];
	return 0;
}

static const struct idx_limits unlimited = { UINT64_MAX, UINT64_MAX, UINT64_MAX, 0 };

/* An index over one store of `cap` slots; each slot costs 1 byte of the
 * limits. */
static struct idx *index_with(struct fake_store *s, int cap, int key_bytes)
{
	memset(s, 0, sizeof(*s));
	one_pool = (struct pool){ cap, 0 };
	s->pool = &one_pool;
	struct idx *x;
	cr_assert_eq(idx_new(B, key_bytes, &unlimited, &x), 0);
	return x;
}

/* The group of (namespace, root byte) on store s, model fp, its blocks
 * counting slot_bytes each. */
static struct idx_group *group_sized(struct idx *x, struct fake_store *s, uint32_t ns,
				     uint8_t root, uint8_t fp, uint64_t slot_bytes)
{
	struct idx_root r = { ns, { root } };
	uint8_t f[PD_FP_SIZE] = { fp };
	struct idx_store ops = { st_alloc, st_free, s, slot_bytes, NULL, slot_bytes, 0 };
	struct idx_group *g;
	cr_assert_eq(idx_group_get(x, &r, f, &ops, &g), 0);
	return g;
}

static struct idx_group *group(struct idx *x, struct fake_store *s, uint32_t ns, uint8_t root,
			       uint8_t fp)
{
	return group_sized(x, s, ns, root, fp, 1);
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

static uint32_t publish(struct idx *x, struct fake_store *s, struct idx_group *r, uint64_t lease,
			const struct prompt *p, uint32_t from, uint32_t n, int *rc)
{
	struct fill_ctx f = { s, p->tags + from };
	uint32_t stored, dedup;
	*rc = idx_publish(x, r, lease, p->hashes + from * 32, p->tokens + from * B, n, fill, &f, &stored,
			  &dedup);
	return stored;
}

static uint32_t match(struct idx *x, struct idx_group *r, const struct prompt *p, uint64_t *lease,
		      struct idx_loc *locs)
{
	uint32_t hit;
	cr_assert_eq(idx_match(x, r, p->hashes, p->tokens, p->n, lease, locs, &hit, NULL, NULL), 0);
	return hit;
}

/* Groups of the tests: namespace 1 with two roots, namespace 2. */
static struct idx_group *root1, *root1b, *root2;

static struct idx *start(struct fake_store *s, int cap, int key_bytes)
{
	struct idx *x = index_with(s, cap, key_bytes);
	root1 = group(x, s, 1, 1, 1);
	root1b = group(x, s, 1, 2, 1);
	root2 = group(x, s, 2, 1, 1);
	return x;
}

static void finish(struct idx *x)
{
	idx_group_put(x, root1);
	idx_group_put(x, root1b);
	idx_group_put(x, root2);
	idx_free(x);
}

Test(index, hits_are_confirmed_exactly)
{
	struct fake_store s;
	struct idx *x = start(&s, 100, 32);
	struct prompt a, b;
	make_prompt(&a, 1, 3, 0, 0);
	int rc;
	cr_assert_eq(publish(x, &s, root1, 0, &a, 0, 3, &rc), 3);
	cr_assert_eq(rc, 0);
	uint64_t lease;
	struct idx_loc locs[64];
	cr_expect_eq(match(x, root1, &a, &lease, locs), 3);
	for (int i = 0; i < 3; i++)
		cr_expect_eq(s.owner[locs[i].offset], a.tags[i], "block %d served from the right slot", i);
	cr_expect_eq(idx_release(x, lease), 0);
	cr_expect_eq(idx_release(x, lease), -ENOENT, "a lease ends once");
	/* The same hashes with one token changed in block 1: only block 0 hits. */
	b = a;
	b.tokens[B + 2]++;
	cr_expect_eq(match(x, root1, &b, &lease, locs), 1);
	idx_release(x, lease);
	/* Another namespace or another root (model, layout, salt) never hits. */
	cr_expect_eq(match(x, root2, &a, &lease, locs), 0);
	cr_expect_eq(lease, 0);
	cr_expect_eq(match(x, root1b, &a, &lease, locs), 0);
	/* Publishing the same blocks again is a dedup. */
	uint32_t stored, dedup;
	struct fill_ctx f = { &s, a.tags };
	cr_expect_eq(idx_publish(x, root1, 0, a.hashes, a.tokens, 3, fill, &f, &stored, &dedup), 0);
	cr_expect_eq(stored, 0);
	cr_expect_eq(dedup, 3);
	struct idx_stats st;
	idx_get_stats(x, &st);
	cr_expect_eq(st.blocks, 3);
	cr_expect_eq(st.dedup, 3);
	finish(x);
	cr_expect_eq(s.used, 0, "every slot returned to the store");
}

Test(index, publish_continues_a_lease)
{
	struct fake_store s;
	struct idx *x = start(&s, 100, 32);
	struct prompt a, b;
	make_prompt(&a, 1, 2, 0, 0);
	make_prompt(&b, 2, 4, 1, 2); /* shares a's two blocks, then its own */
	int rc;
	publish(x, &s, root1, 0, &a, 0, 2, &rc);
	uint64_t lease;
	struct idx_loc locs[64];
	cr_assert_eq(match(x, root1, &b, &lease, locs), 2);
	cr_expect_eq(publish(x, &s, root1, lease, &b, 2, 2, &rc), 2);
	cr_expect_eq(rc, 0);
	idx_release(x, lease);
	cr_expect_eq(match(x, root1, &b, &lease, locs), 4);
	cr_expect_eq(s.owner[locs[3].offset], b.tags[3]);
	idx_release(x, lease);
	uint32_t stored, dedup;
	struct fill_ctx f = { &s, b.tags };
	cr_expect_eq(idx_publish(x, root1, 12345, b.hashes, b.tokens, 1, fill, &f, &stored, &dedup),
		     -ENOENT);
	finish(x);
}

Test(index, leases_block_eviction_and_budget_holds)
{
	struct fake_store s;
	struct idx *x = start(&s, 3, 32);
	struct prompt a, b;
	make_prompt(&a, 1, 3, 0, 0);
	make_prompt(&b, 2, 1, 0, 0);
	int rc;
	publish(x, &s, root1, 0, &a, 0, 3, &rc);
	uint64_t lease;
	struct idx_loc locs[64];
	cr_assert_eq(match(x, root1, &a, &lease, locs), 3);
	cr_expect_eq(publish(x, &s, root1, 0, &b, 0, 1, &rc), 0);
	cr_expect_eq(rc, -ENOSPC, "everything is leased: refused, not evicted");
	cr_expect_eq(s.used, 3);
	idx_release(x, lease);
	cr_expect_eq(publish(x, &s, root1, 0, &b, 0, 1, &rc), 1);
	cr_expect_eq(rc, 0);
	cr_expect_eq(s.used, 3, "the budget is never exceeded");
	/* The leaf went, not the root or the middle block. */
	cr_expect_eq(match(x, root1, &a, &lease, locs), 2);
	idx_release(x, lease);
	struct idx_stats st;
	idx_get_stats(x, &st);
	cr_expect_eq(st.evictions, 1);
	finish(x);
}

Test(index, eviction_is_lru_among_leaves)
{
	struct fake_store s;
	struct idx *x = start(&s, 3, 32);
	struct prompt p[4];
	int rc;
	for (uint32_t i = 0; i < 3; i++) {
		make_prompt(&p[i], i + 1, 1, 0, 0);
		publish(x, &s, root1, 0, &p[i], 0, 1, &rc);
	}
	uint64_t lease;
	struct idx_loc locs[64];
	/* Use prompt 0 again: prompt 1 becomes the least recently used. */
	cr_assert_eq(match(x, root1, &p[0], &lease, locs), 1);
	idx_release(x, lease);
	make_prompt(&p[3], 9, 1, 0, 0);
	cr_expect_eq(publish(x, &s, root1, 0, &p[3], 0, 1, &rc), 1);
	cr_expect_eq(match(x, root1, &p[1], &lease, locs), 0, "LRU block evicted");
	cr_expect_eq(match(x, root1, &p[0], &lease, locs), 1);
	idx_release(x, lease);
	finish(x);
}

/* With one-byte keys, hundreds of prompts collide; none is ever served
 * another prompt's block. */
Test(index, tiny_hash_collisions_are_never_served)
{
	struct fake_store s;
	struct idx *x = start(&s, 4000, 1);
	static struct prompt p[300];
	int rc;
	for (uint32_t i = 0; i < 300; i++) {
		/* Every third prompt shares its first block with prompt 0. */
		make_prompt(&p[i], i + 1, 3, 1, i % 3 == 0 ? 1 : 0);
		publish(x, &s, root1, 0, &p[i], 0, 3, &rc);
		cr_assert(rc == 0 || rc == -EEXIST, "rc %d", rc);
	}
	struct idx_stats st;
	idx_get_stats(x, &st);
	cr_expect_gt(st.collisions, 100, "the tiny hash must collide (%lu)", (unsigned long)st.collisions);
	for (uint32_t i = 0; i < 300; i++) {
		uint64_t lease;
		struct idx_loc locs[64];
		uint32_t hit = match(x, root1, &p[i], &lease, locs);
		for (uint32_t b = 0; b < hit; b++)
			cr_assert_eq(s.owner[locs[b].offset], p[i].tags[b],
				     "prompt %u block %u served another prompt's KV", i, b);
		cr_expect_geq(hit, i % 3 == 0 ? 1 : 0);
		if (lease)
			idx_release(x, lease);
	}
	finish(x);
}

/* ==== One budget for every user and model ==== */

static struct idx *index_limits(int cap, uint64_t quota, uint64_t pin_max)
{
	one_pool = (struct pool){ cap, 0 };
	struct idx_limits lim = { quota, pin_max, (uint64_t)cap, 0 };
	struct idx *x;
	cr_assert_eq(idx_new(B, 32, &lim, &x), 0);
	return x;
}

static void store_on(struct fake_store *s)
{
	memset(s, 0, sizeof(*s));
	s->pool = &one_pool;
}

Test(index, eviction_chooses_across_groups_and_gives_memory_back)
{
	struct fake_store sa, sb;
	struct idx *x = index_limits(4, UINT64_MAX, UINT64_MAX);
	store_on(&sa);
	store_on(&sb);
	struct idx_group *ga = group(x, &sa, 1, 1, 1), *gb = group(x, &sb, 2, 1, 2);
	struct prompt p[6];
	int rc;
	for (uint32_t i = 0; i < 4; i++) {
		make_prompt(&p[i], i + 1, 1, 0, 0);
		cr_assert_eq(publish(x, &sa, ga, 0, &p[i], 0, 1, &rc), 1);
	}
	/* Another user's other model: A's oldest blocks make room. */
	make_prompt(&p[4], 50, 2, 0, 0);
	cr_expect_eq(publish(x, &sb, gb, 0, &p[4], 0, 2, &rc), 2);
	cr_expect_eq(rc, 0);
	cr_expect_eq(one_pool.used, 4, "the budget holds");
	cr_expect_eq(sa.resident, 0, "a victim of another store gives its memory back");
	uint64_t lease;
	struct idx_loc locs[64];
	cr_expect_eq(match(x, ga, &p[0], &lease, locs), 0, "the oldest went");
	cr_expect_eq(match(x, ga, &p[1], &lease, locs), 0);
	cr_expect_eq(match(x, ga, &p[2], &lease, locs), 1);
	idx_release(x, lease);
	struct pd_usage *rows;
	uint32_t n;
	cr_assert_eq(idx_usage(x, &rows, &n), 0);
	cr_assert_eq(n, 2);
	for (uint32_t i = 0; i < n; i++) {
		cr_expect_eq(rows[i].evictions, rows[i].uid == 1 ? 2 : 0);
		cr_expect_eq(rows[i].blocks, 2);
		cr_expect_eq(rows[i].fp[0], rows[i].uid);
	}
	free(rows);
	idx_group_put(x, ga);
	idx_group_put(x, gb);
	idx_free(x);
	/* Every slot back to its store, unpunched: the stores' arenas go
	 * next, with all their pages at once. */
	cr_expect_eq(sa.used + sb.used, 0, "every slot freed");
	cr_expect_eq(sa.resident + sb.resident, 4, "none punched one by one");
}

Test(index, a_user_at_quota_gives_up_their_own_blocks_and_never_another_users)
{
	struct fake_store s1, s2;
	struct idx *x = index_limits(4, 2, UINT64_MAX);
	store_on(&s1);
	store_on(&s2);
	struct idx_group *g1 = group(x, &s1, 1, 1, 1), *g2 = group(x, &s2, 2, 1, 1);
	struct prompt p[6];
	int rc;
	for (uint32_t i = 0; i < 3; i++) {
		make_prompt(&p[i], i + 1, 1, 0, 0);
		cr_assert_eq(publish(x, &s1, g1, 0, &p[i], 0, 1, &rc), 1);
	}
	cr_expect_eq(s1.used, 2, "user 1 holds its quota, no more");
	make_prompt(&p[3], 40, 2, 0, 0);
	cr_expect_eq(publish(x, &s2, g2, 0, &p[3], 0, 2, &rc), 2);
	cr_expect_eq(s1.used, 2, "user 2 took free memory, nothing of user 1's");
	/* User 1 leases everything it has: its next block is refused. */
	uint64_t l1, l2;
	struct idx_loc locs[64];
	cr_assert_eq(match(x, g1, &p[1], &l1, locs), 1);
	cr_assert_eq(match(x, g1, &p[2], &l2, locs), 1);
	make_prompt(&p[4], 60, 1, 0, 0);
	cr_expect_eq(publish(x, &s1, g1, 0, &p[4], 0, 1, &rc), 0);
	cr_expect_eq(rc, -EDQUOT);
	cr_expect_eq(s2.used, 2, "user 2's blocks are untouched");
	struct idx_stats st;
	idx_get_stats(x, &st);
	cr_expect_eq(st.refused_blocks, 1);
	idx_release(x, l1);
	idx_release(x, l2);
	idx_group_put(x, g1);
	idx_group_put(x, g2);
	idx_free(x);
}

static struct pd_id id_of(const struct prompt *p, uint32_t ns)
{
	struct pd_id id = { .uid = ns };
	memcpy(id.key, p->hashes + (p->n - 1) * 32, 32);
	return id;
}

Test(index, pinned_chains_survive_a_flood_and_pins_are_bounded)
{
	struct fake_store s;
	struct idx *x = index_limits(4, UINT64_MAX, 2);
	store_on(&s);
	struct idx_group *g = group(x, &s, 1, 1, 1);
	struct prompt sys, other, flood;
	int rc;
	make_prompt(&sys, 7, 2, 0, 0);
	make_prompt(&other, 8, 1, 0, 0);
	publish(x, &s, g, 0, &sys, 0, 2, &rc);
	publish(x, &s, g, 0, &other, 0, 1, &rc);
	struct pd_id id = id_of(&sys, 1), oid = id_of(&other, 1), none = { .uid = 9 };
	uint64_t pinned;
	cr_assert_eq(idx_pin(x, &id, 0, &pinned), 0);
	cr_expect_eq(pinned, 2);
	cr_expect_eq(idx_pin(x, &oid, 0, &pinned), -E2BIG, "past pin_max");
	cr_expect_eq(pinned, 3);
	cr_expect_eq(idx_pin(x, &none, 0, &pinned), -ENOENT);
	for (uint32_t i = 0; i < 20; i++) {
		make_prompt(&flood, 100 + i, 1, 0, 0);
		cr_expect_eq(publish(x, &s, g, 0, &flood, 0, 1, &rc), 1);
	}
	uint64_t lease;
	struct idx_loc locs[64];
	cr_expect_eq(match(x, g, &sys, &lease, locs), 2, "the pinned chain survived");
	idx_release(x, lease);
	struct pd_evict all = { .by = PD_EVICT_ALL };
	struct pd_evict_reply r;
	cr_assert_eq(idx_evict(x, &all, &r), 0);
	cr_expect_eq(r.blocks, 2, "the two flood blocks left");
	cr_expect_eq(r.kept_pinned, 2);
	cr_expect_eq(idx_unpin(x, &id), 0);
	cr_expect_eq(idx_unpin(x, &id), -ENOENT, "unpinned once");
	cr_assert_eq(idx_evict(x, &all, &r), 0);
	cr_expect_eq(r.blocks, 2);
	idx_group_put(x, g);
	idx_free(x);
}

/* What a user's admin requests reach (daemon/admin.c): the pins of one
 * namespace within a bound (its quota), and eviction of one namespace. */
Test(index, a_namespace_pins_within_its_bound_and_evicts_only_its_own)
{
	struct fake_store s;
	struct idx *x = index_limits(100, UINT64_MAX, 50);
	store_on(&s);
	struct idx_group *g1 = group(x, &s, 1, 1, 1), *g2 = group(x, &s, 2, 1, 1);
	struct prompt a, b, c, d;
	int rc;
	make_prompt(&a, 1, 3, 0, 0);
	make_prompt(&b, 2, 2, 0, 0);
	make_prompt(&c, 3, 2, 0, 0);
	make_prompt(&d, 4, 1, 0, 0);
	publish(x, &s, g1, 0, &a, 0, 3, &rc);
	publish(x, &s, g1, 0, &b, 0, 2, &rc);
	publish(x, &s, g2, 0, &c, 0, 2, &rc);
	publish(x, &s, g2, 0, &d, 0, 1, &rc);
	struct pd_id ia = id_of(&a, 1), ib = id_of(&b, 1), ic = id_of(&c, 2);
	uint64_t pinned;
	cr_expect_eq(idx_pin_ns(x, &ia, 0, 4, &pinned), 0, "3 blocks within 4");
	cr_expect_eq(idx_pin_ns(x, &ib, 0, 4, &pinned), -EDQUOT, "namespace 1's pins past 4");
	cr_expect_eq(pinned, 5, "what they would hold");
	cr_expect_eq(idx_pin_ns(x, &ic, 0, 4, &pinned), 0, "namespace 2's pins are its own");
	cr_expect_eq(pinned, 2, "bounded, it is told its namespace's pins, not every pin (3 + 2)");
	cr_expect_eq(idx_pin_ns(x, &ib, 0, UINT64_MAX, &pinned), 0, "unbounded (an admin's)");
	/* Namespace 2 evicts all it may: d, not namespace 1's b. */
	struct pd_evict all = { .by = PD_EVICT_ALL };
	struct pd_evict_reply r;
	uint32_t ns2 = 2;
	cr_expect_eq(idx_unpin(x, &ib), 0);
	cr_assert_eq(idx_evict_ns(x, &all, &ns2, &r), 0);
	cr_expect_eq(r.blocks, 1, "d's block only");
	cr_expect_eq(r.kept_pinned, 2, "c's, pinned; namespace 1's are not counted");
	uint64_t lease;
	struct idx_loc locs[64];
	cr_expect_eq(match(x, g1, &b, &lease, locs), 2, "b stays");
	idx_release(x, lease);
	cr_expect_eq(match(x, g2, &d, &lease, locs), 0, "d went");
	idx_group_put(x, g1);
	idx_group_put(x, g2);
	idx_free(x);
}

/* A user's STATS (daemon/admin.c) sums their usage rows: another user's
 * many models must not crowd theirs out of the rows a reply carries. */
Test(index, a_view_of_usage_rows_is_never_crowded_out_by_others)
{
	struct fake_store s;
	struct idx *x = index_limits(8, UINT64_MAX, UINT64_MAX);
	store_on(&s);
	struct idx_group *mine = group(x, &s, 1, 1, 1);
	enum { OTHERS = PD_MAX_ROWS + 1 };
	struct idx_group **theirs = calloc(OTHERS, sizeof(*theirs));
	struct idx_store ops = { st_alloc, st_free, &s, 1, NULL, 1, 0 };
	for (uint32_t i = 0; i < OTHERS; i++) {
		struct idx_root r = { 2, { (uint8_t)i, (uint8_t)(i >> 8), 7 } };
		uint8_t f[PD_FP_SIZE] = { (uint8_t)i, (uint8_t)(i >> 8), 7 };
		cr_assert_eq(idx_group_get(x, &r, f, &ops, &theirs[i]), 0);
	}
	struct idx_view view = { { 1, 0 }, 1 };
	struct pd_usage *rows;
	uint32_t n;
	cr_assert_eq(idx_usage_in(x, &view, &rows, &n), 0);
	cr_expect_eq(n, 1, "the view's one row, not %u", n);
	cr_expect(n && rows[0].uid == 1, "namespace 1's row");
	free(rows);
	cr_assert_eq(idx_usage(x, &rows, &n), 0);
	cr_expect_eq(n, PD_MAX_ROWS, "unfiltered, rows stop at what a reply carries");
	free(rows);
	for (uint32_t i = 0; i < OTHERS; i++)
		idx_group_put(x, theirs[i]);
	free(theirs);
	idx_group_put(x, mine);
	idx_free(x);
}

/* A user who lists with cursors of their choosing sees where the scan of
 * the table stops; were the bucket of a key known from the key, that
 * would tell whether another user's chain (of a prompt they guess) is
 * cached. Two indexes file the same chains in different orders. */
Test(index, where_a_chain_lands_in_the_table_is_not_known_from_its_key)
{
	enum { N = 16 };
	uint8_t order[2][N];
	static struct prompt p[N];
	for (int run = 0; run < 2; run++) {
		struct fake_store s;
		struct idx *x = index_limits(64, UINT64_MAX, UINT64_MAX);
		store_on(&s);
		struct idx_group *g = group(x, &s, 1, 1, 1);
		int rc;
		for (uint32_t i = 0; i < N; i++) {
			make_prompt(&p[i], i + 1, 1, 0, 0);
			cr_assert_eq(publish(x, &s, g, 0, &p[i], 0, 1, &rc), 1);
		}
		struct pd_list req = { .max_rows = N };
		struct pd_chain_row rows[N];
		uint32_t n;
		uint64_t next;
		idx_list(x, &req, rows, &n, &next);
		cr_assert_eq(n, N);
		for (uint32_t r = 0; r < N; r++)
			for (uint8_t i = 0; i < N; i++)
				if (!memcmp(rows[r].id.key, p[i].hashes, 32))
					order[run][r] = i;
		idx_group_put(x, g);
		idx_free(x);
	}
	/* Equal by chance once in 16! runs. */
	cr_expect(memcmp(order[0], order[1], N), "the table's order is the same in two indexes");
}

Test(index, a_pin_with_a_ttl_ends_by_itself)
{
	struct fake_store s;
	struct idx *x = index_limits(8, UINT64_MAX, UINT64_MAX);
	store_on(&s);
	struct idx_group *g = group(x, &s, 1, 1, 1);
	struct prompt p;
	int rc;
	make_prompt(&p, 3, 2, 0, 0);
	publish(x, &s, g, 0, &p, 0, 2, &rc);
	struct pd_id id = id_of(&p, 1);
	uint64_t pinned;
	cr_assert_eq(idx_pin(x, &id, 1, &pinned), 0);
	struct pd_list req = { .max_rows = 8 };
	struct pd_chain_row row;
	uint32_t n;
	uint64_t next;
	idx_list(x, &req, &row, &n, &next);
	cr_assert_eq(n, 1);
	cr_expect(row.flags & PD_CHAIN_PINNED);
	cr_expect_leq(row.pin_ttl_s, 1);
	struct idx_stats st;
	usleep(2100 * 1000);
	idx_expire(x);
	idx_get_stats(x, &st);
	cr_expect_eq(st.pins, 0);
	cr_expect_eq(st.pins_expired, 1);
	cr_expect_eq(st.pinned_bytes, 0);
	idx_list(x, &req, &row, &n, &next);
	cr_expect_not(row.flags & PD_CHAIN_PINNED);
	idx_group_put(x, g);
	idx_free(x);
}

Test(index, a_pinned_chain_stays_listed_when_a_longer_one_continues_it)
{
	struct fake_store s;
	struct idx *x = index_limits(8, UINT64_MAX, UINT64_MAX);
	store_on(&s);
	struct idx_group *g = group(x, &s, 1, 1, 1);
	struct prompt sys, longer;
	int rc;
	make_prompt(&sys, 3, 2, 0, 0);
	make_prompt(&longer, 4, 4, 3, 2); /* sys's two blocks, then two more */
	publish(x, &s, g, 0, &sys, 0, 2, &rc);
	struct pd_id id = id_of(&sys, 1);
	uint64_t pinned;
	cr_assert_eq(idx_pin(x, &id, 0, &pinned), 0);
	cr_assert_eq(publish(x, &s, g, 0, &longer, 0, 4, &rc), 2, "two blocks added to the pin");
	struct pd_list req = { .max_rows = 8 };
	struct pd_chain_row rows[8];
	uint32_t n;
	uint64_t next;
	idx_list(x, &req, rows, &n, &next);
	cr_assert_eq(n, 2, "the longer chain and the pin");
	int saw_pin = 0, saw_leaf = 0;
	for (uint32_t r = 0; r < n; r++) {
		if (!memcmp(rows[r].id.key, sys.hashes + 32, 32)) {
			saw_pin = 1;
			cr_expect_eq(rows[r].blocks, 2);
			cr_expect(rows[r].flags & PD_CHAIN_PINNED);
		} else if (!memcmp(rows[r].id.key, longer.hashes + 3 * 32, 32)) {
			saw_leaf = 1;
			cr_expect_eq(rows[r].blocks, 4);
			cr_expect_not(rows[r].flags & PD_CHAIN_PINNED, "only its prefix is");
		}
	}
	cr_expect(saw_pin && saw_leaf);
	cr_expect_eq(idx_unpin(x, &id), 0);
	idx_list(x, &req, rows, &n, &next);
	cr_expect_eq(n, 1, "unpinned, the prefix is part of the longer chain again");
	idx_group_put(x, g);
	idx_free(x);
}

Test(index, a_chain_leaves_as_one_unit_of_age)
{
	struct fake_store s;
	struct idx *x = index_limits(5, UINT64_MAX, UINT64_MAX);
	store_on(&s);
	struct idx_group *g = group(x, &s, 1, 1, 1);
	struct prompt old, mid, fresh[3];
	int rc;
	make_prompt(&old, 1, 3, 0, 0);
	make_prompt(&mid, 2, 1, 0, 0);
	publish(x, &s, g, 0, &old, 0, 3, &rc);
	publish(x, &s, g, 0, &mid, 0, 1, &rc);
	for (uint32_t i = 0; i < 3; i++) {
		make_prompt(&fresh[i], 10 + i, 1, 0, 0);
		publish(x, &s, g, 0, &fresh[i], 0, 1, &rc);
	}
	/* Three new blocks needed room for two: the old chain's leaf, then
	 * its middle, not the newer single block. */
	uint64_t lease;
	struct idx_loc locs[64];
	cr_expect_eq(match(x, g, &old, &lease, locs), 1);
	if (lease)
		idx_release(x, lease);
	cr_expect_eq(match(x, g, &mid, &lease, locs), 1);
	idx_release(x, lease);
	idx_group_put(x, g);
	idx_free(x);
}

Test(index, listing_pages_through_every_leaf_once)
{
	struct fake_store s;
	struct idx *x = index_limits(400, UINT64_MAX, UINT64_MAX);
	store_on(&s);
	struct idx_group *g = group(x, &s, 1, 1, 1), *h = group(x, &s, 2, 1, 2);
	static struct prompt p[50];
	int rc;
	for (uint32_t i = 0; i < 50; i++) {
		make_prompt(&p[i], i + 1, 1 + i % 4, 0, 0);
		publish(x, &s, i % 2 ? h : g, 0, &p[i], 0, p[i].n, &rc);
	}
	int seen[50] = { 0 };
	struct pd_list req = { .max_rows = 7 };
	struct pd_chain_row rows[7];
	uint32_t n, pages = 0;
	do {
		uint64_t next;
		idx_list(x, &req, rows, &n, &next);
		for (uint32_t r = 0; r < n; r++)
			for (uint32_t i = 0; i < 50; i++)
				if (!memcmp(rows[r].id.key, p[i].hashes + (p[i].n - 1) * 32, 32)) {
					seen[i]++;
					cr_expect_eq(rows[r].blocks, p[i].n);
					cr_expect_eq(rows[r].tokens, p[i].n * B);
					cr_expect_eq(rows[r].id.uid, i % 2 ? 2u : 1u);
					cr_expect_eq(rows[r].fp[0], i % 2 ? 2 : 1);
				}
		req.cursor = next;
		pages++;
	} while (req.cursor);
	for (uint32_t i = 0; i < 50; i++)
		cr_expect_eq(seen[i], 1, "chain %u listed %d times", i, seen[i]);
	cr_expect_geq(pages, 8);
	/* Filtered by user. */
	req = (struct pd_list){ .max_rows = 7, .flags = PD_LIST_USER, .uid = 2 };
	uint32_t total = 0;
	do {
		uint64_t next;
		idx_list(x, &req, rows, &n, &next);
		for (uint32_t r = 0; r < n; r++)
			cr_expect_eq(rows[r].id.uid, 2);
		total += n;
		req.cursor = next;
	} while (req.cursor);
	cr_expect_eq(total, 25);
	idx_group_put(x, g);
	idx_group_put(x, h);
	idx_free(x);
}

Test(index, evict_by_each_selector_keeps_leased_and_pinned_blocks)
{
	struct fake_store s;
	struct idx *x = index_limits(100, UINT64_MAX, UINT64_MAX);
	store_on(&s);
	struct idx_group *a1 = group(x, &s, 1, 1, 1), *b1 = group(x, &s, 1, 2, 2),
			 *a2 = group(x, &s, 2, 1, 1);
	struct prompt pa, pb, pc, pd2;
	int rc;
	make_prompt(&pa, 1, 3, 0, 0);
	make_prompt(&pb, 2, 2, 0, 0);
	make_prompt(&pc, 3, 2, 0, 0);
	make_prompt(&pd2, 4, 4, 1, 3); /* continues pa's three blocks */
	publish(x, &s, a1, 0, &pa, 0, 3, &rc);
	publish(x, &s, a1, 0, &pd2, 0, 4, &rc);
	publish(x, &s, b1, 0, &pb, 0, 2, &rc);
	publish(x, &s, a2, 0, &pc, 0, 2, &rc);
	uint64_t lease;
	struct idx_loc locs[64];
	struct pd_evict_reply r;
	/* By id: pa's chain is continued by pd2's, so nothing of it goes. */
	struct pd_evict sel = { .by = PD_EVICT_ID, .uid = 1 };
	memcpy(sel.key, pa.hashes + 2 * 32, 32);
	cr_assert_eq(idx_evict(x, &sel, &r), 0);
	cr_expect_eq(r.blocks, 0);
	cr_expect_eq(r.kept_parent, 3);
	memcpy(sel.key, pd2.hashes + 3 * 32, 32);
	cr_assert_eq(idx_evict(x, &sel, &r), 0);
	cr_expect_eq(r.blocks, 4, "pd2's last block, then pa's three");
	sel.uid = 2;
	cr_expect_eq(idx_evict(x, &sel, &r), -ENOENT, "another user's namespace");
	/* By model, with a lease: the leased blocks stay. */
	cr_assert_eq(match(x, a2, &pc, &lease, locs), 2);
	sel = (struct pd_evict){ .by = PD_EVICT_MODEL, .key = { 1 } };
	cr_assert_eq(idx_evict(x, &sel, &r), 0);
	cr_expect_eq(r.blocks, 0);
	cr_expect_eq(r.kept_leased, 2);
	idx_release(x, lease);
	/* By user: only user 1's model 2. */
	sel = (struct pd_evict){ .by = PD_EVICT_USER, .uid = 1 };
	cr_assert_eq(idx_evict(x, &sel, &r), 0);
	cr_expect_eq(r.blocks, 2);
	cr_expect_eq(match(x, a2, &pc, &lease, locs), 2, "user 2 kept theirs");
	idx_release(x, lease);
	/* By idle time: nothing is 100 s idle; everything is 0 s idle. */
	sel = (struct pd_evict){ .by = PD_EVICT_IDLE, .idle_s = 100 };
	cr_assert_eq(idx_evict(x, &sel, &r), 0);
	cr_expect_eq(r.blocks, 0);
	sel.idle_s = 0;
	cr_assert_eq(idx_evict(x, &sel, &r), 0);
	cr_expect_eq(r.blocks, 2);
	struct idx_stats st;
	idx_get_stats(x, &st);
	cr_expect_eq(st.blocks, 0);
	cr_expect_eq(st.admin_evictions, 8);
	cr_expect_eq(s.pool->used, 0, "every evicted block gave its memory back");
	idx_group_put(x, a1);
	idx_group_put(x, b1);
	idx_group_put(x, a2);
	idx_free(x);
}

/* An admin eviction lets MATCHes have the lock every few MiB it punches:
 * a chain longer than a round goes over several, whole. */
Test(index, a_chain_longer_than_a_round_is_evicted_whole)
{
	struct fake_store s;
	struct idx *x = index_limits(200, UINT64_MAX, UINT64_MAX);
	store_on(&s);
	struct idx_group *g = group_sized(x, &s, 1, 1, 1, 1 << 20);
	struct prompt a, b;
	int rc;
	make_prompt(&a, 1, 40, 0, 0);
	make_prompt(&b, 2, 50, 1, 30); /* shares a's first 30 blocks */
	publish(x, &s, g, 0, &a, 0, 40, &rc);
	uint64_t lease;
	struct idx_loc locs[64];
	cr_assert_eq(match(x, g, &b, &lease, locs), 30);
	publish(x, &s, g, lease, &b, 30, 20, &rc);
	idx_release(x, lease);
	struct pd_evict sel = { .by = PD_EVICT_ID, .uid = 1 };
	memcpy(sel.key, a.hashes + 39 * 32, 32);
	struct pd_evict_reply r;
	cr_assert_eq(idx_evict(x, &sel, &r), 0);
	cr_expect_eq(r.blocks, 10, "a's own ten blocks, over three rounds of four");
	cr_expect_eq(r.kept_parent, 30, "the blocks b continues stay");
	cr_expect_eq(match(x, g, &b, &lease, locs), 50);
	idx_release(x, lease);
	sel = (struct pd_evict){ .by = PD_EVICT_ALL };
	cr_assert_eq(idx_evict(x, &sel, &r), 0);
	cr_expect_eq(r.blocks, 50);
	cr_expect_eq(r.bytes, 50ull << 20);
	cr_expect_eq(s.used, 0);
	idx_group_put(x, g);
	idx_free(x);
}

/* ==== With a disk tier ====
 * The tier is the test: it takes blocks to write (idx_spill_take), says
 * how each write went (idx_spilled), and reads blocks back (idx_match's
 * fetch list, then idx_restored); records cost 1 byte of the disk budget. */

static uint8_t dropped[64][IDX_HASH_BYTES];
static int ndropped, woken;
static atomic_int wakes; /* woken, read by another thread than the index's */

static void on_drop(void *ctx, uint32_t ns, const uint8_t *hash)
{
	(void)ctx;
	(void)ns;
	cr_assert_lt(ndropped, 64);
	memcpy(dropped[ndropped++], hash, IDX_HASH_BYTES);
}

static void on_wake(void *ctx)
{
	(void)ctx;
	woken++;
	atomic_fetch_add(&wakes, 1);
}

static struct idx *tiered(struct fake_store *s, int cap, uint64_t disk_budget, struct idx_group **g)
{
	memset(s, 0, sizeof(*s));
	one_pool = (struct pool){ cap, 0 };
	s->pool = &one_pool;
	struct idx_limits lim = { UINT64_MAX, UINT64_MAX, UINT64_MAX, disk_budget };
	struct idx *x;
	cr_assert_eq(idx_new(B, 32, &lim, &x), 0);
	struct idx_tier t = { on_drop, on_wake, NULL, false };
	idx_set_tier(x, &t);
	ndropped = woken = 0;
	struct idx_root r = { 1, { 1 } };
	uint8_t f[PD_FP_SIZE] = { 1 };
	struct idx_store ops = { st_alloc, st_free, s, 1, NULL, 1, 1 };
	cr_assert_eq(idx_group_get(x, &r, f, &ops, g), 0);
	return x;
}

/* Writes every block waiting, each write ending with rc. */
static uint32_t write_all(struct idx *x, int rc)
{
	struct idx_block b[64];
	uint32_t n = idx_spill_take(x, b, 64, UINT64_MAX);
	for (uint32_t i = 0; i < n; i++) {
		b[i].sum = 1000 + i;
		idx_spilled(x, &b[i], rc);
	}
	return n;
}

/* MATCH with restores; ok[i] for the i-th block read back. */
static uint32_t match_fetch(struct idx *x, struct idx_group *g, const struct prompt *p,
			    const int *ok, uint32_t *nfetch, uint64_t *lease)
{
	struct idx_loc locs[64];
	struct idx_block fetch[64];
	uint32_t hit;
	cr_assert_eq(idx_match(x, g, p->hashes, p->tokens, p->n, lease, locs, &hit, fetch, nfetch), 0);
	for (uint32_t i = 0; i < *nfetch; i++)
		cr_expect_eq(fetch[i].pos, hit - *nfetch + i, "restores are the run's last blocks here");
	if (*nfetch)
		idx_restored(x, lease, &hit, fetch, *nfetch, ok);
	return hit;
}

static int hash_dropped(const struct prompt *p, uint32_t b)
{
	for (int i = 0; i < ndropped; i++)
		if (!memcmp(dropped[i], p->hashes + b * 32, IDX_HASH_BYTES))
			return 1;
	return 0;
}

Test(index, written_blocks_leave_memory_for_disk_and_come_back)
{
	struct fake_store s;
	struct idx_group *g;
	struct idx_loc locs[64];
	struct idx *x = tiered(&s, 4, 100, &g);
	struct prompt a, b;
	make_prompt(&a, 1, 4, 0, 0);
	make_prompt(&b, 2, 4, 0, 0);
	int rc;
	cr_assert_eq(publish(x, &s, g, 0, &a, 0, 4, &rc), 4);
	cr_expect_gt(woken, 0, "the tier is told there is work");
	cr_expect_eq(idx_dirty(x), 4);
	cr_expect_eq(write_all(x, 0), 4);
	struct idx_stats st;
	idx_get_stats(x, &st);
	cr_expect_eq(st.disk_blocks, 4);
	cr_expect_eq(st.disk_bytes, 4);
	cr_expect_eq(st.spills, 4);
	/* B takes memory: A's blocks keep their records. */
	cr_assert_eq(publish(x, &s, g, 0, &b, 0, 4, &rc), 4);
	idx_get_stats(x, &st);
	cr_expect_eq(st.blocks, 4);
	cr_expect_eq(st.disk_blocks, 4, "A is on disk only");
	uint64_t lease;
	uint32_t nfetch;
	cr_expect_eq(match(x, g, &a, &lease, locs), 0, "without restores, a miss");
	int ok[4] = { 0 };
	cr_expect_eq(match_fetch(x, g, &a, ok, &nfetch, &lease), 0,
		     "B, not yet written, is not dropped to make room for a restore");
	idx_get_stats(x, &st);
	cr_expect_eq(st.unwritten_evictions, 0);
	cr_expect_eq(write_all(x, 0), 4);
	cr_expect_eq(match_fetch(x, g, &a, ok, &nfetch, &lease), 4);
	cr_expect_eq(nfetch, 4);
	idx_get_stats(x, &st);
	cr_expect_eq(st.restores, 4);
	cr_expect_eq(st.blocks, 4, "B, written now, made room for them");
	cr_expect_eq(idx_release(x, lease), 0);
	cr_expect_eq(match_fetch(x, g, &a, ok, &nfetch, &lease), 4);
	cr_expect_eq(nfetch, 0, "in memory now");
	cr_expect_eq(idx_release(x, lease), 0);
	idx_group_put(x, g);
	idx_free(x);
}

Test(index, with_a_tier_written_blocks_leave_memory_before_unwritten_ones)
{
	struct fake_store s;
	struct idx_group *g;
	struct idx_loc locs[64];
	struct idx *x = tiered(&s, 4, 100, &g);
	struct prompt a, b, c;
	make_prompt(&a, 1, 2, 0, 0);
	make_prompt(&b, 2, 2, 0, 0);
	make_prompt(&c, 3, 2, 0, 0);
	int rc;
	uint64_t lease;
	cr_assert_eq(publish(x, &s, g, 0, &a, 0, 2, &rc), 2);
	cr_assert_eq(write_all(x, 0), 2);
	cr_assert_eq(publish(x, &s, g, 0, &b, 0, 2, &rc), 2); /* not written */
	cr_assert_eq(match(x, g, &a, &lease, locs), 2);       /* A used after B */
	idx_release(x, lease);
	/* B is the least recently used, but has no record: A goes. */
	cr_assert_eq(publish(x, &s, g, 0, &c, 0, 2, &rc), 2);
	struct idx_stats st;
	idx_get_stats(x, &st);
	cr_expect_eq(st.unwritten_evictions, 0);
	cr_expect_eq(match(x, g, &b, &lease, locs), 2, "B is still in memory");
	idx_release(x, lease);
	cr_expect_eq(match(x, g, &a, &lease, locs), 0, "A is on disk only");
	cr_expect_eq(st.disk_blocks, 2);
	idx_group_put(x, g);
	idx_free(x);
}

struct publisher {
	struct idx *x;
	struct fake_store *s;
	struct idx_group *g;
	const struct prompt *p;
	uint32_t stored;
	int rc;
};

static void *publish_thread(void *arg)
{
	struct publisher *w = arg;
	w->stored = publish(w->x, w->s, w->g, 0, w->p, 0, w->p->n, &w->rc);
	return NULL;
}

Test(index, a_publish_into_memory_full_of_unwritten_blocks_waits_for_the_writer)
{
	struct fake_store s;
	struct idx_group *g;
	struct idx_loc locs[64];
	struct idx *x = tiered(&s, 4, 100, &g);
	struct prompt a, b;
	make_prompt(&a, 1, 4, 0, 0);
	make_prompt(&b, 2, 2, 0, 0);
	int rc;
	cr_assert_eq(publish(x, &s, g, 0, &a, 0, 4, &rc), 4);
	int before = atomic_load(&wakes);
	struct publisher w = { x, &s, g, &b, 0, 0 };
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, publish_thread, &w), 0);
	/* The publisher asks the writer for room (a wake-up), then waits. */
	for (int i = 0; i < 2000 && atomic_load(&wakes) == before + 0; i++)
		usleep(1000);
	cr_assert_gt(atomic_load(&wakes), before, "the publisher waits for the writer");
	uint32_t wrote = 0;
	for (int i = 0; i < 2000 && wrote < 4; i++) {
		wrote += write_all(x, 0);
		usleep(1000);
	}
	pthread_join(t, NULL);
	cr_expect_eq(w.rc, 0);
	cr_expect_eq(w.stored, 2);
	struct idx_stats st;
	idx_get_stats(x, &st);
	cr_expect_eq(st.unwritten_evictions, 0, "no block left memory before it was written");
	cr_expect_eq(st.disk_blocks, 4);
	uint64_t lease;
	cr_expect_eq(match(x, g, &b, &lease, locs), 2);
	idx_release(x, lease);
	idx_group_put(x, g);
	idx_free(x);
}

Test(index, a_full_disk_lets_unwritten_blocks_go_and_counts_them)
{
	struct fake_store s;
	struct idx_group *g;
	struct idx *x = tiered(&s, 4, 100, &g);
	struct prompt a, b;
	make_prompt(&a, 1, 4, 0, 0);
	make_prompt(&b, 2, 1, 0, 0);
	int rc;
	cr_assert_eq(publish(x, &s, g, 0, &a, 0, 4, &rc), 4);
	cr_assert_eq(write_all(x, -ENOSPC), 4);
	cr_assert_eq(publish(x, &s, g, 0, &b, 0, 1, &rc), 1, "no wait for a writer that cannot write");
	struct idx_stats st;
	idx_get_stats(x, &st);
	cr_expect_eq(st.unwritten_evictions, 1);
	cr_expect_eq(st.disk_pending, 4, "A's three others, and B");
	idx_group_put(x, g);
	idx_free(x);
}

/* A disk that hangs in the middle of a write: the writer holds a block
 * and never ends. One publish waits the index's TIER_WAIT_MS (5 s) for it
 * (each wait starts with a wake-up of the writer); the next ones, and the
 * next blocks of a --disk-sync publish, do not wait again until it
 * writes. */
Test(index, a_writer_hung_in_a_write_is_waited_for_once, .timeout = 120)
{
	struct fake_store s;
	struct idx_group *g;
	struct idx *x = tiered(&s, 4, 100, &g);
	struct prompt a[4], b, c, d;
	int rc;
	for (int i = 0; i < 4; i++) { /* four leaves */
		make_prompt(&a[i], 10 + i, 1, 0, 0);
		cr_assert_eq(publish(x, &s, g, 0, &a[i], 0, 1, &rc), 1);
	}
	make_prompt(&b, 2, 1, 0, 0);
	make_prompt(&c, 3, 1, 0, 0);
	make_prompt(&d, 4, 1, 0, 0);
	struct idx_block hung;
	cr_assert_eq(idx_spill_take(x, &hung, 1, UINT64_MAX), 1);
	int before = atomic_load(&wakes);
	cr_expect_eq(publish(x, &s, g, 0, &b, 0, 1, &rc), 0);
	cr_expect_eq(rc, -ENOSPC, "memory is full of blocks not written");
	cr_expect_eq(atomic_load(&wakes), before + 1, "the first publish waited for the writer");
	before = atomic_load(&wakes);
	cr_expect_eq(publish(x, &s, g, 0, &c, 0, 1, &rc), 0);
	cr_expect_eq(rc, -ENOSPC);
	cr_expect_eq(atomic_load(&wakes), before, "the next one does not wait again");
	/* The write ends: publishes count on the writer again. */
	idx_spilled(x, &hung, 0);
	cr_expect_eq(publish(x, &s, g, 0, &d, 0, 1, &rc), 1, "the written block made room");
	struct idx_stats st;
	idx_get_stats(x, &st);
	cr_expect_eq(st.unwritten_evictions, 0);
	idx_group_put(x, g);
	idx_free(x);
}

Test(index, a_disk_sync_publish_waits_once_for_a_hung_writer, .timeout = 120)
{
	struct fake_store s;
	struct idx_group *g;
	struct idx *x = tiered(&s, 16, 100, &g);
	struct prompt a, b;
	make_prompt(&a, 1, 1, 0, 0);
	make_prompt(&b, 2, 3, 0, 0);
	int rc;
	cr_assert_eq(publish(x, &s, g, 0, &a, 0, 1, &rc), 1);
	struct idx_block hung;
	cr_assert_eq(idx_spill_take(x, &hung, 1, UINT64_MAX), 1);
	struct idx_tier t = { on_drop, on_wake, NULL, true }; /* --disk-sync */
	idx_set_tier(x, &t);
	int before = atomic_load(&wakes);
	cr_expect_eq(publish(x, &s, g, 0, &b, 0, 3, &rc), 3);
	cr_expect_eq(rc, 0);
	/* One wake-up for each block queued, one for the single wait. */
	cr_expect_eq(atomic_load(&wakes), before + 3 + 1,
		     "a wait for its first block, none for the two others");
	idx_spilled(x, &hung, 0);
	idx_group_put(x, g);
	idx_free(x);
}

Test(index, writes_that_failed_for_a_full_disk_are_taken_again_parents_first)
{
	struct fake_store s;
	struct idx_group *g;
	struct idx *x = tiered(&s, 16, 100, &g);
	struct prompt a;
	make_prompt(&a, 1, 10, 0, 0);
	int rc;
	cr_assert_eq(publish(x, &s, g, 0, &a, 0, 10, &rc), 10);
	struct idx_block b[16];
	for (int round = 0; round < 3; round++) {
		uint32_t n = idx_spill_take(x, b, 16, UINT64_MAX);
		cr_assert_eq(n, 10, "round %d", round);
		for (uint32_t i = 0; i < n; i++)
			cr_expect_eq(b[i].depth, i, "round %d: block %u of the batch is at depth %u",
				     round, i, b[i].depth);
		for (uint32_t i = 0; i < n; i++)
			idx_spilled(x, &b[i], -ENOSPC);
	}
	/* Half of a batch written: the rest comes next, in order. */
	uint32_t n = idx_spill_take(x, b, 4, UINT64_MAX);
	cr_assert_eq(n, 4);
	idx_spilled(x, &b[0], 0);
	idx_spilled(x, &b[1], 0);
	idx_spilled(x, &b[2], -ENOSPC);
	idx_spilled(x, &b[3], -ENOSPC);
	n = idx_spill_take(x, b, 16, UINT64_MAX);
	cr_assert_eq(n, 8);
	for (uint32_t i = 0; i < n; i++)
		cr_expect_eq(b[i].depth, i + 2);
	for (uint32_t i = 0; i < n; i++)
		idx_spilled(x, &b[i], 0);
	idx_group_put(x, g);
	idx_free(x);
}

Test(index, a_child_waits_for_its_parent_written_and_is_given_up_with_it)
{
	struct fake_store s;
	struct idx_group *g;
	struct idx *x = tiered(&s, 16, 100, &g);
	struct prompt a;
	make_prompt(&a, 1, 3, 0, 0);
	int rc;
	cr_assert_eq(publish(x, &s, g, 0, &a, 0, 3, &rc), 3);
	struct idx_block b[16];
	cr_assert_eq(idx_spill_take(x, b, 1, UINT64_MAX), 1);
	idx_spilled(x, b, -EIO); /* not tried again */
	cr_expect_eq(idx_spill_take(x, b, 16, UINT64_MAX), 0,
		     "no record of a block whose parent has none");
	cr_expect_eq(idx_dirty(x), 0);
	idx_group_put(x, g);
	idx_free(x);
}

Test(index, a_failed_restore_cuts_the_hit_drops_its_record_and_a_publish_heals_it)
{
	struct fake_store s;
	struct idx_group *g;
	struct idx *x = tiered(&s, 4, 100, &g);
	struct prompt a, b;
	make_prompt(&a, 1, 4, 0, 0);
	make_prompt(&b, 2, 4, 0, 0);
	int rc;
	publish(x, &s, g, 0, &a, 0, 4, &rc);
	write_all(x, 0);
	publish(x, &s, g, 0, &b, 0, 4, &rc);
	write_all(x, 0);
	uint64_t lease;
	uint32_t nfetch;
	int ok[4] = { 0, 0, -EBADMSG, 0 };
	cr_expect_eq(match_fetch(x, g, &a, ok, &nfetch, &lease), 2);
	cr_expect_eq(nfetch, 4);
	struct idx_stats st;
	idx_get_stats(x, &st);
	cr_expect_eq(st.disk_corrupt, 1);
	cr_expect_eq(st.restores, 2, "the block after the bad one is not counted");
	cr_expect_eq(st.hit_blocks, 2, "nor is the hit past it");
	cr_expect(hash_dropped(&a, 2), "the bad record is deleted");
	cr_expect(!hash_dropped(&a, 3), "the one after stays");
	cr_expect_eq(idx_release(x, lease), 0);
	int fine[4] = { 0 };
	cr_expect_eq(match_fetch(x, g, &a, fine, &nfetch, &lease), 2, "block 2 is hollow: the hit stops");
	cr_expect_eq(idx_release(x, lease), 0);
	/* The client computes it and publishes: block 2 filled again, 3 from the publisher. */
	uint32_t stored, dedup;
	struct fill_ctx f = { &s, a.tags };
	cr_expect_eq(idx_publish(x, g, 0, a.hashes, a.tokens, 4, fill, &f, &stored, &dedup), 0);
	cr_expect_eq(dedup, 2);
	cr_expect_eq(stored, 2);
	cr_expect_eq(idx_dirty(x), 1, "only the hollow block needs writing again");
	cr_expect_eq(match_fetch(x, g, &a, fine, &nfetch, &lease), 4);
	cr_expect_eq(nfetch, 0);
	cr_expect_eq(idx_release(x, lease), 0);
	idx_group_put(x, g);
	idx_free(x);
}

Test(index, the_disk_budget_takes_the_oldest_disk_only_leaves_and_never_a_resident_block)
{
	struct fake_store s;
	struct idx_group *g;
	struct idx_loc locs[64];
	struct idx *x = tiered(&s, 4, 6, &g);
	struct prompt a, b;
	make_prompt(&a, 1, 4, 0, 0);
	make_prompt(&b, 2, 4, 0, 0);
	int rc;
	publish(x, &s, g, 0, &a, 0, 4, &rc);
	cr_expect_eq(write_all(x, 0), 4);
	publish(x, &s, g, 0, &b, 0, 4, &rc); /* A leaves memory */
	cr_expect_eq(write_all(x, 0), 4, "A's two last blocks go from disk for B's records");
	struct idx_stats st;
	idx_get_stats(x, &st);
	cr_expect_eq(st.disk_bytes, 6);
	cr_expect_eq(st.disk_evictions, 2);
	cr_expect(hash_dropped(&a, 3) && hash_dropped(&a, 2), "A's leaves, leaf first");
	cr_expect(!hash_dropped(&a, 1) && !hash_dropped(&a, 0));
	uint64_t lease;
	uint32_t nfetch;
	int ok[4] = { 0 };
	cr_expect_eq(match_fetch(x, g, &a, ok, &nfetch, &lease), 2);
	cr_expect_eq(idx_release(x, lease), 0);
	/* Full of copies of resident blocks: a new block waits in memory. */
	struct prompt c;
	make_prompt(&c, 3, 1, 0, 0);
	idx_group_put(x, g);
	idx_free(x);
	x = tiered(&s, 8, 4, &g);
	publish(x, &s, g, 0, &a, 0, 4, &rc);
	cr_expect_eq(write_all(x, 0), 4);
	publish(x, &s, g, 0, &c, 0, 1, &rc);
	cr_expect_eq(write_all(x, 0), 0, "no room, and no record of a resident block is given up");
	cr_expect_eq(idx_dirty(x), 1);
	cr_expect_eq(match(x, g, &c, &lease, locs), 1, "it is served from memory");
	cr_expect_eq(idx_release(x, lease), 0);
	idx_group_put(x, g);
	idx_free(x);
}

Test(index, a_block_removed_while_it_is_written_goes_when_the_writer_is_done)
{
	struct fake_store s;
	struct idx_group *g;
	struct idx_loc locs[64];
	struct idx *x = tiered(&s, 4, 100, &g);
	struct prompt a;
	make_prompt(&a, 1, 2, 0, 0);
	int rc;
	publish(x, &s, g, 0, &a, 0, 2, &rc);
	struct idx_block b[2];
	cr_assert_eq(idx_spill_take(x, b, 2, UINT64_MAX), 2);
	struct pd_evict all = { .by = PD_EVICT_ALL };
	struct pd_evict_reply r;
	cr_assert_eq(idx_evict(x, &all, &r), 0);
	cr_expect_eq(r.blocks, 2, "evicted at once");
	uint64_t lease;
	cr_expect_eq(match(x, g, &a, &lease, locs), 0, "and never served again");
	cr_expect_eq(s.used, 2, "their slots stay while the writer reads them");
	idx_spilled(x, &b[1], 0);
	idx_spilled(x, &b[0], -EIO);
	cr_expect_eq(s.used, 0, "then they go");
	cr_expect(hash_dropped(&a, 1), "the record written meanwhile is deleted");
	cr_expect(!hash_dropped(&a, 0), "the one that failed has none");
	struct idx_stats st;
	idx_get_stats(x, &st);
	cr_expect_eq(st.disk_bytes, 0);
	cr_expect_eq(st.disk_blocks, 0);
	cr_expect_eq(st.blocks, 0);
	idx_group_put(x, g);
	idx_free(x);
}

/* A fill that looks at the index while it copies: the copy runs without
 * the lock (else this would deadlock), and no block of the publish is
 * visible before all are copied. */
struct peek_ctx {
	struct fill_ctx f;
	struct idx *x;
	struct idx_group *g;
	const struct prompt *p;
	uint32_t hits[8];
};

static int fill_and_peek(void *ctx, uint32_t i, struct idx_loc loc)
{
	struct peek_ctx *c = ctx;
	uint64_t lease;
	struct idx_loc locs[64];
	cr_assert_eq(idx_match(c->x, c->g, c->p->hashes, c->p->tokens, c->p->n, &lease, locs,
			       &c->hits[i], NULL, NULL), 0);
	if (lease)
		idx_release(c->x, lease);
	return fill(&c->f, i, loc);
}

Test(index, blocks_are_copied_without_the_lock_and_seen_only_once_all_are_in)
{
	struct fake_store s;
	struct idx *x = start(&s, 16, 32);
	struct prompt p;
	make_prompt(&p, 1, 4, 0, 0);
	struct peek_ctx c = { { &s, p.tags }, x, root1, &p, { 0 } };
	uint32_t stored, dedup;
	cr_assert_eq(idx_publish(x, root1, 0, p.hashes, p.tokens, 4, fill_and_peek, &c, &stored,
				 &dedup), 0);
	cr_expect_eq(stored, 4);
	for (int i = 0; i < 4; i++)
		cr_expect_eq(c.hits[i], 0, "while block %d is copied, nothing is visible", i);
	uint64_t lease;
	struct idx_loc locs[64];
	cr_expect_eq(match(x, root1, &p, &lease, locs), 4);
	for (uint32_t i = 0; i < 4; i++)
		cr_expect_eq(s.owner[locs[i].offset], p.tags[i]);
	idx_release(x, lease);
	finish(x);
}

static int fill_fails(void *ctx, uint32_t i, struct idx_loc loc)
{
	(void)ctx;
	(void)i;
	(void)loc;
	return -EIO;
}

Test(index, a_publish_whose_copy_fails_leaves_nothing_behind)
{
	struct fake_store s;
	struct idx *x = start(&s, 16, 32);
	struct prompt p;
	make_prompt(&p, 1, 3, 0, 0);
	uint32_t stored, dedup;
	cr_expect_eq(idx_publish(x, root1, 0, p.hashes, p.tokens, 3, fill_fails, NULL, &stored,
				 &dedup), -EIO);
	cr_expect_eq(stored, 0);
	struct idx_stats st;
	idx_get_stats(x, &st);
	cr_expect_eq(st.blocks, 0);
	cr_expect_eq(s.used, 0, "every slot back");
	uint64_t lease;
	struct idx_loc locs[64];
	cr_expect_eq(match(x, root1, &p, &lease, locs), 0);
	int rc;
	cr_expect_eq(publish(x, &s, root1, 0, &p, 0, 3, &rc), 3, "and it can be published again");
	cr_expect_eq(match(x, root1, &p, &lease, locs), 3);
	idx_release(x, lease);
	finish(x);
}

Test(index, evicting_a_chain_above_a_hollow_block_takes_both)
{
	struct fake_store s;
	struct idx_group *g;
	struct idx *x = tiered(&s, 2, 100, &g);
	struct prompt a, b;
	make_prompt(&a, 1, 2, 0, 0);
	make_prompt(&b, 2, 2, 0, 0);
	int rc;
	publish(x, &s, g, 0, &a, 0, 2, &rc);
	write_all(x, 0);
	publish(x, &s, g, 0, &b, 0, 2, &rc); /* A on disk only */
	write_all(x, 0);
	uint64_t lease;
	uint32_t nfetch;
	int ok[2] = { -EBADMSG, 0 };
	cr_expect_eq(match_fetch(x, g, &a, ok, &nfetch, &lease), 0, "A's first record is bad");
	/* A0 is hollow under its child A1 (on disk): evict everything. */
	struct pd_evict all = { .by = PD_EVICT_ALL };
	struct pd_evict_reply r;
	cr_assert_eq(idx_evict(x, &all, &r), 0);
	struct idx_stats st;
	idx_get_stats(x, &st);
	cr_expect_eq(st.disk_blocks, 0);
	cr_expect_eq(st.blocks, 0);
	idx_group_put(x, g);
	idx_free(x);
}

static uint32_t publish_leased(struct idx *x, struct fake_store *s, struct idx_group *r,
			       uint64_t lease, const struct prompt *p, uint32_t from, uint32_t n,
			       int *rc, uint64_t *out)
{
	struct fill_ctx f = { s, p->tags + from };
	uint32_t stored, dedup;
	*rc = idx_publish_leased(x, r, lease, p->hashes + from * 32, p->tokens + from * B, n, fill,
				 &f, &stored, &dedup, out);
	return stored + dedup;
}

static struct idx_stats stats_of(struct idx *x)
{
	struct idx_stats st;
	idx_get_stats(x, &st);
	return st;
}

/* A publish in parts (libprefixd's, for a staging area smaller than the
 * prefix): each part continues the lease the last one took on the chain,
 * which keeps every block published so far from eviction. */
Test(index, a_publish_leases_its_chain_for_the_next_part)
{
	struct fake_store s;
	struct idx *x = start(&s, 6, 32);
	struct prompt a, b;
	make_prompt(&a, 1, 6, 0, 0);
	make_prompt(&b, 2, 4, 0, 0);
	int rc;
	uint64_t l1, l2, l3, lease;
	cr_assert_eq(publish_leased(x, &s, root1, 0, &a, 0, 2, &rc, &l1), 2);
	cr_assert(!rc && l1);
	cr_assert_eq(publish_leased(x, &s, root1, l1, &a, 2, 2, &rc, &l2), 2);
	cr_assert(!rc && l2 && l2 != l1);
	cr_expect_eq(idx_release(x, l1), 0);
	cr_expect_eq(stats_of(x).leased_bytes, 4, "the second lease holds blocks 0-3");
	/* Another prompt cannot take them: it gets the 2 free slots only. */
	cr_expect_eq(publish(x, &s, root1, 0, &b, 0, 4, &rc), 2);
	cr_expect_eq(rc, -ENOSPC);
	/* The last part evicts b's blocks, and its lease holds all six. */
	cr_assert_eq(publish_leased(x, &s, root1, l2, &a, 4, 2, &rc, &l3), 2);
	cr_assert(!rc && l3);
	cr_expect_eq(idx_release(x, l2), 0);
	cr_expect_eq(stats_of(x).leased_bytes, 6);
	cr_expect_eq(stats_of(x).leases, 1);
	struct idx_loc locs[64];
	cr_expect_eq(match(x, root1, &a, &lease, locs), 6);
	for (int i = 0; i < 6; i++)
		cr_expect_eq(s.owner[locs[i].offset], a.tags[i], "block %d", i);
	idx_release(x, lease);
	cr_expect_eq(idx_release(x, l3), 0);
	cr_expect_eq(stats_of(x).leased_bytes, 0, "nothing stays leased");
	cr_expect_eq(stats_of(x).leases, 0);
	finish(x);
}

/* What a leased publish found already there is in its chain too; a part
 * that stops early leases only what it stored; nothing placed, no lease;
 * an unknown lease to continue is refused. */
Test(index, a_leased_publish_covers_exactly_what_was_stored_or_found)
{
	struct fake_store s;
	struct idx *x = start(&s, 4, 32);
	struct prompt a, b;
	make_prompt(&a, 1, 6, 0, 0);
	make_prompt(&b, 2, 4, 0, 0);
	int rc;
	uint64_t l, hold;
	cr_assert_eq(publish(x, &s, root1, 0, &a, 0, 2, &rc), 2);
	/* Blocks 0-1 are there, 2-3 fill the store, 4 finds no slot: every
	 * other block is held by this very publish. */
	cr_expect_eq(publish_leased(x, &s, root1, 0, &a, 0, 5, &rc, &l), 4);
	cr_expect_eq(rc, -ENOSPC);
	cr_assert_neq(l, 0);
	cr_expect_eq(stats_of(x).leased_bytes, 4, "blocks 0-3: found and stored");
	cr_expect_eq(publish(x, &s, root1b, 0, &b, 0, 1, &rc), 0, "all four are leased");
	cr_expect_eq(rc, -ENOSPC);
	/* Continuing it stops at once: nothing placed, no lease. */
	cr_expect_eq(publish_leased(x, &s, root1, l, &a, 4, 2, &rc, &hold), 0);
	cr_expect_eq(rc, -ENOSPC);
	cr_expect_eq(hold, 0);
	cr_expect_eq(stats_of(x).leases, 1);
	cr_expect_eq(idx_release(x, l), 0);
	cr_expect_eq(stats_of(x).leased_bytes, 0);
	cr_expect_eq(publish_leased(x, &s, root1, 12345, &a, 4, 1, &rc, &hold), 0);
	cr_expect_eq(rc, -ENOENT);
	cr_expect_eq(hold, 0);
	cr_expect_eq(stats_of(x).leases, 0);
	finish(x);
}

/* The writer takes a batch by bytes too: as many records as fit, one at
 * least, oldest first. */
Test(index, a_spill_batch_holds_at_most_its_bytes)
{
	struct fake_store s;
	struct idx_group *g;
	struct idx *x = tiered(&s, 8, 100, &g);
	struct prompt a;
	make_prompt(&a, 1, 5, 0, 0);
	int rc;
	cr_assert_eq(publish(x, &s, g, 0, &a, 0, 5, &rc), 5);
	struct idx_block b[8];
	cr_expect_eq(idx_spill_take(x, b, 8, 2), 2, "records of 1 byte, 2 bytes a batch");
	cr_expect_eq(idx_spill_take(x, b + 2, 8, 0), 1, "one record even past the bytes");
	cr_expect_eq(idx_spill_take(x, b + 3, 1, UINT64_MAX), 1, "and never more than max");
	cr_expect_eq(idx_dirty(x), 1);
	for (uint32_t i = 0; i < 4; i++)
		idx_spilled(x, &b[i], 0);
	cr_expect_eq(write_all(x, 0), 1);
	idx_group_put(x, g);
	idx_free(x);
}

/*
 * Two publishes of one chain at once: the first has placed its blocks and
 * copies them without the lock while the second finds them. The first's
 * copy is held at `gate` until the test lets it go, and then fails or not.
 */
struct racer {
	struct idx *x;
	struct fake_store *s;
	const struct prompt *p;
	uint32_t n;
	bool leased, fails;
	sem_t in, go;          /* the copy has begun; it may go on */
	bool waited;
	int rc;
	uint32_t stored, dedup;
	uint64_t lease;
};

static int racer_fill(void *ctx, uint32_t i, struct idx_loc loc)
{
	struct racer *r = ctx;
	if (!r->waited) {
		r->waited = true;
		sem_post(&r->in);
		sem_wait(&r->go);
	}
	if (r->fails)
		return -EIO;
	r->s->owner[loc.offset] = r->p->tags[i];
	return 0;
}

static void *racer_run(void *arg)
{
	struct racer *r = arg;
	r->rc = idx_publish_leased(r->x, root1, 0, r->p->hashes, r->p->tokens, r->n, racer_fill, r,
				   &r->stored, &r->dedup, r->leased ? &r->lease : NULL);
	sem_post(&r->in); /* done, with nothing of its own to copy perhaps */
	return NULL;
}

/* A racer whose copy is held at the gate: started once it is in its copy
 * (or done, with nothing to copy). */
static void racer_start(struct racer *r, pthread_t *t, struct idx *x, struct fake_store *s,
			const struct prompt *p, uint32_t n, bool leased, bool fails)
{
	*r = (struct racer){ .x = x, .s = s, .p = p, .n = n, .leased = leased, .fails = fails };
	sem_init(&r->in, 0, 0);
	sem_init(&r->go, 0, 0);
	cr_assert_eq(pthread_create(t, NULL, racer_run, r), 0);
	sem_wait(&r->in);
}

/* A racer that copies without a gate, still running on return; `in` is
 * posted when its publish is answered. */
static void racer_launch(struct racer *r, pthread_t *t, struct idx *x, struct fake_store *s,
			 const struct prompt *p, uint32_t n)
{
	*r = (struct racer){ .x = x, .s = s, .p = p, .n = n, .leased = true, .waited = true };
	sem_init(&r->in, 0, 0);
	sem_init(&r->go, 0, 0);
	cr_assert_eq(pthread_create(t, NULL, racer_run, r), 0);
}

/* Whether r's publish is answered within ms. */
static bool racer_answered_within(struct racer *r, int ms)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_nsec += (long)ms * 1000000;
	until.tv_sec += until.tv_nsec / 1000000000L;
	until.tv_nsec %= 1000000000L;
	if (sem_timedwait(&r->in, &until))
		return false;
	sem_post(&r->in); /* racer_end's join still sees it posted */
	return true;
}

static void racer_end(struct racer *r, pthread_t t)
{
	sem_post(&r->go);
	pthread_join(t, NULL);
	sem_destroy(&r->in);
	sem_destroy(&r->go);
}

/* A --disk-sync publish, and what was on disk when it was answered. */
struct synced {
	struct idx *x;
	struct fake_store *s;
	const struct prompt *p;
	int rc;
	uint32_t stored, dedup;
	uint64_t disk_blocks;
	sem_t done;
};

static void *synced_run(void *arg)
{
	struct synced *b = arg;
	struct fill_ctx f = { b->s, b->p->tags };
	b->rc = idx_publish(b->x, root1, 0, b->p->hashes, b->p->tokens, b->p->n, fill, &f,
			    &b->stored, &b->dedup);
	struct idx_stats st;
	idx_get_stats(b->x, &st);
	b->disk_blocks = st.disk_blocks;
	sem_post(&b->done);
	return NULL;
}

/* --disk-sync: b finds the blocks a still copies and counts them as there;
 * it is answered only once they are on disk, as a is (a kill -9 between
 * the two answers would otherwise lose blocks confirmed to b). */
Test(index, a_disk_sync_publish_that_finds_blocks_being_copied_waits_for_their_records,
     .timeout = 60)
{
	struct fake_store s;
	struct idx_group *g;
	struct idx *x = tiered(&s, 16, 100, &g);
	struct idx_tier t = { on_drop, on_wake, NULL, true };
	idx_set_tier(x, &t);
	root1 = g; /* the racers' group */
	struct prompt p;
	make_prompt(&p, 1, 2, 0, 0);
	struct racer a;
	pthread_t ta, tb;
	racer_start(&a, &ta, x, &s, &p, 2, false, false); /* a is in its copy */
	struct synced b = { .x = x, .s = &s, .p = &p };
	sem_init(&b.done, 0, 0);
	cr_assert_eq(pthread_create(&tb, NULL, synced_run, &b), 0);
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 1;
	cr_expect_neq(sem_timedwait(&b.done, &until), 0,
		      "b was answered while a still copied the blocks it found");
	sem_post(&a.go);
	/* This thread is the writer. */
	struct idx_stats st = { 0 };
	for (int i = 0; i < 20000 && st.disk_blocks < 2; i++) {
		write_all(x, 0);
		idx_get_stats(x, &st);
		usleep(1000);
	}
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	cr_expect_eq(a.rc, 0);
	cr_expect_eq(a.stored, 2);
	cr_expect_eq(b.rc, 0);
	cr_expect_eq(b.dedup, 2);
	cr_expect_eq(b.disk_blocks, 2, "b was answered once the blocks it found were on disk");
	sem_destroy(&a.in);
	sem_destroy(&a.go);
	sem_destroy(&b.done);
	idx_group_put(x, g);
	idx_free(x);
}

Test(index, a_publish_fills_the_blocks_of_another_whose_copy_failed)
{
	struct fake_store s;
	struct idx *x = start(&s, 16, 32);
	struct prompt p;
	make_prompt(&p, 1, 4, 0, 0);
	struct racer a, b;
	pthread_t ta, tb;
	racer_start(&a, &ta, x, &s, &p, 2, false, true);
	/* b finds blocks 0 and 1 still being copied by a, places 2 and 3, and
	 * waits in its copy until a has failed. */
	racer_start(&b, &tb, x, &s, &p, 4, true, false);
	racer_end(&a, ta);
	cr_expect_eq(a.rc, -EIO);
	cr_expect_eq(a.stored + a.dedup, 0);
	racer_end(&b, tb);
	cr_expect_eq(b.rc, 0);
	cr_expect_eq(b.stored, 4, "b copied a's two blocks as well as its own (got %u)", b.stored);
	cr_expect_eq(b.dedup, 0);
	cr_expect_neq(b.lease, 0);
	uint64_t lease;
	struct idx_loc locs[64];
	cr_expect_eq(match(x, root1, &p, &lease, locs), 4, "the whole chain is served");
	for (int i = 0; i < 4; i++)
		cr_expect_eq(s.owner[locs[i].offset], p.tags[i], "block %d holds its bytes", i);
	idx_release(x, lease);
	idx_release(x, b.lease);
	struct idx_stats st;
	idx_get_stats(x, &st);
	cr_expect_eq(st.blocks, 4);
	cr_expect_eq(s.used, 4, "one slot each, none leaked");
	finish(x);
}

/* b finds block 0 there and block 1 being copied by a: it has nothing of
 * its own to copy, but is answered only once a's copy is in, so that the
 * MATCH a client sends next attaches what b said was there. */
Test(index, a_publish_that_finds_blocks_being_copied_is_answered_once_they_are_in)
{
	struct fake_store s;
	struct idx *x = start(&s, 4, 32);
	struct prompt p;
	make_prompt(&p, 1, 2, 0, 0);
	int rc;
	cr_assert_eq(publish(x, &s, root1, 0, &p, 0, 1, &rc), 1);
	struct racer a, b;
	pthread_t ta, tb;
	racer_start(&a, &ta, x, &s, &p, 2, false, false);
	racer_launch(&b, &tb, x, &s, &p, 2);
	cr_expect_not(racer_answered_within(&b, 300), "b was answered while a still copied block 1");
	sem_post(&a.go);
	cr_expect(racer_answered_within(&b, 10000), "b was not answered once a's copy was in");
	uint64_t lease;
	struct idx_loc locs[64];
	cr_expect_eq(match(x, root1, &p, &lease, locs), 2, "what b was told is there is attached");
	for (int i = 0; i < 2; i++)
		cr_expect_eq(s.owner[locs[i].offset], p.tags[i], "block %d holds its bytes", i);
	idx_release(x, lease);
	racer_end(&a, ta);
	racer_end(&b, tb);
	cr_expect_eq(a.rc, 0);
	cr_expect_eq(a.stored, 1);
	cr_expect_eq(b.rc, 0);
	cr_expect_eq(b.stored, 0);
	cr_expect_eq(b.dedup, 2);
	cr_expect_eq(idx_release(x, b.lease), 0);
	finish(x);
}

/* The same, a's copy failing: b then copies block 1 itself, and its lease
 * holds the whole chain, never a hole. */
Test(index, a_publish_that_found_blocks_whose_copy_failed_fills_them_itself)
{
	struct fake_store s;
	struct idx *x = start(&s, 2, 32);
	struct prompt p, q;
	make_prompt(&p, 1, 2, 0, 0);
	make_prompt(&q, 2, 2, 0, 0);
	int rc;
	cr_assert_eq(publish(x, &s, root1, 0, &p, 0, 1, &rc), 1);
	struct racer a, b;
	pthread_t ta, tb;
	racer_start(&a, &ta, x, &s, &p, 2, false, true);
	racer_launch(&b, &tb, x, &s, &p, 2);
	cr_expect_not(racer_answered_within(&b, 300), "b was answered while a still copied block 1");
	racer_end(&a, ta);
	racer_end(&b, tb);
	cr_expect_eq(a.rc, -EIO);
	cr_expect_eq(b.rc, 0);
	cr_expect_eq(b.stored, 1, "b copied block 1 (got %u)", b.stored);
	cr_expect_eq(b.dedup, 1);
	uint64_t lease;
	struct idx_loc locs[64];
	cr_expect_eq(match(x, root1, &p, &lease, locs), 2, "the whole chain is served");
	cr_expect_eq(s.owner[locs[1].offset], p.tags[1], "block 1 holds b's bytes");
	idx_release(x, lease);
	cr_expect_eq(idx_release(x, b.lease), 0);
	/* With the leases gone, p's chain makes room for another prompt in
	 * the two slots there are. */
	cr_expect_eq(publish(x, &s, root1, 0, &q, 0, 2, &rc), 2, "q stored whole (rc %d)", rc);
	cr_expect_eq(match(x, root1, &q, &lease, locs), 2);
	idx_release(x, lease);
	finish(x);
}
