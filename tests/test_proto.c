/* SPDX-License-Identifier: MIT */
/* The wire protocol: round trips, and every malformed or oversized input. */
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

/* Garbage never crashes a decoder (ASan and UBSan watch this suite). */
Test(proto, garbage_bytes)
{
	uint64_t x = 88172645463325252ull;
	for (int round = 0; round < 20000; round++) {
		size_t len = (size_t)(round % 300);
		for (size_t i = 0; i < len; i++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			buf[i] = (uint8_t)x;
		}
		struct pd_hdr h;
		struct pd_hello he;
		struct pd_hello_reply hr;
		struct pd_match m;
		struct pd_match_reply mr;
		struct pd_release re;
		struct pd_publish pu;
		struct pd_publish_reply pr;
		struct pd_error er;
		struct pd_stats_reply st;
		struct pd_list li;
		struct pd_list_reply lr;
		struct pd_evict ev;
		struct pd_evict_reply evr;
		struct pd_pin pi;
		struct pd_pin_reply pir;
		if (len >= PD_HDR_SIZE)
			pd_hdr_decode(buf, &h);
		pd_hello_decode(buf, len, &he);
		pd_hello_reply_decode(buf, len, &hr);
		pd_match_decode(buf, len, 16, &m);
		if (!pd_match_reply_decode(buf, len, &mr))
			for (uint32_t i = 0; i < mr.hit; i++)
				pd_place_at(&mr, i);
		pd_release_decode(buf, len, &re);
		pd_publish_decode(buf, len, 16, &pu);
		pd_publish_reply_decode(buf, len, &pr);
		pd_error_decode(buf, len, &er);
		if (!pd_stats_reply_decode(buf, len, &st))
			for (uint32_t i = 0; i < st.nrows; i++)
				pd_usage_at(&st, i);
		pd_list_decode(buf, len, &li);
		if (!pd_list_reply_decode(buf, len, &lr))
			for (uint32_t i = 0; i < lr.nrows; i++)
				pd_chain_at(&lr, i);
		pd_evict_decode(buf, len, &ev);
		pd_evict_reply_decode(buf, len, &evr);
		pd_pin_decode(buf, len, &pi);
		pd_pin_reply_decode(buf, len, &pir);
	}
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
