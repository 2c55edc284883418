/* SPDX-License-Identifier: MIT */
/*
 * Publishing a prefix larger than libprefixd's staging area (8 MiB): it
 * goes in parts, each continuing the last through a lease the daemon takes
 * on what it published (PUBLISH with PD_FLAG_LEASE). What a client sees
 * must be what one PUBLISH gave: every block stored with its bytes, found
 * blocks counted, a full budget reported with the counts, the caller's
 * lease left as it was, and no lease left behind.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon_asserts.h"

/* 3 MiB blocks: two to a part. */
#define BIG_BYTES ((uint64_t)3 << 20)
#define NBLOCKS 7

static struct test_daemon td;

static void start(const char *memory)
{
	const char *args[] = { "--block-tokens", "4", "--memory", memory, NULL };
	t_start(&td, args, NULL);
}

/* A client of td_layout(model) with BIG_BYTES blocks. */
static struct prefixd *client(uint8_t model)
{
	struct prefixd_layout l = td_layout(model);
	l.block_bytes = BIG_BYTES;
	return t_connect(&td, &l);
}

/* A prompt of NBLOCKS blocks and their KV: block b's bytes are a pattern
 * of (seed, b), so a block stored from the wrong part or offset shows. */
struct big {
	uint32_t t[NBLOCKS * TD_BLOCK_TOKENS];
	uint8_t *kv[NBLOCKS];
};

static void big_make(struct big *p, uint32_t seed)
{
	for (uint32_t i = 0; i < NBLOCKS * TD_BLOCK_TOKENS; i++)
		p->t[i] = seed * 1000 + i;
	for (uint32_t b = 0; b < NBLOCKS; b++) {
		cr_assert_not_null(p->kv[b] = malloc(BIG_BYTES));
		for (uint64_t i = 0; i < BIG_BYTES; i += 4)
			*(uint32_t *)(p->kv[b] + i) = (uint32_t)(seed * 7919u + b * 104729u + i);
	}
}

static void big_free(struct big *p)
{
	for (uint32_t b = 0; b < NBLOCKS; b++)
		free(p->kv[b]);
}

/* The leading blocks a fresh MATCH finds, each checked byte for byte. */
static uint32_t hits_ok(struct prefixd *c, const struct big *p)
{
	uint64_t lease;
	uint32_t hit;
	const void *kv[NBLOCKS];
	cr_assert_eq(prefixd_match(c, p->t, NBLOCKS, &lease, &hit, kv), 0, "%s", prefixd_errmsg());
	for (uint32_t b = 0; b < hit; b++)
		cr_expect(!memcmp(kv[b], p->kv[b], BIG_BYTES), "block %u has its own bytes", b);
	if (lease)
		cr_expect_eq(prefixd_release(c, lease), 0);
	return hit;
}

Test(publish, a_prefix_larger_than_the_staging_area_is_stored_whole)
{
	start("256M");
	struct big p;
	big_make(&p, 1);
	struct prefixd *a = client(1), *b = client(1);
	uint32_t stored, dedup;
	cr_assert_eq(prefixd_publish(a, 0, p.t, 0, NBLOCKS, (const void *const *)p.kv, &stored, &dedup),
		     0, "%s", prefixd_errmsg());
	cr_expect_eq(stored, NBLOCKS);
	cr_expect_eq(dedup, 0);
	cr_expect_eq(hits_ok(b, &p), NBLOCKS);
	/* Again: every part finds its blocks. */
	cr_assert_eq(prefixd_publish(a, 0, p.t, 0, NBLOCKS, (const void *const *)p.kv, &stored, &dedup),
		     0, "%s", prefixd_errmsg());
	cr_expect_eq(stored, 0);
	cr_expect_eq(dedup, NBLOCKS);
	struct prefixd_stats s = t_stats(&td);
	cr_expect_eq(s.published, NBLOCKS);
	cr_expect_eq(s.blocks, NBLOCKS);
	cr_expect_eq(td_wait_leases(&td, 0), 0, "no lease of the parts is left");
	prefixd_close(a);
	prefixd_close(b);
	big_free(&p);
	t_stop(&td);
}

Test(publish, parts_continue_the_callers_lease_and_leave_it_held)
{
	start("256M");
	struct big p;
	big_make(&p, 2);
	struct prefixd *a = client(1);
	uint32_t stored, dedup, hit;
	cr_assert_eq(prefixd_publish(a, 0, p.t, 0, 2, (const void *const *)p.kv, &stored, &dedup), 0);
	uint64_t lease;
	const void *kv[NBLOCKS];
	cr_assert_eq(prefixd_match(a, p.t, NBLOCKS, &lease, &hit, kv), 0);
	cr_assert_eq(hit, 2);
	/* Blocks 2-6 after the lease: three parts, partly found already. */
	cr_assert_eq(prefixd_publish(a, lease, p.t, 2, 1, (const void *const *)p.kv + 2, &stored,
				     &dedup), 0);
	cr_assert_eq(prefixd_publish(a, lease, p.t, 2, NBLOCKS - 2, (const void *const *)p.kv + 2,
				     &stored, &dedup), 0, "%s", prefixd_errmsg());
	cr_expect_eq(stored, NBLOCKS - 3);
	cr_expect_eq(dedup, 1);
	cr_expect_eq(hits_ok(a, &p), NBLOCKS);
	cr_expect_eq(td_wait_leases(&td, 1), 1, "the caller's lease, and only it");
	cr_expect_eq(prefixd_release(a, lease), 0, "the caller's lease is still its own");
	cr_expect_eq(td_wait_leases(&td, 0), 0);
	prefixd_close(a);
	big_free(&p);
	t_stop(&td);
}

Test(publish, a_full_budget_stops_the_parts_with_the_counts)
{
	/* Room for 5 blocks: 2 of another prompt held by a lease, 3 for this. */
	start("15M");
	struct big p, q;
	big_make(&p, 3);
	big_make(&q, 4);
	struct prefixd *a = client(1), *b = client(1);
	uint32_t stored, dedup, hit;
	cr_assert_eq(prefixd_publish(b, 0, q.t, 0, 2, (const void *const *)q.kv, &stored, &dedup), 0);
	uint64_t held;
	const void *kv[NBLOCKS];
	cr_assert_eq(prefixd_match(b, q.t, 2, &held, &hit, kv), 0);
	cr_assert_eq(hit, 2);
	int rc = prefixd_publish(a, 0, p.t, 0, NBLOCKS, (const void *const *)p.kv, &stored, &dedup);
	cr_expect_eq(rc, -ENOSPC, "%s", prefixd_errmsg());
	cr_expect_eq(stored, 3, "three blocks fit beside the leased two");
	cr_expect_eq(dedup, 0);
	cr_expect(strstr(prefixd_errmsg(), "stored 3 of 7"), "%s", prefixd_errmsg());
	cr_expect_eq(hits_ok(b, &p), 3);
	cr_expect_eq(td_wait_leases(&td, 1), 1, "b's lease only");
	cr_expect_eq(prefixd_release(b, held), 0);
	prefixd_close(a);
	prefixd_close(b);
	big_free(&p);
	big_free(&q);
	t_stop(&td);
}
