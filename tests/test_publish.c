/* SPDX-License-Identifier: MIT */
/*
 * Publishing a prefix larger than libprefixd's staging area (8 MiB): it
 * goes in parts, each continuing the last through a lease the daemon takes
 * on what it published (PUBLISH with PD_FLAG_LEASE). What a client sees
 * must be what one PUBLISH gave: every block stored with its bytes, found
 * blocks counted, a full budget reported with the counts, the caller's
 * lease left as it was, and no lease left behind. A connection keeps its
 * staging memory from one publish to the next (its pages cost more than
 * the copy when they are new).
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* The staging memfds this process has open: their inodes in ino (up to
 * cap), their count. */
static int staging_fds(ino_t *ino, int cap)
{
	int n = 0;
	DIR *d = opendir("/proc/self/fd");
	cr_assert_not_null(d);
	for (struct dirent *e; (e = readdir(d));) {
		char path[300], link[256];
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		ssize_t l = readlink(path, link, sizeof(link) - 1);
		if (l <= 0)
			continue;
		link[l] = 0;
		struct stat sb;
		if (!strstr(link, "memfd:prefixd-staging") || stat(path, &sb))
			continue;
		if (n < cap)
			ino[n] = sb.st_ino;
		n++;
	}
	closedir(d);
	return n;
}

Test(publish, a_connection_keeps_one_staging_area_for_its_publishes)
{
	start("256M");
	struct big p, q;
	big_make(&p, 3);
	big_make(&q, 4);
	struct prefixd *a = client(1), *b = client(1);
	ino_t first[4], again[4];
	cr_expect_eq(staging_fds(first, 4), 0, "none before the first publish");
	uint32_t stored, dedup;
	cr_assert_eq(prefixd_publish(a, 0, p.t, 0, NBLOCKS, (const void *const *)p.kv, &stored, &dedup),
		     0, "%s", prefixd_errmsg());
	cr_assert_eq(staging_fds(first, 4), 1, "the connection keeps its staging memfd");
	/* Another prompt through the same memory: its pages are paid for,
	 * and what the first publish left there must not show. */
	cr_assert_eq(prefixd_publish(a, 0, q.t, 0, NBLOCKS, (const void *const *)q.kv, &stored, &dedup),
		     0, "%s", prefixd_errmsg());
	cr_expect_eq(stored, NBLOCKS);
	cr_assert_eq(staging_fds(again, 4), 1, "still one staging memfd");
	cr_expect_eq(again[0], first[0], "the same memfd, not a new one each publish");
	cr_expect_eq(hits_ok(b, &p), NBLOCKS);
	cr_expect_eq(hits_ok(b, &q), NBLOCKS);
	prefixd_close(a);
	cr_expect_eq(staging_fds(again, 4), 0, "closing the connection closes it");
	prefixd_close(b);
	big_free(&p);
	big_free(&q);
	t_stop(&td);
}

/* Minor page faults of a process so far (/proc/PID/stat's 10th field). */
static unsigned long minor_faults(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	const char *s = strrchr(td_read_file(path), ')');
	unsigned long v = 0;
	cr_assert(s && sscanf(s + 2, "%*c %*d %*d %*d %*d %*d %*u %lu", &v) == 1, "%s", path);
	return v;
}

Test(publish, the_daemon_fills_new_slots_without_faulting_their_pages_in)
{
	start("256M");
	struct big p;
	big_make(&p, 5);
	struct prefixd *a = client(1), *b = client(1);
	uint32_t stored, dedup;
	unsigned long f0 = minor_faults(td.pid);
	cr_assert_eq(prefixd_publish(a, 0, p.t, 0, NBLOCKS, (const void *const *)p.kv, &stored, &dedup),
		     0, "%s", prefixd_errmsg());
	unsigned long faults = minor_faults(td.pid) - f0;
	cr_expect_eq(stored, NBLOCKS);
	/* Copied into its view, each of the 21 MiB's 4 KiB pages is a fault. */
	uint64_t pages = NBLOCKS * BIG_BYTES / 4096;
	cr_expect_lt(faults, pages / 8, "%lu page faults for %llu new pages", faults,
		     (unsigned long long)pages);
	cr_expect_eq(hits_ok(b, &p), NBLOCKS, "the slots hold the blocks' bytes");
	prefixd_close(a);
	prefixd_close(b);
	big_free(&p);
	t_stop(&td);
}
