/* SPDX-License-Identifier: MIT */
/* The arena pool under the index: the budget holds, and what the daemon
 * stores a client reads through its own read-only mapping. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "store.h"

Test(store, budget_caps_the_arenas)
{
	struct pd_store *s;
	/* 4 slots of 4 KiB per arena: 16 KiB arenas, budget for 2.5 of them. */
	cr_assert_eq(store_new(4096, 40960, 4, &s), 0);
	struct idx_loc loc[9];
	for (int i = 0; i < 8; i++)
		cr_assert_eq(store_alloc(s, &loc[i]), 0, "slot %d", i);
	cr_expect_eq(store_alloc(s, &loc[8]), -ENOSPC);
	cr_expect_eq(store_arenas(s), 2);
	cr_expect_leq(store_bytes_mapped(s), 40960);
	cr_expect_eq(store_bytes_used(s), 8 * 4096);
	store_release(s, loc[3]);
	cr_expect_eq(store_bytes_used(s), 7 * 4096);
	cr_expect_eq(store_alloc(s, &loc[8]), 0);
	cr_expect_eq(loc[8].arena, loc[3].arena);
	cr_expect_eq(loc[8].offset, loc[3].offset);
	cr_expect_null(store_slot(s, (struct idx_loc){ 5, 0 }));
	cr_expect_null(store_slot(s, (struct idx_loc){ 0, 100 }));
	store_free(s);
	cr_expect_eq(store_new(4096, 4096, 4, &s), -EINVAL, "not even one arena fits");
}

struct fill_ctx {
	struct pd_store *s;
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
	struct pd_store *s;
	cr_assert_eq(store_new(8192, 1 << 20, 8, &s), 0);
	struct idx_store ops = { store_alloc, store_release, s };
	struct pd_index *x;
	cr_assert_eq(idx_new(2, 32, &ops, &x), 0);
	struct idx_root root = { 1000, { 7 } };
	uint8_t hash[32] = { 42 };
	uint32_t tokens[2] = { 5, 6 }, stored, dedup, hit;
	struct fill_ctx f = { s, "block zero KV" };
	cr_assert_eq(idx_publish(x, &root, 0, hash, tokens, 1, fill, &f, &stored, &dedup), 0);
	uint64_t lease;
	struct idx_loc loc;
	cr_assert_eq(idx_match(x, &root, hash, tokens, 1, &lease, &loc, &hit), 0);
	cr_assert_eq(hit, 1);
	struct shm_arena *a = store_arena(s, loc.arena);
	int fd = shm_arena_ro_fd(a);
	const void *ro;
	cr_assert_eq(shm_map_ro(fd, shm_arena_size(a), &ro), 0);
	cr_expect_str_eq((const char *)ro + loc.offset, "block zero KV");
	shm_unmap(ro, shm_arena_size(a));
	close(fd);
	idx_release(x, lease);
	idx_free(x);
	store_free(s);
}
