/* SPDX-License-Identifier: MIT */
/*
 * Bad input at prefixd: each gets its typed error (or, for a frame that
 * cannot be parsed, the close of that one connection), while a client
 * served at the same time sees no difference.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <regex.h>
#include <signal.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon_util.h"
#include "reaper.h"
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

Test(hostile, the_lease_flag_on_anything_but_publish_closes_the_connection)
{
	int fd = raw_connect();
	hello(fd);
	/* A RELEASE of lease 1, header and body in one write: the daemon
	 * closes on the header, and a second write could meet the close. */
	uint8_t frame[PD_HDR_SIZE + 8] = { 0 };
	struct pd_hdr h = { PD_MAGIC, PD_VERSION, PD_OP_RELEASE, PD_FLAG_LEASE, 0, 1, 8 };
	pd_hdr_encode(&h, frame);
	frame[PD_HDR_SIZE] = 1;
	cr_assert_eq(send(fd, frame, sizeof(frame), MSG_NOSIGNAL), (ssize_t)sizeof(frame));
	expect_closed(fd);
	close(fd);
}

Test(hostile, the_shared_flag_on_anything_but_hello_closes_the_connection)
{
	int fd = raw_connect();
	hello(fd);
	uint8_t frame[PD_HDR_SIZE + 8] = { 0 };
	struct pd_hdr h = { PD_MAGIC, PD_VERSION, PD_OP_RELEASE, PD_FLAG_SHARED, 0, 1, 8 };
	pd_hdr_encode(&h, frame);
	frame[PD_HDR_SIZE] = 1;
	cr_assert_eq(send(fd, frame, sizeof(frame), MSG_NOSIGNAL), (ssize_t)sizeof(frame));
	expect_closed(fd);
	close(fd);
}

Test(hostile, the_flight_flag_on_anything_but_match_closes_the_connection)
{
	int fd = raw_connect();
	hello(fd);
	uint8_t frame[PD_HDR_SIZE + 8] = { 0 };
	struct pd_hdr h = { PD_MAGIC, PD_VERSION, PD_OP_RELEASE, PD_FLAG_FLIGHT, 0, 1, 8 };
	pd_hdr_encode(&h, frame);
	frame[PD_HDR_SIZE] = 1;
	cr_assert_eq(send(fd, frame, sizeof(frame), MSG_NOSIGNAL), (ssize_t)sizeof(frame));
	expect_closed(fd);
	close(fd);
}

/* A MATCH with the FLIGHT flag of one block (hash and tokens from seed)
 * after the 8 bytes of wait_ms and flags; len cuts the body. */
static size_t flight_body(uint8_t *b, uint32_t wait_ms, uint32_t flags, uint8_t seed)
{
	uint8_t hash[PD_HASH_SIZE], tokens[4 * TD_BLOCK_TOKENS];
	memset(hash, seed, sizeof(hash));
	memset(tokens, seed, sizeof(tokens));
	for (int i = 0; i < 4; i++) {
		b[i] = (uint8_t)(wait_ms >> 8 * i);
		b[4 + i] = (uint8_t)(flags >> 8 * i);
	}
	struct pd_match m = { 1, hash, tokens };
	return PD_FLIGHT_SIZE + pd_match_encode(&m, TD_BLOCK_TOKENS, b + PD_FLIGHT_SIZE, 256);
}

/* Sends a FLIGHT MATCH; the reply's status, its message in msg and, on
 * status 0, its flight outcome in *outcome. */
static int flight_call(int fd, const uint8_t *body, size_t len, char *msg, uint32_t *outcome)
{
	struct pd_hdr h = { PD_MAGIC, PD_VERSION, PD_OP_MATCH, PD_FLAG_FLIGHT, 0, 78, (uint32_t)len };
	cr_assert_eq(pd_send(fd, &h, body, NULL, 0), 0);
	struct pd_hdr r;
	uint8_t *rb;
	int rfds[PD_MAX_FDS], n = 0;
	cr_assert_eq(pd_recv(fd, &r, &rb, rfds, &n), 0, "a reply, not a close");
	cr_expect_eq(r.opaque, 78);
	msg[0] = 0;
	struct pd_error e;
	struct pd_flight_reply fr;
	struct pd_match_reply mr;
	if (r.status && !pd_error_decode(rb, r.body_len, &e))
		snprintf(msg, 300, "%.*s", (int)e.len, e.msg);
	if (!r.status) {
		cr_assert_eq(pd_flight_reply_decode(rb, r.body_len, &fr), 0);
		cr_assert_eq(pd_match_reply_decode(rb, r.body_len - PD_FLIGHT_REPLY_SIZE, &mr), 0);
		*outcome = fr.outcome;
	}
	for (int i = 0; i < n; i++)
		close(rfds[i]);
	free(rb);
	return (int)r.status;
}

Test(hostile, flight_matches_that_do_not_decode_or_ask_too_much)
{
	int fd = raw_connect();
	hello(fd);
	uint8_t body[512];
	char msg[300];
	uint32_t outcome = 99;
	size_t n = flight_body(body, 100, PD_FLIGHT_CLAIM, 3);
	cr_expect_eq(flight_call(fd, body, 4, msg, &outcome), PD_E_MALFORMED, "no room for the flight fields");
	cr_expect_eq(flight_call(fd, body, PD_FLIGHT_SIZE, msg, &outcome), PD_E_MALFORMED, "no MATCH body");
	cr_expect_eq(flight_call(fd, body, n - 1, msg, &outcome), PD_E_MALFORMED, "a MATCH body cut short");
	n = flight_body(body, 100, 2, 3);
	cr_expect_eq(flight_call(fd, body, n, msg, &outcome), PD_E_MALFORMED, "an unknown flight flag");
	n = flight_body(body, PD_MAX_WAIT_MS + 1, PD_FLIGHT_CLAIM, 3);
	cr_expect_eq(flight_call(fd, body, n, msg, &outcome), PD_E_LIMIT, "a wait past the limit");
	cr_expect(strstr(msg, "600000"), "%s", msg);
	/* The connection is still served: a claim, then a plain miss. */
	n = flight_body(body, 0, PD_FLIGHT_CLAIM, 3);
	cr_expect_eq(flight_call(fd, body, n, msg, &outcome), PD_OK, "%s", msg);
	cr_expect_eq(outcome, PD_FLIGHT_CLAIMED);
	n = flight_body(body, 100, 0, 4);
	cr_expect_eq(flight_call(fd, body, n, msg, &outcome), PD_OK, "%s", msg);
	cr_expect_eq(outcome, PD_FLIGHT_NONE, "no CLAIM flag, no claim to wait for");
	close(fd);
}

Test(hostile, a_waiting_match_keeps_what_its_peer_sends_and_ends_with_its_peer)
{
	int a = raw_connect(), b = raw_connect(), c = raw_connect();
	hello(a);
	hello(b);
	hello(c);
	uint8_t body[512];
	char msg[300];
	uint32_t outcome = 99;
	size_t n = flight_body(body, 5000, PD_FLIGHT_CLAIM, 9);
	cr_assert_eq(flight_call(a, body, n, msg, &outcome), PD_OK, "%s", msg);
	cr_assert_eq(outcome, PD_FLIGHT_CLAIMED);
	/* b waits 300 ms, and sends a STATS meanwhile: answered after. */
	n = flight_body(body, 300, PD_FLIGHT_CLAIM, 9);
	struct pd_hdr h = { PD_MAGIC, PD_VERSION, PD_OP_MATCH, PD_FLAG_FLIGHT, 0, 1, (uint32_t)n };
	cr_assert_eq(pd_send(b, &h, body, NULL, 0), 0);
	struct pd_hdr st = { PD_MAGIC, PD_VERSION, PD_OP_STATS, 0, 0, 2, 0 };
	cr_assert_eq(pd_send(b, &st, NULL, NULL, 0), 0);
	struct pd_hdr r;
	uint8_t *rb;
	int rfds[PD_MAX_FDS], nfds = 0;
	cr_assert_eq(pd_recv(b, &r, &rb, rfds, &nfds), 0);
	cr_expect(r.op == PD_OP_MATCH && r.opaque == 1 && !r.status, "the MATCH is answered first");
	struct pd_flight_reply fr;
	cr_expect_eq(pd_flight_reply_decode(rb, r.body_len, &fr), 0);
	cr_expect_eq(fr.outcome, PD_FLIGHT_WAITED);
	cr_expect_geq(fr.waited_ms, 250);
	free(rb);
	cr_assert_eq(pd_recv(b, &r, &rb, rfds, &nfds), 0);
	cr_expect(r.op == PD_OP_STATS && r.opaque == 2 && !r.status, "then the STATS");
	free(rb);
	/* c waits, and hangs up: the daemon drops it; a's claim stays. */
	n = flight_body(body, 5000, PD_FLIGHT_CLAIM, 9);
	h.body_len = (uint32_t)n;
	cr_assert_eq(pd_send(c, &h, body, NULL, 0), 0);
	usleep(100000);
	close(c);
	struct prefixd_stats s = { 0 };
	for (int i = 0; i < 200 && (td_stats(&td, &s) || s.connections > 4); i++)
		usleep(10000);
	cr_expect_leq(s.connections, 4, "the waiting connection was closed (a, b, the bystander and the one asking stay)");
	cr_expect_eq(s.claims, 1);
	cr_expect_eq(s.waits, 2);
	cr_expect_eq(s.claims_inherited, 0);
	close(a);
	close(b);
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

/* Layouts the daemon does not store, sent as they are (libprefixd checks
 * them before it sends): refused with LAYOUT, the connection kept. */
Test(hostile, unknown_layouts_and_ragged_16_bit_blocks_are_refused)
{
	int fd = raw_connect();
	uint8_t fp[PD_FP_SIZE] = { 1 }, body[128];
	char msg[300];
	const struct { uint32_t layout; uint64_t bytes; const char *why; } bad[] = {
		{ 0, TD_BLOCK_BYTES, "layout 0" },
		{ 4, TD_BLOCK_BYTES, "layout 4" },
		{ PREFIXD_LAYOUT_F32, TD_BLOCK_TOKENS * 4 + 2, "f32 values" },
		{ PREFIXD_LAYOUT_F16, TD_BLOCK_TOKENS * 2 + 1, "16-bit values" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct pd_hello m = { PD_VERSION, PD_VERSION, TD_BLOCK_TOKENS, bad[i].bytes,
				      bad[i].layout, fp, 0, NULL };
		size_t n = pd_hello_encode(&m, body, sizeof(body));
		cr_expect_eq(raw_call(fd, PD_OP_HELLO, PD_VERSION, body, n, NULL, 0, msg), PD_E_LAYOUT,
			     "case %zu", i);
		cr_expect(strstr(msg, bad[i].why), "case %zu: %s", i, msg);
	}
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

/* ==== Admin messages ==== */

/* A raw request whose reply body the caller keeps (free it); the status. */
static int raw_body(int fd, int op, const uint8_t *body, size_t len, uint8_t **rb, uint32_t *rlen)
{
	struct pd_hdr h = { PD_MAGIC, PD_VERSION, (uint8_t)op, 0, 0, 78, (uint32_t)len };
	cr_assert_eq(pd_send(fd, &h, body, NULL, 0), 0);
	struct pd_hdr r;
	cr_assert_eq(pd_recv(fd, &r, rb, NULL, NULL), 0, "a reply, not a close");
	cr_expect_eq(r.opaque, 78);
	cr_expect_eq(r.op, op);
	*rlen = r.body_len;
	return (int)r.status;
}

static size_t list_body(uint8_t *b, uint64_t cursor, uint32_t max_rows, uint32_t flags, uint8_t model)
{
	struct pd_list m = { cursor, max_rows, flags, 0, { 0 } };
	memset(m.fp, model, sizeof(m.fp));
	return pd_list_encode(&m, b, PD_LIST_SIZE);
}

/* A good LIST on fd: OK with a reply that decodes. */
static void expect_list_works(int fd)
{
	uint8_t body[PD_LIST_SIZE], *rb;
	uint32_t rlen;
	list_body(body, 0, 16, 0, 0);
	cr_assert_eq(raw_body(fd, PD_OP_LIST, body, sizeof(body), &rb, &rlen), PD_OK,
		     "the connection still serves a good LIST");
	struct pd_list_reply r;
	cr_expect_eq(pd_list_reply_decode(rb, rlen, &r), 0);
	free(rb);
}

Test(hostile, list_requests_that_do_not_decode_or_ask_too_much)
{
	int fd = raw_connect();
	char msg[300];
	uint8_t body[PD_LIST_SIZE + 8] = { 0 };
	list_body(body, 0, 16, 0, 0);
	cr_expect_eq(raw_call(fd, PD_OP_LIST, PD_VERSION, body, PD_LIST_SIZE - 1, NULL, 0, msg),
		     PD_E_MALFORMED, "a short body");
	cr_expect_eq(raw_call(fd, PD_OP_LIST, PD_VERSION, body, PD_LIST_SIZE + 1, NULL, 0, msg),
		     PD_E_MALFORMED, "trailing bytes");
	cr_expect_eq(raw_call(fd, PD_OP_LIST, PD_VERSION, NULL, 0, NULL, 0, msg), PD_E_MALFORMED,
		     "no body");
	list_body(body, 0, 16, 1u << 2, 0);
	cr_expect_eq(raw_call(fd, PD_OP_LIST, PD_VERSION, body, PD_LIST_SIZE, NULL, 0, msg),
		     PD_E_MALFORMED, "an unknown flag");
	cr_expect(msg[0], "with a message");
	list_body(body, 0, 16, 0x80000000u, 0);
	cr_expect_eq(raw_call(fd, PD_OP_LIST, PD_VERSION, body, PD_LIST_SIZE, NULL, 0, msg),
		     PD_E_MALFORMED, "the top flag bit");
	list_body(body, 0, 16, 0, 0);
	body[20] = 1; /* the pad after uid */
	cr_expect_eq(raw_call(fd, PD_OP_LIST, PD_VERSION, body, PD_LIST_SIZE, NULL, 0, msg),
		     PD_E_MALFORMED, "non-zero padding");
	list_body(body, 0, 0, 0, 0);
	cr_expect_eq(raw_call(fd, PD_OP_LIST, PD_VERSION, body, PD_LIST_SIZE, NULL, 0, msg),
		     PD_E_LIMIT, "max_rows 0");
	list_body(body, 0, PD_MAX_ROWS + 1, 0, 0);
	cr_expect_eq(raw_call(fd, PD_OP_LIST, PD_VERSION, body, PD_LIST_SIZE, NULL, 0, msg),
		     PD_E_LIMIT, "max_rows past 4096");
	list_body(body, 0, 0xffffffffu, 0, 0);
	cr_expect_eq(raw_call(fd, PD_OP_LIST, PD_VERSION, body, PD_LIST_SIZE, NULL, 0, msg),
		     PD_E_LIMIT, "max_rows of 2^32 - 1");
	expect_list_works(fd);
	/* A cursor the daemon never gave: an answer, not a crash. */
	uint8_t *rb;
	uint32_t rlen;
	const uint64_t cursors[] = { ~0ull, 0xffffull << 32 | 0xffffffffu, 1ull << 48, 12345 };
	for (size_t i = 0; i < sizeof(cursors) / sizeof(cursors[0]); i++) {
		list_body(body, cursors[i], PD_MAX_ROWS, 0, 0);
		cr_expect_eq(raw_body(fd, PD_OP_LIST, body, PD_LIST_SIZE, &rb, &rlen), PD_OK,
			     "cursor %llx", (unsigned long long)cursors[i]);
		struct pd_list_reply r;
		cr_expect_eq(pd_list_reply_decode(rb, rlen, &r), 0);
		cr_expect(r.next == 0 || r.next > cursors[i], "cursor %llx: the listing advances",
			  (unsigned long long)cursors[i]);
		free(rb);
	}
	expect_list_works(fd);
	close(fd);
}

static int key_cmp(const void *a, const void *b)
{
	return memcmp(a, b, PD_HASH_SIZE);
}

/* 3000 chains in 65536 buckets: dozens of buckets hold two or more, so
 * pages end inside buckets too. */
Test(hostile, a_listing_one_row_a_page_sees_every_chain_once)
{
	struct prefixd_layout l = td_layout(3);
	struct prefixd *c;
	cr_assert_eq(prefixd_connect(td.sock, &l, &c), 0, "%s", prefixd_errmsg());
	enum { N = 3000 };
	for (uint32_t p = 0; p < N; p++) {
		uint32_t t[TD_BLOCK_TOKENS], stored, dedup;
		for (uint32_t i = 0; i < TD_BLOCK_TOKENS; i++)
			t[i] = 100 * p + i;
		cr_assert_eq(td_publish(c, 0, t, 0, 1, &stored, &dedup), 0, "%s", prefixd_errmsg());
		cr_assert_eq(stored, 1);
	}
	int fd = raw_connect();
	uint8_t body[PD_LIST_SIZE];
	static uint8_t keys[N][PD_HASH_SIZE];
	uint64_t cursor = 0;
	int rows = 0, pages = 0;
	do {
		uint8_t *rb;
		uint32_t rlen;
		list_body(body, cursor, 1, PD_LIST_MODEL, 3);
		cr_assert_eq(raw_body(fd, PD_OP_LIST, body, sizeof(body), &rb, &rlen), PD_OK);
		struct pd_list_reply r;
		cr_assert_eq(pd_list_reply_decode(rb, rlen, &r), 0);
		cr_expect_leq(r.nrows, 1, "max_rows holds");
		for (uint32_t i = 0; i < r.nrows && rows < N; i++) {
			struct pd_chain_row row = pd_chain_at(&r, i);
			memcpy(keys[rows++], row.id.key, PD_HASH_SIZE);
			cr_expect_eq(row.blocks, 1);
			cr_expect_eq(row.fp[0], 3);
		}
		int stuck = r.next && r.next <= cursor;
		cr_expect(!stuck, "the cursor advances: page %d, cursor (bucket %llu, position %llu) -> next (bucket %llu, position %llu) after %d rows",
			  pages, (unsigned long long)(cursor >> 32), (unsigned long long)(cursor & 0xffffffffu),
			  (unsigned long long)(r.next >> 32), (unsigned long long)(r.next & 0xffffffffu), rows);
		cursor = stuck ? 0 : r.next;
		free(rb);
		pages++;
	} while (cursor && pages < 4 * N);
	cr_expect_eq(rows, N, "%d of %d chains listed", rows, N);
	qsort(keys, (size_t)rows, PD_HASH_SIZE, key_cmp);
	int twice = 0;
	for (int i = 1; i < rows; i++)
		twice += !memcmp(keys[i - 1], keys[i], PD_HASH_SIZE);
	cr_expect_eq(twice, 0, "each chain listed once: %d listed twice", twice);
	close(fd);
	prefixd_close(c);
}

static size_t evict_body(uint8_t *b, uint32_t by, uint32_t uid, uint64_t idle_s)
{
	struct pd_evict m = { by, uid, idle_s, { 0 } };
	return pd_evict_encode(&m, b, PD_EVICT_SIZE);
}

Test(hostile, evict_requests_that_do_not_decode)
{
	int fd = raw_connect();
	char msg[300];
	uint8_t body[PD_EVICT_SIZE + 8] = { 0 };
	/* The selector of a user nobody is, so that the bystander keeps its blocks. */
	evict_body(body, PD_EVICT_USER, 4242, 0);
	cr_expect_eq(raw_call(fd, PD_OP_EVICT, PD_VERSION, body, PD_EVICT_SIZE - 1, NULL, 0, msg),
		     PD_E_MALFORMED, "a short body");
	cr_expect_eq(raw_call(fd, PD_OP_EVICT, PD_VERSION, body, PD_EVICT_SIZE + 1, NULL, 0, msg),
		     PD_E_MALFORMED, "trailing bytes");
	cr_expect_eq(raw_call(fd, PD_OP_EVICT, PD_VERSION, NULL, 0, NULL, 0, msg), PD_E_MALFORMED,
		     "no body");
	const uint32_t bad[] = { 0, PD_EVICT_MAX + 1, 255, 0x80000001u };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		evict_body(body, bad[i], 4242, 0);
		cr_expect_eq(raw_call(fd, PD_OP_EVICT, PD_VERSION, body, PD_EVICT_SIZE, NULL, 0, msg),
			     PD_E_MALFORMED, "selector %u", bad[i]);
		cr_expect(msg[0], "with a message");
	}
	/* Good ones that select nothing, then an unknown id. */
	uint8_t *rb;
	uint32_t rlen;
	evict_body(body, PD_EVICT_USER, 4242, 0);
	cr_expect_eq(raw_body(fd, PD_OP_EVICT, body, PD_EVICT_SIZE, &rb, &rlen), PD_OK,
		     "the connection still serves");
	struct pd_evict_reply r;
	cr_expect_eq(pd_evict_reply_decode(rb, rlen, &r), 0);
	cr_expect_eq(r.blocks, 0);
	free(rb);
	evict_body(body, PD_EVICT_IDLE, 0, ~0ull);
	cr_expect_eq(raw_call(fd, PD_OP_EVICT, PD_VERSION, body, PD_EVICT_SIZE, NULL, 0, msg), PD_OK,
		     "idle for 2^64 - 1 seconds");
	evict_body(body, PD_EVICT_ID, 0, 0);
	memset(body + 16, 0x5a, PD_HASH_SIZE);
	cr_expect_eq(raw_call(fd, PD_OP_EVICT, PD_VERSION, body, PD_EVICT_SIZE, NULL, 0, msg),
		     PD_E_NOTFOUND, "an id nobody cached");
	expect_list_works(fd);
	close(fd);
}

static size_t pin_body(uint8_t *b, uint8_t key, uint32_t uid, uint32_t ttl_s)
{
	struct pd_pin m = { { { 0 }, uid }, ttl_s };
	memset(m.id.key, key, sizeof(m.id.key));
	return pd_pin_encode(&m, b, PD_PIN_SIZE);
}

Test(hostile, pin_and_unpin_requests_that_do_not_decode)
{
	int fd = raw_connect();
	char msg[300];
	uint8_t body[PD_PIN_SIZE + 8] = { 0 };
	const int ops[] = { PD_OP_PIN, PD_OP_UNPIN };
	for (int k = 0; k < 2; k++) {
		pin_body(body, 0x5a, 0, 0);
		cr_expect_eq(raw_call(fd, ops[k], PD_VERSION, body, PD_PIN_SIZE - 1, NULL, 0, msg),
			     PD_E_MALFORMED, "op %d: a short body", ops[k]);
		cr_expect_eq(raw_call(fd, ops[k], PD_VERSION, body, PD_PIN_SIZE + 1, NULL, 0, msg),
			     PD_E_MALFORMED, "op %d: trailing bytes", ops[k]);
		cr_expect_eq(raw_call(fd, ops[k], PD_VERSION, NULL, 0, NULL, 0, msg), PD_E_MALFORMED,
			     "op %d: no body", ops[k]);
		cr_expect_eq(raw_call(fd, ops[k], PD_VERSION, body, PD_PIN_SIZE, NULL, 0, msg),
			     PD_E_NOTFOUND, "op %d: an id nobody cached, after the bad ones", ops[k]);
	}
	pin_body(body, 0x5a, 0, 1);
	cr_expect_eq(raw_call(fd, PD_OP_UNPIN, PD_VERSION, body, PD_PIN_SIZE, NULL, 0, msg),
		     PD_E_MALFORMED, "UNPIN with a ttl");
	pin_body(body, 0x5a, 0, 0xffffffffu);
	cr_expect_eq(raw_call(fd, PD_OP_UNPIN, PD_VERSION, body, PD_PIN_SIZE, NULL, 0, msg),
		     PD_E_MALFORMED, "UNPIN with the largest ttl");
	cr_expect_eq(raw_call(fd, PD_OP_PIN, PD_VERSION, body, PD_PIN_SIZE, NULL, 0, msg),
		     PD_E_NOTFOUND, "PIN with the largest ttl is well-formed");
	expect_list_works(fd);
	close(fd);
}

Test(hostile, export_and_import_requests_that_do_not_decode_or_carry_no_file)
{
	int fd = raw_connect();
	char msg[300], path[] = "/tmp/pfx-hostile-XXXXXX";
	int file = mkstemp(path);
	cr_assert_geq(file, 0);
	unlink(path);
	uint8_t body[PD_EXPORT_SIZE + 8] = { 0 };
	struct pd_export ex = { PD_EXPORT_USER, 4242, { 0 }, { { 0 }, 0 } };
	pd_export_encode(&ex, body, PD_EXPORT_SIZE);
	cr_expect_eq(raw_call(fd, PD_OP_EXPORT, PD_VERSION, body, PD_EXPORT_SIZE - 1, &file, 1, msg),
		     PD_E_MALFORMED, "a short body");
	cr_expect_eq(raw_call(fd, PD_OP_EXPORT, PD_VERSION, body, PD_EXPORT_SIZE + 1, &file, 1, msg),
		     PD_E_MALFORMED, "trailing bytes");
	cr_expect_eq(raw_call(fd, PD_OP_EXPORT, PD_VERSION, body, PD_EXPORT_SIZE, NULL, 0, msg),
		     PD_E_MALFORMED, "no file");
	cr_expect(strstr(msg, "exactly one descriptor"), "%s", msg);
	int two[2] = { file, file };
	cr_expect_eq(raw_call(fd, PD_OP_EXPORT, PD_VERSION, body, PD_EXPORT_SIZE, two, 2, msg),
		     PD_E_MALFORMED, "two files");
	ex.flags = 1u << 7;
	pd_export_encode(&ex, body, PD_EXPORT_SIZE);
	cr_expect_eq(raw_call(fd, PD_OP_EXPORT, PD_VERSION, body, PD_EXPORT_SIZE, &file, 1, msg),
		     PD_E_MALFORMED, "an unknown selector");
	ex.flags = PD_EXPORT_ID;
	memset(ex.id.key, 0x5a, sizeof(ex.id.key));
	pd_export_encode(&ex, body, PD_EXPORT_SIZE);
	cr_expect_eq(raw_call(fd, PD_OP_EXPORT, PD_VERSION, body, PD_EXPORT_SIZE, &file, 1, msg),
		     PD_E_NOTFOUND, "an id nobody cached");
	struct pd_import im = { 1u << 3, 0 };
	pd_import_encode(&im, body, PD_IMPORT_SIZE);
	cr_expect_eq(raw_call(fd, PD_OP_IMPORT, PD_VERSION, body, PD_IMPORT_SIZE, &file, 1, msg),
		     PD_E_MALFORMED, "an unknown import flag");
	im.flags = 0;
	pd_import_encode(&im, body, PD_IMPORT_SIZE);
	cr_expect_eq(raw_call(fd, PD_OP_IMPORT, PD_VERSION, body, PD_IMPORT_SIZE, NULL, 0, msg),
		     PD_E_MALFORMED, "no file");
	int sv[2];
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	cr_expect_eq(raw_call(fd, PD_OP_IMPORT, PD_VERSION, body, PD_IMPORT_SIZE, &sv[0], 1, msg),
		     PD_E_MALFORMED, "a socket is no file");
	cr_expect(strstr(msg, "not a regular file"), "%s", msg);
	cr_expect_eq(write(file, "PFXDREC", 7), 7);
	cr_expect_eq(raw_call(fd, PD_OP_IMPORT, PD_VERSION, body, PD_IMPORT_SIZE, &file, 1, msg),
		     PD_E_MALFORMED, "seven bytes are no record");
	cr_expect(strstr(msg, "nothing was imported"), "%s", msg);
	close(sv[0]);
	close(sv[1]);
	close(file);
	expect_list_works(fd);
	close(fd);
}

Test(hostile, stats_with_a_body_is_malformed)
{
	int fd = raw_connect();
	char msg[300];
	uint8_t body[PD_LIST_SIZE] = { 0 };
	const size_t lens[] = { 1, 8, PD_LIST_SIZE };
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		cr_expect_eq(raw_call(fd, PD_OP_STATS, PD_VERSION, body, lens[i], NULL, 0, msg),
			     PD_E_MALFORMED, "a body of %zu bytes", lens[i]);
		cr_expect(strstr(msg, "empty"), "%s", msg);
	}
	uint8_t *rb;
	uint32_t rlen;
	cr_assert_eq(raw_body(fd, PD_OP_STATS, NULL, 0, &rb, &rlen), PD_OK, "then a good STATS");
	struct pd_stats_reply v;
	cr_expect_eq(pd_stats_reply_decode(rb, rlen, &v), 0);
	cr_expect_geq(v.v[PD_ST_errors], 3);
	free(rb);
	close(fd);
}

/* In a child of another uid: the status of each admin request (well-formed
 * ones), then of a HELLO on the same connection; -1 when the connection
 * failed. No Criterion here: the parent checks. */
/* What uid 60001 asks of root's namespace, and of its own, and what the
 * daemon answered. */
enum { D_LIST_ALL, D_LIST_ROOT, D_EVICT_ALL, D_EVICT_ROOT, D_PIN_ROOT, D_UNPIN_ROOT, D_STATS,
       D_HELLO, D_N };
static const char *const denied_names[D_N] = { "LIST of all", "LIST of uid 0", "EVICT all",
					       "EVICT of uid 0", "PIN of uid 0's", "UNPIN of uid 0's",
					       "STATS", "HELLO" };

struct denied {
	int status[D_N];
	char msg[D_N][160];
};

static int plain_call(int fd, int op, const uint8_t *body, size_t len, char *msg, size_t cap)
{
	struct pd_hdr h = { PD_MAGIC, PD_VERSION, (uint8_t)op, 0, 0, 5, (uint32_t)len };
	struct pd_hdr r;
	uint8_t *rb = NULL;
	if (pd_send(fd, &h, body, NULL, 0) || pd_recv(fd, &r, &rb, NULL, NULL))
		return -1;
	struct pd_error e;
	msg[0] = 0;
	if (r.status && !pd_error_decode(rb, r.body_len, &e))
		snprintf(msg, cap, "%.*s", (int)e.len, e.msg);
	free(rb);
	return (int)r.status;
}

static void denied_child(const char *sock, int out)
{
	struct denied d;
	memset(&d, 0xff, sizeof(d.status));
	memset(d.msg, 0, sizeof(d.msg));
	gid_t g = 65534;
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	strcpy(a.sun_path, sock);
	int fd = -1;
	if (!setgroups(1, &g) && !setresgid(g, g, g) && !setresuid(60001, 60001, 60001) &&
	    (fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0 &&
	    !connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		struct timeval tv = { 5, 0 };
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		uint8_t la[PD_LIST_SIZE], lr[PD_LIST_SIZE], ea[PD_EVICT_SIZE], er[PD_EVICT_SIZE];
		uint8_t pb[PD_PIN_SIZE], hb[128], fp[PD_FP_SIZE];
		list_body(la, 0, 16, 0, 0);
		list_body(lr, 0, 16, PD_LIST_USER, 0); /* uid 0 */
		evict_body(ea, PD_EVICT_ALL, 0, 0);
		evict_body(er, PD_EVICT_USER, 0, 0);
		pin_body(pb, 0x5a, 0, 0);
		const struct {
			int op;
			const uint8_t *body;
			size_t len;
		} req[D_HELLO] = {
			{ PD_OP_LIST, la, sizeof(la) },    { PD_OP_LIST, lr, sizeof(lr) },
			{ PD_OP_EVICT, ea, sizeof(ea) },   { PD_OP_EVICT, er, sizeof(er) },
			{ PD_OP_PIN, pb, sizeof(pb) },     { PD_OP_UNPIN, pb, sizeof(pb) },
			{ PD_OP_STATS, NULL, 0 },
		};
		for (int i = 0; i < D_HELLO; i++)
			d.status[i] = plain_call(fd, req[i].op, req[i].body, req[i].len, d.msg[i],
						 sizeof(d.msg[i]));
		memset(fp, 1, sizeof(fp));
		struct pd_hello m = { PD_VERSION, PD_VERSION, TD_BLOCK_TOKENS, TD_BLOCK_BYTES, 1, fp, 0, NULL };
		size_t n = pd_hello_encode(&m, hb, sizeof(hb));
		d.status[D_HELLO] = plain_call(fd, PD_OP_HELLO, hb, n, d.msg[D_HELLO], sizeof(d.msg[0]));
	}
	_exit(write(out, &d, sizeof(d)) == (ssize_t)sizeof(d) ? 0 : 1);
}

Test(hostile, admin_requests_from_another_user_reach_only_their_own_chains)
{
	cr_assert_eq(geteuid(), 0, "this test changes uid: run it as root");
	struct test_daemon td2;
	const char *args[] = { "--block-tokens", "4", "--memory", "1M", "--group", "65534", NULL };
	cr_assert_eq(td_start_named(&td2, "sock", args), 0);
	cr_assert_eq(chmod(td2.dir, 0711), 0);
	/* Something to evict or pin, were it allowed. */
	struct prefixd_layout l = td_layout(1);
	struct prefixd *c;
	cr_assert_eq(prefixd_connect(td2.sock, &l, &c), 0, "%s", prefixd_errmsg());
	uint32_t t[2 * TD_BLOCK_TOKENS], stored, dedup;
	for (uint32_t i = 0; i < 2 * TD_BLOCK_TOKENS; i++)
		t[i] = 300 + i;
	cr_assert_eq(td_publish(c, 0, t, 0, 2, &stored, &dedup), 0, "%s", prefixd_errmsg());
	int p[2];
	cr_assert_eq(pipe(p), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(p[0]);
		denied_child(td2.sock, p[1]);
	}
	close(p[1]);
	struct denied d;
	ssize_t got = read(p[0], &d, sizeof(d));
	close(p[0]);
	int st;
	waitpid(pid, &st, 0);
	cr_assert_eq(got, (ssize_t)sizeof(d), "the child reports");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* What names root's namespace is denied, saying why; the rest is
	 * answered, on the user's own chains (none). */
	static const int denied[D_N] = { [D_LIST_ROOT] = 1, [D_EVICT_ROOT] = 1, [D_PIN_ROOT] = 1,
					 [D_UNPIN_ROOT] = 1 };
	for (int i = 0; i < D_N; i++) {
		cr_expect_eq(d.status[i], denied[i] ? PD_E_DENIED : PD_OK,
			     "%s from uid 60001: status %d: %s", denied_names[i], d.status[i], d.msg[i]);
		if (denied[i])
			cr_expect(strstr(d.msg[i], "not uid 0's") && strstr(d.msg[i], "root"),
				  "%s: the message says why and who may: %s", denied_names[i], d.msg[i]);
	}
	/* Nothing was evicted, and the daemon serves root. */
	struct prefixd_stats s;
	cr_assert_eq(prefixd_stats(c, &s), 0, "%s", prefixd_errmsg());
	cr_expect_eq(s.blocks, 2);
	cr_expect_eq(s.admin_evictions, 0);
	cr_expect_eq(s.pins, 0);
	cr_expect_geq(s.errors, 4);
	prefixd_close(c);
	cr_expect_eq(td_stop(&td2), 0, "the second prefixd stops cleanly");
}

/* In a child of uid 60001: LIST pages of one row from the start, until
 * the cursor ends (at most 1000 pages); writes {pages, rows} to out. */
static void pager_child(const char *sock, int out)
{
	uint32_t res[2] = { 0, 0 };
	gid_t g = 65534;
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	strcpy(a.sun_path, sock);
	int fd = -1;
	if (!setgroups(1, &g) && !setresgid(g, g, g) && !setresuid(60001, 60001, 60001) &&
	    (fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0 &&
	    !connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		struct timeval tv = { 5, 0 };
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		uint64_t cursor = 0;
		do {
			uint8_t body[PD_LIST_SIZE], *rb = NULL;
			struct pd_hdr h = { PD_MAGIC, PD_VERSION, PD_OP_LIST, 0, 0, 6, PD_LIST_SIZE };
			struct pd_hdr r;
			struct pd_list_reply lr;
			list_body(body, cursor, 1, 0, 0);
			if (pd_send(fd, &h, body, NULL, 0) || pd_recv(fd, &r, &rb, NULL, NULL) ||
			    r.status || pd_list_reply_decode(rb, r.body_len, &lr)) {
				free(rb);
				res[0] = UINT32_MAX;
				break;
			}
			res[0]++;
			res[1] += lr.nrows;
			cursor = lr.next;
			free(rb);
		} while (cursor && res[0] < 1000);
	}
	_exit(write(out, res, sizeof(res)) == (ssize_t)sizeof(res) ? 0 : 1);
}

Test(hostile, a_user_paging_one_row_at_a_time_cannot_count_others_chains)
{
	cr_assert_eq(geteuid(), 0, "this test changes uid: run it as root");
	struct test_daemon td2;
	const char *args[] = { "--block-tokens", "4", "--memory", "1M", "--group", "65534", NULL };
	cr_assert_eq(td_start_named(&td2, "sock", args), 0);
	cr_assert_eq(chmod(td2.dir, 0711), 0);
	/* Root's 6 chains of 2 blocks, which uid 60001 must not learn of. */
	struct prefixd_layout l = td_layout(1);
	struct prefixd *c;
	cr_assert_eq(prefixd_connect(td2.sock, &l, &c), 0, "%s", prefixd_errmsg());
	for (uint32_t k = 0; k < 6; k++) {
		uint32_t t[2 * TD_BLOCK_TOKENS], stored, dedup;
		for (uint32_t i = 0; i < 2 * TD_BLOCK_TOKENS; i++)
			t[i] = 1000 * (k + 1) + i;
		cr_assert_eq(td_publish(c, 0, t, 0, 2, &stored, &dedup), 0, "%s", prefixd_errmsg());
	}
	int p[2];
	cr_assert_eq(pipe(p), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(p[0]);
		pager_child(td2.sock, p[1]);
	}
	close(p[1]);
	uint32_t res[2];
	ssize_t got = read(p[0], res, sizeof(res));
	close(p[0]);
	int st;
	waitpid(pid, &st, 0);
	cr_assert_eq(got, (ssize_t)sizeof(res), "the child reports");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	cr_expect_eq(res[1], 0, "uid 60001 sees none of root's chains (%u rows)", res[1]);
	/* A page that ended at each of root's rows would count them. */
	cr_expect_eq(res[0], 1, "one page, whatever others cache: %u pages", res[0]);
	prefixd_close(c);
	cr_expect_eq(td_stop(&td2), 0, "the second prefixd stops cleanly");
}

/* ==== Limits: connections, request memory, deadlines ==== */

/* These start their own daemon (with the limits under test). */
static void start_limited(const char *const *extra)
{
	static const char *const base[] = { "--block-tokens", "4", "--memory", "16M", NULL };
	cr_assert_eq(td_start_args(&td, base, extra), 0);
}

static struct prefixd *connect_layout(char *why, size_t cap)
{
	struct prefixd_layout l = td_layout(1);
	struct prefixd *c;
	if (prefixd_connect(td.sock, &l, &c)) {
		snprintf(why, cap, "%s", prefixd_errmsg());
		return NULL;
	}
	return c;
}

/* Sends a header for a MATCH body of len bytes, and none of the body. */
static void send_match_header(int fd, uint32_t len)
{
	struct pd_hdr h = { PD_MAGIC, PD_VERSION, PD_OP_MATCH, 0, 0, 5, len };
	uint8_t hb[PD_HDR_SIZE];
	pd_hdr_encode(&h, hb);
	cr_assert_eq(write(fd, hb, sizeof(hb)), (ssize_t)sizeof(hb));
}

/* Sends a MATCH header for len bytes and the body, which does not decode
 * (its count does not match its length), then reads the answer: MALFORMED
 * proves the daemon took and read the whole body; LIMIT (or a close
 * before any reply) that it refused it. Returns the status, -1 for a close. */
static int match_body_answer(int fd, uint32_t len)
{
	send_match_header(fd, len);
	uint8_t *body = calloc(1, len);
	cr_assert(body);
	body[0] = 1; /* count 1: 52 bytes, not len */
	for (size_t off = 0; off < len;) {
		ssize_t w = send(fd, body + off, len - off, MSG_NOSIGNAL);
		if (w <= 0)
			break; /* refused and closed: the reply says so */
		off += (size_t)w;
	}
	free(body);
	struct pd_hdr r;
	uint8_t *rb = NULL;
	int rfds[PD_MAX_FDS], nfds = 0;
	int rc = pd_recv(fd, &r, &rb, rfds, &nfds);
	free(rb);
	return rc ? -1 : (int)r.status;
}

/* The reply is LIMIT and its message names `what`. */
static void expect_limit(int fd, const char *what)
{
	struct pd_hdr r;
	uint8_t *rb = NULL;
	int rfds[PD_MAX_FDS], nfds = 0;
	cr_assert_eq(pd_recv(fd, &r, &rb, rfds, &nfds), 0, "an answer, not silence");
	cr_expect_eq(r.status, PD_E_LIMIT);
	struct pd_error e;
	cr_assert_eq(pd_error_decode(rb, r.body_len, &e), 0);
	cr_expect(memmem(e.msg, e.len, what, strlen(what)), "%.*s", (int)e.len, e.msg);
	free(rb);
}

/* connect_layout, tried a few times: with a 1 s --request-timeout a loaded
 * machine may not schedule the daemon to read a HELLO in time, which is the
 * limit working, not the daemon failing. */
static struct prefixd *connect_patiently(char *why, size_t cap)
{
	struct prefixd *c = NULL;
	for (int i = 0; i < 5 && !(c = connect_layout(why, cap)); i++)
		usleep(100000);
	return c;
}

Test(limits, a_stranger_cannot_make_the_daemon_reserve_a_large_body)
{
	const char *extra[] = { NULL };
	start_limited(extra);
	int fd = raw_connect();
	/* A header for a 1 MiB MATCH body before HELLO, and none of the body. */
	send_match_header(fd, 1u << 20);
	expect_limit(fd, "before HELLO");
	expect_closed(fd);
	close(fd);
	/* After HELLO the same size is read: the body is decoded, and found
	 * malformed, rather than refused. */
	fd = raw_connect();
	hello(fd);
	cr_expect_eq(match_body_answer(fd, 64u << 10), PD_E_MALFORMED,
		     "a 64 KiB body after HELLO is read and decoded");
	close(fd);
	cr_expect_eq(td_stop(&td), 0);
}

/* Another user's client that holds n connections until killed. It closes
 * what it inherited: a copy of this process's connections would keep
 * them open. */
static pid_t hold_connections_as_another_user(int n)
{
	int up[2];
	cr_assert_eq(pipe(up), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		for (int fd = 3; fd < 1024; fd++)
			if (fd != up[1])
				close(fd);
		gid_t g = 65534;
		if (setgroups(1, &g) || setresgid(g, g, g) || setresuid(60001, 60001, 60001))
			_exit(1);
		struct prefixd_layout l = td_layout(1);
		struct prefixd *o;
		for (int i = 0; i < n; i++)
			if (prefixd_connect(td.sock, &l, &o))
				_exit(2);
		char c = 'k';
		if (write(up[1], &c, 1) != 1)
			_exit(3);
		pause();
		_exit(0);
	}
	close(up[1]);
	char c;
	cr_assert_eq(read(up[0], &c, 1), 1, "the other user connected %d times", n);
	close(up[0]);
	return pid;
}

Test(limits, connections_past_the_limits_are_told_why_at_once)
{
	const char *extra[] = { "--max-connections", "6", "--max-user-connections", "3",
				"--group", "65534", NULL };
	start_limited(extra);
	cr_assert_eq(td_share_dir(&td), 0, "let another user reach the socket");
	char why[300] = "";
	struct prefixd *mine[3];
	/* The start's probe connection counts until the daemon has read its
	 * close (as below): wait for that rather than fail on it. */
	for (int i = 0; i < 3; i++) {
		mine[i] = NULL;
		for (int k = 0; k < 300 && !(mine[i] = connect_layout(why, sizeof(why))); k++)
			usleep(10000);
		cr_assert(mine[i], "connection %d: %s", i, why);
	}
	double t0 = td_now_s();
	cr_expect_null(connect_layout(why, sizeof(why)), "a fourth of one user");
	cr_expect(strstr(why, "max-user-connections"), "says which limit: %s", why);
	/* Another user is not affected, and fills the daemon: 3 + 3. */
	pid_t other = hold_connections_as_another_user(3);
	prefixd_close(mine[2]);
	/* The daemon counts 6 until it has read the close, then 5. */
	struct prefixd *again = NULL;
	for (int i = 0; i < 300 && !(again = connect_layout(why, sizeof(why))); i++)
		usleep(10000);
	cr_assert(again, "a place freed by a close is given again: %s", why);
	cr_expect_null(connect_layout(why, sizeof(why)), "six in all");
	cr_expect(strstr(why, "max-connections"), "says which limit: %s", why);
	cr_expect_lt(td_now_s() - t0, 5.0, "refusals come at once, never a hang");
	/* Past the refusals the daemon keeps to tell, it closes at once: a
	 * client sees an error, not a hang. */
	int held[80];
	for (int i = 0; i < 80; i++)
		held[i] = raw_connect();
	t0 = td_now_s();
	cr_expect_null(connect_layout(why, sizeof(why)));
	cr_expect_lt(td_now_s() - t0, 2.0, "an error at once (%s)", why);
	for (int i = 0; i < 80; i++)
		close(held[i]);
	kill(other, SIGKILL);
	waitpid(other, NULL, 0);
	prefixd_close(again);
	prefixd_close(mine[0]);
	prefixd_close(mine[1]);
	cr_expect_eq(td_stop(&td), 0);
}

Test(limits, silent_and_slow_connections_are_closed_and_idle_clients_kept)
{
	const char *extra[] = { "--request-timeout", "1", NULL };
	start_limited(extra);
	char why[300] = "";
	struct prefixd *good = connect_patiently(why, sizeof(why));
	cr_assert(good, "%s", why);
	int silent = raw_connect(), half_header = raw_connect(), half_body = raw_connect();
	cr_assert_eq(write(half_header, "PFXD", 4), 4);
	hello(half_body);
	struct pd_hdr h = { PD_MAGIC, PD_VERSION, PD_OP_MATCH, 0, 0, 5, 4096 };
	uint8_t hb[PD_HDR_SIZE + 100] = { 0 };
	pd_hdr_encode(&h, hb);
	cr_assert_eq(write(half_body, hb, sizeof(hb)), (ssize_t)sizeof(hb));
	double t0 = td_now_s();
	expect_closed(silent);
	expect_closed(half_header);
	expect_closed(half_body);
	double took = td_now_s() - t0;
	cr_expect(took > 0.5 && took < 4.0, "closed after the 1 s timeout (%.2f s)", took);
	/* The good client was idle as long, holding no lease: still served. */
	uint32_t t[TD_BLOCK_TOKENS] = { 1, 2, 3, 4 };
	uint32_t stored, dedup;
	cr_expect_eq(td_publish(good, 0, t, 0, 1, &stored, &dedup), 0, "%s", prefixd_errmsg());
	close(silent);
	close(half_header);
	close(half_body);
	prefixd_close(good);
	cr_expect_eq(td_stop(&td), 0);
}

Test(limits, request_memory_is_bounded_and_a_request_past_it_is_refused)
{
	const char *extra[] = { "--request-memory", "4M", NULL };
	start_limited(extra);
	/* One connection starts a 3 MiB body and stalls. */
	int hog = raw_connect();
	hello(hog);
	send_match_header(hog, 3u << 20);
	usleep(100000);
	/* Another's 2 MiB would pass the 4 MiB: refused, and told why. */
	int other = raw_connect();
	hello(other);
	send_match_header(other, 2u << 20);
	expect_limit(other, "request-memory");
	close(other);
	/* Small requests still pass, and once the hog is gone, large ones. */
	char why[300] = "";
	struct prefixd *good = connect_layout(why, sizeof(why));
	cr_assert(good, "%s", why);
	uint32_t t[TD_BLOCK_TOKENS] = { 1, 2, 3, 4 };
	uint32_t stored, dedup;
	cr_expect_eq(td_publish(good, 0, t, 0, 1, &stored, &dedup), 0, "%s", prefixd_errmsg());
	close(hog);
	/* The daemon frees the hog's memory once it has read the close: until
	 * then a 2 MiB body may still be refused, after it must be read. */
	int answer = -1;
	for (int i = 0; i < 100 && answer != PD_E_MALFORMED; i++) {
		if (i)
			usleep(20000);
		int big = raw_connect();
		hello(big);
		answer = match_body_answer(big, 2u << 20);
		close(big);
	}
	cr_expect_eq(answer, PD_E_MALFORMED, "a 2 MiB body is read once the hog left (last answer %d)",
		     answer);
	prefixd_close(good);
	cr_expect_eq(td_stop(&td), 0);
}

Test(limits, an_idle_timeout_closes_connections_without_leases_only)
{
	const char *extra[] = { "--idle-timeout", "1", NULL };
	start_limited(extra);
	char why[300] = "";
	struct prefixd *holder = connect_layout(why, sizeof(why)), *idler = connect_layout(why, sizeof(why));
	cr_assert(holder && idler, "%s", why);
	uint32_t t[TD_BLOCK_TOKENS] = { 1, 2, 3, 4 };
	uint32_t stored, dedup, hit;
	cr_assert_eq(td_publish(holder, 0, t, 0, 1, &stored, &dedup), 0, "%s", prefixd_errmsg());
	uint64_t lease;
	const void *kv[1];
	cr_assert_eq(prefixd_match(holder, t, 1, &lease, &hit, kv), 0, "%s", prefixd_errmsg());
	cr_assert_eq(hit, 1);
	usleep(2600 * 1000); /* two sweeps past the timeout */
	cr_expect(td_block_ok(t, 0, kv[0]), "a leased block stays readable");
	cr_expect_eq(prefixd_release(holder, lease), 0);
	cr_expect_eq(prefixd_match(holder, t, 1, &lease, &hit, kv), 0,
		     "a connection holding a lease is kept: %s", prefixd_errmsg());
	cr_expect_neq(prefixd_match(idler, t, 1, &lease, &hit, kv), 0,
		      "an idle one without leases was closed");
	prefixd_close(holder);
	prefixd_close(idler);
	cr_expect_eq(td_stop(&td), 0);
}

/* Refused without --force (test_daemon.c); with it, a warning logged as
 * every line is: time, level, name. */
Test(limits, a_budget_larger_than_the_machine_is_warned_about)
{
	const char *extra[] = { "--memory", "64T", "--force", NULL };
	start_limited(extra);
	FILE *f = fopen(td.log, "r");
	char line[512];
	int warned = 0;
	regex_t re;
	cr_assert_eq(regcomp(&re, "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z warn prefixd: --memory "
				  "65536.0 GiB is more than this machine's .* of RAM",
			     REG_EXTENDED | REG_NOSUB), 0);
	while (f && fgets(line, sizeof(line), f))
		warned |= !regexec(&re, line, 0, NULL, 0);
	regfree(&re);
	if (f)
		fclose(f);
	cr_expect(warned, "prefixd says the budget cannot be backed, with time and level");
	cr_expect_eq(td_stop(&td), 0);
}

Test(limits, many_large_bodies_keep_the_daemon_rss_bounded)
{
	const char *extra[] = { "--request-memory", "8M", NULL };
	start_limited(extra);
	uint64_t before = td_rss(td.pid);
	/* 30 clients each start a 4 MiB body and send 1 MiB of it: 30 MiB
	 * the daemon would hold; it admits two bodies (8 MiB) and refuses
	 * the rest. */
	enum { N = 30 };
	int fds[N];
	static uint8_t chunk[64 << 10];
	memset(chunk, 0x5a, sizeof(chunk));
	struct timeval tv = { 2, 0 };
	for (int i = 0; i < N; i++) {
		fds[i] = raw_connect();
		setsockopt(fds[i], SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		hello(fds[i]);
		send_match_header(fds[i], 4u << 20);
	}
	/* A refused body's connection is closed: its sends fail at once. */
	for (int i = 0; i < N; i++)
		for (int k = 0; k < 16; k++)
			if (send(fds[i], chunk, sizeof(chunk), MSG_NOSIGNAL) < 0)
				break;
	usleep(300000);
	uint64_t rss = td_rss(td.pid);
	cr_expect_lt(rss, before + (12u << 20), "RSS grew by %.1f MiB (from %.1f MiB), not past the 8 MiB of --request-memory and some slack",
		     (double)(rss - before) / (1 << 20), (double)before / (1 << 20));
	for (int i = 0; i < N; i++)
		close(fds[i]);
	cr_expect_eq(td_stop(&td), 0);
}

/* Connections past their deadline that are still sending: the sweep that
 * closes them meets their events (a use-after-free once, under load). */
Test(limits, clients_trickling_past_their_deadline_are_cut_cleanly)
{
	const char *extra[] = { "--request-timeout", "1", NULL };
	start_limited(extra);
	enum { N = 40 };
	int fds[N];
	for (int i = 0; i < N; i++) {
		fds[i] = raw_connect();
		hello(fds[i]);
		send_match_header(fds[i], 64u << 10);
	}
	int open_ = N;
	for (double t0 = td_now_s(); td_now_s() - t0 < 3.5 && open_;) {
		open_ = 0;
		for (int i = 0; i < N; i++)
			open_ += send(fds[i], "", 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1;
		usleep(5000);
	}
	cr_expect_eq(open_, 0, "every trickling client was cut");
	for (int i = 0; i < N; i++)
		close(fds[i]);
	char why[300] = "";
	struct prefixd *good = connect_patiently(why, sizeof(why));
	cr_expect(good, "the daemon still serves: %s", why);
	prefixd_close(good);
	cr_expect_eq(td_stop(&td), 0, "and stops cleanly");
}

Test(limits, a_block_larger_than_the_quota_in_whole_pages_is_refused_at_hello)
{
	/* 8208 bytes fit a 10 KiB quota, the three pages they hold do not. */
	const char *extra[] = { "--quota", "10K", NULL };
	start_limited(extra);
	struct prefixd_layout l = td_layout(1);
	l.block_bytes = TD_BLOCK_BYTES + 16;
	struct prefixd *c = NULL;
	cr_expect_eq(prefixd_connect(td.sock, &l, &c), -ENOSPC, "refused at HELLO, not at every publish");
	cr_expect(strstr(prefixd_errmsg(), "whole pages"), "%s", prefixd_errmsg());
	prefixd_close(c);
	cr_expect_eq(td_stop(&td), 0);
}

/* ==== Descriptors whose close blocks ==== */

#define LINGER_CONNS 14
/* A frame's descriptors: harmless ones, with LINGER_RUN lingering sockets
 * past the 16th (what a request may carry) and as many past the 32nd (the
 * room the daemon's control buffer had). */
#define LINGER_RUN 4
#define LINGER_FDS (2 * PD_MAX_FDS + LINGER_RUN)
#define LINGER_S 30
/* Requests sent ahead of the frame: replies to them overflow the socket. */
#define LINGER_REQUESTS 2000

/*
 * A loopback TCP socket whose close() blocks for LINGER_S seconds: SO_LINGER
 * set, and its send queue full of data its peer never reads, so its FIN
 * cannot go out. *peer is that peer, which must stay open (closing it
 * resets the connection and ends the wait).
 */
static int lingering_socket(int lfd, const struct sockaddr_in *at, int *peer)
{
	int a = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), small = 4096;
	if (a < 0 || setsockopt(a, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)) ||
	    connect(a, (const struct sockaddr *)at, sizeof(*at)))
		return -1;
	if ((*peer = accept(lfd, NULL, NULL)) < 0)
		return -1;
	struct linger l = { 1, LINGER_S };
	if (setsockopt(a, SOL_SOCKET, SO_LINGER, &l, sizeof(l)))
		return -1;
	static const char junk[4096];
	while (send(a, junk, sizeof(junk), MSG_DONTWAIT) > 0)
		;
	return errno == EAGAIN || errno == EWOULDBLOCK ? a : -1;
}

/*
 * Another user (uid 60001) that sends, on each of LINGER_CONNS connections,
 * a frame carrying LINGER_FDS descriptors, some of them lingering sockets,
 * closes its own copies (the daemon's are then the last) and keeps the
 * sockets' peers open until killed.
 */
static pid_t linger_attack(void)
{
	int up[2];
	cr_assert_eq(pipe(up), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		/* Holds nothing of the test's, not even its output: a failed test
		 * must not wait for it. */
		for (int fd = 3; fd < 1024; fd++)
			if (fd != up[1])
				close(fd);
		int null = open("/dev/null", O_RDWR);
		dup2(null, 0);
		dup2(null, 1);
		dup2(null, 2);
		close(null);
		gid_t g = 65534;
		if (setgroups(1, &g) || setresgid(g, g, g) || setresuid(60001, 60001, 60001))
			_exit(1);
		/* After the uid change, which clears it: dies with the test. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), small = 4096;
		struct sockaddr_in at = { .sin_family = AF_INET,
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t len = sizeof(at);
		/* The peers' small receive buffers (accepted sockets inherit it). */
		if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)) ||
		    bind(lfd, (struct sockaddr *)&at, sizeof(at)) || listen(lfd, 64) ||
		    getsockname(lfd, (struct sockaddr *)&at, &len))
			_exit(2);
		struct sockaddr_un un = { .sun_family = AF_UNIX };
		strcpy(un.sun_path, td.sock);
		uint8_t hdr[PD_HDR_SIZE];
		struct pd_hdr h = { PD_MAGIC, PD_VERSION, PD_OP_STATS, 0, 0, 1, 0 };
		pd_hdr_encode(&h, hdr);
		uint8_t *many = malloc(LINGER_REQUESTS * sizeof(hdr));
		if (!many)
			_exit(5);
		for (int k = 0; k < LINGER_REQUESTS; k++)
			memcpy(many + k * sizeof(hdr), hdr, sizeof(hdr));
		struct pollfd socks[LINGER_CONNS];
		for (int i = 0; i < LINGER_CONNS; i++) {
			int fds[LINGER_FDS], peers[2 * LINGER_RUN], np = 0;
			for (int k = 0; k < LINGER_FDS; k++) {
				bool linger = (k >= PD_MAX_FDS && k < PD_MAX_FDS + LINGER_RUN) ||
					      k >= 2 * PD_MAX_FDS;
				fds[k] = linger ? lingering_socket(lfd, &at, &peers[np++])
						: open("/dev/null", O_RDONLY | O_CLOEXEC);
				if (fds[k] < 0)
					_exit(linger ? 30 + errno % 100 : 3);
			}
			int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (s < 0 || connect(s, (struct sockaddr *)&un, sizeof(un)))
				_exit(4);
			/* Requests whose replies this process does not take yet:
			 * more than the socket holds, so the daemon stops reading
			 * this connection until they are taken, and the frame
			 * below stays unread while its descriptors' copies here
			 * are closed. The daemon's are then the last. */
			for (size_t off = 0; off < LINGER_REQUESTS * sizeof(hdr);) {
				ssize_t w = send(s, many + off, LINGER_REQUESTS * sizeof(hdr) - off,
						 MSG_NOSIGNAL);
				if (w <= 0)
					break; /* refused: the bound at work */
				off += (size_t)w;
			}
			char cbuf[CMSG_SPACE(sizeof(fds))] = { 0 };
			struct iovec iov = { hdr, sizeof(hdr) };
			struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
					      .msg_controllen = sizeof(cbuf) };
			struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN(sizeof(fds));
			memcpy(CMSG_DATA(c), fds, sizeof(fds));
			(void)sendmsg(s, &msg, MSG_NOSIGNAL);
			for (int k = 0; k < LINGER_FDS; k++)
				close(fds[k]); /* not the last: the message holds them */
			socks[i] = (struct pollfd){ s, POLLIN, 0 };
			/* The peers stay open. */
		}
		char ok = 'k';
		if (write(up[1], &ok, 1) != 1)
			_exit(8);
		/* Takes the replies: the daemon reads on, up to the descriptors. */
		static uint8_t sink[1 << 16];
		for (;;) {
			if (poll(socks, LINGER_CONNS, -1) < 0)
				continue;
			for (int i = 0; i < LINGER_CONNS; i++)
				if (socks[i].revents && recv(socks[i].fd, sink, sizeof(sink), 0) <= 0)
					socks[i].fd = -1; /* closed by the daemon */
		}
	}
	close(up[1]);
	char c;
	if (read(up[0], &c, 1) != 1) {
		int st = 0;
		waitpid(pid, &st, 0);
		cr_assert_fail("the attacker sent its frames (it exited with %d, errno %d)",
			       WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), errno);
	}
	close(up[0]);
	return pid;
}

/* Seconds from connect to HELLO's answer; 99 without one within 5 s. */
static double timed_hello(void)
{
	double t0 = td_now_s();
	int fd = raw_connect();
	uint8_t fp[PD_FP_SIZE], body[128];
	memset(fp, 1, sizeof(fp));
	struct pd_hello m = { PD_VERSION, PD_VERSION, TD_BLOCK_TOKENS, TD_BLOCK_BYTES, 1, fp, 0, NULL };
	size_t n = pd_hello_encode(&m, body, sizeof(body));
	struct pd_hdr h = { PD_MAGIC, PD_VERSION, PD_OP_HELLO, 0, 0, 9, (uint32_t)n }, r;
	uint8_t *rb = NULL;
	int rfds[PD_MAX_FDS], nr = 0;
	bool ok = !pd_send(fd, &h, body, NULL, 0) && !pd_recv(fd, &r, &rb, rfds, &nr) &&
		  r.status == PD_OK;
	for (int i = 0; i < nr; i++)
		close(rfds[i]);
	free(rb);
	close(fd);
	return ok ? td_now_s() - t0 : 99.0;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

Test(limits, descriptors_whose_close_blocks_stall_no_worker)
{
	const char *extra[] = { "--threads", "2", "--group", "65534", NULL };
	start_limited(extra);
	cr_assert_eq(td_share_dir(&td), 0, "let another user reach the socket");
	pid_t attacker = linger_attack();
	/* A good client's HELLOs meanwhile. A worker that closed one of those
	 * sockets itself would stall for LINGER_S seconds, and raw_connect's
	 * 5 s receive timeout would fail the HELLO. */
	/* While the daemon takes in the attacker's descriptors: until it has
	 * cut the attacker off for having too many waiting to be closed (at
	 * least 1 s, at most 15 s). */
	enum { MAX = 100000 };
	double *took = malloc(MAX * sizeof(double)), t0 = td_now_s(), t = t0;
	int n = 0;
	bool cut = false;
	char out[256];
	cr_assert(took);
	while (n < MAX && t < t0 + 15 && !(cut && t > t0 + 1)) {
		/* One unanswered is enough to fail: the rest would wait too. */
		if ((took[n++] = timed_hello()) == 99.0)
			break;
		cut = cut || td_sh(out, sizeof(out), "grep -q 'uid 60001: more than %d descriptors it sent wait' '%s'",
				   REAPER_USER_MAX, td.log) == 0;
		t = td_now_s();
	}
	qsort(took, (size_t)n, sizeof(took[0]), by_value);
	double p99 = took[n * 99 / 100], worst = took[n - 1];
	free(took);
	cr_expect_lt(p99, 2.0, "a good client's HELLO is answered (p99 %.3f s, max %.3f s, %d HELLOs)",
		     p99, worst, n);
	if (p99 >= 2.0) {
		/* Stalled workers would not stop in time either. */
		kill(attacker, SIGKILL);
		waitpid(attacker, NULL, 0);
		td_kill(&td);
		return;
	}
	cr_expect(cut, "the attacker's connections are cut once it has too many descriptors waiting");
	/* Its peers go: the lingering closes end with a reset, and the daemon
	 * stops without waiting for them. */
	kill(attacker, SIGKILL);
	waitpid(attacker, NULL, 0);
	cr_expect_eq(td_stop(&td), 0);
}
