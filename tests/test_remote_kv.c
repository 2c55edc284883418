/* SPDX-License-Identifier: MIT */
/*
 * The remote tier's Redis client (daemon/remote/kv.h) against private
 * redis-servers (tests/support/redis_util.h): standalone over a unix socket
 * and TCP, AUTH, DBs, TTLs, a stopped and a killed server; a 3-master Redis
 * Cluster with pipelines per node, MOVED after a reshard, ASK during a
 * migration and a dead master; the cluster's CRC16 and the seed syntax.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "crc16.h"
#include "kv.h"
#include "kv_resp.h"
#include "redis_util.h"

#define TIMEOUT_MS 200

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static void need_redis(void)
{
	if (!tr_available())
		cr_skip_test("redis-server is not installed (scripts/deps.sh installs it)");
}

static struct kv *open_kv(const char *const *seeds, uint32_t n, bool cluster, const char *pw)
{
	struct kv_opts o = { .seeds = seeds, .n_seeds = n, .cluster = cluster, .password = pw,
			     .timeout_ms = TIMEOUT_MS };
	struct kv *k = NULL;
	char why[256] = "";
	cr_assert_eq(kv_open(&o, &k, why, sizeof(why)), 0, "%s", why);
	return k;
}

static struct kv *open_one(const char *seed, const char *pw)
{
	return open_kv((const char *[]){ seed }, 1, false, pw);
}

static int set1(struct kv *k, const char *key, const void *v, size_t len, uint64_t ttl)
{
	int res = 1;
	const uint8_t *vals[] = { v };
	int rc = kv_set(k, 1, (const char *[]){ key }, vals, &len, ttl, &res);
	cr_assert_eq(rc, res, "kv_set returns %d, the key's result %d", rc, res);
	return res;
}

/* GET of one key: its result; the value in *v, *len. */
static int get1(struct kv *k, const char *key, const uint8_t **v, size_t *len)
{
	int res = 1;
	const uint8_t *val;
	size_t l;
	int rc = kv_get(k, 1, (const char *[]){ key }, &val, &l, &res);
	cr_assert_eq(rc, res == -ENOENT ? 0 : res, "kv_get returns %d, the key's result %d", rc,
		     res);
	if (v)
		*v = val, *len = l;
	return res;
}

/* ---- CRC16 and slots, from the Redis Cluster specification ---- */

Test(remote_kv, crc16_is_the_cluster_specs)
{
	cr_expect_eq(kv_crc16("123456789", 9), 0x31C3);
	cr_expect_eq(kv_crc16("", 0), 0);
	/* Slots redis-server computes (CLUSTER KEYSLOT). */
	cr_expect_eq(kv_key_slot("foo", 3), 12182);
	cr_expect_eq(kv_key_slot("bar", 3), 5061);
	const char *a = "{user1000}.following", *b = "{user1000}.followers";
	cr_expect_eq(kv_key_slot(a, strlen(a)), kv_key_slot(b, strlen(b)));
	cr_expect_eq(kv_key_slot(a, strlen(a)), kv_key_slot("user1000", 8));
	/* An empty tag counts for nothing: the whole key is hashed. */
	cr_expect_eq(kv_key_slot("foo{}{bar}", 10), kv_crc16("foo{}{bar}", 10) % 16384);
	cr_expect_neq(kv_key_slot("foo{}{bar}", 10), kv_key_slot("bar", 3));
	/* The first tag only, and a '{' without '}' is no tag. */
	cr_expect_eq(kv_key_slot("foo{{bar}}zap", 13), kv_key_slot("{bar", 4));
	cr_expect_eq(kv_key_slot("foo{bar}{zap}", 13), kv_key_slot("bar", 3));
	cr_expect_eq(kv_key_slot("foo{bar", 7), kv_crc16("foo{bar", 7) % 16384);
}

/* ---- Seeds ---- */

static void refused(const char *seed, const char *words)
{
	char why[256] = "";
	cr_expect_eq(kv_parse_seed(seed, why, sizeof(why)), -EINVAL, "%s accepted", seed);
	cr_expect(strstr(why, words), "%s: \"%s\" does not say \"%s\"", seed, why, words);
}

Test(remote_kv, seeds_parse_or_say_what_is_wrong)
{
	const char *good[] = { "redis://127.0.0.1:6380", "redis://cache.example:1/15",
			       "redis://[::1]:7000", "unix:/run/redis.sock", "redis://h:65535/0" };
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		char why[256] = "";
		cr_expect_eq(kv_parse_seed(good[i], why, sizeof(why)), 0, "%s: %s", good[i], why);
	}
	refused("http://127.0.0.1:6379", "unknown scheme");
	refused("127.0.0.1:6379", "unknown scheme");
	refused("rediss://h:1", "TLS");
	refused("redis://h:0", "port");
	refused("redis://h:70000", "port");
	refused("redis://h:", "port");
	refused("redis://h", "no port");
	refused("redis://:6379", "no host");
	refused("redis://h:6379x", "unexpected \"x\"");
	refused("redis://h:6379/1/2", "unexpected \"/2\"");
	refused("redis://h:6379/", "DB");
	refused("redis://h:6379/abc", "DB");
	refused("redis://user:pw@h:6379", "password");
	refused("redis://[::1:6379", "no ]");
	refused("unix:", "no path");
	refused("", "empty");
}

Test(remote_kv, open_refuses_what_cannot_work)
{
	struct kv *k = (struct kv *)1;
	char why[256] = "";
	const char *two[] = { "redis://127.0.0.1:7000", "redis://127.0.0.1:7001" };
	struct kv_opts o = { .seeds = two, .n_seeds = 2, .timeout_ms = 100 };
	cr_expect_eq(kv_open(&o, &k, why, sizeof(why)), -EINVAL);
	cr_expect(strstr(why, "Redis Cluster"), "%s", why);
	cr_expect_null(k);
	const char *db[] = { "redis://127.0.0.1:7000/2" };
	o = (struct kv_opts){ .seeds = db, .n_seeds = 1, .cluster = true, .timeout_ms = 100 };
	cr_expect_eq(kv_open(&o, &k, why, sizeof(why)), -EINVAL);
	cr_expect(strstr(why, "only DB 0"), "%s", why);
	o = (struct kv_opts){ .seeds = two, .n_seeds = 1, .timeout_ms = 0 };
	cr_expect_eq(kv_open(&o, &k, why, sizeof(why)), -EINVAL);
	cr_expect(strstr(why, "timeout"), "%s", why);
	o = (struct kv_opts){ .seeds = (const char *[]){ "redis://h:99999" }, .n_seeds = 1,
			      .timeout_ms = 10 };
	cr_expect_eq(kv_open(&o, &k, why, sizeof(why)), -EINVAL);
	cr_expect(strstr(why, "port"), "%s", why);
	/* Unreachable is not an error at open: nothing is connected yet. */
	o = (struct kv_opts){ .seeds = two, .n_seeds = 1, .timeout_ms = 10 };
	cr_expect_eq(kv_open(&o, &k, why, sizeof(why)), 0, "%s", why);
	struct kv_stats st;
	kv_stats(k, &st);
	cr_expect_eq(st.connects, 0);
	kv_close(k);
	kv_close(NULL);
}

/* ---- Replies read off the socket (kv_resp.c) ---- */

static int sp[2];
static struct kv_clock clk;

/* A socket whose other end the test writes; a 100 ms timeout from now. */
static void pair(void)
{
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
	clk = (struct kv_clock){ .moved_ns = kv_now_ns(), .timeout_ns = 100000000 };
}

static void put(const void *p, size_t n)
{
	cr_assert_eq(write(sp[1], p, n), (ssize_t)n);
}

Test(remote_kv, replies_are_read_whole_and_in_step)
{
	pair();
	struct kv_rbuf b = { 0 };
	struct kv_resp r;
	const char *replies = "+OK\r\n$-1\r\n-MOVED 1 h:2\r\n$5\r\nab\r\nc\r\n$0\r\n\r\n";
	put(replies, strlen(replies));
	cr_assert_eq(kv_resp_next(&b, sp[0], &clk, &r), 0);
	cr_expect(r.type == KV_RESP_STATUS && r.len == 2 && !memcmp(b.buf + r.off, "OK", 2));
	cr_assert_eq(kv_resp_next(&b, sp[0], &clk, &r), 0);
	cr_expect_eq(r.type, KV_RESP_NIL);
	cr_assert_eq(kv_resp_next(&b, sp[0], &clk, &r), 0);
	cr_expect(r.type == KV_RESP_ERROR && r.len == 11 && !memcmp(b.buf + r.off, "MOVED 1 h:2", 11));
	cr_assert_eq(kv_resp_next(&b, sp[0], &clk, &r), 0, "a value holding CRLF");
	cr_expect(r.type == KV_RESP_BULK && r.len == 5 && !memcmp(b.buf + r.off, "ab\r\nc", 5));
	cr_assert_eq(kv_resp_next(&b, sp[0], &clk, &r), 0);
	cr_expect(r.type == KV_RESP_BULK && r.len == 0);
	/* Nothing more: the receive timeout. */
	cr_expect_eq(kv_resp_next(&b, sp[0], &clk, &r), -ETIMEDOUT);
	/* A value in pieces, larger than one read. */
	static char big[3 << 20];
	memset(big, 'x', sizeof(big));
	char head[32];
	int hl = snprintf(head, sizeof(head), "$%zu\r\n", sizeof(big));
	kv_rbuf_reset(&b);
	put(head, (size_t)hl);
	put(big, 100);
	cr_expect_eq(kv_resp_next(&b, sp[0], &clk, &r), -ETIMEDOUT, "half a value is no reply");
	kv_rbuf_reset(&b);
	pid_t writer = fork();
	if (writer == 0) {
		close(sp[0]); /* a test that fails leaves the writer an EPIPE, not a wait */
		put(head, (size_t)hl);
		for (size_t at = 0; at < sizeof(big); at += 65536)
			put(big + at, 65536);
		put("\r\n", 2);
		_exit(0);
	}
	/* The reader waits 100 ms at most between pieces, the writer far less. */
	clk.moved_ns = kv_now_ns();
	int rc = kv_resp_next(&b, sp[0], &clk, &r);
	cr_assert_eq(rc, 0, "%d", rc);
	cr_expect(r.type == KV_RESP_BULK && r.len == sizeof(big));
	cr_expect(!memcmp(b.buf + r.off, big, sizeof(big)));
	waitpid(writer, NULL, 0);
	kv_rbuf_free(&b);
	close(sp[0]);
	close(sp[1]);
}

static int one(const char *bytes, bool close_after)
{
	pair();
	put(bytes, strlen(bytes));
	if (close_after)
		close(sp[1]);
	struct kv_rbuf b = { 0 };
	struct kv_resp r;
	int rc = kv_resp_next(&b, sp[0], &clk, &r);
	kv_rbuf_free(&b);
	close(sp[0]);
	if (!close_after)
		close(sp[1]);
	return rc;
}

Test(remote_kv, replies_out_of_step_are_refused)
{
	cr_expect_eq(one(":1\r\n", false), -EPROTO, "an integer");
	cr_expect_eq(one("*1\r\n$1\r\na\r\n", false), -EPROTO, "an array");
	cr_expect_eq(one("$3\r\nabcd\r\n", false), -EPROTO, "a value longer than said");
	cr_expect_eq(one("$x\r\n", false), -EPROTO);
	cr_expect_eq(one("$-2\r\n", false), -EPROTO);
	cr_expect_eq(one("$99999999999999999999999\r\n", false), -EPROTO);
	cr_expect_eq(one("+OK\n", false), -EPROTO, "LF without CR");
	cr_expect_eq(one("\r\n", false), -EPROTO);
	cr_expect_eq(one("$10\r\nabc", true), -ECONNREFUSED, "closed mid-value");
	cr_expect_eq(one("", true), -ECONNREFUSED);
}

/* ---- Values handed over as they come (kv_get_each) ---- */

/* A fake Redis on a unix socket, in a child: it reads the three GETs of a
 * pipeline, answers the first, and answers the others only once the
 * client said (through a pipe) that it was handed the first value; with
 * cut, it sends half of the third value and closes. */
static pid_t fake_redis(const char *path, int said, bool cut)
{
	int l = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	cr_assert_eq(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(listen(l, 1), 0);
	pid_t pid = fork();
	if (pid)
		return close(l), pid;
	int c = accept(l, NULL, NULL);
	char in[4096];
	size_t got = 0;
	int gets = 0;
	while (gets < 3 && got < sizeof(in) - 1) {
		ssize_t n = read(c, in + got, sizeof(in) - 1 - got);
		if (n <= 0)
			_exit(1);
		got += (size_t)n;
		in[got] = 0;
		gets = 0;
		for (char *p = in; (p = strstr(p, "GET")); p += 3)
			gets++;
	}
	const char first[] = "$5\r\nhello\r\n", rest[] = "$-1\r\n$3\r\nxyz\r\n";
	if (write(c, first, sizeof(first) - 1) < 0)
		_exit(1);
	struct pollfd pf = { .fd = said, .events = POLLIN };
	if (poll(&pf, 1, 5000) != 1)
		_exit(2); /* never told: the client waited for every reply */
	usleep(20000); /* the rest comes a little after */
	if (write(c, rest, cut ? sizeof(rest) - 1 - 4 : sizeof(rest) - 1) < 0)
		_exit(1);
	if (!cut)
		(void)!read(c, in, 1); /* until the client closes */
	_exit(0);
}

#define FAKE_TIMEOUT_MS 1000

struct seen {
	int told;         /* the pipe's write end */
	unsigned sleep_ms; /* the time the first value takes the caller */
	uint32_t n, i[4];
	char v[4][8];
};

/* Takes every value but the third's, which it leaves to the call's end. */
static bool on_value(void *ctx, uint32_t i, const uint8_t *v, size_t len)
{
	struct seen *s = ctx;
	if (s->sleep_ms && i == 0)
		usleep(s->sleep_ms * 1000u);
	if (s->n < 4) {
		s->i[s->n] = i;
		snprintf(s->v[s->n++], 8, "%.*s", (int)(len < 7 ? len : 7), (const char *)v);
	}
	(void)!write(s->told, "x", 1);
	return i != 2;
}

static void each_against_fake(bool cut, unsigned sleep_ms, struct seen *s, int *res, int *rc)
{
	char dir[] = "/tmp/pfx-kv-each-XXXXXX", path[64], seed[80];
	cr_assert(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/s", dir);
	snprintf(seed, sizeof(seed), "unix:%s", path);
	int p[2];
	cr_assert_eq(pipe(p), 0);
	pid_t pid = fake_redis(path, p[0], cut);
	*s = (struct seen){ .told = p[1], .sleep_ms = sleep_ms };
	/* A timeout of 1 s: a loaded machine may take a while to run the
	 * fake, and only the_callers_time_... needs the timeout passed. */
	struct kv_opts o = { .seeds = (const char *[]){ seed }, .n_seeds = 1,
			     .timeout_ms = FAKE_TIMEOUT_MS };
	struct kv *k = NULL;
	char why[256] = "";
	cr_assert_eq(kv_open(&o, &k, why, sizeof(why)), 0, "%s", why);
	const char *keys[] = { "a", "b", "c" };
	const uint8_t *vals[3];
	size_t lens[3];
	*rc = kv_get_each(k, 3, keys, vals, lens, res, on_value, s);
	if (!*rc) {
		cr_expect(!vals[0] && lens[0] == 5, "a value taken is not kept");
		cr_expect(lens[2] == 3 && vals[2] && !memcmp(vals[2], "xyz", 3),
			  "a value not taken is kept, as kv_get's");
	}
	kv_close(k);
	int st;
	waitpid(pid, &st, 0);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "the fake Redis: status %d (2: the first value was not handed over before "
		  "the others came)", WEXITSTATUS(st));
	close(p[0]);
	close(p[1]);
	unlink(path);
	rmdir(dir);
}

Test(remote_kv, each_value_is_handed_over_before_the_next_arrives)
{
	struct seen s;
	int res[3], rc;
	each_against_fake(false, 0, &s, res, &rc);
	cr_assert_eq(rc, 0);
	cr_expect(!res[0] && res[1] == -ENOENT && !res[2]);
	cr_assert_eq(s.n, 2, "values handed over: %u", s.n);
	cr_expect(s.i[0] == 0 && !strcmp(s.v[0], "hello"));
	cr_expect(s.i[1] == 2 && !strcmp(s.v[1], "xyz"));
}

/* The caller taking longer than the timeout over a value is not the
 * node's silence: the next value, sent 20 ms after, is still waited for. */
Test(remote_kv, the_callers_time_is_not_the_nodes_silence)
{
	struct seen s;
	int res[3], rc;
	each_against_fake(false, FAKE_TIMEOUT_MS + 100, &s, res, &rc);
	cr_expect_eq(rc, 0, "%d", rc);
	cr_expect(!res[0] && res[1] == -ENOENT && !res[2]);
}

Test(remote_kv, a_value_cut_short_is_never_handed_over)
{
	struct seen s;
	int res[3], rc;
	each_against_fake(true, 0, &s, res, &rc);
	cr_expect_eq(rc, -ECONNREFUSED);
	cr_expect(!res[0] && res[1] == -ENOENT && res[2] == -ECONNREFUSED);
	cr_expect_eq(s.n, 1, "only the whole value: %u", s.n);
}

/* ---- Standalone ---- */

static struct test_redis rs;

static void stop_redis(void)
{
	if (rs.dir[0])
		cr_expect_eq(tr_stop(&rs), 0);
}

TestSuite(remote_kv_redis, .fini = stop_redis);

static void start_redis(bool tcp, const char *conf)
{
	need_redis();
	cr_assert_eq(tcp ? tr_start_tcp(&rs, conf) : tr_start(&rs, conf), 0);
}

static struct kv *open_redis(bool tcp, int db, const char *pw)
{
	static char seed[2][PATH_MAX + 32];
	static int which;
	char *s = seed[which ^= 1];
	tr_seed(&rs, tcp, db, s, sizeof(seed[0]));
	return open_one(s, pw);
}

Test(remote_kv_redis, binary_values_round_trip_over_a_unix_socket)
{
	start_redis(false, NULL);
	struct kv *k = open_redis(false, 0, NULL);
	static uint8_t zeros[64], big[1 << 20];
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)(i * 2654435761u >> 13);
	big[100] = 0, big[101] = '\r', big[102] = '\n';
	const char *keys[] = { "zeros", "big", "empty" };
	const uint8_t *vals[] = { zeros, big, NULL };
	size_t lens[] = { sizeof(zeros), sizeof(big), 0 };
	int res[3] = { 1, 1, 1 };
	cr_assert_eq(kv_set(k, 3, keys, vals, lens, 0, res), 0, "%s", kv_errmsg(k));
	cr_expect(!res[0] && !res[1] && !res[2]);
	const char *gkeys[] = { "big", "missing", "zeros", "empty" };
	const uint8_t *got[4];
	size_t glen[4];
	int gres[4];
	cr_assert_eq(kv_get(k, 4, gkeys, got, glen, gres), 0, "%s", kv_errmsg(k));
	cr_expect_eq(gres[0], 0);
	cr_expect_eq(gres[1], -ENOENT);
	cr_expect_null(got[1]);
	cr_expect_eq(gres[2], 0);
	cr_expect_eq(gres[3], 0);
	cr_assert_eq(glen[0], sizeof(big));
	cr_expect(!memcmp(got[0], big, sizeof(big)), "the 1 MiB value differs");
	cr_assert_eq(glen[2], sizeof(zeros));
	cr_expect(!memcmp(got[2], zeros, sizeof(zeros)));
	cr_expect_eq(glen[3], 0);
	struct kv_stats st;
	kv_stats(k, &st);
	cr_expect_eq(st.connects, 1);
	cr_expect_eq(st.round_trips, 2, "one pipeline per call: %llu",
		     (unsigned long long)st.round_trips);
	cr_expect_eq(st.errors, 0);
	kv_close(k);
}

/* Large values taken as they come, but one: each value is whole and right
 * when it is handed over (the buffer's room reused under the next ones),
 * and the one not taken is still right after the call. */
struct big_seen {
	uint32_t n, bad, keep;
};

static uint8_t big_byte(uint32_t key, size_t at)
{
	return (uint8_t)((at * 2654435761u >> 11) + key * 77u);
}

static bool check_big(void *ctx, uint32_t i, const uint8_t *v, size_t len)
{
	struct big_seen *s = ctx;
	s->n++;
	size_t want = ((size_t)3 << 20) + i * 4099u;
	bool ok = len == want;
	for (size_t at = 0; ok && at < len; at++)
		ok = v[at] == big_byte(i, at);
	s->bad += !ok;
	return i != s->keep;
}

Test(remote_kv_redis, large_values_taken_as_they_come_are_whole)
{
	start_redis(false, NULL);
	struct kv *k = open_redis(false, 0, NULL);
	enum { N = 8 };
	char names[N][16];
	const char *keys[N];
	static uint8_t data[N][(3 << 20) + N * 4099];
	const uint8_t *vals[N];
	size_t lens[N];
	int res[N];
	for (uint32_t i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "big%u", i);
		keys[i] = names[i];
		lens[i] = ((size_t)3 << 20) + i * 4099u;
		for (size_t at = 0; at < lens[i]; at++)
			data[i][at] = big_byte(i, at);
		vals[i] = data[i];
	}
	cr_assert_eq(kv_set(k, N, keys, vals, lens, 0, res), 0, "%s", kv_errmsg(k));
	struct big_seen s = { .keep = 5 };
	cr_assert_eq(kv_get_each(k, N, keys, vals, lens, res, check_big, &s), 0, "%s",
		     kv_errmsg(k));
	cr_expect_eq(s.n, N);
	cr_expect_eq(s.bad, 0, "%u values were not whole when handed over", s.bad);
	for (uint32_t i = 0; i < N; i++)
		cr_expect(!res[i] && (i == s.keep) == (vals[i] != NULL), "key %u", i);
	cr_assert_eq(lens[s.keep], sizeof(data[0]) - (N - 5) * 4099u);
	cr_expect(!memcmp(vals[s.keep], data[s.keep], lens[s.keep]), "the value kept changed");
	kv_close(k);
}

Test(remote_kv_redis, a_hundred_keys_are_one_pipeline)
{
	start_redis(false, NULL);
	struct kv *k = open_redis(false, 0, NULL);
	enum { N = 100 };
	char names[N][16];
	const char *keys[N];
	const uint8_t *vals[N];
	size_t lens[N];
	int res[N];
	for (int i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "key%d", i);
		keys[i] = names[i];
		vals[i] = (const uint8_t *)names[i];
		lens[i] = strlen(names[i]);
	}
	cr_assert_eq(kv_set(k, N, keys, vals, lens, 0, res), 0, "%s", kv_errmsg(k));
	const uint8_t *got[N];
	cr_assert_eq(kv_get(k, N, keys, got, lens, res), 0, "%s", kv_errmsg(k));
	for (int i = 0; i < N; i++)
		cr_expect(!res[i] && lens[i] == strlen(names[i]) && !memcmp(got[i], names[i], lens[i]),
			  "key %d", i);
	struct kv_stats st;
	kv_stats(k, &st);
	cr_expect_eq(st.round_trips, 2);
	kv_close(k);
}

Test(remote_kv_redis, ttl_expires)
{
	start_redis(false, NULL);
	struct kv *k = open_redis(false, 0, NULL);
	cr_assert_eq(set1(k, "short", "v", 1, 150), 0, "%s", kv_errmsg(k));
	cr_assert_eq(set1(k, "forever", "v", 1, 0), 0, "%s", kv_errmsg(k));
	char out[64];
	cr_assert_eq(tr_cmd(&rs, NULL, out, sizeof(out), "PTTL", "short", NULL), 0);
	cr_expect(atoi(out) > 0 && atoi(out) <= 150, "PTTL %s", out);
	cr_assert_eq(tr_cmd(&rs, NULL, out, sizeof(out), "PTTL", "forever", NULL), 0);
	cr_expect_str_eq(out, "-1");
	cr_expect_eq(get1(k, "short", NULL, NULL), 0);
	usleep(300 * 1000);
	cr_expect_eq(get1(k, "short", NULL, NULL), -ENOENT);
	cr_expect_eq(get1(k, "forever", NULL, NULL), 0);
	kv_close(k);
}

Test(remote_kv_redis, auth_is_sent_and_its_refusal_said)
{
	start_redis(false, "requirepass s3cret\n");
	struct kv *none = open_redis(false, 0, NULL);
	cr_expect_eq(get1(none, "k", NULL, NULL), -EACCES);
	cr_expect(strstr(kv_errmsg(none), "NOAUTH"), "%s", kv_errmsg(none));
	struct kv *wrong = open_redis(false, 0, "nope");
	cr_expect_eq(get1(wrong, "k", NULL, NULL), -EACCES);
	cr_expect(strstr(kv_errmsg(wrong), "WRONGPASS"), "%s", kv_errmsg(wrong));
	struct kv_stats st;
	kv_stats(wrong, &st);
	cr_expect_eq(st.errors, 1);
	struct kv *right = open_redis(false, 0, "s3cret");
	cr_expect_eq(set1(right, "k", "v", 1, 0), 0, "%s", kv_errmsg(right));
	const uint8_t *v;
	size_t len;
	cr_expect_eq(get1(right, "k", &v, &len), 0);
	cr_expect(len == 1 && v[0] == 'v');
	kv_close(none);
	kv_close(wrong);
	kv_close(right);
}

Test(remote_kv_redis, dbs_are_apart_over_tcp)
{
	start_redis(true, NULL);
	struct kv *db0 = open_redis(true, 0, NULL), *db3 = open_redis(true, 3, NULL);
	cr_assert_eq(set1(db3, "where", "three", 5, 0), 0, "%s", kv_errmsg(db3));
	cr_expect_eq(get1(db0, "where", NULL, NULL), -ENOENT);
	const uint8_t *v;
	size_t len;
	cr_expect_eq(get1(db3, "where", &v, &len), 0);
	cr_expect(len == 5 && !memcmp(v, "three", 5));
	char out[64];
	cr_assert_eq(tr_cmd(&rs, NULL, out, sizeof(out), "INFO", "keyspace", NULL), 0);
	cr_expect(strstr(out, "db3:keys=1"), "%s", out);
	kv_close(db0);
	kv_close(db3);
}

Test(remote_kv_redis, a_stopped_server_costs_the_timeout_then_answers)
{
	start_redis(false, NULL);
	struct kv *k = open_redis(false, 0, NULL);
	cr_assert_eq(set1(k, "k", "v", 1, 0), 0, "%s", kv_errmsg(k));
	tr_pause(&rs);
	double t0 = now_ms();
	int rc = get1(k, "k", NULL, NULL);
	double ms = now_ms() - t0;
	cr_expect_eq(rc, -ETIMEDOUT, "%d: %s", rc, kv_errmsg(k));
	cr_expect(ms >= TIMEOUT_MS * 0.9 && ms < TIMEOUT_MS + 150, "%.0f ms for a %d ms timeout",
		  ms, TIMEOUT_MS);
	/* A new connection to it is bounded as well (the kernel accepts it). */
	t0 = now_ms();
	rc = get1(k, "k", NULL, NULL);
	ms = now_ms() - t0;
	cr_expect_eq(rc, -ETIMEDOUT, "%d: %s", rc, kv_errmsg(k));
	cr_expect(ms < TIMEOUT_MS + 150, "%.0f ms", ms);
	/* Writes are bounded too: 16 MiB do not fit in the socket's buffers. */
	size_t big = 16u << 20;
	uint8_t *v = calloc(1, big);
	t0 = now_ms();
	rc = set1(k, "big", v, big, 0);
	ms = now_ms() - t0;
	cr_expect_eq(rc, -ETIMEDOUT, "%d: %s", rc, kv_errmsg(k));
	cr_expect(ms < TIMEOUT_MS + 150, "%.0f ms", ms);
	tr_resume(&rs);
	cr_expect_eq(get1(k, "k", NULL, NULL), 0, "%s", kv_errmsg(k));
	cr_expect_eq(set1(k, "big", v, big, 0), 0, "%s", kv_errmsg(k));
	const uint8_t *got;
	size_t len;
	cr_expect_eq(get1(k, "big", &got, &len), 0, "%s", kv_errmsg(k));
	cr_expect(len == big && !memcmp(got, v, big));
	free(v);
	struct kv_stats st;
	kv_stats(k, &st);
	cr_expect_eq(st.errors, 3);
	cr_expect_geq(st.connects, 2, "a connection that timed out is made again");
	kv_close(k);
}

Test(remote_kv_redis, a_killed_server_is_refused_fast_and_reconnected)
{
	start_redis(false, NULL);
	struct kv *k = open_redis(false, 0, NULL);
	cr_assert_eq(set1(k, "k", "v", 1, 0), 0, "%s", kv_errmsg(k));
	tr_kill(&rs);
	for (int i = 0; i < 2; i++) { /* the old connection, then a new one */
		double t0 = now_ms();
		int rc = get1(k, "k", NULL, NULL);
		double ms = now_ms() - t0;
		cr_expect_eq(rc, -ECONNREFUSED, "%d: %s", rc, kv_errmsg(k));
		cr_expect(ms < 50, "%.0f ms to be refused", ms);
		/* SET as well: a write to a dead socket raises no SIGPIPE. */
		cr_expect_eq(set1(k, "k", "w", 1, 0), -ECONNREFUSED);
	}
	cr_assert_eq(tr_restart(&rs), 0);
	cr_expect_eq(get1(k, "k", NULL, NULL), -ENOENT, "%s", kv_errmsg(k));
	cr_expect_eq(set1(k, "k", "w", 1, 0), 0);
	struct kv_stats st;
	kv_stats(k, &st);
	cr_expect_eq(st.connects, 2);
	cr_expect_eq(st.errors, 4);
	kv_close(k);
}

/* ---- Redis Cluster ---- */

static struct test_cluster cl;
static char cl_bufs[TC_MAX][64];
static const char *cl_seeds[TC_MAX];

static void stop_cluster(void)
{
	if (cl.n)
		cr_expect_eq(tc_stop(&cl), 0);
}

TestSuite(remote_kv_cluster, .fini = stop_cluster);

static struct kv *start_cluster(int n)
{
	need_redis();
	cr_assert_eq(tc_start(&cl, n), 0);
	tc_seeds(&cl, &cl_bufs[0][0], sizeof(cl_bufs[0]), cl_seeds);
	return open_kv(cl_seeds, (uint32_t)n, true, NULL);
}

enum { NK = 300 };
static char knames[NK][24], kvals[NK][48];
static const char *keys[NK];
static const uint8_t *vals[NK];
static size_t lens[NK];

/* NK keys, "key:I", with values of their own; 10 of them share the hash
 * tag {moved} and 2 the tag {ask}. */
static void make_keys(void)
{
	for (int i = 0; i < NK; i++) {
		if (i < 10)
			snprintf(knames[i], sizeof(knames[i]), "{moved}:%d", i);
		else if (i < 12)
			snprintf(knames[i], sizeof(knames[i]), "{ask}:%d", i);
		else
			snprintf(knames[i], sizeof(knames[i]), "key:%d", i);
		snprintf(kvals[i], sizeof(kvals[i]), "value %d of %s", i * 7919, knames[i]);
		keys[i] = knames[i];
		vals[i] = (const uint8_t *)kvals[i];
		lens[i] = strlen(kvals[i]);
	}
}

static int owner_of(const char *key)
{
	return tc_owner(&cl, kv_key_slot(key, strlen(key)));
}

static void set_all(struct kv *k)
{
	int res[NK];
	cr_assert_eq(kv_set(k, NK, keys, vals, lens, 0, res), 0, "%s", kv_errmsg(k));
}

/* GETs every key: each found with its value, or with res expect(i). The
 * milliseconds kv_get took. */
static double get_all_at(struct kv *k, int (*expect)(int i), int line)
{
	const uint8_t *got[NK];
	size_t glen[NK];
	int res[NK];
	double t0 = now_ms();
	kv_get(k, NK, keys, got, glen, res);
	double ms = now_ms() - t0;
	for (int i = 0; i < NK; i++) {
		int want = expect ? expect(i) : 0;
		cr_expect_eq(res[i], want, "line %d: %s: %d, expected %d (%s) owner %d", line, keys[i],
			     res[i], want, kv_errmsg(k), owner_of(keys[i]));
		if (!res[i] && !want)
			cr_expect(glen[i] == lens[i] && !memcmp(got[i], vals[i], lens[i]),
				  "%s: another value", keys[i]);
	}
	return ms;
}
#define get_all(k, expect) get_all_at(k, expect, __LINE__)

static struct kv_stats stats(const struct kv *k)
{
	struct kv_stats st;
	kv_stats(k, &st);
	return st;
}

Test(remote_kv_cluster, keys_spread_over_the_masters_one_pipeline_each)
{
	struct kv *k = start_cluster(3);
	make_keys();
	set_all(k);
	get_all(k, NULL);
	struct kv_stats st = stats(k);
	cr_expect_eq(st.round_trips, 6, "one pipeline per master per call: %llu",
		     (unsigned long long)st.round_trips);
	cr_expect_eq(st.map_refreshes, 1);
	cr_expect_eq(st.redirects, 0);
	cr_expect_eq(st.connects, 3);
	cr_expect_eq(st.errors, 0);
	/* Each master holds the keys of its slots, no more. */
	for (int n = 0; n < 3; n++) {
		int mine = 0;
		for (int i = 0; i < NK; i++)
			mine += owner_of(keys[i]) == n;
		char out[32];
		cr_assert_eq(tr_cmd(&cl.node[n], NULL, out, sizeof(out), "DBSIZE", NULL), 0);
		cr_expect_eq(atoi(out), mine, "master %d holds %s keys, owns %d", n, out, mine);
		cr_expect_gt(mine, 50);
	}
	kv_close(k);
}

Test(remote_kv_cluster, a_reshard_is_followed_through_moved)
{
	struct kv *k = start_cluster(3);
	make_keys();
	set_all(k);
	unsigned s = kv_key_slot("moved", 5);
	int from = tc_owner(&cl, s), to = (from + 1) % 3;
	unsigned end = 16384u * (unsigned)(from + 1) / 3 - 1;
	cr_assert_eq(tc_move_slots(&cl, from, to, s, s + 15 < end ? s + 15 : end), 0);
	struct kv_stats before = stats(k);
	get_all(k, NULL);
	struct kv_stats after = stats(k);
	cr_expect_eq(after.redirects - before.redirects, 10, "one MOVED per key of the slot");
	cr_expect_eq(after.map_refreshes - before.map_refreshes, 1, "the map fetched once");
	cr_expect_eq(after.errors, 0);
	/* The map now knows: no more redirects. */
	get_all(k, NULL);
	cr_expect_eq(stats(k).redirects, after.redirects);
	cr_expect_eq(stats(k).map_refreshes, after.map_refreshes);
	kv_close(k);
}

Test(remote_kv_cluster, a_migrating_slot_is_followed_through_ask)
{
	struct kv *k = start_cluster(3);
	make_keys();
	set_all(k);
	unsigned s = kv_key_slot("ask", 3);
	int from = tc_owner(&cl, s), to = (from + 2) % 3;
	cr_assert_eq(tc_begin_slot_move(&cl, from, to, s, "{ask}:10"), 0);
	struct kv_stats before = stats(k);
	get_all(k, NULL);
	struct kv_stats after = stats(k);
	cr_expect_eq(after.redirects - before.redirects, 1, "one ASK, for {ask}:10");
	cr_expect_eq(after.map_refreshes, before.map_refreshes, "ASK changes no map");
	/* A new key of the slot goes where the migration takes it. */
	cr_expect_eq(set1(k, "{ask}:new", "n", 1, 0), 0, "%s", kv_errmsg(k));
	char out[64], slot[16];
	snprintf(slot, sizeof(slot), "%u", s);
	cr_assert_eq(tr_cmd(&cl.node[to], NULL, out, sizeof(out), "CLUSTER", "COUNTKEYSINSLOT",
			    slot, NULL), 0);
	cr_expect_str_eq(out, "2", "{ask}:10 and {ask}:new on the importing master");
	cr_assert_eq(tc_finish_slot_move(&cl, from, to, s), 0);
	get_all(k, NULL);
	cr_expect_gt(stats(k).map_refreshes, after.map_refreshes, "MOVED once the slot moved");
	const uint8_t *v;
	size_t len;
	cr_expect_eq(get1(k, "{ask}:new", &v, &len), 0, "%s", kv_errmsg(k));
	cr_expect(len == 1 && v[0] == 'n');
	cr_expect_eq(stats(k).errors, 0);
	kv_close(k);
}

/* Master 1 killed (then restarted empty), then masters 1 and 2 stopped. */
static int down_then(int i)
{
	return owner_of(keys[i]) == 1 ? -ECONNREFUSED : 0;
}
static int lost_then(int i)
{
	return owner_of(keys[i]) == 1 ? -ENOENT : 0;
}
static int late_then(int i)
{
	return owner_of(keys[i]) ? -ETIMEDOUT : 0;
}

Test(remote_kv_cluster, a_dead_or_stopped_master_costs_its_keys_only)
{
	struct kv *k = start_cluster(3);
	make_keys();
	set_all(k);
	tr_kill(&cl.node[1]);
	double ms = get_all(k, down_then);
	cr_expect_lt(ms, 100, "%.0f ms to be refused", ms);
	get_all(k, down_then); /* reconnecting, and the map asked again */
	/* While it stays down, the map is asked again once a second at most. */
	uint64_t refreshes = stats(k).map_refreshes;
	for (int i = 0; i < 4; i++)
		get_all(k, down_then);
	cr_expect_leq(stats(k).map_refreshes - refreshes, 1);
	cr_assert_eq(tc_restart(&cl, 1), 0);
	get_all(k, lost_then); /* no persistence: its keys are gone */
	/* Two stopped masters cost one timeout: the round has one deadline. */
	tr_pause(&cl.node[1]);
	tr_pause(&cl.node[2]);
	ms = get_all(k, late_then);
	cr_expect(ms < TIMEOUT_MS + 150, "%.0f ms for a %d ms timeout", ms, TIMEOUT_MS);
	tr_resume(&cl.node[1]);
	tr_resume(&cl.node[2]);
	get_all(k, lost_then);
	kv_close(k);
}

Test(remote_kv_cluster, a_one_node_cluster_serves_every_slot)
{
	struct kv *k = start_cluster(1);
	make_keys();
	set_all(k);
	get_all(k, NULL);
	cr_expect_eq(stats(k).round_trips, 2);
	cr_expect_eq(stats(k).connects, 1);
	/* A slot nobody serves: CLUSTERDOWN is an error for its keys only. */
	char slot[16], out[64];
	snprintf(slot, sizeof(slot), "%u", kv_key_slot("moved", 5));
	cr_assert_eq(tr_cmd(&cl.node[0], NULL, out, sizeof(out), "CLUSTER", "DELSLOTS", slot, NULL), 0);
	cr_assert_str_eq(out, "OK");
	const uint8_t *got[2];
	size_t glen[2];
	int res[2];
	cr_expect_eq(kv_get(k, 2, (const char *[]){ "{moved}:1", "key:20" }, got, glen, res), -EPROTO);
	cr_expect_eq(res[0], -EPROTO);
	cr_expect(strstr(kv_errmsg(k), "CLUSTERDOWN"), "%s", kv_errmsg(k));
	cr_expect_eq(res[1], 0);
	kv_close(k);
}
