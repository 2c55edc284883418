/* SPDX-License-Identifier: MIT */
/*
 * The remote tier: two daemons ("hosts") with their own memory and disk
 * share one private redis-server. A prefix published through the first is
 * attached through the second; values damaged, cut short, of another
 * model or forged are dropped, counted and never served; a stopped or
 * killed Redis costs a MATCH at most the timeout and turns into misses,
 * and hits come back with it; per-user namespaces stay local unless
 * --remote-users all; bad flags are refused. The runtime's logits on a
 * prefix fetched from Redis equal an uncached run's.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <sodium.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon_asserts.h"
#include "helpers.h"
#include "redis_util.h"

#define BT TD_BLOCK_TOKENS

static struct test_redis rs;
static struct test_daemon ta, tb;
static char seed[PATH_MAX + 32], keyfile[PATH_MAX + 16], dir[PATH_MAX];

static void setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/pfx-remote-XXXXXX");
	cr_assert(mkdtemp(dir));
	snprintf(keyfile, sizeof(keyfile), "%s/key", dir);
	int fd = open(keyfile, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	cr_assert_geq(fd, 0);
	const char k[] = "an-example-secret-of-forty-bytes-at-least\n";
	cr_assert_eq(write(fd, k, sizeof(k) - 1), (ssize_t)sizeof(k) - 1);
	close(fd);
}

static void teardown(void)
{
	char out[256];
	/* What a failed test left running. */
	if (ta.pid > 0)
		td_kill(&ta);
	if (tb.pid > 0)
		td_kill(&tb);
	if (rs.pid)
		tr_stop(&rs);
	td_sh(out, sizeof(out), "rm -rf %s", dir);
}

TestSuite(remote, .init = setup, .fini = teardown, .timeout = 120);

/* A private Redis, or the test skipped (with why) when there is none. */
static void redis_up(void)
{
	if (!tr_available())
		cr_skip_test("redis-server is not installed (scripts/deps.sh installs it)");
	cr_assert_eq(tr_start(&rs, NULL), 0);
	tr_seed(&rs, false, 0, seed, sizeof(seed));
}

/* A daemon of 4-token blocks on the test Redis with a shared namespace
 * (root publishes into it), its disk in DIR/tag, and extra flags. */
static void start(struct test_daemon *d, const char *tag, bool key, const char *const *extra)
{
	static char disks[2][PATH_MAX + 16];
	char *disk = disks[d == &tb];
	snprintf(disk, sizeof(disks[0]), "%s/%s", dir, tag);
	const char *base[] = { "--block-tokens", "4", "--shared-group", "0", "--disk-dir", disk,
			       "--remote", seed, key ? "--remote-key-file" : NULL, keyfile, NULL };
	t_start(d, base, extra);
}

static struct prefixd *shared_client(const struct test_daemon *d, uint8_t model)
{
	struct prefixd_layout l = td_layout(model);
	struct prefixd *c;
	cr_assert_eq(prefixd_connect_flags(d->sock, &l, PREFIXD_CONNECT_SHARED, &c), 0, "%s",
		     prefixd_errmsg());
	return c;
}

/* Waits (up to 5 s) until d wrote n records to Redis, and until the other
 * daemon, if its index of Redis's keys is live, learned of as many keys
 * (a notification takes a moment: a lookup before it would be a miss). */
static struct prefixd_stats wait_writes(const struct test_daemon *d, uint64_t n)
{
	struct prefixd_stats s = { 0 }, o;
	for (int i = 0; i < 500 && (td_stats(d, &s) || s.remote_writes < n); i++)
		usleep(10000);
	cr_assert_geq(s.remote_writes, n, "records written to Redis");
	const struct test_daemon *other = d == &ta ? &tb : &ta;
	for (int i = 0; other->pid > 0 && i < 200 && !td_stats(other, &o) &&
			o.remote_index_live && o.remote_index_keys < n;
	     i++)
		usleep(10000);
	return s;
}

/* The key of model m's record whose hash starts the key's last field
 * (found with KEYS: the test knows the fingerprint, not the hash). */
static int keys_of(uint8_t model, char keys[][256], int max)
{
	char pat[128], fp[2 * 32 + 1], out[8192];
	for (int i = 0; i < 32; i++)
		snprintf(fp + 2 * i, 3, "%02x", model);
	snprintf(pat, sizeof(pat), "pfx2:*:%s:8192:4:*", fp);
	cr_assert_eq(tr_cmd(&rs, NULL, out, sizeof(out), "KEYS", pat, NULL), 0);
	int n = 0;
	for (char *save, *l = strtok_r(out, "\n", &save); l && n < max; l = strtok_r(NULL, "\n", &save))
		if (!strncmp(l, "pfx2:", 5))
			snprintf(keys[n++], 256, "%s", l);
	return n;
}

static void eval(const char *script, const char *k1, const char *k2, const char *arg)
{
	char out[512];
	int rc = k2 ? tr_cmd(&rs, NULL, out, sizeof(out), "EVAL", script, "2", k1, k2, NULL)
		    : tr_cmd(&rs, NULL, out, sizeof(out), "EVAL", script, "1", k1, arg, NULL);
	cr_assert_eq(rc, 0);
	cr_assert(out[0] != '-', "%s: %s", script, out);
}

/* Block-by-block match of prompt p (n blocks) on d: the hit, every hit
 * block checked to be the publisher's bytes. */
static uint32_t match_ok(struct prefixd *c, const uint32_t *p, uint32_t n)
{
	uint64_t lease;
	uint32_t hit;
	const void *kv[16];
	cr_assert_eq(prefixd_match(c, p, n, &lease, &hit, kv), 0, "%s", prefixd_errmsg());
	for (uint32_t i = 0; i < hit; i++)
		cr_assert(td_block_ok(p, i, kv[i]), "block %u of a remote hit is not the publisher's", i);
	if (lease)
		prefixd_release(c, lease);
	return hit;
}

Test(remote, a_prefix_published_on_one_host_is_attached_on_another)
{
	redis_up();
	start(&ta, "a", true, NULL);
	start(&tb, "b", true, NULL);
	uint32_t p[4 * BT], stored, dedup;
	td_prompt(p, 4, TD_PROMPT_K(1));
	struct prefixd *a = shared_client(&ta, 1);
	cr_assert_eq(td_publish(a, 0, p, 0, 3, &stored, &dedup), 0, "%s", prefixd_errmsg());
	struct prefixd_stats s = wait_writes(&ta, 3);
	cr_expect_eq(s.remote_write_drops, 0);
	cr_expect_gt(s.remote_bytes_out, 3 * 8192);
	struct prefixd *b = shared_client(&tb, 1);
	cr_expect_eq(match_ok(b, p, 4), 3, "the 3 blocks published on the other host");
	s = t_stats(&tb);
	cr_expect_eq(s.remote_hits, 3);
	cr_expect_eq(s.remote_bad_checksum + s.remote_bad_foreign + s.remote_bad_mac, 0);
	cr_expect_gt(s.remote_bytes_in, 3 * 8192);
	cr_expect(td_log_has(&tb, "records signed (--remote-key-file)"), "the log says how it runs");
	/* Now in B's memory: no second trip. */
	cr_expect_eq(match_ok(b, p, 3), 3);
	cr_expect_eq(t_stats(&tb).remote_hits, 3);
	/* Where the chain is, for each daemon: in memory and in Redis. */
	static char out[1 << 16];
	cr_expect_eq(t_ctl(&ta, out, sizeof(out), "ls", ""), 0, "%s", out);
	cr_expect(strstr(out, "both+remote"), "A wrote it (and has it on disk): %s", out);
	cr_expect_eq(t_ctl(&tb, out, sizeof(out), "ls", ""), 0, "%s", out);
	cr_expect(strstr(out, "+remote"), "B read it: %s", out);
	cr_expect_eq(t_ctl(&tb, out, sizeof(out), "stats", "--prometheus"), 0, "%s", out);
	cr_expect(strstr(out, "prefixd_remote_hit_blocks_total 3"), "%s", out);
	prefixd_close(a);
	prefixd_close(b);
	t_stop(&ta);
	t_stop(&tb);
}

/* KiB of d's block arenas resident in its own mappings (/proc/PID/smaps). */
static uint64_t arena_rss_kib(const struct test_daemon *d)
{
	char path[64], line[512];
	snprintf(path, sizeof(path), "/proc/%d/smaps", (int)d->pid);
	FILE *f = fopen(path, "r");
	uint64_t kib = 0, v;
	bool arena = false;
	while (f && fgets(line, sizeof(line), f)) {
		uint64_t from, to;
		if (sscanf(line, "%" SCNx64 "-%" SCNx64 " ", &from, &to) == 2)
			arena = strstr(line, "prefixd-arena") != NULL;
		else if (arena && sscanf(line, "Rss: %" SCNu64 " kB", &v) == 1)
			kib += v;
	}
	if (f)
		fclose(f);
	return kib;
}

/* A fetch starts the store's pool: free slots' pages written ahead, past
 * the blocks fetched (64 slots at most; without the pool only the 3). */
Test(remote, a_fetch_has_free_slots_populated_ahead)
{
	redis_up();
	start(&ta, "a", true, NULL);
	start(&tb, "b", true, NULL);
	uint32_t p[4 * BT], stored, dedup;
	td_prompt(p, 4, TD_PROMPT_K(3));
	struct prefixd *a = shared_client(&ta, 1);
	cr_assert_eq(td_publish(a, 0, p, 0, 3, &stored, &dedup), 0, "%s", prefixd_errmsg());
	wait_writes(&ta, 3);
	struct prefixd *b = shared_client(&tb, 1);
	cr_expect_eq(arena_rss_kib(&tb), 0, "no slot before the fetch");
	cr_assert_eq(match_ok(b, p, 4), 3);
	uint64_t slot_kib = 8192 / 1024, want = (3 + 64) * slot_kib, got = 0;
	for (int i = 0; i < 500 && (got = arena_rss_kib(&tb)) < want; i++)
		usleep(10000);
	cr_expect_geq(got, want, "B's arenas hold %" PRIu64 " KiB resident, not the 3 blocks "
		      "and 64 populated slots", got);
	prefixd_close(a);
	prefixd_close(b);
	t_stop(&ta);
	t_stop(&tb);
}

/* In a child as nobody, a member of B's shared namespace (not a
 * publisher): the prefix attached from Redis. 0, or which step failed. */
static int member_attaches(const uint32_t *p)
{
	gid_t g = 65534;
	if (setgroups(1, &g) || setgid(65534) || setuid(65534))
		return 64;
	struct prefixd_layout l = td_layout(1);
	struct prefixd *c;
	if (prefixd_connect_flags(tb.sock, &l, PREFIXD_CONNECT_SHARED, &c))
		return 65;
	uint64_t lease;
	uint32_t hit;
	const void *kv[3];
	if (prefixd_match(c, p, 3, &lease, &hit, kv))
		return 66;
	for (uint32_t i = 0; i < hit; i++)
		if (!td_block_ok(p, i, kv[i]))
			return 2;
	prefixd_close(c);
	return hit == 3 ? 0 : 1;
}

Test(remote, a_member_of_the_shared_namespace_attaches_what_another_host_published)
{
	cr_assert_eq(geteuid(), 0, "this test changes uid: run it as root");
	redis_up();
	start(&ta, "a", true, NULL);
	const char *member[] = { "--group", "65534", "--shared-group", "65534", NULL };
	start(&tb, "b", true, member);
	cr_assert_eq(td_share_dir(&tb), 0);
	uint32_t p[3 * BT], stored, dedup;
	td_prompt(p, 3, TD_PROMPT_K(4));
	struct prefixd *a = shared_client(&ta, 1);
	cr_assert_eq(td_publish(a, 0, p, 0, 3, &stored, &dedup), 0, "%s", prefixd_errmsg());
	prefixd_close(a);
	wait_writes(&ta, 3);
	/* Nothing was ever published into B's shared namespace. */
	pid_t pid = fork();
	if (pid == 0)
		_exit(member_attaches(p));
	int st;
	waitpid(pid, &st, 0);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "the member: status %d (1: not every block hit, 2: wrong bytes)", WEXITSTATUS(st));
	cr_expect_eq(t_stats(&tb).remote_hits, 3);
	t_stop(&ta);
	t_stop(&tb);
}

/* Publishes prompt k's first block on A under model, waits for its record. */
static void publish_one(uint8_t model, uint32_t k, uint64_t writes)
{
	uint32_t p[BT], stored, dedup;
	td_prompt(p, 1, TD_PROMPT_K(k));
	struct prefixd *a = shared_client(&ta, model);
	cr_assert_eq(td_publish(a, 0, p, 0, 1, &stored, &dedup), 0, "%s", prefixd_errmsg());
	prefixd_close(a);
	wait_writes(&ta, writes);
}

static uint32_t match_on_b(uint8_t model, uint32_t k)
{
	uint32_t p[BT];
	td_prompt(p, 1, TD_PROMPT_K(k));
	struct prefixd *b = shared_client(&tb, model);
	uint32_t hit = match_ok(b, p, 1);
	prefixd_close(b);
	return hit;
}

Test(remote, damaged_cut_short_and_foreign_values_are_dropped_and_counted)
{
	redis_up();
	start(&ta, "a", false, NULL);
	start(&tb, "b", false, NULL);
	char keys[4][256];
	/* A byte of the payload changed. */
	publish_one(1, 1, 1);
	cr_assert_eq(keys_of(1, keys, 4), 1);
	eval("return redis.call('SETRANGE', KEYS[1], 4096 + 100, ARGV[1])", keys[0], NULL, "X");
	cr_expect_eq(match_on_b(1, 1), 0, "a damaged record is never served");
	cr_expect_eq(t_stats(&tb).remote_bad_checksum, 1);
	/* Cut short. */
	eval("return redis.call('DEL', KEYS[1])", keys[0], NULL, "");
	publish_one(1, 2, 2);
	cr_assert_eq(keys_of(1, keys, 4), 1);
	eval("return redis.call('SET', KEYS[1], string.sub(redis.call('GET', KEYS[1]), 1, tonumber(ARGV[1])))",
	     keys[0], NULL, "6000");
	cr_expect_eq(match_on_b(1, 2), 0, "a record cut short is never served");
	cr_expect_eq(t_stats(&tb).remote_bad_checksum, 2);
	/* Another model's intact record under this model's key. */
	eval("return redis.call('DEL', KEYS[1])", keys[0], NULL, "");
	publish_one(2, 3, 3);
	publish_one(1, 3, 4);
	char other[4][256];
	cr_assert_eq(keys_of(1, keys, 4), 1);
	cr_assert_eq(keys_of(2, other, 4), 1);
	eval("return redis.call('SET', KEYS[2], redis.call('GET', KEYS[1]))", other[0], keys[0], NULL);
	cr_expect_eq(match_on_b(1, 3), 0, "another model's record is never served");
	struct prefixd_stats s = t_stats(&tb);
	cr_expect_eq(s.remote_bad_foreign, 1);
	cr_expect_eq(s.remote_hits, 0);
	/* The intact one of model 2 is served to model 2. */
	cr_expect_eq(match_on_b(2, 3), 1);
	cr_expect_eq(t_stats(&tb).remote_hits, 1);
	t_stop(&ta);
	t_stop(&tb);
}

Test(remote, with_a_key_a_forged_or_unsigned_record_is_dropped)
{
	redis_up();
	start(&ta, "a", true, NULL);
	start(&tb, "b", true, NULL);
	char keys[4][256];
	publish_one(1, 1, 1);
	cr_assert_eq(keys_of(1, keys, 4), 1);
	/* A record rewritten (tokens changed, checksums made good would need
	 * more; any change at all) keeps a MAC that no longer fits. */
	eval("return redis.call('SETRANGE', KEYS[1], 4096 + 8, ARGV[1])", keys[0], NULL, "Y");
	cr_expect_eq(match_on_b(1, 1), 0, "a changed record is never served");
	cr_expect_eq(t_stats(&tb).remote_bad_mac, 1);
	/* The record without its MAC, as a writer without the key makes it. */
	eval("return redis.call('DEL', KEYS[1])", keys[0], NULL, "");
	publish_one(1, 2, 2);
	cr_assert_eq(keys_of(1, keys, 4), 1);
	eval("local v = redis.call('GET', KEYS[1]) return redis.call('SET', KEYS[1], string.sub(v, 1, #v - 32))",
	     keys[0], NULL, "");
	cr_expect_eq(match_on_b(1, 2), 0, "an unsigned record is never served");
	cr_expect_eq(t_stats(&tb).remote_bad_mac, 2);
	/* A record with a MAC of another key. */
	eval("local v = redis.call('GET', KEYS[1]) return redis.call('SET', KEYS[1], v .. string.rep('z', 32))",
	     keys[0], NULL, "");
	cr_expect_eq(match_on_b(1, 2), 0, "a forged MAC is never accepted");
	struct prefixd_stats s = t_stats(&tb);
	cr_expect_eq(s.remote_bad_mac, 3);
	cr_expect_eq(s.remote_hits, 0);
	t_stop(&ta);
	t_stop(&tb);
}

/* The value of key as bytes (through Lua in hex: tr_cmd gives text):
 * its length, at most cap. */
static size_t value_of(const char *key, uint8_t *out, size_t cap)
{
	static char hex[2 * 65536 + 64];
	int rc = tr_cmd(&rs, NULL, hex, sizeof(hex), "EVAL",
			"local v = redis.call('GET', KEYS[1]) local t = {} "
			"for i = 1, #v do t[i] = string.format('%02x', v:byte(i)) end "
			"return table.concat(t)", "1", key, NULL);
	cr_assert_eq(rc, 0);
	size_t n = strlen(hex) / 2;
	cr_assert_leq(n, cap);
	for (size_t i = 0; i < n; i++) {
		unsigned b;
		cr_assert_eq(sscanf(hex + 2 * i, "%2x", &b), 1);
		out[i] = (uint8_t)b;
	}
	return n;
}

/* The depth a record in Redis says it has (its header's byte 56, low). */
static int depth_of(const char *key)
{
	char out[64];
	cr_assert_eq(tr_cmd(&rs, NULL, out, sizeof(out), "EVAL",
			    "return string.byte(redis.call('GETRANGE', KEYS[1], 56, 56))", "1",
			    key, NULL), 0);
	return atoi(out);
}

Test(remote, the_mac_is_poly1305_under_a_one_time_key_of_the_nonce)
{
	redis_up();
	start(&ta, "a", true, NULL);
	start(&tb, "b", true, NULL);
	char keys[4][256];
	publish_one(1, 1, 1);
	cr_assert_eq(keys_of(1, keys, 4), 1);
	/* docs/FORMAT.md, "Remote records", computed here apart from the
	 * daemon: 4096 + 8192 bytes of record (4-token blocks of 8 KiB). */
	static uint8_t v[16384];
	size_t size = 4096 + 8192, len = value_of(keys[0], v, sizeof(v));
	cr_assert_eq(len, size + 32);
	const char line[] = "an-example-secret-of-forty-bytes-at-least";
	uint8_t key[32], otk[32];
	crypto_generichash(key, sizeof(key), (const uint8_t *)line, sizeof(line) - 1, NULL, 0);
	const char ctx[] = "prefixd remote record MAC v2";
	crypto_generichash_state st;
	crypto_generichash_init(&st, key, sizeof(key), sizeof(otk));
	crypto_generichash_update(&st, (const uint8_t *)ctx, sizeof(ctx) - 1);
	crypto_generichash_update(&st, v + size, 16);
	crypto_generichash_final(&st, otk, sizeof(otk));
	cr_expect_eq(crypto_onetimeauth_verify(v + size + 16, v, size, otk), 0,
		     "the tag is Poly1305 of the record under the nonce's one-time key");
	cr_expect_eq(match_on_b(1, 1), 1);
	/* Another nonce: another one-time key, under which the tag fails. */
	eval("local v = redis.call('GET', KEYS[1]) local at = 4096 + 8192 + 1 "
	     "return redis.call('SET', KEYS[1], string.sub(v, 1, at - 1) .. "
	     "string.char((v:byte(at) + 1) % 256) .. string.sub(v, at + 1))", keys[0], NULL, "");
	/* A fresh B: the first had the block in memory. */
	t_stop(&tb);
	start(&tb, "b2", true, NULL);
	cr_expect_eq(match_on_b(1, 1), 0, "a value whose nonce changed is never served");
	cr_expect_eq(t_stats(&tb).remote_bad_mac, 1);
	t_stop(&ta);
	t_stop(&tb);
}

Test(remote, a_damaged_block_mid_chain_ends_the_hit_before_it)
{
	redis_up();
	start(&ta, "a", true, NULL);
	start(&tb, "b", true, NULL);
	uint32_t p[3 * BT], stored, dedup;
	td_prompt(p, 3, TD_PROMPT_K(7));
	struct prefixd *a = shared_client(&ta, 1);
	cr_assert_eq(td_publish(a, 0, p, 0, 3, &stored, &dedup), 0, "%s", prefixd_errmsg());
	prefixd_close(a);
	wait_writes(&ta, 3);
	char keys[4][256];
	cr_assert_eq(keys_of(1, keys, 4), 3);
	int mid = -1;
	for (int i = 0; i < 3; i++)
		if (depth_of(keys[i]) == 1)
			mid = i;
	cr_assert_geq(mid, 0, "no record of depth 1");
	/* One byte of block 1's payload: its MAC no longer fits. The three
	 * come in one pipeline, each taken as it arrives: block 0 is in
	 * before block 1 is refused, block 2 is never taken. */
	eval("return redis.call('SETRANGE', KEYS[1], 4096 + 100, ARGV[1])", keys[mid], NULL, "X");
	struct prefixd *b = shared_client(&tb, 1);
	cr_expect_eq(match_ok(b, p, 3), 1, "the hit ends before the damaged block");
	prefixd_close(b);
	struct prefixd_stats s = t_stats(&tb);
	cr_expect_eq(s.remote_bad_mac, 1);
	cr_expect_eq(s.remote_hits, 1);
	t_stop(&ta);
	t_stop(&tb);
}

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* The slowest of n MATCHes of fresh prompts on B (all miss). */
static double slowest_miss(struct prefixd *b, uint32_t first_k, int n)
{
	double worst = 0;
	for (int i = 0; i < n; i++) {
		uint32_t p[2 * BT];
		td_prompt(p, 2, TD_PROMPT_K(first_k + (uint32_t)i));
		double t0 = now_ms();
		cr_expect_eq(match_ok(b, p, 2), 0);
		double dt = now_ms() - t0;
		worst = dt > worst ? dt : worst;
	}
	return worst;
}

/* Waits (up to 5 s) for prompt k to hit on B again. */
static bool hits_again(uint32_t k)
{
	for (int i = 0; i < 100; i++) {
		if (match_on_b(1, k))
			return true;
		usleep(50000);
	}
	return false;
}

Test(remote, a_stopped_or_killed_redis_costs_at_most_the_timeout_and_comes_back)
{
	redis_up();
	/* Every miss asks (test_remote_index: with the index, once Redis is
	 * killed, the same). */
	const char *fast[] = { "--remote-timeout", "50", "--remote-index", "off", NULL };
	start(&ta, "a", true, NULL);
	start(&tb, "b", true, fast);
	publish_one(1, 1, 1);
	struct prefixd *b = shared_client(&tb, 1);
	cr_expect_lt(slowest_miss(b, 100, 3), 50, "misses while Redis answers");
	tr_pause(&rs);
	double worst = slowest_miss(b, 200, 20);
	/* 50 ms of timeout, and slack for a loaded machine under ASan. */
	cr_expect_lt(worst, 50 + 100, "a MATCH with Redis stopped took %.1f ms", worst);
	struct prefixd_stats s = t_stats(&tb);
	cr_expect_geq(s.remote_errors, 1);
	cr_expect_geq(s.remote_breaker_opens, 1, "the breaker opened");
	cr_expect_geq(s.remote_skipped, 1, "and lookups were skipped while open");
	tr_resume(&rs);
	cr_expect(hits_again(1), "hits resume once Redis answers");
	/* Killed: refused at once, then back empty (no persistence). */
	tr_kill(&rs);
	worst = slowest_miss(b, 300, 10);
	cr_expect_lt(worst, 50 + 100, "a MATCH with Redis killed took %.1f ms", worst);
	cr_assert_eq(tr_restart(&rs), 0);
	publish_one(1, 2, t_stats(&ta).remote_writes + 1);
	cr_expect(hits_again(2), "hits resume after Redis restarts");
	prefixd_close(b);
	t_stop(&ta);
	t_stop(&tb);
}

static long long dbsize(void)
{
	char out[64];
	cr_assert_eq(tr_cmd(&rs, NULL, out, sizeof(out), "DBSIZE", NULL), 0);
	return atoll(out);
}

Test(remote, per_user_namespaces_stay_local_unless_remote_users_all)
{
	redis_up();
	start(&ta, "a", false, NULL);
	uint32_t p[2 * BT], stored, dedup;
	td_prompt(p, 2, TD_PROMPT_K(1));
	struct prefixd *own = t_client(&ta, 1);
	cr_assert_eq(td_publish(own, 0, p, 0, 2, &stored, &dedup), 0, "%s", prefixd_errmsg());
	prefixd_close(own);
	/* A shared publish after it: once its record is there, the own one
	 * would have been too. */
	publish_one(1, 2, 1);
	cr_expect_eq(dbsize(), 1, "the user's own blocks stay on this host");
	cr_expect_eq(t_stats(&ta).remote_writes, 1);
	t_stop(&ta);
	const char *all[] = { "--remote-users", "all", NULL };
	start(&ta, "a2", false, all);
	start(&tb, "b", false, all);
	own = t_client(&ta, 1);
	td_prompt(p, 2, TD_PROMPT_K(3));
	cr_assert_eq(td_publish(own, 0, p, 0, 2, &stored, &dedup), 0, "%s", prefixd_errmsg());
	prefixd_close(own);
	wait_writes(&ta, 2);
	struct prefixd *b = t_client(&tb, 1);
	cr_expect_eq(match_ok(b, p, 2), 2, "with --remote-users all, the user's blocks travel");
	prefixd_close(b);
	t_stop(&ta);
	t_stop(&tb);
}

Test(remote, bad_remote_flags_say_what_is_wrong)
{
	char out[16384], loose[PATH_MAX + 16], shorter[PATH_MAX + 16], args[PATH_MAX + 64];
	snprintf(loose, sizeof(loose), "%s/loose", dir);
	snprintf(shorter, sizeof(shorter), "%s/short", dir);
	cr_assert_eq(td_sh(out, sizeof(out), "echo a-secret-that-is-long-enough-0123456789 > %s && chmod 644 %s && echo short > %s && chmod 600 %s",
			   loose, loose, shorter, shorter), 0, "%s", out);
	static const struct {
		const char *args, *says;
	} cases[] = {
		{ "--remote-ttl 60", "only with --remote" },
		{ "--remote-cluster", "only with --remote" },
		{ "--remote bogus://x", "--remote 'bogus://x'" },
		{ "--remote unix:/a --remote unix:/b", "--remote-cluster" },
		{ "--remote unix:/a --remote-users some", "--remote-users: 'some'" },
		{ "--remote unix:/a --remote-timeout 0", "--remote-timeout: '0'" },
		{ "--remote unix:/a --remote-ttl -1", "--remote-ttl: '-1'" },
		{ "--remote unix:/a --remote-index maybe", "--remote-index: 'maybe'" },
		{ "--remote unix:/a --remote-index 0", "--remote-index: '0'" },
		{ "--remote-index off", "only with --remote" },
		{ "--remote unix:/a --remote-key-file /nonexistent/key", "/nonexistent/key" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		cr_expect_eq(td_sh(out, sizeof(out), "%s --socket /nonexistent/x %s", PREFIXD_EXE,
				   cases[i].args), 2, "%s", cases[i].args);
		cr_expect(strstr(out, cases[i].says), "%s: %s", cases[i].args, out);
	}
	snprintf(args, sizeof(args), "--remote unix:/a --remote-key-file %s", loose);
	cr_expect_eq(td_sh(out, sizeof(out), "%s --socket /nonexistent/x %s", PREFIXD_EXE, args), 2);
	cr_expect(strstr(out, "chmod 600"), "%s", out);
	snprintf(args, sizeof(args), "--remote unix:/a --remote-auth-file %s", loose);
	cr_expect_eq(td_sh(out, sizeof(out), "%s --socket /nonexistent/x %s", PREFIXD_EXE, args), 2);
	cr_expect(strstr(out, "--remote-auth-file") && strstr(out, "chmod 600"), "%s", out);
	snprintf(args, sizeof(args), "--remote unix:/a --remote-key-file %s", shorter);
	cr_expect_eq(td_sh(out, sizeof(out), "%s --socket /nonexistent/x %s", PREFIXD_EXE, args), 2);
	cr_expect(strstr(out, "32 at least"), "%s", out);
	cr_expect_eq(td_sh(out, sizeof(out), "%s --help", PREFIXD_EXE), 0);
	cr_expect(strstr(out, "--remote-key-file"), "%s", out);
	cr_expect(strstr(out, "--remote-index on|off|KEYS"), "%s", out);
}

/* ==== The runtime on a prefix fetched from Redis ==== */

#define MODEL "llama-tiny-gqa"
#define HEAD 24 /* the prefix: 6 blocks of 4 */

Test(remote, logits_on_a_prefix_fetched_from_redis_equal_an_uncached_run)
{
	redis_up();
	const char *all[] = { "--remote-users", "all", NULL };
	start(&ta, "a", true, all);
	start(&tb, "b", true, all);
	size_t ntok;
	int32_t *tok = expected_i32(MODEL, "tokens", &ntok);
	char *head = tokens_csv(tok, HEAD), *whole = tokens_csv(tok, ntok);
	char out[PATH_MAX + 32];
	snprintf(out, sizeof(out), "%s/a.npy", dir);
	struct cmd_result a = run("logits --model %s/" MODEL " --block-tokens 4 --socket %s --tokens %s --out %s",
				  fixtures_dir(), ta.sock, head, out);
	cr_assert_eq(a.status, 0, "%s", a.out);
	cr_expect(strstr(a.out, "6 new blocks published"), "%s", a.out);
	wait_writes(&ta, 6);
	snprintf(out, sizeof(out), "%s/b.npy", dir);
	struct cmd_result b = run("logits --model %s/" MODEL " --block-tokens 4 --socket %s --tokens %s --out %s",
				  fixtures_dir(), tb.sock, whole, out);
	cr_assert_eq(b.status, 0, "%s", b.out);
	cr_expect(strstr(b.out, "24 attached from the cache"), "%s", b.out);
	cr_expect_eq(t_stats(&tb).remote_hits, 6);
	struct pfx_model *m = load_fixture_model_bt(MODEL, 4);
	float *ref = logits_uncached(m, tok, ntok);
	size_t V = (size_t)pfx_model_config(m)->vocab, rows = ntok - HEAD;
	float *got = read_npy(out, rows, V);
	float d = max_abs_diff(got, ref + HEAD * V, rows * V);
	cr_expect_leq(d, TOL_SELF, "logits on the fetched prefix vs an uncached run: %g", d);
	free(got);
	free(ref);
	pfx_model_free(m);
	free(head);
	free(whole);
	free(tok);
	t_stop(&ta);
	t_stop(&tb);
}

/* ==== A Redis Cluster ==== */

Test(remote, a_cluster_serves_across_hosts_and_after_a_reshard)
{
	if (!tr_available())
		cr_skip_test("redis-server is not installed (scripts/deps.sh installs it)");
	static struct test_cluster cl;
	cr_assert_eq(tc_start(&cl, 3), 0);
	char bufs[3][64];
	const char *seeds[3];
	tc_seeds(&cl, bufs[0], sizeof(bufs[0]), seeds);
	const char *args[] = { "--block-tokens", "4", "--shared-group", "0", "--remote-cluster",
			       "--remote", seeds[0], "--remote", seeds[1], "--remote", seeds[2],
			       "--remote-key-file", keyfile, NULL };
	t_start(&ta, args, NULL);
	t_start(&tb, args, NULL);
	uint32_t p[8 * BT], stored, dedup;
	td_prompt(p, 8, TD_PROMPT_K(1));
	struct prefixd *a = shared_client(&ta, 1);
	cr_assert_eq(td_publish(a, 0, p, 0, 8, &stored, &dedup), 0, "%s", prefixd_errmsg());
	prefixd_close(a);
	wait_writes(&ta, 8);
	/* B learns the slot map with a lookup of another prompt. */
	struct prefixd *b = shared_client(&tb, 1);
	uint32_t q[BT];
	td_prompt(q, 1, TD_PROMPT_K(9));
	cr_expect_eq(match_ok(b, q, 1), 0);
	/* The slot of the prompt's first block moves to another master. */
	char key[8][256], out[64];
	int n = 0;
	for (int i = 0; i < 3 && !n; i++) {
		struct test_redis saved = rs;
		rs = cl.node[i];
		n = keys_of(1, key, 8);
		rs = saved;
	}
	cr_assert_gt(n, 0, "the records are in the cluster");
	cr_assert_eq(tr_cmd(&cl.node[0], NULL, out, sizeof(out), "CLUSTER", "KEYSLOT", key[0], NULL), 0);
	unsigned slot = (unsigned)atoi(out);
	int from = tc_owner(&cl, slot);
	cr_assert_geq(from, 0);
	cr_assert_eq(tc_move_slots(&cl, from, (from + 1) % 3, slot, slot), 0);
	cr_expect_eq(match_ok(b, p, 8), 8, "B follows the MOVED and fetches the whole prefix");
	struct prefixd_stats s = t_stats(&tb);
	cr_expect_eq(s.remote_hits, 8);
	cr_expect_eq(s.remote_bad_checksum + s.remote_bad_foreign + s.remote_bad_mac, 0);
	prefixd_close(b);
	t_stop(&ta);
	t_stop(&tb);
	cr_expect_eq(tc_stop(&cl), 0);
}

Test(remote, records_expire_with_remote_ttl)
{
	redis_up();
	const char *ttl[] = { "--remote-ttl", "100", NULL };
	start(&ta, "a", false, ttl);
	publish_one(1, 1, 1);
	char keys[2][256], out[64];
	cr_assert_eq(keys_of(1, keys, 2), 1);
	cr_assert_eq(tr_cmd(&rs, NULL, out, sizeof(out), "PTTL", keys[0], NULL), 0);
	long long ms = atoll(out);
	cr_expect(ms > 90000 && ms <= 100000, "the record's TTL: %s ms", out);
	t_stop(&ta);
}

Test(remote, a_password_from_remote_auth_file)
{
	if (!tr_available())
		cr_skip_test("redis-server is not installed (scripts/deps.sh installs it)");
	cr_assert_eq(tr_start(&rs, "requirepass a-redis-password-1234\n"), 0);
	tr_seed(&rs, false, 0, seed, sizeof(seed));
	char good[PATH_MAX + 16], bad[PATH_MAX + 16], out[256];
	snprintf(good, sizeof(good), "%s/pass", dir);
	snprintf(bad, sizeof(bad), "%s/wrong", dir);
	cr_assert_eq(td_sh(out, sizeof(out), "echo a-redis-password-1234 > %s && echo nope > %s && chmod 600 %s %s",
			   good, bad, good, bad), 0, "%s", out);
	const char *right[] = { "--remote-auth-file", good, NULL };
	start(&ta, "a", false, right);
	publish_one(1, 1, 1);
	/* The index's subscriber and scan authenticate too. */
	struct prefixd_stats sa = { 0 };
	for (int i = 0; i < 500 && (td_stats(&ta, &sa) || !sa.remote_index_live); i++)
		usleep(10000);
	cr_expect_eq(sa.remote_index_live, 1, "A's index went live with the password");
	cr_expect_eq(sa.remote_index_keys, 1);
	const char *wrong[] = { "--remote-auth-file", bad, NULL };
	start(&tb, "b", false, wrong);
	cr_expect_eq(match_on_b(1, 1), 0, "refused by Redis: a miss");
	struct prefixd_stats s = t_stats(&tb);
	cr_expect_geq(s.remote_errors, 1);
	cr_expect_eq(s.remote_hits, 0);
	cr_expect(td_log_has(&tb, "a lookup failed"), "the log says why lookups fail");
	cr_expect_eq(s.remote_index_live, 0, "nor is B's index live");
	t_stop(&ta);
	t_stop(&tb);
}
