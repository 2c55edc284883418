/* SPDX-License-Identifier: MIT */
/*
 * Single flight through libprefixd: one process computes a prefix that
 * several start at once, the others wait for it and attach it; a claimant
 * that dies or stalls is taken over once; claims and waits are bounded per
 * connection and per user, and never cross users.
 */
#include <criterion/criterion.h>
#include <grp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon_util.h"
#include "flight_cases.h"

static struct test_daemon td;

static void start(const char *const *extra)
{
	const char *base[] = { "--block-tokens", "4", "--memory", "64M", NULL };
	cr_assert_eq(td_start_args(&td, base, extra), 0);
}

static struct prefixd *client(void)
{
	char why[200];
	struct prefixd *c = td_connect(td.sock, 1, why, sizeof(why));
	cr_assert(c, "%s", why);
	return c;
}

static struct prefixd_stats stats(void)
{
	struct prefixd_stats s;
	cr_assert_eq(td_stats(&td, &s), 0, "%s", prefixd_errmsg());
	return s;
}

Test(flight, four_clients_at_once_compute_the_prefix_once)
{
	char why[256] = "";
	cr_expect_eq(case_flight_one_computes(4, why, sizeof(why)), 0, "%s", why);
}

Test(flight, eight_clients_at_once_compute_the_prefix_once)
{
	char why[256] = "";
	cr_expect_eq(case_flight_one_computes(8, why, sizeof(why)), 0, "%s", why);
}

Test(flight, a_killed_claimant_is_inherited_by_one_waiter)
{
	char why[256] = "";
	cr_expect_eq(case_flight_claimant_killed(why, sizeof(why)), 0, "%s", why);
}

Test(flight, a_stalled_claimant_is_taken_over_once_after_the_timeout)
{
	char why[256] = "";
	cr_expect_eq(case_flight_claimant_stalls(why, sizeof(why)), 0, "%s", why);
}

Test(flight, a_match_without_a_wait_neither_claims_nor_waits)
{
	start(NULL);
	struct prefixd *a = client(), *b = client();
	uint32_t t[4 * TD_BLOCK_TOKENS], hit;
	td_prompt(t, 4, 10);
	uint64_t lease;
	const void *kv[4];
	struct prefixd_match_info info;
	/* a claims; b's plain match does not wait for it. */
	cr_assert_eq(prefixd_match_wait(a, t, 4, 5000, &lease, &hit, kv, &info), 0);
	cr_expect_eq(info.flight, PREFIXD_FLIGHT_CLAIMED);
	double t0 = td_now_s();
	cr_assert_eq(prefixd_match_wait(b, t, 4, 0, &lease, &hit, kv, &info), 0);
	cr_expect_lt(td_now_s() - t0, 0.5);
	cr_expect_eq(info.flight, PREFIXD_FLIGHT_NONE);
	cr_expect_eq(hit, 0);
	struct prefixd_stats s = stats();
	cr_expect_eq(s.claims, 1);
	cr_expect_eq(s.waits, 0);
	cr_expect_eq(s.matches, 2);
	cr_expect_eq(s.misses, 2, "a match counts once");
	prefixd_close(a);
	prefixd_close(b);
	cr_expect_eq(td_stop(&td), 0);
}

Test(flight, a_wait_ends_at_its_timeout_and_the_waiter_computes)
{
	start(NULL);
	struct prefixd *a = client(), *b = client();
	uint32_t t[4 * TD_BLOCK_TOKENS], hit;
	td_prompt(t, 4, 10);
	uint64_t lease;
	const void *kv[4];
	struct prefixd_match_info info;
	cr_assert_eq(prefixd_match_wait(a, t, 4, 5000, &lease, &hit, kv, &info), 0);
	cr_expect_eq(info.flight, PREFIXD_FLIGHT_CLAIMED);
	double t0 = td_now_s();
	cr_assert_eq(prefixd_match_wait(b, t, 4, 300, &lease, &hit, kv, &info), 0);
	double took = td_now_s() - t0;
	cr_expect_eq(info.flight, PREFIXD_FLIGHT_WAITED);
	cr_expect_eq(hit, 0);
	cr_expect(took >= 0.25 && took < 1.5, "waited %.3f s for a 300 ms wait", took);
	cr_expect(info.waited_ms >= 250 && info.waited_ms < 1500, "%u ms", info.waited_ms);
	struct prefixd_stats s = stats();
	cr_expect_eq(s.waits, 1);
	cr_expect_geq(s.wait_ms, 250);
	cr_expect_eq(s.misses, 2, "the waiting match counts once");
	cr_expect_eq(s.matches, 2);
	prefixd_close(a);
	prefixd_close(b);
	cr_expect_eq(td_stop(&td), 0);
}

struct half {
	struct prefixd *c;
	const uint32_t *t;
	int rc;
};

static void *publish_half(void *arg)
{
	struct half *h = arg;
	uint32_t stored, dedup;
	usleep(200000);
	h->rc = td_publish(h->c, 0, h->t, 0, 4, &stored, &dedup);
	return NULL;
}

Test(flight, a_publish_wakes_waiters_that_need_only_part_of_the_prefix)
{
	start(NULL);
	struct prefixd *a = client(), *b = client();
	uint32_t t[8 * TD_BLOCK_TOKENS], hit;
	td_prompt(t, 8, 10);
	uint64_t lease;
	const void *kv[8];
	struct prefixd_match_info info;
	cr_assert_eq(prefixd_match_wait(a, t, 8, 5000, &lease, &hit, kv, &info), 0);
	cr_assert_eq(info.flight, PREFIXD_FLIGHT_CLAIMED);
	/* b needs the first 4 blocks only; a publishes them from another
	 * thread while b waits. */
	struct half h = { a, t, -1 };
	pthread_t th;
	pthread_create(&th, NULL, publish_half, &h);
	cr_assert_eq(prefixd_match_wait(b, t, 4, 5000, &lease, &hit, kv, &info), 0);
	pthread_join(th, NULL);
	cr_expect_eq(h.rc, 0);
	cr_expect_eq(info.flight, PREFIXD_FLIGHT_WAITED);
	cr_expect_eq(hit, 4, "the waiter attached what it needs");
	for (uint32_t i = 0; i < hit; i++)
		cr_expect(td_block_ok(t, i, kv[i]));
	cr_expect(info.waited_ms >= 150 && info.waited_ms < 2000, "%u ms", info.waited_ms);
	prefixd_close(a);
	prefixd_close(b);
	cr_expect_eq(td_stop(&td), 0);
}

Test(flight, a_connection_holds_a_bounded_number_of_claims)
{
	start(NULL);
	struct prefixd *a = client();
	uint32_t t[2 * TD_BLOCK_TOKENS], hit;
	uint64_t lease;
	const void *kv[2];
	struct prefixd_match_info info;
	int claimed = 0;
	for (uint32_t k = 0; k < 12; k++) {
		td_prompt(t, 2, TD_PROMPT_K(k));
		cr_assert_eq(prefixd_match_wait(a, t, 2, 1000, &lease, &hit, kv, &info), 0);
		claimed += info.flight == PREFIXD_FLIGHT_CLAIMED;
	}
	cr_expect_eq(claimed, 8, "8 claims a connection");
	/* Its claims end with it: nobody waits for them afterwards. */
	prefixd_close(a);
	struct prefixd *b = client();
	td_prompt(t, 2, TD_PROMPT_K(0));
	double t0 = td_now_s();
	cr_assert_eq(prefixd_match_wait(b, t, 2, 3000, &lease, &hit, kv, &info), 0);
	cr_expect_lt(td_now_s() - t0, 1.0);
	cr_expect_eq(info.flight, PREFIXD_FLIGHT_CLAIMED);
	prefixd_close(b);
	cr_expect_eq(td_stop(&td), 0);
}

/* ==== Many waiters of one user, and another user ==== */

#define FLOOD 300

struct flooder {
	uint32_t flight;
	int err;
};

static uint32_t flood_t[2 * TD_BLOCK_TOKENS];

static void *flood_main(void *arg)
{
	struct flooder *f = arg;
	char why[200];
	struct prefixd *c = td_connect(td.sock, 1, why, sizeof(why));
	if (!c) {
		f->err = 1;
		return NULL;
	}
	uint64_t lease;
	uint32_t hit;
	const void *kv[2];
	struct prefixd_match_info info;
	f->err = prefixd_match_wait(c, flood_t, 2, 3000, &lease, &hit, kv, &info);
	f->flight = info.flight;
	prefixd_close(c);
	return NULL;
}

/* In a child as nobody: a plain match and a waiting one, on root's
 * claimed prompt. Exit code: 0 when both came back at once and the
 * waiting one claimed in nobody's own namespace. */
static int nobody_matches(void)
{
	gid_t g = 65534;
	if (setgroups(1, &g) || setgid(65534) || setuid(65534))
		return 64;
	char why[200];
	struct prefixd *c = td_connect(td.sock, 1, why, sizeof(why));
	if (!c)
		return 65;
	uint64_t lease;
	uint32_t hit;
	const void *kv[2];
	struct prefixd_match_info info;
	double t0 = td_now_s();
	if (prefixd_match(c, flood_t, 2, &lease, &hit, kv))
		return 66;
	double plain = td_now_s() - t0;
	t0 = td_now_s();
	if (prefixd_match_wait(c, flood_t, 2, 3000, &lease, &hit, kv, &info))
		return 67;
	double waited = td_now_s() - t0;
	prefixd_close(c);
	if (plain > 0.2)
		return 1;
	if (waited > 0.2)
		return 2; /* it waited on root's claim */
	return info.flight == PREFIXD_FLIGHT_CLAIMED ? 0 : 3;
}

Test(flight, a_flood_of_waiters_is_bounded_and_never_delays_another_user)
{
	cr_assert_eq(geteuid(), 0, "this test changes uid: run it as root (the README's test command does)");
	const char *extra[] = { "--group", "65534", "--max-user-connections", "400", NULL };
	start(extra);
	td_share_dir(&td);
	td_prompt(flood_t, 2, 77);
	struct prefixd *owner = client();
	uint64_t lease;
	uint32_t hit;
	const void *kv[2];
	struct prefixd_match_info info;
	cr_assert_eq(prefixd_match_wait(owner, flood_t, 2, 1000, &lease, &hit, kv, &info), 0);
	cr_assert_eq(info.flight, PREFIXD_FLIGHT_CLAIMED);
	static struct flooder f[FLOOD];
	static pthread_t th[FLOOD];
	for (int i = 0; i < FLOOD; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, flood_main, &f[i]), 0);
	/* Wait until the user's waits are at their bound. */
	struct prefixd_stats s = { 0 };
	for (int i = 0; i < 500 && (td_stats(&td, &s) || s.waits < 256); i++)
		usleep(10000);
	cr_expect_eq(s.waits, 256, "one user waits in 256 MATCHes at most");
	pid_t pid = fork();
	if (pid == 0)
		_exit(nobody_matches());
	int st;
	waitpid(pid, &st, 0);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "another user's matches: status %d (1: plain one slow, 2: waited on root's claim, 3: did not claim)",
		  WEXITSTATUS(st));
	/* The owner publishes: every waiter attaches at once. */
	double t0 = td_now_s();
	uint32_t stored, dedup;
	cr_assert_eq(td_publish(owner, 0, flood_t, 0, 2, &stored, &dedup), 0);
	int none = 0, waited = 0;
	for (int i = 0; i < FLOOD; i++) {
		pthread_join(th[i], NULL);
		cr_expect_eq(f[i].err, 0);
		none += f[i].flight == PREFIXD_FLIGHT_NONE;
		waited += f[i].flight == PREFIXD_FLIGHT_WAITED;
	}
	cr_expect_lt(td_now_s() - t0, 2.5, "the waiters came back on the publish");
	cr_expect_eq(waited, 256);
	cr_expect_eq(none, FLOOD - 256, "past the bound, a match neither waits nor claims");
	s = stats();
	cr_expect_eq(s.claims, 2, "root's claim and nobody's");
	prefixd_close(owner);
	cr_expect_eq(td_stop(&td), 0);
}
