/* SPDX-License-Identifier: MIT */
/*
 * The remote index's set (daemon/remote_index.c) alone: trusted only once
 * live; keys put and dropped, thousands of them through the table's
 * growth and backward-shift deletions, each answered right; a drop by a
 * master that does not hold the key ignored (a reshard's crossed events);
 * past its cap it is no longer live, until a reset.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "remote_index.h"

static struct remote_index *ix;

static void fini(void)
{
	remote_index_free(ix);
	ix = NULL;
}

TestSuite(remote_index_set, .fini = fini);

static size_t key(char *b, unsigned i)
{
	return (size_t)snprintf(b, 64, "pfx2:4294967295:ab:8192:4:%08x", i);
}

static bool held(unsigned i)
{
	char b[64];
	size_t n = key(b, i);
	return remote_index_may_hold(ix, b, n);
}

static void put(unsigned i, uint8_t node)
{
	char b[64];
	size_t n = key(b, i);
	remote_index_put(ix, b, n, node);
}

static void drop(unsigned i, uint8_t node)
{
	char b[64];
	size_t n = key(b, i);
	remote_index_drop(ix, b, n, node);
}

static struct remote_index_stats stats(void)
{
	struct remote_index_stats s;
	remote_index_stats(ix, &s);
	return s;
}

Test(remote_index_set, not_live_it_rules_nothing_out)
{
	cr_assert_eq(remote_index_new(100, &ix), 0);
	cr_expect(held(1), "not live: ask");
	remote_index_set_live(ix);
	cr_expect(!held(1), "live and not put: Redis does not hold it");
	put(1, 0);
	cr_expect(held(1));
	remote_index_reset(ix);
	cr_expect(held(2), "reset: not live, ask");
	cr_expect_eq(stats().keys, 0);
}

Test(remote_index_set, thousands_of_keys_put_and_dropped_are_answered_right)
{
	enum { N = 20000 };
	cr_assert_eq(remote_index_new(N, &ix), 0);
	remote_index_set_live(ix);
	for (unsigned i = 0; i < N; i++)
		put(i, (uint8_t)(i % 3));
	cr_expect_eq(stats().keys, N);
	/* Every third dropped, in a scattered order, by its own master. */
	for (unsigned j = 0; j < N; j++) {
		unsigned i = (j * 7919u) % N;
		if (i % 3 == 0)
			drop(i, 0);
	}
	for (unsigned i = 0; i < N; i++)
		cr_assert_eq(held(i), i % 3 != 0, "key %u", i);
	cr_expect_eq(stats().keys, N - (N + 2) / 3);
	cr_expect(stats().live);
}

Test(remote_index_set, a_drop_by_another_master_is_ignored)
{
	cr_assert_eq(remote_index_new(100, &ix), 0);
	remote_index_set_live(ix);
	put(1, 0);
	/* Migrated: restored on master 1 before master 0's deletion arrives. */
	put(1, 1);
	drop(1, 0);
	cr_expect(held(1), "master 1 holds it");
	drop(1, 1);
	cr_expect(!held(1));
	/* A key this daemon wrote is dropped by whichever master says so. */
	put(2, REMOTE_INDEX_ANY_NODE);
	drop(2, 2);
	cr_expect(!held(2));
}

Test(remote_index_set, past_its_cap_it_is_not_live_until_a_reset)
{
	cr_assert_eq(remote_index_new(3, &ix), 0);
	put(1, 0);
	put(2, 0);
	put(3, 0);
	put(3, 1); /* held already: not one more */
	remote_index_set_live(ix);
	cr_expect(stats().live);
	char b[64];
	size_t n = key(b, 4);
	cr_expect(remote_index_put(ix, b, n, 0), "this key made it over");
	cr_expect(!remote_index_put(ix, b, n, 0), "once");
	struct remote_index_stats s = stats();
	cr_expect(!s.live && s.over);
	cr_expect(held(5), "over: ask");
	remote_index_set_live(ix);
	cr_expect(!stats().live, "over stays not live");
	remote_index_reset(ix);
	remote_index_set_live(ix);
	cr_expect(stats().live && !stats().over);
}
