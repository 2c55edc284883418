/* SPDX-License-Identifier: MIT */
/*
 * The remote tier's index of Redis's keys (daemon/remote_index.c, fed by
 * daemon/remote/kv_watch.c): live, a miss it rules out makes no round
 * trip (Redis's own INFO commandstats says so), and another daemon's
 * write is learned from a keyspace notification, so it still hits; keys
 * deleted, expired or evicted in Redis leave it; CONFIG refused, Redis
 * killed or --remote-index off: not live, every miss asks as before
 * (timeout, breaker); on a 3-master cluster every master's keys are
 * learned.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon_asserts.h"
#include "helpers.h"
#include "redis_util.h"

#define BT TD_BLOCK_TOKENS

static struct test_redis rs;
static struct test_cluster cl;
static struct test_daemon ta, tb;
static char seed[PATH_MAX + 32], dir[PATH_MAX];

static void setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/pfx-rindex-XXXXXX");
	cr_assert(mkdtemp(dir));
}

static void teardown(void)
{
	char out[256];
	if (ta.pid > 0)
		td_kill(&ta);
	if (tb.pid > 0)
		td_kill(&tb);
	if (rs.pid)
		tr_stop(&rs);
	if (cl.n)
		tc_stop(&cl);
	td_sh(out, sizeof(out), "rm -rf %s", dir);
}

TestSuite(remote_index, .init = setup, .fini = teardown, .timeout = 120);

static void redis_up(const char *conf)
{
	if (!tr_available())
		cr_skip_test("redis-server is not installed (scripts/deps.sh installs it)");
	cr_assert_eq(tr_start(&rs, conf), 0);
	tr_seed(&rs, false, 0, seed, sizeof(seed));
}

/* A daemon of 4-token blocks on the test Redis, shared namespace. */
static void start(struct test_daemon *d, const char *const *extra)
{
	const char *base[] = { "--block-tokens", "4", "--shared-group", "0", "--remote", seed, NULL };
	t_start(d, base, extra);
}

static struct prefixd *shared_client(const struct test_daemon *d)
{
	struct prefixd_layout l = td_layout(1);
	struct prefixd *c;
	cr_assert_eq(prefixd_connect_flags(d->sock, &l, PREFIXD_CONNECT_SHARED, &c), 0, "%s",
		     prefixd_errmsg());
	return c;
}

/* Waits (up to 10 s) until d's stats satisfy cond. */
#define WAIT_STATS(d, s, cond)                                                 \
	({                                                                     \
		bool ok_ = false;                                              \
		for (int i_ = 0; i_ < 1000 && !ok_; i_++) {                    \
			ok_ = !td_stats(d, &(s)) && (cond);                    \
			if (!ok_)                                              \
				usleep(10000);                                 \
		}                                                              \
		ok_;                                                           \
	})

/* Waits (up to 5 s) until d's log has what. */
static bool wait_log(const struct test_daemon *d, const char *what)
{
	for (int i = 0; i < 500; i++) {
		if (td_log_has(d, what))
			return true;
		usleep(10000);
	}
	return false;
}

static void wait_live(const struct test_daemon *d)
{
	struct prefixd_stats s;
	cr_assert(WAIT_STATS(d, s, s.remote_index_live == 1), "the index went live");
}

/* Publishes blocks [0, n) of prompt k through A and waits until A wrote
 * `writes` records in all. */
static void publish(uint32_t k, uint32_t n, uint64_t writes)
{
	uint32_t p[8 * BT], stored, dedup;
	td_prompt(p, n, TD_PROMPT_K(k));
	struct prefixd *a = shared_client(&ta);
	cr_assert_eq(td_publish(a, 0, p, 0, n, &stored, &dedup), 0, "%s", prefixd_errmsg());
	prefixd_close(a);
	struct prefixd_stats s;
	cr_assert(WAIT_STATS(&ta, s, s.remote_writes >= writes), "A wrote its records");
}

/* The hit of prompt k's n blocks on d, each hit block the publisher's. */
static uint32_t match(const struct test_daemon *d, uint32_t k, uint32_t n)
{
	uint32_t p[8 * BT], hit;
	td_prompt(p, n, TD_PROMPT_K(k));
	struct prefixd *c = shared_client(d);
	uint64_t lease;
	const void *kv[8];
	cr_assert_eq(prefixd_match(c, p, n, &lease, &hit, kv), 0, "%s", prefixd_errmsg());
	for (uint32_t i = 0; i < hit; i++)
		cr_assert(td_block_ok(p, i, kv[i]), "block %u of a remote hit is not the publisher's", i);
	if (lease)
		prefixd_release(c, lease);
	prefixd_close(c);
	return hit;
}

/* GETs Redis r served so far (INFO commandstats). */
static long long gets_of(const struct test_redis *r)
{
	static char out[1 << 14];
	cr_assert_eq(tr_cmd(r, NULL, out, sizeof(out), "INFO", "commandstats", NULL), 0);
	const char *g = strstr(out, "cmdstat_get:calls=");
	return g ? atoll(g + strlen("cmdstat_get:calls=")) : 0;
}

/* Redis's keys of prompt records. */
static int keys_of(const struct test_redis *r, char keys[][256], int max)
{
	static char out[1 << 14];
	cr_assert_eq(tr_cmd(r, NULL, out, sizeof(out), "KEYS", "pfx2:*", NULL), 0);
	int n = 0;
	for (char *save, *l = strtok_r(out, "\n", &save); l && n < max; l = strtok_r(NULL, "\n", &save))
		if (!strncmp(l, "pfx2:", 5))
			snprintf(keys[n++], 256, "%s", l);
	return n;
}

Test(remote_index, another_daemons_write_is_learned_and_a_miss_costs_no_round_trip)
{
	redis_up(NULL);
	start(&ta, NULL);
	start(&tb, NULL);
	wait_live(&tb);
	cr_expect(td_log_has(&tb, "keys is live ("), "the log says so");
	long long gets = gets_of(&rs);
	cr_expect_eq(match(&tb, 1, 3), 0);
	cr_expect_eq(gets_of(&rs), gets, "a miss the index rules out sends Redis no GET");
	struct prefixd_stats s = t_stats(&tb);
	cr_expect_eq(s.remote_index_skips, 1);
	cr_expect_eq(s.remote_misses, 1);
	publish(1, 3, 3);
	/* Learned from the notifications, not from a lookup of B's. */
	cr_assert(WAIT_STATS(&tb, s, s.remote_index_keys == 3), "B learned A's 3 keys: %llu",
		  (unsigned long long)s.remote_index_keys);
	cr_expect_eq(match(&tb, 1, 3), 3, "B hits what A wrote");
	cr_expect_eq(gets_of(&rs), gets + 3, "one GET a block, in one round trip");
	s = t_stats(&tb);
	cr_expect_eq(s.remote_hits, 3);
	cr_expect_eq(s.remote_index_skips, 1);
	static char out[1 << 16];
	cr_expect_eq(t_ctl(&tb, out, sizeof(out), "stats", "--prometheus"), 0, "%s", out);
	cr_expect(strstr(out, "prefixd_remote_index_live 1"), "%s", out);
	cr_expect(strstr(out, "prefixd_remote_index_keys 3"), "%s", out);
	t_stop(&ta);
	t_stop(&tb);
}

Test(remote_index, a_daemons_own_writes_and_a_scan_at_start_fill_it)
{
	redis_up(NULL);
	start(&ta, NULL);
	publish(1, 2, 2);
	struct prefixd_stats s;
	cr_assert(WAIT_STATS(&ta, s, s.remote_index_keys == 2 && s.remote_index_live == 1));
	/* A daemon started after the writes: its SCAN finds them. */
	start(&tb, NULL);
	wait_live(&tb);
	cr_expect_eq(t_stats(&tb).remote_index_keys, 2, "the scan at start found the 2 keys");
	cr_expect_eq(match(&tb, 1, 2), 2);
	t_stop(&ta);
	t_stop(&tb);
}

Test(remote_index, keys_deleted_expired_or_evicted_in_redis_leave_it)
{
	redis_up(NULL);
	start(&ta, NULL);
	start(&tb, NULL);
	wait_live(&tb);
	publish(1, 4, 4);
	struct prefixd_stats s;
	cr_assert(WAIT_STATS(&tb, s, s.remote_index_keys == 4));
	char keys[4][256], out[256];
	cr_assert_eq(keys_of(&rs, keys, 4), 4);
	cr_assert_eq(tr_cmd(&rs, NULL, out, sizeof(out), "DEL", keys[0], NULL), 0);
	cr_expect(WAIT_STATS(&tb, s, s.remote_index_keys == 3), "a DEL drops it: %llu",
		  (unsigned long long)s.remote_index_keys);
	cr_assert_eq(tr_cmd(&rs, NULL, out, sizeof(out), "PEXPIRE", keys[1], "1", NULL), 0);
	cr_expect(WAIT_STATS(&tb, s, s.remote_index_keys == 2), "an expiry drops it: %llu",
		  (unsigned long long)s.remote_index_keys);
	/* Eviction: a memory limit below what Redis uses, then a write. */
	cr_assert_eq(tr_cmd(&rs, NULL, out, sizeof(out), "CONFIG", "SET", "maxmemory-policy",
			    "allkeys-random", NULL), 0);
	cr_assert_eq(tr_cmd(&rs, NULL, out, sizeof(out), "CONFIG", "SET", "maxmemory", "1", NULL), 0);
	tr_cmd(&rs, NULL, out, sizeof(out), "SET", "other", "x", NULL);
	cr_assert_eq(tr_cmd(&rs, NULL, out, sizeof(out), "CONFIG", "SET", "maxmemory", "0", NULL), 0);
	cr_expect(WAIT_STATS(&tb, s, s.remote_index_keys == 0), "evictions drop them: %llu",
		  (unsigned long long)s.remote_index_keys);
	cr_expect_eq(keys_of(&rs, keys, 4), 0, "Redis evicted them");
	/* Gone from Redis and from the index: no round trip, no hit. */
	long long gets = gets_of(&rs);
	cr_expect_eq(match(&tb, 1, 4), 0);
	cr_expect_eq(gets_of(&rs), gets);
	cr_expect_eq(t_stats(&tb).remote_index_live, 1);
	t_stop(&ta);
	t_stop(&tb);
}

Test(remote_index, config_refused_stays_in_ask_mode_and_still_hits)
{
	redis_up("rename-command CONFIG \"\"\n");
	start(&ta, NULL);
	start(&tb, NULL);
	cr_assert(wait_log(&tb, "refused CONFIG"), "B says what the admin should set");
	cr_expect(td_log_has(&tb, "notify-keyspace-events"));
	publish(1, 3, 3);
	long long gets = gets_of(&rs);
	cr_expect_eq(match(&tb, 1, 3), 3, "B asks Redis and hits");
	cr_expect_eq(match(&tb, 2, 1), 0);
	cr_expect_eq(gets_of(&rs), gets + 3 + 1, "each miss asks");
	struct prefixd_stats s = t_stats(&tb);
	cr_expect_eq(s.remote_index_live, 0);
	cr_expect_eq(s.remote_index_skips, 0);
	t_stop(&ta);
	t_stop(&tb);
}

Test(remote_index, an_acl_without_config_stays_in_ask_mode_and_still_hits)
{
	redis_up("user default on nopass ~* &* +@all -config\n");
	start(&ta, NULL);
	start(&tb, NULL);
	cr_assert(wait_log(&tb, "refused CONFIG"), "B says what the admin should set");
	cr_expect(td_log_has(&tb, "NOPERM"), "and why");
	publish(1, 2, 2);
	cr_expect_eq(match(&tb, 1, 2), 2, "B asks Redis and hits");
	cr_expect_eq(t_stats(&tb).remote_index_live, 0);
	t_stop(&ta);
	t_stop(&tb);
}

Test(remote_index, off_every_miss_asks)
{
	redis_up(NULL);
	const char *off[] = { "--remote-index", "off", NULL };
	start(&tb, off);
	cr_expect(wait_log(&tb, "no index of"));
	usleep(300000);
	long long gets = gets_of(&rs);
	cr_expect_eq(match(&tb, 1, 2), 0);
	cr_expect_eq(gets_of(&rs), gets + 2, "the miss asked Redis (a GET a block)");
	struct prefixd_stats s = t_stats(&tb);
	cr_expect_eq(s.remote_index_live, 0);
	cr_expect_eq(s.remote_index_skips, 0);
	t_stop(&tb);
}

Test(remote_index, redis_killed_is_not_live_misses_ask_and_the_breaker_opens)
{
	redis_up(NULL);
	const char *fast[] = { "--remote-timeout", "50", NULL };
	start(&ta, NULL);
	start(&tb, fast);
	wait_live(&tb);
	tr_kill(&rs);
	struct prefixd_stats s;
	cr_assert(WAIT_STATS(&tb, s, s.remote_index_live == 0), "Redis killed: not live");
	for (uint32_t k = 10; k < 20; k++)
		cr_expect_eq(match(&tb, k, 1), 0);
	s = t_stats(&tb);
	cr_expect_geq(s.remote_errors, 1, "the misses asked");
	cr_expect_geq(s.remote_breaker_opens, 1, "the breaker opened");
	cr_assert_eq(tr_restart(&rs), 0);
	cr_assert(WAIT_STATS(&tb, s, s.remote_index_live == 1), "live again once Redis is back");
	publish(1, 1, 1);
	cr_assert(WAIT_STATS(&tb, s, s.remote_index_keys == 1));
	cr_expect_eq(match(&tb, 1, 1), 1, "hits resume");
	t_stop(&ta);
	t_stop(&tb);
}

Test(remote_index, a_stopped_redis_is_not_live_within_seconds_and_misses_ask)
{
	redis_up(NULL);
	const char *fast[] = { "--remote-timeout", "50", NULL };
	start(&tb, fast);
	wait_live(&tb);
	tr_pause(&rs);
	/* Its heartbeat (a CONFIG GET a second, 1 s to answer) notices. */
	struct prefixd_stats s;
	cr_assert(WAIT_STATS(&tb, s, s.remote_index_live == 0), "Redis stopped: not live");
	for (uint32_t k = 10; k < 16; k++)
		cr_expect_eq(match(&tb, k, 1), 0);
	s = t_stats(&tb);
	cr_expect_geq(s.remote_errors, 1, "the misses asked (and timed out)");
	cr_expect_geq(s.remote_breaker_opens, 1, "the breaker opened");
	tr_resume(&rs);
	cr_assert(WAIT_STATS(&tb, s, s.remote_index_live == 1), "live again once Redis wakes");
	t_stop(&tb);
}

Test(remote_index, every_masters_keys_are_learned_in_a_cluster)
{
	if (!tr_available())
		cr_skip_test("redis-server is not installed (scripts/deps.sh installs it)");
	cr_assert_eq(tc_start(&cl, 3), 0);
	char bufs[3][64];
	const char *seeds[3];
	tc_seeds(&cl, bufs[0], sizeof(bufs[0]), seeds);
	const char *args[] = { "--block-tokens", "4", "--shared-group", "0", "--remote-cluster",
			       "--remote", seeds[0], NULL };
	t_start(&ta, args, NULL);
	t_start(&tb, args, NULL);
	wait_live(&tb);
	publish(1, 8, 8);
	struct prefixd_stats s;
	cr_assert(WAIT_STATS(&tb, s, s.remote_index_keys == 8), "B learned 8 keys: %llu",
		  (unsigned long long)s.remote_index_keys);
	int masters = 0;
	for (int i = 0; i < 3; i++) {
		char keys[8][256];
		masters += keys_of(&cl.node[i], keys, 8) > 0;
	}
	cr_expect_geq(masters, 2, "the keys are spread over the masters");
	cr_expect_eq(match(&tb, 1, 8), 8);
	long long gets = 0;
	for (int i = 0; i < 3; i++)
		gets += gets_of(&cl.node[i]);
	cr_expect_eq(match(&tb, 2, 8), 0);
	long long after = 0;
	for (int i = 0; i < 3; i++)
		after += gets_of(&cl.node[i]);
	cr_expect_eq(after, gets, "a miss costs no master a GET");
	/* A reshard moves a key: restored on one master, deleted on the
	 * other, events that may cross; it stays known. */
	char keys[8][256], out[64];
	int from = -1;
	for (int i = 0; i < 3 && from < 0; i++)
		if (keys_of(&cl.node[i], keys, 8) > 0)
			from = i;
	cr_assert_eq(tr_cmd(&cl.node[0], NULL, out, sizeof(out), "CLUSTER", "KEYSLOT", keys[0], NULL),
		     0);
	unsigned slot = (unsigned)atoi(out);
	cr_assert_eq(tc_move_slots(&cl, from, (from + 1) % 3, slot, slot), 0);
	usleep(300000);
	s = t_stats(&tb);
	cr_expect_eq(s.remote_index_keys, 8, "still 8 keys after the move: %llu",
		     (unsigned long long)s.remote_index_keys);
	/* A master restarted (empty: no persistence): not live, then
	 * subscribed and scanned again, its keys gone. */
	int gone = keys_of(&cl.node[2], keys, 8);
	cr_assert_eq(tc_restart(&cl, 2), 0);
	cr_assert(WAIT_STATS(&tb, s, s.remote_index_live == 1 && s.remote_index_keys == 8u - gone),
		  "live again with %d keys: live %llu, %llu keys", 8 - gone,
		  (unsigned long long)s.remote_index_live, (unsigned long long)s.remote_index_keys);
	t_stop(&ta);
	t_stop(&tb);
	cr_expect_eq(tc_stop(&cl), 0);
	cl.n = 0;
}

Test(remote_index, past_its_cap_every_miss_asks)
{
	redis_up(NULL);
	start(&ta, NULL);
	publish(1, 3, 3);
	const char *cap[] = { "--remote-index", "2", NULL };
	start(&tb, cap);
	cr_assert(wait_log(&tb, "holds more than --remote-index 2 keys"), "B says why it asks");
	struct prefixd_stats s = t_stats(&tb);
	cr_expect_eq(s.remote_index_live, 0);
	long long gets = gets_of(&rs);
	cr_expect_eq(match(&tb, 2, 1), 0);
	cr_expect_eq(gets_of(&rs), gets + 1, "the miss asked Redis");
	cr_expect_eq(match(&tb, 1, 3), 3);
	t_stop(&ta);
	t_stop(&tb);
}
