/* SPDX-License-Identifier: MIT */
/* The wire protocol: the bytes docs/PROTOCOL.md lays out, round trips, and
 * every malformed or oversized input. */
#include <criterion/criterion.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "chain.h"
#include "wire.h"

static uint8_t buf[1 << 20];

Test(proto, header_round_trip)
{
	struct pd_hdr h = { PD_MAGIC, PD_VERSION, PD_OP_MATCH, PD_FLAG_REPLY, PD_E_NOSPACE, 77, 1234 }, g;
	uint8_t out[PD_HDR_SIZE];
	pd_hdr_encode(&h, out);
	cr_assert_eq(out[0], 'P');
	cr_assert_eq(out[3], 'D');
	cr_assert_eq(pd_hdr_decode(out, &g), 0);
	cr_expect_eq(g.op, PD_OP_MATCH);
	cr_expect_eq(g.flags, PD_FLAG_REPLY);
	cr_expect_eq(g.status, PD_E_NOSPACE);
	cr_expect_eq(g.opaque, 77);
	cr_expect_eq(g.body_len, 1234);
}

Test(proto, header_rejections)
{
	struct pd_hdr h = { PD_MAGIC, PD_VERSION, PD_OP_HELLO, 0, 0, 1, 0 }, g;
	uint8_t out[PD_HDR_SIZE];
	struct {
		int byte;
		uint8_t value;
		int want;
	} cases[] = {
		{ 0, 'X', PD_E_MALFORMED },   /* magic */
		{ 6, 0, PD_E_MALFORMED },     /* op 0 */
		{ 6, 99, PD_E_MALFORMED },    /* unknown op */
		{ 7, 0x80, PD_E_MALFORMED },  /* unknown flag */
		{ 8, 200, PD_E_MALFORMED },   /* unknown status */
		{ 20, 1, PD_E_MALFORMED },    /* reserved byte */
		{ 31, 1, PD_E_MALFORMED },    /* last reserved byte */
		{ 19, 0x7f, PD_E_LIMIT },     /* body_len ~2 GiB */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		pd_hdr_encode(&h, out);
		out[cases[i].byte] = cases[i].value;
		cr_expect_eq(pd_hdr_decode(out, &g), cases[i].want, "case %zu", i);
	}
	/* The version is not a header error: HELLO negotiates it. */
	h.version = 99;
	pd_hdr_encode(&h, out);
	cr_expect_eq(pd_hdr_decode(out, &g), 0);
}

static const uint8_t fp[PD_FP_SIZE] = { 1, 2, 3 };

Test(proto, hello)
{
	struct pd_hello m = { 1, 1, 64, 46080 * 64, 1, fp, 5, (const uint8_t *)"salty" }, g;
	size_t n = pd_hello_encode(&m, buf, sizeof(buf));
	cr_assert_gt(n, 0);
	cr_assert_eq(pd_hello_decode(buf, n, &g), 0);
	cr_expect_eq(g.block_tokens, 64);
	cr_expect_eq(g.block_bytes, 46080 * 64);
	cr_expect_eq(memcmp(g.fingerprint, fp, PD_FP_SIZE), 0);
	cr_expect_eq(g.salt_len, 5);
	cr_expect_eq(memcmp(g.salt, "salty", 5), 0);
	for (size_t cut = 0; cut < n; cut++)
		cr_expect_eq(pd_hello_decode(buf, cut, &g), PD_E_MALFORMED, "truncated at %zu", cut);
	cr_expect_eq(pd_hello_decode(buf, n + 1, &g), PD_E_MALFORMED, "trailing byte");
	m.block_tokens = 48;
	n = pd_hello_encode(&m, buf, sizeof(buf));
	cr_expect_eq(pd_hello_decode(buf, n, &g), PD_E_MALFORMED, "block size not a power of two");
	m.block_tokens = 8192;
	n = pd_hello_encode(&m, buf, sizeof(buf));
	cr_expect_eq(pd_hello_decode(buf, n, &g), PD_E_LIMIT);
	m.block_tokens = 64;
	m.version_min = 3;
	m.version_max = 2;
	n = pd_hello_encode(&m, buf, sizeof(buf));
	cr_expect_eq(pd_hello_decode(buf, n, &g), PD_E_MALFORMED);
	/* A salt length past the limit, written by hand. */
	m.version_min = 1;
	n = pd_hello_encode(&m, buf, sizeof(buf));
	buf[n - 5 - 4] = 200;
	cr_expect_eq(pd_hello_decode(buf, n, &g), PD_E_LIMIT);
	m.salt_len = PD_MAX_SALT + 1;
	cr_expect_eq(pd_hello_encode(&m, buf, sizeof(buf)), 0, "encoder refuses too long a salt");
}

Test(proto, match_and_publish)
{
	enum { B = 4, C = 3 };
	uint8_t hashes[C * PD_HASH_SIZE];
	uint8_t tokens[C * B * 4];
	for (size_t i = 0; i < sizeof(hashes); i++)
		hashes[i] = (uint8_t)i;
	for (int i = 0; i < C * B; i++) {
		uint32_t t = 1000u + (uint32_t)i;
		memcpy(tokens + 4 * i, &t, 4); /* little-endian host */
	}
	struct pd_match m = { C, hashes, tokens }, g;
	size_t n = pd_match_encode(&m, B, buf, sizeof(buf));
	cr_assert_eq(n, 4 + C * PD_HASH_SIZE + C * B * 4);
	cr_assert_eq(pd_match_decode(buf, n, B, &g), 0);
	cr_expect_eq(g.count, C);
	cr_expect_eq(pd_token_at(g.tokens, B, 2, 3), 1000 + 11);
	cr_expect_eq(memcmp(g.hashes, hashes, sizeof(hashes)), 0);
	cr_expect_eq(pd_match_decode(buf, n - 1, B, &g), PD_E_MALFORMED);
	cr_expect_eq(pd_match_decode(buf, n + 4, B, &g), PD_E_MALFORMED);
	cr_expect_eq(pd_match_decode(buf, n, B * 2, &g), PD_E_MALFORMED, "tokens for another block size");
	/* A count past the limit is refused before its arrays are looked at. */
	uint32_t big = PD_MAX_HASHES + 1;
	memcpy(buf, &big, 4);
	cr_expect_eq(pd_match_decode(buf, n, B, &g), PD_E_LIMIT);
	big = 0xffffffffu;
	memcpy(buf, &big, 4);
	cr_expect_eq(pd_match_decode(buf, n, B, &g), PD_E_LIMIT);

	struct pd_publish p = { 9, C, hashes, tokens }, q;
	n = pd_publish_encode(&p, B, buf, sizeof(buf));
	cr_assert_eq(pd_publish_decode(buf, n, B, &q), 0);
	cr_expect_eq(q.count, C);
	cr_expect_eq(q.lease, 9);
	p.count = 0;
	n = pd_publish_encode(&p, B, buf, sizeof(buf));
	cr_expect_eq(pd_publish_decode(buf, n, B, &q), PD_E_MALFORMED, "empty publish");
}

Test(proto, match_reply)
{
	struct pd_place places[2] = { { .arena = 3, .offset = 4096 }, { .arena = 7, .flags = PD_PLACE_FROM_DISK, .offset = 1 << 30 } };
	struct pd_arena_desc arenas[1] = { { 7, 64u << 20 } };
	struct pd_match_reply g;
	size_t n = pd_match_reply_encode(42, 2, places, 1, arenas, buf, sizeof(buf));
	cr_assert_eq(pd_match_reply_decode(buf, n, &g), 0);
	cr_expect_eq(g.lease, 42);
	cr_expect_eq(g.hit, 2);
	cr_expect_eq(pd_place_at(&g, 1).arena, 7);
	cr_expect_eq(pd_place_at(&g, 1).offset, 1 << 30);
	cr_expect_eq(pd_place_at(&g, 0).flags, 0);
	cr_expect_eq(pd_place_at(&g, 1).flags, PD_PLACE_FROM_DISK);
	cr_expect_eq(pd_arena_at(&g, 0).size, 64u << 20);
	buf[16 + 32 + 4] = 1; /* an arena entry's word is reserved: no flags there */
	cr_expect_eq(pd_match_reply_decode(buf, n, &g), PD_E_MALFORMED);
	buf[16 + 32 + 4] = 0;
	buf[16 + 5] = 1; /* a flag of place 0 that does not exist */
	cr_expect_eq(pd_match_reply_decode(buf, n, &g), PD_E_MALFORMED);
	n = pd_match_reply_encode(0, 2, places, 0, NULL, buf, sizeof(buf));
	cr_expect_eq(pd_match_reply_decode(buf, n, &g), PD_E_MALFORMED, "a hit needs a lease");
	n = pd_match_reply_encode(0, 0, NULL, 0, NULL, buf, sizeof(buf));
	cr_expect_eq(pd_match_reply_decode(buf, n, &g), 0, "a miss");
	cr_expect_eq(pd_match_reply_encode(1, 1, places, PD_MAX_FDS + 1, arenas, buf, sizeof(buf)), 0);
}

Test(proto, small_messages)
{
	struct pd_release r = { 5 }, rg;
	size_t n = pd_release_encode(&r, buf, sizeof(buf));
	cr_assert_eq(pd_release_decode(buf, n, &rg), 0);
	cr_expect_eq(rg.lease, 5);
	r.lease = 0;
	n = pd_release_encode(&r, buf, sizeof(buf));
	cr_expect_eq(pd_release_decode(buf, n, &rg), PD_E_MALFORMED);

	uint64_t st[PD_STATS_COUNT];
	struct pd_stats_reply sg;
	for (int i = 0; i < PD_STATS_COUNT; i++)
		st[i] = (uint64_t)i << 40;
	struct pd_usage u = { .uid = 7, .fp = { 9 }, .blocks = 3, .bytes = 4, .pinned_bytes = 5,
			      .hits = 6, .hit_tokens = 7, .query_tokens = 8, .evictions = 9 };
	n = pd_stats_reply_encode(st, &u, 1, buf, sizeof(buf));
	cr_assert_eq(n, PD_STATS_REPLY_FIXED + 8 * PD_STATS_COUNT + PD_USAGE_SIZE);
	cr_assert_eq(pd_stats_reply_decode(buf, n, &sg), 0);
	cr_expect_eq(memcmp(st, sg.v, sizeof(st)), 0);
	cr_expect_eq(sg.nrows, 1);
	struct pd_usage ug = pd_usage_at(&sg, 0);
	cr_expect(ug.uid == 7 && ug.fp[0] == 9 && ug.blocks == 3 && ug.bytes == 4 &&
		  ug.pinned_bytes == 5 && ug.hits == 6 && ug.hit_tokens == 7 &&
		  ug.query_tokens == 8 && ug.evictions == 9);
	cr_expect_eq(pd_stats_reply_decode(buf, n - 8, &sg), PD_E_MALFORMED);

	struct pd_error e;
	n = pd_error_encode("budget full", buf, sizeof(buf));
	cr_assert_eq(pd_error_decode(buf, n, &e), 0);
	cr_expect_eq(e.len, 11);
	cr_expect_eq(memcmp(e.msg, "budget full", 11), 0);
	uint32_t huge = 1u << 30;
	memcpy(buf, &huge, 4);
	cr_expect_eq(pd_error_decode(buf, n, &e), PD_E_LIMIT);
	cr_expect_eq(pd_hello_reply_encode(&(struct pd_hello_reply){ 1, 4096, 1 << 30, 1, 1 }, buf, 3), 0,
		     "encoders refuse a buffer too small");
}

/* Decodes body as message kind k; when it decodes, re-encodes the result
 * into out (*out_len bytes; 0 when this kind cannot say the same bytes
 * again, e.g. a STATS reply with another number of counters). */
enum { K_HELLO, K_HELLO_REPLY, K_MATCH, K_MATCH_REPLY, K_RELEASE, K_PUBLISH, K_PUBLISH_REPLY,
       K_STATS_REPLY, K_LIST, K_LIST_REPLY, K_EVICT, K_EVICT_REPLY, K_PIN, K_PIN_REPLY,
       K_EXPORT, K_EXPORT_REPLY, K_IMPORT, K_IMPORT_REPLY, K_ERROR, K_COUNT };
#define GARBAGE_BT 16

static int decode_reencode(int k, const uint8_t *b, size_t len, uint8_t *out, size_t cap,
			   size_t *out_len)
{
	static struct pd_place places[PD_MAX_HASHES];
	static struct pd_arena_desc arenas[PD_MAX_FDS];
	static struct pd_usage usage[PD_MAX_ROWS];
	static struct pd_chain_row chains[PD_MAX_ROWS];
	int rc;
	*out_len = 0;
	switch (k) {
	case K_HELLO: {
		struct pd_hello m;
		if (!(rc = pd_hello_decode(b, len, &m)))
			*out_len = pd_hello_encode(&m, out, cap);
		return rc;
	}
	case K_HELLO_REPLY: {
		struct pd_hello_reply m;
		if (!(rc = pd_hello_reply_decode(b, len, &m)))
			*out_len = pd_hello_reply_encode(&m, out, cap);
		return rc;
	}
	case K_MATCH: {
		struct pd_match m;
		if (!(rc = pd_match_decode(b, len, GARBAGE_BT, &m)))
			*out_len = pd_match_encode(&m, GARBAGE_BT, out, cap);
		return rc;
	}
	case K_MATCH_REPLY: {
		struct pd_match_reply m;
		if ((rc = pd_match_reply_decode(b, len, &m)))
			return rc;
		cr_assert_leq(m.hit, PD_MAX_HASHES);
		cr_assert_leq(m.new_arenas, PD_MAX_FDS);
		for (uint32_t i = 0; i < m.hit; i++)
			places[i] = pd_place_at(&m, i);
		for (uint32_t i = 0; i < m.new_arenas; i++)
			arenas[i] = pd_arena_at(&m, i);
		*out_len = pd_match_reply_encode(m.lease, m.hit, places, m.new_arenas, arenas, out, cap);
		return 0;
	}
	case K_RELEASE: {
		struct pd_release m;
		if (!(rc = pd_release_decode(b, len, &m)))
			*out_len = pd_release_encode(&m, out, cap);
		return rc;
	}
	case K_PUBLISH: {
		struct pd_publish m;
		if (!(rc = pd_publish_decode(b, len, GARBAGE_BT, &m)))
			*out_len = pd_publish_encode(&m, GARBAGE_BT, out, cap);
		return rc;
	}
	case K_PUBLISH_REPLY: {
		struct pd_publish_reply m;
		if (!(rc = pd_publish_reply_decode(b, len, &m)))
			*out_len = pd_publish_reply_encode(&m, len == PD_PUBLISH_LEASE_REPLY_SIZE, out, cap);
		return rc;
	}
	case K_STATS_REPLY: {
		struct pd_stats_reply m;
		if ((rc = pd_stats_reply_decode(b, len, &m)) || m.ncounters != PD_STATS_COUNT)
			return rc;
		for (uint32_t i = 0; i < m.nrows; i++)
			usage[i] = pd_usage_at(&m, i);
		*out_len = pd_stats_reply_encode(m.v, usage, m.nrows, out, cap);
		return 0;
	}
	case K_LIST: {
		struct pd_list m;
		if (!(rc = pd_list_decode(b, len, &m)))
			*out_len = pd_list_encode(&m, out, cap);
		return rc;
	}
	case K_LIST_REPLY: {
		struct pd_list_reply m;
		if ((rc = pd_list_reply_decode(b, len, &m)))
			return rc;
		for (uint32_t i = 0; i < m.nrows; i++)
			chains[i] = pd_chain_at(&m, i);
		*out_len = pd_list_reply_encode(m.next, chains, m.nrows, out, cap);
		return 0;
	}
	case K_EVICT: {
		struct pd_evict m;
		if (!(rc = pd_evict_decode(b, len, &m)))
			*out_len = pd_evict_encode(&m, out, cap);
		return rc;
	}
	case K_EVICT_REPLY: {
		struct pd_evict_reply m;
		if (!(rc = pd_evict_reply_decode(b, len, &m)))
			*out_len = pd_evict_reply_encode(&m, out, cap);
		return rc;
	}
	case K_PIN: {
		struct pd_pin m;
		if (!(rc = pd_pin_decode(b, len, &m)))
			*out_len = pd_pin_encode(&m, out, cap);
		return rc;
	}
	case K_PIN_REPLY: {
		struct pd_pin_reply m;
		if (!(rc = pd_pin_reply_decode(b, len, &m)))
			*out_len = pd_pin_reply_encode(&m, out, cap);
		return rc;
	}
	case K_EXPORT: {
		struct pd_export m;
		if (!(rc = pd_export_decode(b, len, &m)))
			*out_len = pd_export_encode(&m, out, cap);
		return rc;
	}
	case K_EXPORT_REPLY: {
		struct pd_export_reply m;
		if (!(rc = pd_export_reply_decode(b, len, &m)))
			*out_len = pd_export_reply_encode(&m, out, cap);
		return rc;
	}
	case K_IMPORT: {
		struct pd_import m;
		if (!(rc = pd_import_decode(b, len, &m)))
			*out_len = pd_import_encode(&m, out, cap);
		return rc;
	}
	case K_IMPORT_REPLY: {
		struct pd_import_reply m;
		if (!(rc = pd_import_reply_decode(b, len, &m)))
			*out_len = pd_import_reply_encode(&m, out, cap);
		return rc;
	}
	case K_ERROR: {
		struct pd_error m;
		char msg[PD_MAX_MESSAGE + 1];
		if ((rc = pd_error_decode(b, len, &m)))
			return rc;
		cr_assert_leq(m.len, PD_MAX_MESSAGE);
		memcpy(msg, m.msg, m.len);
		msg[m.len] = 0;
		/* The encoder takes a C string: a message with a NUL in it
		 * cannot be said again. */
		if (strlen(msg) == m.len)
			*out_len = pd_error_encode(msg, out, cap);
		return 0;
	}
	}
	cr_assert_fail("kind %d", k);
	return -1;
}

static uint64_t xorshift(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* A decoder's answer to input of kind k: 0 or a status, and what it accepts
 * re-encodes to the same bytes. Returns whether it accepted. */
static int expect_sound(int k, const uint8_t *in, size_t len, const char *what, int round)
{
	static uint8_t again[1 << 20];
	size_t n;
	int rc = decode_reencode(k, in, len, again, sizeof(again), &n);
	cr_assert(rc >= 0 && rc <= PD_STATUS_MAX, "%s %d, kind %d: returned %d, not 0 or a PD_E_*", what,
		  round, k, rc);
	if (rc == 0 && n) {
		cr_assert_eq(n, len, "%s %d, kind %d: %zu bytes accepted re-encode to %zu", what, round, k,
			     len, n);
		cr_assert_arr_eq(again, in, len, "%s %d, kind %d: accepted bytes re-encode differently",
				 what, round, k);
	}
	return rc == 0;
}

/* Garbage never crashes a decoder (ASan and UBSan watch this suite), every
 * decoder answers 0 or a status, and what it accepts is exactly what its
 * encoder writes for the result. Random bytes rarely decode, so valid
 * bodies with one byte changed are tried too. */
Test(proto, garbage_bytes)
{
	uint64_t x = 88172645463325252ull;
	for (int round = 0; round < 20000; round++) {
		size_t len = (size_t)(round % 300);
		for (size_t i = 0; i < len; i++)
			buf[i] = (uint8_t)xorshift(&x);
		struct pd_hdr h;
		if (len >= PD_HDR_SIZE) {
			int rc = pd_hdr_decode(buf, &h);
			cr_assert(rc >= 0 && rc <= PD_STATUS_MAX, "header decode returned %d", rc);
		}
		for (int k = 0; k < K_COUNT; k++)
			expect_sound(k, buf, len, "random round", round);
	}
	/* One valid body of every kind, from its encoder. */
	static uint8_t valid[K_COUNT][1024];
	size_t vlen[K_COUNT];
	uint8_t hashes[2 * PD_HASH_SIZE], tokens[2 * GARBAGE_BT * 4];
	for (size_t i = 0; i < sizeof(hashes); i++)
		hashes[i] = (uint8_t)(i * 3);
	for (size_t i = 0; i < sizeof(tokens); i++)
		tokens[i] = (uint8_t)(i * 5);
	struct pd_place places[2] = { { 1, 0, 4096 }, { 2, PD_PLACE_FROM_DISK, 8192 } };
	struct pd_arena_desc arenas[1] = { { 2, 1 << 20 } };
	uint64_t st[PD_STATS_COUNT];
	for (int i = 0; i < PD_STATS_COUNT; i++)
		st[i] = (uint64_t)i * 1000003u;
	struct pd_usage u = { .uid = 5, .fp = { 1, 2 }, .blocks = 3, .bytes = 4, .hits = 6 };
	struct pd_chain_row row = { .id = { .key = { 9 }, .uid = 7 }, .fp = { 4 }, .blocks = 2,
				    .tokens = 32, .leases = 1, .flags = PD_CHAIN_MEMORY, .bytes = 8192,
				    .hits = 3 };
	vlen[K_HELLO] = pd_hello_encode(&(struct pd_hello){ 2, 2, 16, 4096, 1, fp, 3, (const uint8_t *)"abc" },
					valid[K_HELLO], 1024);
	vlen[K_HELLO_REPLY] = pd_hello_reply_encode(&(struct pd_hello_reply){ 2, 4096, 1 << 20, 1 << 19, 1 << 18 },
						    valid[K_HELLO_REPLY], 1024);
	vlen[K_MATCH] = pd_match_encode(&(struct pd_match){ 2, hashes, tokens }, GARBAGE_BT,
					valid[K_MATCH], 1024);
	vlen[K_MATCH_REPLY] = pd_match_reply_encode(7, 2, places, 1, arenas, valid[K_MATCH_REPLY], 1024);
	vlen[K_RELEASE] = pd_release_encode(&(struct pd_release){ 7 }, valid[K_RELEASE], 1024);
	vlen[K_PUBLISH] = pd_publish_encode(&(struct pd_publish){ 7, 2, hashes, tokens }, GARBAGE_BT,
					    valid[K_PUBLISH], 1024);
	vlen[K_PUBLISH_REPLY] = pd_publish_reply_encode(&(struct pd_publish_reply){ 1, 1, 0, 9 }, true,
							valid[K_PUBLISH_REPLY], 1024);
	vlen[K_STATS_REPLY] = pd_stats_reply_encode(st, &u, 1, valid[K_STATS_REPLY], 1024);
	vlen[K_LIST] = pd_list_encode(&(struct pd_list){ 0, 10, PD_LIST_USER, 5, { 0 } }, valid[K_LIST], 1024);
	vlen[K_LIST_REPLY] = pd_list_reply_encode(3, &row, 1, valid[K_LIST_REPLY], 1024);
	vlen[K_EVICT] = pd_evict_encode(&(struct pd_evict){ PD_EVICT_IDLE, 0, 60, { 0 } }, valid[K_EVICT], 1024);
	vlen[K_EVICT_REPLY] = pd_evict_reply_encode(&(struct pd_evict_reply){ 1, 2, 3, 4, 5 },
						    valid[K_EVICT_REPLY], 1024);
	vlen[K_PIN] = pd_pin_encode(&(struct pd_pin){ { { 1, 2, 3 }, 5 }, 60 }, valid[K_PIN], 1024);
	vlen[K_PIN_REPLY] = pd_pin_reply_encode(&(struct pd_pin_reply){ 4096, 1 << 20 }, valid[K_PIN_REPLY], 1024);
	vlen[K_EXPORT] = pd_export_encode(&(struct pd_export){ PD_EXPORT_USER, 5, { 0 }, { { 0 }, 0 } },
					  valid[K_EXPORT], 1024);
	vlen[K_EXPORT_REPLY] = pd_export_reply_encode(&(struct pd_export_reply){ 2, 9000 },
						      valid[K_EXPORT_REPLY], 1024);
	vlen[K_IMPORT] = pd_import_encode(&(struct pd_import){ PD_IMPORT_USER, 5 }, valid[K_IMPORT], 1024);
	vlen[K_IMPORT_REPLY] = pd_import_reply_encode(&(struct pd_import_reply){ 1, 2, 3, 4, 5 },
						      valid[K_IMPORT_REPLY], 1024);
	vlen[K_ERROR] = pd_error_encode("budget full", valid[K_ERROR], 1024);
	for (int k = 0; k < K_COUNT; k++) {
		cr_assert_gt(vlen[k], 0, "kind %d encodes", k);
		cr_assert(expect_sound(k, valid[k], vlen[k], "valid body", 0), "kind %d decodes", k);
	}
	/* Each with one byte changed: many of these still decode. */
	int accepted = 0;
	for (int round = 0; round < 20000; round++) {
		int k = round % K_COUNT;
		memcpy(buf, valid[k], vlen[k]);
		uint64_t r = xorshift(&x);
		buf[r % vlen[k]] ^= (uint8_t)(1 + (r >> 32) % 255);
		accepted += expect_sound(k, buf, vlen[k], "changed byte, round", round);
	}
	cr_expect_gt(accepted, 1000, "only %d changed bodies decoded: the re-encoding went untested",
		     accepted);
}

/* The chain is BLAKE2b-256 of the previous hash and the block's token ids
 * as little-endian u32, as docs/PROTOCOL.md says, on any host. */
Test(proto, chain_hashes_are_the_documented_blake2b)
{
	uint32_t tokens[2 * 3] = { 1, 0x01020304, 70000, 5, 6, 0xffffffffu };
	uint8_t h0[32], h[2 * 32], want[32], msg[32 + 12];
	for (int i = 0; i < 32; i++)
		h0[i] = (uint8_t)i;
	pd_chain(h0, tokens, 3, 2, h);
	const uint8_t *prev = h0;
	for (int b = 0; b < 2; b++) {
		memcpy(msg, prev, 32);
		for (int t = 0; t < 3; t++)
			for (int k = 0; k < 4; k++)
				msg[32 + 4 * t + k] = (uint8_t)(tokens[3 * b + t] >> 8 * k);
		crypto_generichash(want, 32, msg, sizeof(msg), NULL, 0);
		cr_expect_arr_eq(h + 32 * b, want, 32, "block %d", b);
		prev = h + 32 * b;
	}
}

/* ==== Golden bytes, written from docs/PROTOCOL.md's tables ====
 * Each body is spelled out field by field (offset, size, little-endian)
 * as the page lays it out, independently of proto/wire.c: the encoder must
 * write exactly these bytes and the decoder read these values back, so a
 * change made alike in both still fails here. */

struct golden {
	uint8_t b[2048];
	size_t n;
};

static void le(struct golden *g, uint64_t v, int bytes)
{
	cr_assert_leq(g->n + (size_t)bytes, sizeof(g->b));
	for (int i = 0; i < bytes; i++, v >>= 8)
		g->b[g->n++] = (uint8_t)v;
}

static void raw(struct golden *g, const void *p, size_t n)
{
	cr_assert_leq(g->n + n, sizeof(g->b));
	memcpy(g->b + g->n, p, n);
	g->n += n;
}

/* 32 bytes start, start + 1, ...: a hash, key or fingerprint. */
static const uint8_t *seq32(uint8_t start)
{
	static uint8_t v[8][32];
	static int next;
	uint8_t *p = v[next++ % 8];
	for (int i = 0; i < 32; i++)
		p[i] = (uint8_t)(start + i);
	return p;
}

static void expect_golden(const uint8_t *got, size_t n, const struct golden *want, const char *what)
{
	cr_assert_eq(n, want->n, "%s: %zu bytes, PROTOCOL.md says %zu", what, n, want->n);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(got[i], want->b[i], "%s: byte %zu is %#x, PROTOCOL.md says %#x", what, i,
			     got[i], want->b[i]);
}

Test(proto, golden_header)
{
	/* magic "PFXD", version 2, op 4 PUBLISH, flags reply|LEASE, status 4
	 * LIMIT, opaque, body_len, 12 reserved zero bytes. */
	struct golden g = { .n = 0 };
	raw(&g, "PFXD", 4);
	le(&g, 2, 2);
	le(&g, 4, 1);
	le(&g, 0x05, 1);
	le(&g, 4, 4);
	le(&g, 0xa1b2c3d4u, 4);
	le(&g, 0x00123456u, 4);
	for (int i = 0; i < 12; i++)
		le(&g, 0, 1);
	struct pd_hdr h = { PD_MAGIC, 2, PD_OP_PUBLISH, PD_FLAG_REPLY | PD_FLAG_LEASE, PD_E_LIMIT,
			    0xa1b2c3d4u, 0x00123456u }, d;
	uint8_t out[PD_HDR_SIZE];
	pd_hdr_encode(&h, out);
	expect_golden(out, sizeof(out), &g, "header");
	cr_assert_eq(pd_hdr_decode(g.b, &d), 0);
	cr_expect(d.magic == PD_MAGIC && d.version == 2 && d.op == 4 && d.flags == 5 &&
		  d.status == 4 && d.opaque == 0xa1b2c3d4u && d.body_len == 0x00123456u);
	/* The documented numbers of ops and statuses. */
	cr_expect(PD_OP_HELLO == 1 && PD_OP_MATCH == 2 && PD_OP_RELEASE == 3 && PD_OP_PUBLISH == 4 &&
		  PD_OP_STATS == 5 && PD_OP_LIST == 6 && PD_OP_EVICT == 7 && PD_OP_PIN == 8 &&
		  PD_OP_UNPIN == 9 && PD_OP_EXPORT == 10 && PD_OP_IMPORT == 11);
	cr_expect(PD_E_MALFORMED == 1 && PD_E_VERSION == 2 && PD_E_STATE == 3 && PD_E_LIMIT == 4 &&
		  PD_E_NOSPACE == 5 && PD_E_NOTFOUND == 6 && PD_E_LAYOUT == 7 && PD_E_INTERNAL == 8 &&
		  PD_E_DENIED == 9);
	cr_expect(PD_FLAG_REPLY == 1 && PD_FLAG_NOREPLY == 2 && PD_FLAG_LEASE == 4);
}

Test(proto, golden_hello_and_its_reply)
{
	const uint8_t *f = seq32(0x40);
	struct golden g = { .n = 0 };
	le(&g, 1, 2);                       /* version_min */
	le(&g, 2, 2);                       /* version_max */
	le(&g, 64, 4);                      /* block_tokens */
	le(&g, 0x0000000102030405ull, 8);   /* block_bytes */
	le(&g, 3, 4);                       /* layout: bf16 */
	raw(&g, f, 32);                     /* fingerprint */
	le(&g, 5, 4);                       /* salt_len */
	raw(&g, "salty", 5);
	struct pd_hello m = { 1, 2, 64, 0x0000000102030405ull, PREFIXD_LAYOUT_BF16, f, 5,
			      (const uint8_t *)"salty" }, d;
	expect_golden(buf, pd_hello_encode(&m, buf, sizeof(buf)), &g, "HELLO");
	cr_assert_eq(pd_hello_decode(g.b, g.n, &d), 0);
	cr_expect(d.version_min == 1 && d.version_max == 2 && d.block_tokens == 64 &&
		  d.block_bytes == 0x0000000102030405ull && d.layout == 3 && d.salt_len == 5);
	cr_expect_arr_eq(d.fingerprint, f, 32);
	cr_expect_arr_eq(d.salt, "salty", 5);

	struct golden r = { .n = 0 };
	le(&r, 2, 2);                       /* version */
	le(&r, 0, 2);
	le(&r, 4096, 4);                    /* max_hashes */
	le(&r, 0x1122334455667788ull, 8);   /* budget_bytes */
	le(&r, 0x0102030405060708ull, 8);   /* quota_bytes */
	le(&r, 0x0a0b0c0d0e0f1011ull, 8);   /* pin_max_bytes */
	struct pd_hello_reply hr = { 2, 4096, 0x1122334455667788ull, 0x0102030405060708ull,
				     0x0a0b0c0d0e0f1011ull }, hd;
	expect_golden(buf, pd_hello_reply_encode(&hr, buf, sizeof(buf)), &r, "HELLO reply");
	cr_assert_eq(pd_hello_reply_decode(r.b, r.n, &hd), 0);
	cr_expect(hd.version == 2 && hd.max_hashes == 4096 && hd.budget_bytes == hr.budget_bytes &&
		  hd.quota_bytes == hr.quota_bytes && hd.pin_max_bytes == hr.pin_max_bytes);
}

Test(proto, golden_match_release_and_publish)
{
	enum { B = 2, C = 2 };
	uint8_t hashes[C * 32], tokens[C * B * 4];
	memcpy(hashes, seq32(0x10), 32);
	memcpy(hashes + 32, seq32(0x90), 32);
	const uint32_t tok[C * B] = { 7, 0x01020304u, 70000, 0xfffffffeu };
	struct golden g = { .n = 0 };
	le(&g, C, 4);                        /* count */
	raw(&g, hashes, sizeof(hashes));     /* hashes */
	for (int i = 0; i < C * B; i++)      /* tokens, u32 each */
		le(&g, tok[i], 4);
	memcpy(tokens, g.b + 4 + sizeof(hashes), sizeof(tokens));
	struct pd_match m = { C, hashes, tokens }, md;
	expect_golden(buf, pd_match_encode(&m, B, buf, sizeof(buf)), &g, "MATCH");
	cr_assert_eq(pd_match_decode(g.b, g.n, B, &md), 0);
	cr_expect_eq(md.count, C);
	cr_expect_arr_eq(md.hashes, hashes, sizeof(hashes));
	for (int i = 0; i < C * B; i++)
		cr_expect_eq(pd_token_at(md.tokens, B, (uint32_t)i / B, (uint32_t)i % B), tok[i]);

	struct golden p = { .n = 0 };
	le(&p, 0x0102030405060708ull, 8);    /* lease */
	le(&p, C, 4);                        /* count */
	raw(&p, hashes, sizeof(hashes));
	raw(&p, tokens, sizeof(tokens));
	struct pd_publish pu = { 0x0102030405060708ull, C, hashes, tokens }, pd;
	expect_golden(buf, pd_publish_encode(&pu, B, buf, sizeof(buf)), &p, "PUBLISH");
	cr_assert_eq(pd_publish_decode(p.b, p.n, B, &pd), 0);
	cr_expect(pd.lease == pu.lease && pd.count == C);

	struct golden rl = { .n = 0 };
	le(&rl, 0x1112131415161718ull, 8);   /* lease */
	struct pd_release re = { 0x1112131415161718ull }, rd;
	expect_golden(buf, pd_release_encode(&re, buf, sizeof(buf)), &rl, "RELEASE");
	cr_assert_eq(pd_release_decode(rl.b, rl.n, &rd), 0);
	cr_expect_eq(rd.lease, re.lease);
}

Test(proto, golden_match_and_publish_replies)
{
	struct golden g = { .n = 0 };
	le(&g, 0x0102030405060708ull, 8);    /* lease */
	le(&g, 2, 4);                        /* hit */
	le(&g, 1, 4);                        /* new_arenas */
	le(&g, 3, 4);                        /* place 0: arena, flags, offset */
	le(&g, 0, 4);
	le(&g, 0x100000000ull, 8);
	le(&g, 9, 4);                        /* place 1: read back from disk */
	le(&g, 1, 4);
	le(&g, 4096, 8);
	le(&g, 9, 4);                        /* arena: id, 0, size */
	le(&g, 0, 4);
	le(&g, 0x0000000280000000ull, 8);
	struct pd_place places[2] = { { 3, 0, 0x100000000ull }, { 9, PD_PLACE_FROM_DISK, 4096 } };
	struct pd_arena_desc arenas[1] = { { 9, 0x0000000280000000ull } };
	struct pd_match_reply d;
	expect_golden(buf, pd_match_reply_encode(0x0102030405060708ull, 2, places, 1, arenas, buf, sizeof(buf)),
		      &g, "MATCH reply");
	cr_assert_eq(pd_match_reply_decode(g.b, g.n, &d), 0);
	cr_expect(d.lease == 0x0102030405060708ull && d.hit == 2 && d.new_arenas == 1);
	cr_expect(pd_place_at(&d, 0).arena == 3 && pd_place_at(&d, 0).flags == 0 &&
		  pd_place_at(&d, 0).offset == 0x100000000ull);
	cr_expect(pd_place_at(&d, 1).arena == 9 && pd_place_at(&d, 1).flags == PD_PLACE_FROM_DISK &&
		  pd_place_at(&d, 1).offset == 4096);
	cr_expect(pd_arena_at(&d, 0).arena == 9 && pd_arena_at(&d, 0).size == 0x0000000280000000ull);

	struct golden p = { .n = 0 };
	le(&p, 5, 4);                        /* stored */
	le(&p, 6, 4);                        /* deduplicated */
	le(&p, 2, 4);                        /* stop: BUDGET */
	le(&p, 0, 4);
	struct pd_publish_reply pr = { 5, 6, PD_STOP_BUDGET, 0 }, pd;
	expect_golden(buf, pd_publish_reply_encode(&pr, false, buf, sizeof(buf)), &p, "PUBLISH reply");
	cr_assert_eq(pd_publish_reply_decode(p.b, p.n, &pd), 0);
	cr_expect(pd.stored == 5 && pd.deduplicated == 6 && pd.stop == 2 && pd.lease == 0);
	le(&p, 0x2122232425262728ull, 8);    /* lease, with the LEASE flag */
	pr.lease = 0x2122232425262728ull;
	expect_golden(buf, pd_publish_reply_encode(&pr, true, buf, sizeof(buf)), &p, "PUBLISH reply with a lease");
	cr_assert_eq(pd_publish_reply_decode(p.b, p.n, &pd), 0);
	cr_expect_eq(pd.lease, pr.lease);
	cr_expect(PD_STOP_NONE == 0 && PD_STOP_COLLISION == 1 && PD_STOP_BUDGET == 2 && PD_STOP_QUOTA == 3);
}

Test(proto, golden_stats_reply)
{
	uint64_t st[PD_STATS_COUNT];
	struct golden g = { .n = 0 };
	le(&g, PD_STATS_COUNT, 4);           /* ncounters */
	le(&g, 1, 4);                        /* nrows */
	for (int i = 0; i < PD_STATS_COUNT; i++) {
		st[i] = 0x0100000000000000ull * (uint64_t)(i + 1) + (uint64_t)i;
		le(&g, st[i], 8);
	}
	const uint8_t *f = seq32(0x20);
	le(&g, 60001, 4);                    /* uid */
	le(&g, 0, 4);
	raw(&g, f, 32);                      /* fingerprint */
	for (uint64_t v = 1; v <= 7; v++)    /* blocks .. evictions */
		le(&g, v << 33 | v, 8);
	struct pd_usage u = { .uid = 60001, .blocks = 1ull << 33 | 1, .bytes = 2ull << 33 | 2,
			      .pinned_bytes = 3ull << 33 | 3, .hits = 4ull << 33 | 4,
			      .hit_tokens = 5ull << 33 | 5, .query_tokens = 6ull << 33 | 6,
			      .evictions = 7ull << 33 | 7 };
	memcpy(u.fp, f, 32);
	struct pd_stats_reply d;
	expect_golden(buf, pd_stats_reply_encode(st, &u, 1, buf, sizeof(buf)), &g, "STATS reply");
	cr_assert_eq(pd_stats_reply_decode(g.b, g.n, &d), 0);
	cr_expect_arr_eq(d.v, st, sizeof(st));
	struct pd_usage r = pd_usage_at(&d, 0);
	cr_expect(r.uid == u.uid && r.blocks == u.blocks && r.bytes == u.bytes &&
		  r.pinned_bytes == u.pinned_bytes && r.hits == u.hits && r.hit_tokens == u.hit_tokens &&
		  r.query_tokens == u.query_tokens && r.evictions == u.evictions);
	cr_expect_arr_eq(r.fp, f, 32);
	/* The counters named in the table, at their indexes, 55 of them. */
	cr_expect_eq(PD_STATS_COUNT, 55);
	cr_expect(PD_ST_hits == 0 && PD_ST_blocks == 3 && PD_ST_budget == 5 && PD_ST_evictions == 8 &&
		  PD_ST_leases == 10 && PD_ST_errors == 12 && PD_ST_query_tokens == 15 &&
		  PD_ST_refused_blocks == 21 && PD_ST_pins_expired == 23 && PD_ST_disk_blocks == 24 &&
		  PD_ST_restores == 28 && PD_ST_disk_pending == 32 &&
		  PD_ST_unwritten_evictions == 33 && PD_ST_claims == 34 && PD_ST_waits == 35 &&
		  PD_ST_wait_ms == 36 && PD_ST_claims_inherited == 37 && PD_ST_claims_expired == 38 &&
		  PD_ST_remote_hits == 39 && PD_ST_remote_writes == 43 && PD_ST_remote_bad_mac == 48 &&
		  PD_ST_remote_us == 51 && PD_ST_remote_index_skips == 52 &&
		  PD_ST_remote_index_keys == 54);
}

static void golden_chain_row(struct golden *g, const struct pd_chain_row *c)
{
	raw(g, c->id.key, 32);               /* key */
	le(g, c->id.uid, 4);                 /* uid */
	le(g, c->blocks, 4);
	raw(g, c->fp, 32);                   /* fingerprint */
	le(g, c->tokens, 4);
	le(g, c->leases, 4);
	le(g, c->bytes, 8);
	le(g, c->hits, 8);
	le(g, c->idle_s, 4);
	le(g, c->flags, 4);
	le(g, c->pin_ttl_s, 4);
	le(g, 0, 4);
}

Test(proto, golden_list_and_its_reply)
{
	const uint8_t *f = seq32(0x60);
	struct golden g = { .n = 0 };
	le(&g, 0x0102030405060708ull, 8);    /* cursor */
	le(&g, 100, 4);                      /* max_rows */
	le(&g, 3, 4);                        /* flags: user and model */
	le(&g, 60002, 4);                    /* uid */
	le(&g, 0, 4);
	raw(&g, f, 32);                      /* fingerprint */
	struct pd_list m = { 0x0102030405060708ull, 100, PD_LIST_USER | PD_LIST_MODEL, 60002, { 0 } }, d;
	memcpy(m.fp, f, 32);
	expect_golden(buf, pd_list_encode(&m, buf, sizeof(buf)), &g, "LIST");
	cr_assert_eq(pd_list_decode(g.b, g.n, &d), 0);
	cr_expect(d.cursor == m.cursor && d.max_rows == 100 && d.flags == 3 && d.uid == 60002);
	cr_expect_arr_eq(d.fp, f, 32);

	struct pd_chain_row rows[2] = {
		{ .blocks = 3, .tokens = 192, .leases = 2, .bytes = 0x0000000300000000ull,
		  .hits = 0x0000000400000005ull, .idle_s = 77, .flags = PD_CHAIN_PINNED | PD_CHAIN_MEMORY,
		  .pin_ttl_s = 3600 },
		{ .blocks = 1, .tokens = 64, .bytes = 8192, .flags = PD_CHAIN_DISK },
	};
	memcpy(rows[0].id.key, seq32(0x01), 32);
	rows[0].id.uid = 60001;
	memcpy(rows[0].fp, seq32(0x81), 32);
	memcpy(rows[1].id.key, seq32(0xa1), 32);
	memcpy(rows[1].fp, seq32(0xc1), 32);
	struct golden r = { .n = 0 };
	le(&r, 0x1112131415161718ull, 8);    /* next */
	le(&r, 2, 4);                        /* nrows */
	le(&r, 0, 4);
	golden_chain_row(&r, &rows[0]);
	golden_chain_row(&r, &rows[1]);
	struct pd_list_reply rd;
	expect_golden(buf, pd_list_reply_encode(0x1112131415161718ull, rows, 2, buf, sizeof(buf)), &r,
		      "LIST reply");
	cr_assert_eq(pd_list_reply_decode(r.b, r.n, &rd), 0);
	cr_expect(rd.next == 0x1112131415161718ull && rd.nrows == 2);
	for (uint32_t i = 0; i < 2; i++) {
		struct pd_chain_row c = pd_chain_at(&rd, i);
		cr_expect(c.id.uid == rows[i].id.uid && c.blocks == rows[i].blocks &&
			  c.tokens == rows[i].tokens && c.leases == rows[i].leases &&
			  c.bytes == rows[i].bytes && c.hits == rows[i].hits &&
			  c.idle_s == rows[i].idle_s && c.flags == rows[i].flags &&
			  c.pin_ttl_s == rows[i].pin_ttl_s, "row %u", i);
		cr_expect_arr_eq(c.id.key, rows[i].id.key, 32);
		cr_expect_arr_eq(c.fp, rows[i].fp, 32);
	}
	cr_expect(PD_CHAIN_PINNED == 1 && PD_CHAIN_MEMORY == 2 && PD_CHAIN_DISK == 4);
}

Test(proto, golden_evict_pin_unpin_and_their_replies)
{
	const uint8_t *k = seq32(0x33);
	struct golden g = { .n = 0 };
	le(&g, 2, 4);                        /* by: ID */
	le(&g, 60001, 4);                    /* uid */
	le(&g, 0x0000000100000002ull, 8);    /* idle_s */
	raw(&g, k, 32);                      /* key */
	struct pd_evict m = { PD_EVICT_ID, 60001, 0x0000000100000002ull, { 0 } }, d;
	memcpy(m.key, k, 32);
	expect_golden(buf, pd_evict_encode(&m, buf, sizeof(buf)), &g, "EVICT");
	cr_assert_eq(pd_evict_decode(g.b, g.n, &d), 0);
	cr_expect(d.by == 2 && d.uid == 60001 && d.idle_s == m.idle_s);
	cr_expect_arr_eq(d.key, k, 32);
	cr_expect(PD_EVICT_ALL == 1 && PD_EVICT_ID == 2 && PD_EVICT_MODEL == 3 && PD_EVICT_USER == 4 &&
		  PD_EVICT_IDLE == 5);

	struct golden er = { .n = 0 };
	for (uint64_t v = 1; v <= 5; v++)    /* blocks, bytes, kept_leased, kept_pinned, kept_parent */
		le(&er, v << 40 | v, 8);
	struct pd_evict_reply e = { 1ull << 40 | 1, 2ull << 40 | 2, 3ull << 40 | 3, 4ull << 40 | 4,
				    5ull << 40 | 5 }, ed;
	expect_golden(buf, pd_evict_reply_encode(&e, buf, sizeof(buf)), &er, "EVICT reply");
	cr_assert_eq(pd_evict_reply_decode(er.b, er.n, &ed), 0);
	cr_expect(ed.blocks == e.blocks && ed.bytes == e.bytes && ed.kept_leased == e.kept_leased &&
		  ed.kept_pinned == e.kept_pinned && ed.kept_parent == e.kept_parent);

	struct golden p = { .n = 0 };
	raw(&p, k, 32);                      /* key */
	le(&p, 60003, 4);                    /* uid */
	le(&p, 7200, 4);                     /* ttl_s */
	struct pd_pin pin = { { { 0 }, 60003 }, 7200 }, pind;
	memcpy(pin.id.key, k, 32);
	expect_golden(buf, pd_pin_encode(&pin, buf, sizeof(buf)), &p, "PIN");
	cr_assert_eq(pd_pin_decode(p.b, p.n, &pind), 0);
	cr_expect(pind.id.uid == 60003 && pind.ttl_s == 7200);
	cr_expect_arr_eq(pind.id.key, k, 32);

	struct golden pr = { .n = 0 };
	le(&pr, 0x0000000500000006ull, 8);   /* pinned_bytes */
	le(&pr, 0x0000000700000008ull, 8);   /* pin_max */
	struct pd_pin_reply r = { 0x0000000500000006ull, 0x0000000700000008ull }, rd;
	expect_golden(buf, pd_pin_reply_encode(&r, buf, sizeof(buf)), &pr, "PIN reply");
	cr_assert_eq(pd_pin_reply_decode(pr.b, pr.n, &rd), 0);
	cr_expect(rd.pinned_bytes == r.pinned_bytes && rd.pin_max == r.pin_max);
}

Test(proto, golden_export_import_and_their_replies)
{
	const uint8_t *f = seq32(0x70), *k = seq32(0xb0);
	struct golden g = { .n = 0 };
	le(&g, 7, 4);                        /* flags: user, model, id */
	le(&g, 60001, 4);                    /* uid */
	raw(&g, f, 32);                      /* fingerprint */
	raw(&g, k, 32);                      /* key */
	le(&g, 60002, 4);                    /* key_uid */
	le(&g, 0, 4);
	struct pd_export m = { PD_EXPORT_USER | PD_EXPORT_MODEL | PD_EXPORT_ID, 60001, { 0 },
			       { { 0 }, 60002 } }, d;
	memcpy(m.fp, f, 32);
	memcpy(m.id.key, k, 32);
	expect_golden(buf, pd_export_encode(&m, buf, sizeof(buf)), &g, "EXPORT");
	cr_assert_eq(pd_export_decode(g.b, g.n, &d), 0);
	cr_expect(d.flags == 7 && d.uid == 60001 && d.id.uid == 60002);
	cr_expect_arr_eq(d.fp, f, 32);
	cr_expect_arr_eq(d.id.key, k, 32);

	struct golden xr = { .n = 0 };
	le(&xr, 0x0000000100000002ull, 8);   /* blocks */
	le(&xr, 0x0000000300000004ull, 8);   /* bytes */
	struct pd_export_reply x = { 0x0000000100000002ull, 0x0000000300000004ull }, xd;
	expect_golden(buf, pd_export_reply_encode(&x, buf, sizeof(buf)), &xr, "EXPORT reply");
	cr_assert_eq(pd_export_reply_decode(xr.b, xr.n, &xd), 0);
	cr_expect(xd.blocks == x.blocks && xd.bytes == x.bytes);

	struct golden i = { .n = 0 };
	le(&i, 1, 4);                        /* flags: into uid's namespace */
	le(&i, 60004, 4);                    /* uid */
	struct pd_import im = { PD_IMPORT_USER, 60004 }, imd;
	expect_golden(buf, pd_import_encode(&im, buf, sizeof(buf)), &i, "IMPORT");
	cr_assert_eq(pd_import_decode(i.b, i.n, &imd), 0);
	cr_expect(imd.flags == 1 && imd.uid == 60004);

	struct golden ir = { .n = 0 };
	for (uint64_t v = 1; v <= 5; v++)    /* blocks, dedup, skipped, refused, bytes */
		le(&ir, v << 36 | v, 8);
	struct pd_import_reply r = { 1ull << 36 | 1, 2ull << 36 | 2, 3ull << 36 | 3, 4ull << 36 | 4,
				     5ull << 36 | 5 }, rd;
	expect_golden(buf, pd_import_reply_encode(&r, buf, sizeof(buf)), &ir, "IMPORT reply");
	cr_assert_eq(pd_import_reply_decode(ir.b, ir.n, &rd), 0);
	cr_expect(rd.blocks == r.blocks && rd.dedup == r.dedup && rd.skipped == r.skipped &&
		  rd.refused == r.refused && rd.bytes == r.bytes);
}

Test(proto, golden_error_body)
{
	struct golden g = { .n = 0 };
	le(&g, 11, 4);                       /* len */
	raw(&g, "budget full", 11);          /* UTF-8, no NUL */
	struct pd_error d;
	expect_golden(buf, pd_error_encode("budget full", buf, sizeof(buf)), &g, "error");
	cr_assert_eq(pd_error_decode(g.b, g.n, &d), 0);
	cr_expect_eq(d.len, 11);
	cr_expect_arr_eq(d.msg, "budget full", 11);
}

Test(proto, single_flight_fields_round_trip_and_refuse_bad_values)
{
	uint8_t b[32];
	struct pd_flight f = { 1500, PD_FLIGHT_CLAIM }, g;
	cr_assert_eq(pd_flight_encode(&f, b, sizeof(b)), PD_FLIGHT_SIZE);
	cr_assert_eq(pd_flight_decode(b, 64, &g), 0, "the MATCH body follows");
	cr_expect(g.wait_ms == 1500 && g.flags == PD_FLIGHT_CLAIM);
	cr_expect_eq(pd_flight_decode(b, PD_FLIGHT_SIZE - 1, &g), PD_E_MALFORMED);
	b[4] = 2; /* an unknown flag */
	cr_expect_eq(pd_flight_decode(b, PD_FLIGHT_SIZE, &g), PD_E_MALFORMED);
	f.wait_ms = PD_MAX_WAIT_MS + 1;
	cr_expect_eq(pd_flight_encode(&f, b, sizeof(b)), 0, "an encoder refuses what a decoder would");
	uint32_t w = PD_MAX_WAIT_MS + 1;
	memcpy(b, &w, 4);
	b[4] = 1;
	cr_expect_eq(pd_flight_decode(b, PD_FLIGHT_SIZE, &g), PD_E_LIMIT);

	/* The reply's fields come last, after the MATCH reply. */
	struct pd_flight_reply r = { PD_FLIGHT_INHERITED, 77 }, s;
	cr_assert_eq(pd_flight_reply_encode(&r, b + 16, 16), PD_FLIGHT_REPLY_SIZE);
	cr_assert_eq(pd_flight_reply_decode(b, 16 + PD_FLIGHT_REPLY_SIZE, &s), 0);
	cr_expect(s.outcome == PD_FLIGHT_INHERITED && s.waited_ms == 77);
	cr_expect_eq(pd_flight_reply_decode(b, PD_FLIGHT_REPLY_SIZE - 1, &s), PD_E_MALFORMED);
	b[16] = PD_FLIGHT_OUTCOME_MAX + 1;
	cr_expect_eq(pd_flight_reply_decode(b, 16 + PD_FLIGHT_REPLY_SIZE, &s), PD_E_MALFORMED);
	r.outcome = PD_FLIGHT_OUTCOME_MAX + 1;
	cr_expect_eq(pd_flight_reply_encode(&r, b, sizeof(b)), 0);
}
