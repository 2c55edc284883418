/* SPDX-License-Identifier: MIT */
/*
 * Single flight through libprefixd: one process computes a prefix that
 * several start at once, the others wait for it and attach it; a claimant
 * that dies or stalls is taken over once; claims and waits are bounded per
 * connection and per user, and never cross users.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <math.h>
#include <sys/mman.h>

#include "cache.h"
#include "daemon_util.h"
#include "flight_cases.h"
#include "helpers.h"

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
	uint32_t blocks; /* 0: 4 */
};

static void *publish_half(void *arg)
{
	struct half *h = arg;
	uint32_t stored, dedup;
	usleep(200000);
	h->rc = td_publish(h->c, 0, h->t, 0, h->blocks ? h->blocks : 4, &stored, &dedup);
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
	struct half h = { a, t, -1, 4 };
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
	/* Inherited when the daemon read a's close while b waited. */
	cr_expect(info.flight == PREFIXD_FLIGHT_CLAIMED || info.flight == PREFIXD_FLIGHT_INHERITED,
		  "flight %u", info.flight);
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

/* ==== The runtime's prefill ==== */

#define RT_MODEL "llama3-tiny-ropescaled" /* 1024 positions: room for chunks */
#define RT_N 900
#define RT_PROCS 3
#define RT_V 512

struct rt_report {
	int rc;
	size_t attached, computed;
	uint32_t published, deduplicated;
	float last[RT_V];       /* logits of the prompt's last position */
	char why[200];
};

static void rt_prompt(int32_t *t)
{
	for (int i = 0; i < RT_N; i++)
		t[i] = (int32_t)((i * 7919u + 13u) % RT_V);
}

/* One process: loads the model (after the fork: no inherited threads),
 * waits at the barrier (a byte on fd), prefills through the cache. */
static int rt_process(int barrier, unsigned flags, struct rt_report *r)
{
	char dir[512];
	snprintf(dir, sizeof(dir), "%s/%s", fixtures_dir(), RT_MODEL);
	struct pfx_model_opts o = { .threads = 1, .block_tokens = 4 };
	struct pfx_error err = { "" }, cerr = { "" };
	struct pfx_model *m;
	struct pfx_cache *c;
	struct pfx_session *s;
	if (pfx_model_load(dir, &o, &m, &err) || pfx_model_config(m)->vocab != RT_V ||
	    pfx_cache_open_flags(m, td.sock, NULL, 0, flags, &c, &err) ||
	    pfx_session_new(m, &s, &err)) {
		snprintf(r->why, sizeof(r->why), "set-up: %s", err.msg);
		return 1;
	}
	int32_t t[RT_N];
	rt_prompt(t);
	char go;
	if (read(barrier, &go, 1) != 1)
		return 2;
	struct pfx_prefill_info info;
	r->rc = pfx_session_prefill(s, c, t, RT_N, PFX_LOGITS_LAST, r->last, &info, &cerr, &err);
	if (r->rc || info.cache_rc || info.publish_rc)
		snprintf(r->why, sizeof(r->why), "prefill: %s / %s", err.msg, cerr.msg);
	r->attached = info.attached;
	r->computed = info.computed;
	r->published = info.published;
	r->deduplicated = info.deduplicated;
	pfx_session_free(s);
	pfx_cache_close(c);
	pfx_model_free(m);
	return r->why[0] ? 3 : 0;
}

/* RT_PROCS processes start the prompt at once; their reports. */
static struct rt_report *rt_run(unsigned flags)
{
	struct rt_report *r = mmap(NULL, RT_PROCS * sizeof(*r), PROT_READ | PROT_WRITE,
				   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(r, MAP_FAILED);
	memset(r, 0, RT_PROCS * sizeof(*r));
	int barrier[2];
	cr_assert_eq(pipe(barrier), 0);
	pid_t pid[RT_PROCS];
	for (int i = 0; i < RT_PROCS; i++) {
		pid[i] = fork();
		cr_assert_geq(pid[i], 0);
		if (pid[i] == 0) {
			close(barrier[1]);
			_exit(rt_process(barrier[0], flags, &r[i]));
		}
	}
	close(barrier[0]);
	usleep(300000); /* every process has loaded its model */
	char go[RT_PROCS] = { 0 };
	cr_assert_eq(write(barrier[1], go, RT_PROCS), RT_PROCS);
	close(barrier[1]);
	for (int i = 0; i < RT_PROCS; i++) {
		int st;
		waitpid(pid[i], &st, 0);
		cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "process %d: status %d: %s", i,
			  WEXITSTATUS(st), r[i].why);
	}
	return r;
}

/* The prompt computed alone, in one piece. */
static void rt_reference(float *out)
{
	struct pfx_model *m = load_fixture_model_bt(RT_MODEL, 4);
	struct pfx_error err = { "" };
	struct pfx_session *s;
	int32_t t[RT_N];
	rt_prompt(t);
	cr_assert_eq(pfx_session_new(m, &s, &err), 0);
	cr_assert_eq(pfx_session_append(s, t, RT_N, PFX_LOGITS_LAST, out, &err), 0, "%s", err.msg);
	pfx_session_free(s);
	pfx_model_free(m);
}

Test(flight, processes_that_prefill_one_prompt_at_once_compute_it_once)
{
	start(NULL);
	struct rt_report *r = rt_run(0);
	float ref[RT_V];
	rt_reference(ref);
	/* A prompt of whole blocks: a waiter attaches all but its last token,
	 * which it computes (its logits are the answer). */
	_Static_assert(RT_N % 4 == 0, "a prompt of whole blocks");
	size_t full = RT_N / 4;
	int computing = 0;
	uint64_t computed = 0;
	for (int i = 0; i < RT_PROCS; i++) {
		computed += r[i].computed;
		if (r[i].attached == 0) {
			computing++;
			cr_expect_eq(r[i].published, full, "the claimant published every block");
		} else {
			cr_expect_eq(r[i].attached, RT_N - 1, "a waiter attached the whole prompt");
			cr_expect_eq(r[i].published, 0);
		}
		float d = 0;
		for (int v = 0; v < RT_V; v++)
			d = fmaxf(d, fabsf(r[i].last[v] - ref[v]));
		cr_expect_leq(d, TOL_LOGITS, "process %d: logits off the uncached run by %g", i, d);
	}
	cr_expect_eq(computing, 1, "one process computed the prompt");
	cr_expect_eq(computed, RT_N + RT_PROCS - 1, "the others computed the last token only");
	struct prefixd_stats s = stats();
	cr_expect_eq(s.published, full, "each block stored once");
	cr_expect_eq(s.dedup, 0, "the chunks' publishes sent each block once");
	cr_expect_eq(s.claims, 1);
	cr_expect_eq(s.waits, RT_PROCS - 1);
	munmap(r, RT_PROCS * sizeof(*r));
	cr_expect_eq(td_stop(&td), 0);
}

Test(flight, with_no_wait_every_process_computes_alone)
{
	start(NULL);
	struct rt_report *r = rt_run(PFX_CACHE_NO_WAIT);
	struct prefixd_stats s = stats();
	cr_expect_eq(s.claims, 0, "no claim, no wait");
	cr_expect_eq(s.waits, 0);
	for (int i = 0; i < RT_PROCS; i++)
		cr_expect_eq(r[i].published + r[i].deduplicated + r[i].attached / 4, RT_N / 4,
			     "every block published, found or attached");
	munmap(r, RT_PROCS * sizeof(*r));
	cr_expect_eq(td_stop(&td), 0);
}

Test(flight, prefixctl_prints_the_flight_counters_also_for_prometheus)
{
	start(NULL);
	struct prefixd *a = client(), *b = client();
	uint32_t t[2 * TD_BLOCK_TOKENS], hit;
	td_prompt(t, 2, 5);
	uint64_t lease;
	const void *kv[2];
	struct prefixd_match_info info;
	cr_assert_eq(prefixd_match_wait(a, t, 2, 1000, &lease, &hit, kv, &info), 0);
	cr_assert_eq(prefixd_match_wait(b, t, 2, 100, &lease, &hit, kv, &info), 0);
	cr_assert_eq(info.flight, PREFIXD_FLIGHT_WAITED);
	static char out[65536];
	cr_assert_eq(td_sh(out, sizeof(out), "%s --socket %s stats --prometheus", PREFIXCTL, td.sock), 0,
		     "%s", out);
	cr_expect(strstr(out, "\nprefixd_flight_claims_total 1\n"), "%s", out);
	cr_expect(strstr(out, "\nprefixd_flight_waits_total 1\n"), "%s", out);
	cr_expect(strstr(out, "\nprefixd_flight_wait_milliseconds_total "), "%s", out);
	cr_expect(strstr(out, "\nprefixd_flight_claims_inherited_total 0\n"), "%s", out);
	cr_expect(strstr(out, "\nprefixd_flight_claims_expired_total 0\n"), "%s", out);
	cr_assert_eq(td_sh(out, sizeof(out), "%s --socket %s stats", PREFIXCTL, td.sock), 0, "%s", out);
	cr_expect(strstr(out, "claims made by a MATCH (single flight)"), "%s", out);
	cr_expect(strstr(out, "MATCH requests that waited for another's claim"), "%s", out);
	prefixd_close(a);
	prefixd_close(b);
	cr_expect_eq(td_stop(&td), 0);
}

Test(flight, a_claim_whose_blocks_cannot_be_stored_sends_its_waiters_to_compute)
{
	/* Room for 8 blocks of 8 KiB, all leased by a bystander. */
	const char *extra[] = { "--memory", "64K", "--claim-timeout", "10", NULL };
	start(extra);
	struct prefixd *full = client(), *a = client(), *b = client();
	uint32_t t[8 * TD_BLOCK_TOKENS], p[2 * TD_BLOCK_TOKENS], hit, stored, dedup;
	td_prompt(t, 8, 1000);
	td_prompt(p, 2, 5000);
	uint64_t held, lease;
	const void *kv[8];
	cr_assert_eq(td_publish(full, 0, t, 0, 8, &stored, &dedup), 0);
	cr_assert_eq(prefixd_match(full, t, 8, &held, &hit, kv), 0);
	cr_assert_eq(hit, 8, "the budget is full of leased blocks");
	struct prefixd_match_info info;
	cr_assert_eq(prefixd_match_wait(a, p, 2, 5000, &lease, &hit, kv, &info), 0);
	cr_assert_eq(info.flight, PREFIXD_FLIGHT_CLAIMED);
	struct half h = { a, p, 0, 2 };
	pthread_t th;
	pthread_create(&th, NULL, publish_half, &h); /* fails: the budget is full */
	double t0 = td_now_s();
	cr_assert_eq(prefixd_match_wait(b, p, 2, 8000, &lease, &hit, kv, &info), 0);
	double took = td_now_s() - t0;
	pthread_join(th, NULL);
	cr_expect_eq(h.rc, -ENOSPC, "the claimant's publish stopped at the budget");
	cr_expect_eq(info.flight, PREFIXD_FLIGHT_WAITED);
	cr_expect_eq(hit, 0);
	cr_expect_lt(took, 2.0, "told to compute at the failed publish (%.2f s), not at the claim's timeout",
		     took);
	prefixd_close(full);
	prefixd_close(a);
	prefixd_close(b);
	cr_expect_eq(td_stop(&td), 0);
}

Test(flight, a_match_too_large_for_a_connections_own_buffer_never_waits)
{
	start(NULL);
	struct prefixd *a = client(), *b = client();
	/* 4000 blocks of 4 tokens: a 192 KB body, past the 128 KiB a
	 * connection keeps, so it draws on --request-memory. */
	enum { N = 4000 };
	static uint32_t t[N * TD_BLOCK_TOKENS];
	static const void *kv[N];
	td_prompt(t, N, 10);
	uint64_t lease;
	uint32_t hit;
	struct prefixd_match_info info;
	cr_assert_eq(prefixd_match_wait(a, t, N, 1000, &lease, &hit, kv, &info), 0, "%s",
		     prefixd_errmsg());
	cr_expect_eq(info.flight, PREFIXD_FLIGHT_CLAIMED);
	double t0 = td_now_s();
	cr_assert_eq(prefixd_match_wait(b, t, N, 3000, &lease, &hit, kv, &info), 0);
	cr_expect_lt(td_now_s() - t0, 1.0, "it did not wait");
	cr_expect_eq(info.flight, PREFIXD_FLIGHT_NONE);
	cr_expect_eq(stats().waits, 0);
	prefixd_close(a);
	prefixd_close(b);
	cr_expect_eq(td_stop(&td), 0);
}

/* In a child as nobody, a member of the shared namespace's group: waits
 * for the publisher's claim on p there, then cannot claim q there.
 * Exit code: 0, or which step failed. */
static int member_waits(const uint32_t *p, const uint32_t *q)
{
	gid_t g = 65534;
	if (setgroups(1, &g) || setgid(65534) || setuid(65534))
		return 64;
	struct prefixd_layout l = td_layout(1);
	struct prefixd *c;
	if (prefixd_connect_flags(td.sock, &l, PREFIXD_CONNECT_SHARED, &c))
		return 65;
	uint64_t lease;
	uint32_t hit;
	const void *kv[2];
	struct prefixd_match_info info;
	if (prefixd_match_wait(c, p, 2, 5000, &lease, &hit, kv, &info))
		return 66;
	if (info.flight != PREFIXD_FLIGHT_WAITED || hit != 2 || !td_block_ok(p, 1, kv[1]))
		return 1; /* did not wait for the publisher's blocks */
	if (prefixd_match_wait(c, q, 2, 1000, &lease, &hit, kv, &info))
		return 67;
	if (info.flight != PREFIXD_FLIGHT_NONE)
		return 2; /* a member claimed in the shared namespace */
	prefixd_close(c);
	return 0;
}

Test(flight, members_of_the_shared_namespace_wait_on_its_publishers_claims_only)
{
	cr_assert_eq(geteuid(), 0, "this test changes uid: run it as root (the README's test command does)");
	const char *extra[] = { "--group", "65534", "--shared-group", "65534", "--shared-publishers",
				"0", NULL };
	start(extra);
	td_share_dir(&td);
	uint32_t p[2 * TD_BLOCK_TOKENS], q[2 * TD_BLOCK_TOKENS], hit, stored, dedup;
	td_prompt(p, 2, 300);
	td_prompt(q, 2, 900);
	struct prefixd_layout l = td_layout(1);
	struct prefixd *pub;
	cr_assert_eq(prefixd_connect_flags(td.sock, &l, PREFIXD_CONNECT_SHARED, &pub), 0, "%s",
		     prefixd_errmsg());
	uint64_t lease;
	const void *kv[2];
	struct prefixd_match_info info;
	cr_assert_eq(prefixd_match_wait(pub, p, 2, 1000, &lease, &hit, kv, &info), 0);
	cr_assert_eq(info.flight, PREFIXD_FLIGHT_CLAIMED, "the publisher claims in the shared namespace");
	pid_t pid = fork();
	if (pid == 0)
		_exit(member_waits(p, q));
	struct prefixd_stats s = { 0 };
	for (int i = 0; i < 300 && (td_stats(&td, &s) || !s.waits); i++)
		usleep(10000);
	cr_expect_eq(s.waits, 1, "the member waits");
	cr_assert_eq(td_publish(pub, 0, p, 0, 2, &stored, &dedup), 0, "%s", prefixd_errmsg());
	int st;
	waitpid(pid, &st, 0);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "the member: status %d (1: did not wait for the publisher's blocks, 2: claimed)",
		  WEXITSTATUS(st));
	cr_expect_eq(stats().claims, 1, "the publisher's claim only");
	prefixd_close(pub);
	cr_expect_eq(td_stop(&td), 0);
}
