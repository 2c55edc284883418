/* SPDX-License-Identifier: MIT */
/*
 * Bad input at prefixd: each gets its typed error (or, for a frame that
 * cannot be parsed, the close of that one connection), while a client
 * served at the same time sees no difference.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon_util.h"
#include "sock.h"
#include "wire.h"

static struct test_daemon td;

/* ==== A well-behaved client in the background ==== */

static atomic_int stop_bystander, bystander_rounds, bystander_errors;

static void *bystander(void *arg)
{
	struct prefixd_layout l = td_layout(1);
	struct prefixd *c;
	if (prefixd_connect(td.sock, &l, &c)) {
		atomic_fetch_add(&bystander_errors, 1);
		return NULL;
	}
	uint32_t t[3 * TD_BLOCK_TOKENS];
	for (uint32_t i = 0; i < 3 * TD_BLOCK_TOKENS; i++)
		t[i] = 7000 + i;
	uint32_t stored, dedup, hit;
	if (td_publish(c, 0, t, 0, 3, &stored, &dedup))
		atomic_fetch_add(&bystander_errors, 1);
	while (!atomic_load(&stop_bystander)) {
		uint64_t lease;
		const void *kv[3];
		if (prefixd_match(c, t, 3, &lease, &hit, kv) || hit != 3 ||
		    !td_block_ok(t, 2, kv[2]) || prefixd_release(c, lease))
			atomic_fetch_add(&bystander_errors, 1);
		atomic_fetch_add(&bystander_rounds, 1);
	}
	prefixd_close(c);
	return NULL;
}

static pthread_t bystander_thread;

static void setup(void)
{
	const char *args[] = { "--block-tokens", "4", "--memory", "64M", NULL };
	cr_assert_eq(td_start(&td, args), 0);
	atomic_store(&stop_bystander, 0);
	atomic_store(&bystander_rounds, 0);
	atomic_store(&bystander_errors, 0);
	pthread_create(&bystander_thread, NULL, bystander, NULL);
}

static void teardown(void)
{
	while (atomic_load(&bystander_rounds) < 10)
		usleep(1000);
	atomic_store(&stop_bystander, 1);
	pthread_join(bystander_thread, NULL);
	cr_expect_eq(atomic_load(&bystander_errors), 0, "the concurrent client saw no difference");
	cr_expect_eq(td_stop(&td), 0, "prefixd stops cleanly");
}

TestSuite(hostile, .init = setup, .fini = teardown);

/* ==== Raw frames ==== */

static int raw_connect(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	cr_assert_lt(strlen(td.sock), sizeof(a.sun_path));
	strcpy(a.sun_path, td.sock);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	struct timeval tv = { 5, 0 }; /* a hung daemon fails the test, not the run */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

/* Sends a request; returns the reply's status and its message in msg. */
static int raw_call(int fd, int op, uint16_t version, const uint8_t *body, size_t len,
		    const int *fds, int nfds, char *msg)
{
	struct pd_hdr h = { PD_MAGIC, version, (uint8_t)op, 0, 0, 77, (uint32_t)len };
	cr_assert_eq(pd_send(fd, &h, body, fds, nfds), 0);
	struct pd_hdr r;
	uint8_t *rb;
	int rfds[PD_MAX_FDS], n = 0;
	cr_assert_eq(pd_recv(fd, &r, &rb, rfds, &n), 0, "a reply, not a close");
	cr_expect_eq(r.opaque, 77);
	cr_expect_eq(r.op, op);
	struct pd_error e;
	msg[0] = 0;
	if (r.status && !pd_error_decode(rb, r.body_len, &e))
		snprintf(msg, 300, "%.*s", (int)e.len, e.msg);
	for (int i = 0; i < n; i++)
		close(rfds[i]);
	free(rb);
	return (int)r.status;
}

static void hello(int fd)
{
	uint8_t fp[PD_FP_SIZE], body[128];
	memset(fp, 1, sizeof(fp));
	struct pd_hello m = { PD_VERSION, PD_VERSION, TD_BLOCK_TOKENS, TD_BLOCK_BYTES, 1, fp, 0, NULL };
	size_t n = pd_hello_encode(&m, body, sizeof(body));
	char msg[300];
	cr_assert_eq(raw_call(fd, PD_OP_HELLO, PD_VERSION, body, n, NULL, 0, msg), PD_OK, "%s", msg);
}

/* The connection was closed by the daemon. */
static void expect_closed(int fd)
{
	char b;
	/* A reset when bytes the daemon never read were left behind. */
	ssize_t r = recv(fd, &b, 1, 0);
	cr_expect(r == 0 || (r < 0 && errno == ECONNRESET), "the daemon closed this connection (%zd, %s)",
		  r, strerror(errno));
}

Test(hostile, a_malformed_header_closes_only_that_connection)
{
	int fd = raw_connect();
	uint8_t hdr[PD_HDR_SIZE] = { 0 };
	struct pd_hdr h = { PD_MAGIC, PD_VERSION, PD_OP_STATS, 0, 0, 1, 0 };
	pd_hdr_encode(&h, hdr);
	hdr[25] = 1; /* a reserved byte */
	cr_assert_eq(write(fd, hdr, sizeof(hdr)), (ssize_t)sizeof(hdr));
	expect_closed(fd);
	close(fd);
}

Test(hostile, garbage_bytes_close_the_connection)
{
	int fd = raw_connect();
	uint8_t junk[200];
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)(i * 97 + 13);
	cr_assert_eq(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	expect_closed(fd);
	close(fd);
}

Test(hostile, a_wrong_version_gets_its_error_and_the_connection_stays)
{
	int fd = raw_connect();
	uint8_t fp[PD_FP_SIZE] = { 1 }, body[128];
	char msg[300];
	struct pd_hello m = { PD_VERSION + 1, PD_VERSION + 2, TD_BLOCK_TOKENS, TD_BLOCK_BYTES, 1, fp, 0, NULL };
	size_t n = pd_hello_encode(&m, body, sizeof(body));
	cr_expect_eq(raw_call(fd, PD_OP_HELLO, PD_VERSION, body, n, NULL, 0, msg), PD_E_VERSION);
	cr_expect(strstr(msg, "version 2"), "%s", msg);
	cr_expect_eq(raw_call(fd, PD_OP_STATS, 9, NULL, 0, NULL, 0, msg), PD_E_VERSION,
		     "a frame of another version");
	hello(fd);
	close(fd);
}

Test(hostile, requests_before_hello_are_refused)
{
	int fd = raw_connect();
	uint8_t body[8] = { 1 };
	char msg[300];
	cr_expect_eq(raw_call(fd, PD_OP_RELEASE, PD_VERSION, body, 8, NULL, 0, msg), PD_E_STATE);
	cr_expect_eq(raw_call(fd, PD_OP_MATCH, PD_VERSION, body, 4, NULL, 0, msg), PD_E_STATE);
	hello(fd);
	cr_expect_eq(raw_call(fd, PD_OP_HELLO, PD_VERSION, body, 4, NULL, 0, msg), PD_E_STATE,
		     "HELLO twice");
	close(fd);
}

Test(hostile, counts_and_lengths_past_the_limits)
{
	int fd = raw_connect();
	hello(fd);
	char msg[300];
	/* A count over the limit, with nothing behind it. */
	uint8_t body[4 + 2 * (PD_HASH_SIZE + 4 * TD_BLOCK_TOKENS) + 8] = { 0 };
	uint32_t big = PD_MAX_HASHES + 1;
	memcpy(body, &big, 4);
	cr_expect_eq(raw_call(fd, PD_OP_MATCH, PD_VERSION, body, 4, NULL, 0, msg), PD_E_LIMIT);
	/* A hash list longer than its count says. */
	body[0] = 1;
	body[1] = body[2] = body[3] = 0;
	size_t two = 4 + 2 * (PD_HASH_SIZE + 4 * TD_BLOCK_TOKENS);
	cr_expect_eq(raw_call(fd, PD_OP_MATCH, PD_VERSION, body, two, NULL, 0, msg), PD_E_MALFORMED);
	cr_expect_eq(raw_call(fd, PD_OP_MATCH, PD_VERSION, body, 3, NULL, 0, msg), PD_E_MALFORMED,
		     "a body shorter than its count");
	cr_expect_eq(raw_call(fd, PD_OP_RELEASE, PD_VERSION, body, 8, NULL, 0, msg), PD_E_NOTFOUND,
		     "a lease this connection does not hold");
	/* A body over 4 MiB cannot be skipped: LIMIT, then the close. */
	struct pd_hdr h = { PD_MAGIC, PD_VERSION, PD_OP_MATCH, 0, 0, 5, PD_MAX_BODY + 1 };
	uint8_t hdr[PD_HDR_SIZE];
	pd_hdr_encode(&h, hdr);
	cr_assert_eq(write(fd, hdr, sizeof(hdr)), (ssize_t)sizeof(hdr));
	struct pd_hdr r;
	uint8_t *rb;
	cr_assert_eq(pd_recv(fd, &r, &rb, NULL, NULL), 0);
	cr_expect_eq(r.status, PD_E_LIMIT);
	free(rb);
	expect_closed(fd);
	close(fd);
}

/* A PUBLISH body for one block of tokens 1..4 with the given hash. */
static size_t publish_body(uint8_t *body, size_t cap, uint64_t lease, const uint8_t *hash)
{
	uint8_t tokens[4 * TD_BLOCK_TOKENS] = { 0 };
	for (int i = 0; i < TD_BLOCK_TOKENS; i++)
		tokens[4 * i] = (uint8_t)(i + 1);
	struct pd_publish p = { lease, 1, hash, tokens };
	return pd_publish_encode(&p, TD_BLOCK_TOKENS, body, cap);
}

Test(hostile, publishes_with_bad_staging_or_lying_hashes)
{
	int fd = raw_connect();
	hello(fd);
	char msg[300];
	uint8_t body[256], hash[PD_HASH_SIZE];
	memset(hash, 0xab, sizeof(hash)); /* not the chain's hash of these tokens */
	size_t n = publish_body(body, sizeof(body), 0, hash);
	cr_expect_eq(raw_call(fd, PD_OP_PUBLISH, PD_VERSION, body, n, NULL, 0, msg), PD_E_MALFORMED,
		     "no staging descriptor");
	int p[2];
	cr_assert_eq(pipe(p), 0);
	cr_expect_eq(raw_call(fd, PD_OP_PUBLISH, PD_VERSION, body, n, p, 1, msg), PD_E_MALFORMED,
		     "a pipe is not staging memory");
	cr_expect(strstr(msg, "memfd"), "%s", msg);
	close(p[0]);
	close(p[1]);
	int small = memfd_create("small", MFD_CLOEXEC);
	cr_assert_eq(ftruncate(small, 100), 0);
	cr_expect_eq(raw_call(fd, PD_OP_PUBLISH, PD_VERSION, body, n, &small, 1, msg), PD_E_MALFORMED,
		     "staging smaller than the blocks");
	int mem = memfd_create("ok", MFD_CLOEXEC);
	cr_assert_eq(ftruncate(mem, TD_BLOCK_BYTES), 0);
	cr_expect_eq(raw_call(fd, PD_OP_PUBLISH, PD_VERSION, body, n, &mem, 1, msg), PD_E_MALFORMED,
		     "a hash that is not the chain's");
	cr_expect(strstr(msg, "chain"), "%s", msg);
	n = publish_body(body, sizeof(body), 12345, hash);
	cr_expect_eq(raw_call(fd, PD_OP_PUBLISH, PD_VERSION, body, n, &mem, 1, msg), PD_E_NOTFOUND,
		     "a lease this connection does not hold");
	close(small);
	close(mem);
	close(fd);
}

Test(hostile, statistics_count_the_refusals)
{
	int fd = raw_connect();
	char msg[300];
	uint8_t body[8] = { 0 };
	cr_expect_eq(raw_call(fd, PD_OP_MATCH, PD_VERSION, body, 4, NULL, 0, msg), PD_E_STATE);
	cr_expect_eq(raw_call(fd, PD_OP_STATS, PD_VERSION, body, 3, NULL, 0, msg), PD_E_MALFORMED);
	struct pd_hdr h = { PD_MAGIC, PD_VERSION, PD_OP_STATS, 0, 0, 1, 0 };
	cr_assert_eq(pd_send(fd, &h, NULL, NULL, 0), 0);
	uint8_t *rb;
	struct pd_hdr r;
	cr_assert_eq(pd_recv(fd, &r, &rb, NULL, NULL), 0);
	struct pd_stats_reply v;
	cr_assert_eq(pd_stats_reply_decode(rb, r.body_len, &v), 0);
	cr_expect_eq(v.v[PD_ST_errors], 2);
	free(rb);
	close(fd);
}

Test(hostile, one_way_releases_get_no_reply_and_one_way_is_only_for_release)
{
	int fd = raw_connect();
	hello(fd);
	uint8_t body[8] = { 9 };
	struct pd_hdr h = { PD_MAGIC, PD_VERSION, PD_OP_RELEASE, PD_FLAG_NOREPLY, 0, 1, 8 };
	cr_assert_eq(pd_send(fd, &h, body, NULL, 0), 0);
	/* The next reply is the next request's: the unknown lease was only
	 * counted as a refusal. */
	char msg[300];
	cr_expect_eq(raw_call(fd, PD_OP_RELEASE, PD_VERSION, body, 8, NULL, 0, msg), PD_E_NOTFOUND);
	struct pd_hdr m = { PD_MAGIC, PD_VERSION, PD_OP_MATCH, PD_FLAG_NOREPLY, 0, 2, 4 };
	uint8_t zero[4] = { 0 };
	cr_assert_eq(pd_send(fd, &m, zero, NULL, 0), 0);
	expect_closed(fd);
	close(fd);
}
