/* SPDX-License-Identifier: MIT */
/* The arena pool under the index: the budget holds, and what the daemon
 * stores a client reads through its own read-only mapping. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "store.h"

Test(store, budget_is_charged_by_slot)
{
	struct store *s;
	/* 4 slots of 4 KiB per arena, budget for 10 slots: 4 + 4 + 2 used. */
	struct store_budget b = { .limit = 40960 };
	cr_assert_eq(store_new(4096, &b, 4, &s), 0);
	struct idx_loc loc[11];
	for (int i = 0; i < 10; i++)
		cr_assert_eq(store_alloc(s, &loc[i]), 0, "slot %d", i);
	cr_expect_eq(store_alloc(s, &loc[10]), -ENOSPC);
	cr_expect_eq(store_arenas(s), 3);
	cr_expect_eq(store_bytes_charged(s), 40960);
	cr_expect_eq(b.charged, 40960);
	cr_expect_eq(store_bytes_used(s), 10 * 4096);
	store_release(s, loc[3], false);
	cr_expect_eq(store_bytes_used(s), 9 * 4096);
	cr_expect_eq(b.charged, 40960, "a freed slot's pages stay resident");
	cr_expect_eq(store_alloc(s, &loc[10]), 0);
	cr_expect_eq(loc[10].arena, loc[3].arena);
	cr_expect_eq(loc[10].offset, loc[3].offset);
	cr_expect_null(store_slot(s, (struct idx_loc){ 5, 0 }));
	cr_expect_null(store_slot(s, (struct idx_loc){ 0, 100 }));
	store_free(s);
	cr_expect_eq(b.charged, 0, "freeing a store returns its slots to the budget");
	struct store_budget tiny = { .limit = 4096 };
	cr_expect_eq(store_new(8192, &tiny, 4, &s), -ENOSPC, "not even one slot fits");
}

Test(store, an_arena_larger_than_the_budget_costs_only_its_used_slots)
{
	struct store *s;
	struct store_budget b = { .limit = 3 * 4096 };
	cr_assert_eq(store_new(4096, &b, 1000, &s), 0);
	struct idx_loc loc;
	for (int i = 0; i < 3; i++)
		cr_assert_eq(store_alloc(s, &loc), 0, "slot %d", i);
	cr_expect_eq(store_alloc(s, &loc), -ENOSPC);
	cr_expect_eq(store_arenas(s), 1);
	cr_expect_eq(shm_arena_size(store_arena(s, 0)), 1000 * 4096);
	cr_expect_eq(b.charged, 3 * 4096);
	store_free(s);
}

Test(store, block_sizes_share_one_budget)
{
	struct store_budget b = { .limit = 8 * 4096 };
	struct store *s1, *s2;
	cr_assert_eq(store_new(4096, &b, 4, &s1), 0);
	cr_assert_eq(store_new(8192, &b, 4, &s2), 0);
	struct idx_loc loc, first;
	cr_assert_eq(store_alloc(s1, &first), 0);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(store_alloc(s1, &loc), 0);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(store_alloc(s2, &loc), 0);
	cr_expect_eq(store_alloc(s1, &loc), -ENOSPC);
	cr_expect_eq(store_alloc(s2, &loc), -ENOSPC);
	cr_expect_eq(store_bytes_charged(s1) + store_bytes_charged(s2), 8 * 4096);
	store_release(s1, first, false);
	cr_expect_eq(store_alloc(s2, &loc), -ENOSPC, "s1's freed slot stays s1's");
	cr_expect_eq(store_alloc(s1, &loc), 0);
	store_free(s1);
	store_free(s2);
}

struct fill_ctx {
	struct store *s;
	const char *text;
};

static int fill(void *ctx, uint32_t i, struct idx_loc loc)
{
	struct fill_ctx *f = ctx;
	strcpy((char *)store_slot(f->s, loc), f->text);
	return 0;
}

Test(store, index_blocks_reach_a_read_only_client)
{
	struct store *s;
	struct store_budget b = { .limit = 1 << 20 };
	cr_assert_eq(store_new(8192, &b, 8, &s), 0);
	struct idx_store ops = { store_alloc, store_release, s, store_slot_bytes(s), NULL, 8192, 0 };
	struct idx_limits lim = { UINT64_MAX, UINT64_MAX, UINT64_MAX, 0 };
	struct idx *x;
	cr_assert_eq(idx_new(2, 32, &lim, &x), 0);
	struct idx_root r = { 1000, { 7 } };
	uint8_t fp[PD_FP_SIZE] = { 1 };
	struct idx_group *root;
	cr_assert_eq(idx_group_get(x, &r, fp, &ops, &root), 0);
	uint8_t hash[32] = { 42 };
	uint32_t tokens[2] = { 5, 6 }, stored, dedup, hit;
	struct fill_ctx f = { s, "block zero KV" };
	cr_assert_eq(idx_publish(x, root, 0, hash, tokens, 1, fill, &f, &stored, &dedup), 0);
	uint64_t lease;
	struct idx_loc loc;
	cr_assert_eq(idx_match(x, root, hash, tokens, 1, &lease, &loc, &hit, NULL, NULL), 0);
	cr_assert_eq(hit, 1);
	struct shm_arena *a = store_arena(s, loc.arena);
	int fd = shm_arena_ro_fd(a);
	const void *ro;
	cr_assert_eq(shm_map_ro(fd, shm_arena_size(a), &ro), 0);
	cr_expect_str_eq((const char *)ro + loc.offset, "block zero KV");
	shm_unmap(ro, shm_arena_size(a));
	close(fd);
	idx_release(x, lease);
	idx_group_put(x, root);
	idx_free(x);
	store_free(s);
}

/* ==== The pool of populated slots (store_pool) ==== */

/* Waits (5 s at most) until the pool has `ready` slots and has populated
 * `filled` in all. */
static bool pool_reaches(struct store *s, uint32_t ready, uint64_t filled)
{
	struct store_pool_stats st;
	for (int i = 0; i < 500; i++) {
		store_pool_stats(s, &st);
		if (st.ready == ready && st.filled == filled)
			return true;
		usleep(10000);
	}
	return false;
}

/* Pages of [p, p + len) resident (mincore: in the memfd's page cache). */
static size_t resident_pages(const uint8_t *p, size_t len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), n = len / page, in = 0;
	unsigned char v[1024];
	cr_assert(n <= sizeof(v));
	cr_assert_eq(mincore((void *)p, len, v), 0);
	for (size_t i = 0; i < n; i++)
		in += v[i] & 1;
	return in;
}

Test(store, the_pool_keeps_populated_slots_ready_and_charged)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), slot = 4 * page;
	struct store_budget b = { .limit = 64 * slot };
	struct store *s;
	cr_assert_eq(store_new(slot, &b, 32, &s), 0);
	cr_assert_eq(store_pool(s, 4), 0);
	cr_assert(pool_reaches(s, 4, 4), "the pool did not fill 4 slots");
	cr_expect_eq(b.charged, 4 * slot, "pooled slots are charged to the budget");
	cr_expect_eq(store_bytes_used(s), 0);
	cr_expect_eq(resident_pages(shm_arena_base(store_arena(s, 0)), 32 * slot), 4 * 4,
		     "the pooled slots' pages are resident, no others");
	struct idx_loc loc;
	cr_assert_eq(store_alloc(s, &loc), 0);
	cr_expect_eq(resident_pages(store_slot(s, loc), slot), 4, "an allocated slot is a populated one");
	struct store_pool_stats st;
	store_pool_stats(s, &st);
	cr_expect_eq(st.taken, 1);
	cr_expect(pool_reaches(s, 4, 5), "the pool refills after a slot is taken");
	cr_expect_eq(b.charged, 5 * slot);
	cr_expect_eq(store_bytes_used(s), slot);
	store_free(s);
	cr_expect_eq(b.charged, 0, "freeing the store (and its pool thread) returns every slot");
}

Test(store, the_pool_never_takes_the_budgets_last_room)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), slot = 4 * page;
	/* Room for 4 x 4 + 1 slots besides the pool's: it fills. */
	struct store_budget b = { .limit = 30 * slot };
	struct store *s1, *s2;
	cr_assert_eq(store_new(slot, &b, 64, &s1), 0);
	cr_assert_eq(store_new(slot, &b, 64, &s2), 0);
	cr_assert_eq(store_pool(s1, 4), 0);
	cr_assert(pool_reaches(s1, 4, 4));
	/* Another store takes the rest; the pool does not refill into it. */
	struct idx_loc loc;
	for (int i = 0; i < 26; i++)
		cr_assert_eq(store_alloc(s2, &loc), 0, "slot %d", i);
	cr_expect_eq(store_alloc(s2, &loc), -ENOSPC);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(store_alloc(s1, &loc), 0, "pooled slot %d", i);
	usleep(50000);
	struct store_pool_stats st;
	store_pool_stats(s1, &st);
	cr_expect_eq(st.filled, 4, "no room: the pool took no more");
	cr_expect_eq(b.charged, 30 * slot);
	store_free(s1);
	store_free(s2);
	/* A budget without that room: the pool takes nothing at all. */
	struct store_budget small = { .limit = 16 * slot };
	cr_assert_eq(store_new(slot, &small, 64, &s1), 0);
	cr_assert_eq(store_pool(s1, 4), 0);
	usleep(50000);
	store_pool_stats(s1, &st);
	cr_expect(st.filled == 0 && small.charged == 0, "filled %llu", (unsigned long long)st.filled);
	for (int i = 0; i < 16; i++)
		cr_assert_eq(store_alloc(s1, &loc), 0, "slot %d", i);
	store_free(s1);
}
