/* SPDX-License-Identifier: MIT */
/*
 * Fuzzes every decoder of proto/wire.h (input format: fuzz_wire.h). Beyond
 * "no crash, no sanitizer report" it checks what is cheap to check:
 *  - a decoder returns 0, PD_E_MALFORMED or PD_E_LIMIT, nothing else;
 *  - pointers it returns lie inside the body, and the body's length is the
 *    one the message's own counts imply (pd_chain_body_size & co.);
 *  - what decodes re-encodes to the very same bytes (every padding and
 *    reserved field is checked on decode, so the encoding is canonical),
 *    except where the format allows otherwise (a STATS reply with another
 *    number of counters, an error text holding a NUL): there decode, encode,
 *    decode gives the same values;
 *  - an encoder given one byte less than it needs writes nothing past it
 *    and returns 0;
 *  - the accessors (pd_token_at, pd_place_at, ...) read what the bytes say.
 */
#include <stdbool.h>
#include <string.h>

#include "fuzz.h"
#include "fuzz_wire.h"
#include "wire.h"

static uint64_t le(const uint8_t *p, int bytes)
{
	uint64_t v = 0;
	for (int i = bytes - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static bool inside(const uint8_t *q, size_t qlen, const uint8_t *p, size_t n)
{
	return q && q >= p && (size_t)(q - p) <= n && qlen <= n - (size_t)(q - p);
}

static void check_rc(int rc)
{
	FUZZ_CHECK(rc == 0 || rc == PD_E_MALFORMED || rc == PD_E_LIMIT);
}

/* Buffers of exactly the size asked for, so AddressSanitizer sees an encoder
 * that writes one byte too many. */
static uint8_t *buf_of(size_t n)
{
	uint8_t *b = malloc(n ? n : 1);
	FUZZ_CHECK(b);
	return b;
}

/* The encoding of what p[0, n) decoded to must be p[0, n) again, and the
 * same encoder must refuse a buffer one byte short. ENC(out, cap) is the
 * encoder call. */
#define ROUND_TRIP(p, n, ENC)                                                     \
	do {                                                                      \
		uint8_t *out_ = buf_of(n);                                        \
		size_t got_ = ENC(out_, (n));                                     \
		FUZZ_CHECK(got_ == (n));                                          \
		FUZZ_CHECK(!memcmp(out_, (p), (n)));                              \
		free(out_);                                                       \
		if ((n) > 0) {                                                    \
			out_ = buf_of((n) - 1);                                   \
			FUZZ_CHECK(ENC(out_, (n) - 1) == 0);                      \
			free(out_);                                               \
		}                                                                 \
	} while (0)

/* ==== One decoder each ==== */

static void hdr(const uint8_t *p, size_t n)
{
	if (n < PD_HDR_SIZE)
		return;
	struct pd_hdr h;
	int rc = pd_hdr_decode(p, &h);
	check_rc(rc);
	if (rc == PD_E_MALFORMED)
		return;
	/* PD_E_LIMIT comes after every other check: the fields are all set. */
	FUZZ_CHECK(rc == 0 ? h.body_len <= PD_MAX_BODY : h.body_len > PD_MAX_BODY);
	FUZZ_CHECK(h.magic == PD_MAGIC && h.op >= 1 && h.op <= PD_OP_MAX);
	FUZZ_CHECK(pd_status_str((int)h.status) != NULL);
	uint8_t out[PD_HDR_SIZE];
	pd_hdr_encode(&h, out);
	FUZZ_CHECK(!memcmp(out, p, PD_HDR_SIZE));
}

static int hello(const uint8_t *p, size_t n, uint32_t *block_tokens)
{
	struct pd_hello m;
	int rc = pd_hello_decode(p, n, &m);
	check_rc(rc);
	if (rc)
		return rc;
	FUZZ_CHECK(pd_hello_check(&m) == 0);
	FUZZ_CHECK(inside(m.fingerprint, PD_FP_SIZE, p, n) && inside(m.salt, m.salt_len, p, n));
	FUZZ_CHECK(n == 56 + (size_t)m.salt_len);
#define ENC(out, cap) pd_hello_encode(&m, out, cap)
	ROUND_TRIP(p, n, ENC);
#undef ENC
	if (block_tokens)
		*block_tokens = m.block_tokens;
	return 0;
}

static void hello_reply(const uint8_t *p, size_t n)
{
	struct pd_hello_reply m;
	int rc = pd_hello_reply_decode(p, n, &m);
	check_rc(rc);
	if (rc)
		return;
	FUZZ_CHECK(n == PD_HELLO_REPLY_SIZE);
#define ENC(out, cap) pd_hello_reply_encode(&m, out, cap)
	ROUND_TRIP(p, n, ENC);
#undef ENC
}

/* Every token of a MATCH or PUBLISH, through pd_token_at and by hand. */
static void check_tokens(const uint8_t *tokens, uint32_t count, uint32_t block_tokens)
{
	for (uint32_t b = 0; b < count; b++)
		for (uint32_t t = 0; t < block_tokens; t++)
			FUZZ_CHECK(pd_token_at(tokens, block_tokens, b, t) ==
				   le(tokens + ((size_t)b * block_tokens + t) * 4, 4));
}

static void match(const uint8_t *p, size_t n, uint32_t block_tokens)
{
	struct pd_match m;
	int rc = pd_match_decode(p, n, block_tokens, &m);
	check_rc(rc);
	if (rc)
		return;
	FUZZ_CHECK(m.count <= PD_MAX_HASHES && block_tokens <= PD_MAX_BLOCK_TOKENS);
	FUZZ_CHECK(n == pd_chain_body_size(m.count, block_tokens));
	FUZZ_CHECK(m.hashes == p + 4 && m.tokens == p + 4 + (size_t)m.count * PD_HASH_SIZE);
	check_tokens(m.tokens, m.count, block_tokens);
#define ENC(out, cap) pd_match_encode(&m, block_tokens, out, cap)
	ROUND_TRIP(p, n, ENC);
#undef ENC
}

static void match_reply(const uint8_t *p, size_t n)
{
	struct pd_match_reply m;
	int rc = pd_match_reply_decode(p, n, &m);
	check_rc(rc);
	if (rc)
		return;
	FUZZ_CHECK(m.hit <= PD_MAX_HASHES && m.new_arenas <= PD_MAX_FDS);
	FUZZ_CHECK(!m.hit == !m.lease);
	FUZZ_CHECK(n == pd_match_reply_size(m.hit, m.new_arenas));
	FUZZ_CHECK(inside(m.places, (size_t)m.hit * PD_PLACE_SIZE, p, n) &&
		   inside(m.arenas, (size_t)m.new_arenas * PD_PLACE_SIZE, p, n));
	struct pd_place *places = malloc(((size_t)m.hit + 1) * sizeof(*places));
	struct pd_arena_desc arenas[PD_MAX_FDS];
	FUZZ_CHECK(places);
	for (uint32_t i = 0; i < m.hit; i++) {
		places[i] = pd_place_at(&m, i);
		const uint8_t *e = m.places + (size_t)i * PD_PLACE_SIZE;
		FUZZ_CHECK(places[i].arena == le(e, 4) && places[i].offset == le(e + 8, 8) &&
			   places[i].flags == le(e + 4, 4) &&
			   !(places[i].flags & ~(uint32_t)PD_PLACE_FLAGS));
	}
	for (uint32_t i = 0; i < m.new_arenas; i++) {
		arenas[i] = pd_arena_at(&m, i);
		const uint8_t *e = m.arenas + (size_t)i * PD_PLACE_SIZE;
		FUZZ_CHECK(arenas[i].arena == le(e, 4) && arenas[i].size == le(e + 8, 8));
	}
#define ENC(out, cap) pd_match_reply_encode(m.lease, m.hit, places, m.new_arenas, arenas, out, cap)
	ROUND_TRIP(p, n, ENC);
#undef ENC
	free(places);
}

/* Single flight's 8 bytes, then a MATCH body. */
static void flight(const uint8_t *p, size_t n, uint32_t block_tokens)
{
	struct pd_flight m;
	int rc = pd_flight_decode(p, n, &m);
	check_rc(rc);
	if (rc)
		return;
	FUZZ_CHECK(n >= PD_FLIGHT_SIZE && m.wait_ms <= PD_MAX_WAIT_MS &&
		   !(m.flags & ~(uint32_t)PD_FLIGHT_FLAGS));
#define ENC(out, cap) pd_flight_encode(&m, out, cap)
	ROUND_TRIP(p, PD_FLIGHT_SIZE, ENC);
#undef ENC
	match(p + PD_FLIGHT_SIZE, n - PD_FLIGHT_SIZE, block_tokens);
}

/* A MATCH reply, then single flight's 8 bytes. */
static void flight_reply(const uint8_t *p, size_t n)
{
	struct pd_flight_reply m;
	int rc = pd_flight_reply_decode(p, n, &m);
	check_rc(rc);
	if (rc)
		return;
	FUZZ_CHECK(n >= PD_FLIGHT_REPLY_SIZE && m.outcome <= PD_FLIGHT_OUTCOME_MAX);
	const uint8_t *tail = p + n - PD_FLIGHT_REPLY_SIZE;
#define ENC(out, cap) pd_flight_reply_encode(&m, out, cap)
	ROUND_TRIP(tail, PD_FLIGHT_REPLY_SIZE, ENC);
#undef ENC
	match_reply(p, n - PD_FLIGHT_REPLY_SIZE);
}

static void release(const uint8_t *p, size_t n)
{
	struct pd_release m;
	int rc = pd_release_decode(p, n, &m);
	check_rc(rc);
	if (rc)
		return;
	FUZZ_CHECK(m.lease != 0);
#define ENC(out, cap) pd_release_encode(&m, out, cap)
	ROUND_TRIP(p, n, ENC);
#undef ENC
}

static void publish(const uint8_t *p, size_t n, uint32_t block_tokens)
{
	struct pd_publish m;
	int rc = pd_publish_decode(p, n, block_tokens, &m);
	check_rc(rc);
	if (rc)
		return;
	FUZZ_CHECK(m.count >= 1 && m.count <= PD_MAX_HASHES && block_tokens <= PD_MAX_BLOCK_TOKENS);
	FUZZ_CHECK(n == 8 + pd_chain_body_size(m.count, block_tokens));
	FUZZ_CHECK(m.hashes == p + 12 && m.tokens == p + 12 + (size_t)m.count * PD_HASH_SIZE);
	check_tokens(m.tokens, m.count, block_tokens);
#define ENC(out, cap) pd_publish_encode(&m, block_tokens, out, cap)
	ROUND_TRIP(p, n, ENC);
#undef ENC
}

static void publish_reply(const uint8_t *p, size_t n)
{
	struct pd_publish_reply m;
	int rc = pd_publish_reply_decode(p, n, &m);
	check_rc(rc);
	if (rc)
		return;
	bool leased = n == PD_PUBLISH_LEASE_REPLY_SIZE;
	FUZZ_CHECK(m.stop <= PD_STOP_MAX && (leased || n == PD_PUBLISH_REPLY_SIZE));
	FUZZ_CHECK(leased || !m.lease);
#define ENC(out, cap) pd_publish_reply_encode(&m, leased, out, cap)
	ROUND_TRIP(p, n, ENC);
#undef ENC
}

static void stats_reply(const uint8_t *p, size_t n)
{
	struct pd_stats_reply m;
	int rc = pd_stats_reply_decode(p, n, &m);
	check_rc(rc);
	if (rc)
		return;
	FUZZ_CHECK(m.ncounters <= PD_MAX_COUNTERS && m.nrows <= PD_MAX_ROWS);
	FUZZ_CHECK(n == PD_STATS_REPLY_FIXED + 8 * (size_t)m.ncounters + PD_USAGE_SIZE * (size_t)m.nrows);
	FUZZ_CHECK(inside(m.rows, (size_t)m.nrows * PD_USAGE_SIZE, p, n));
	for (uint32_t i = 0; i < PD_STATS_COUNT; i++)
		FUZZ_CHECK(m.v[i] == (i < m.ncounters ? le(p + 8 + 8 * (size_t)i, 8) : 0));
	struct pd_usage *rows = malloc(((size_t)m.nrows + 1) * sizeof(*rows));
	FUZZ_CHECK(rows);
	for (uint32_t i = 0; i < m.nrows; i++) {
		rows[i] = pd_usage_at(&m, i);
		const uint8_t *r = m.rows + (size_t)i * PD_USAGE_SIZE;
		FUZZ_CHECK(rows[i].uid == le(r, 4) && !memcmp(rows[i].fp, r + 8, PD_FP_SIZE) &&
			   rows[i].evictions == le(r + 88, 8));
	}
	if (m.ncounters == PD_STATS_COUNT) {
#define ENC(out, cap) pd_stats_reply_encode(m.v, rows, m.nrows, out, cap)
		ROUND_TRIP(p, n, ENC);
#undef ENC
	} else {
		/* The encoder sends this side's counters: same values, other length. */
		size_t len = PD_STATS_REPLY_FIXED + 8 * (size_t)PD_STATS_COUNT +
			     PD_USAGE_SIZE * (size_t)m.nrows;
		uint8_t *out = buf_of(len);
		FUZZ_CHECK(pd_stats_reply_encode(m.v, rows, m.nrows, out, len) == len);
		struct pd_stats_reply again;
		FUZZ_CHECK(pd_stats_reply_decode(out, len, &again) == 0);
		FUZZ_CHECK(again.ncounters == PD_STATS_COUNT && again.nrows == m.nrows);
		FUZZ_CHECK(!memcmp(again.v, m.v, sizeof(m.v)));
		FUZZ_CHECK(!m.nrows || !memcmp(again.rows, m.rows, (size_t)m.nrows * PD_USAGE_SIZE));
		free(out);
	}
	free(rows);
}

static void list(const uint8_t *p, size_t n)
{
	struct pd_list m;
	int rc = pd_list_decode(p, n, &m);
	check_rc(rc);
	if (rc)
		return;
	FUZZ_CHECK(n == PD_LIST_SIZE && m.max_rows >= 1 && m.max_rows <= PD_MAX_ROWS);
	FUZZ_CHECK(!(m.flags & ~(uint32_t)(PD_LIST_USER | PD_LIST_MODEL)));
#define ENC(out, cap) pd_list_encode(&m, out, cap)
	ROUND_TRIP(p, n, ENC);
#undef ENC
}

static void list_reply(const uint8_t *p, size_t n)
{
	struct pd_list_reply m;
	int rc = pd_list_reply_decode(p, n, &m);
	check_rc(rc);
	if (rc)
		return;
	FUZZ_CHECK(m.nrows <= PD_MAX_ROWS);
	FUZZ_CHECK(n == PD_LIST_REPLY_FIXED + PD_CHAIN_SIZE * (size_t)m.nrows);
	FUZZ_CHECK(inside(m.rows, (size_t)m.nrows * PD_CHAIN_SIZE, p, n));
	struct pd_chain_row *rows = malloc(((size_t)m.nrows + 1) * sizeof(*rows));
	FUZZ_CHECK(rows);
	for (uint32_t i = 0; i < m.nrows; i++) {
		rows[i] = pd_chain_at(&m, i);
		const uint8_t *r = m.rows + (size_t)i * PD_CHAIN_SIZE;
		FUZZ_CHECK(rows[i].blocks && !(rows[i].flags & ~(uint32_t)PD_CHAIN_FLAGS));
		FUZZ_CHECK(!memcmp(rows[i].id.key, r, PD_HASH_SIZE) && rows[i].id.uid == le(r + 32, 4) &&
			   rows[i].pin_ttl_s == le(r + 104, 4));
	}
#define ENC(out, cap) pd_list_reply_encode(m.next, rows, m.nrows, out, cap)
	ROUND_TRIP(p, n, ENC);
#undef ENC
	free(rows);
}

static void evict(const uint8_t *p, size_t n)
{
	struct pd_evict m;
	int rc = pd_evict_decode(p, n, &m);
	check_rc(rc);
	if (rc)
		return;
	FUZZ_CHECK(n == PD_EVICT_SIZE && m.by >= PD_EVICT_ALL && m.by <= PD_EVICT_MAX);
#define ENC(out, cap) pd_evict_encode(&m, out, cap)
	ROUND_TRIP(p, n, ENC);
#undef ENC
}

static void evict_reply(const uint8_t *p, size_t n)
{
	struct pd_evict_reply m;
	int rc = pd_evict_reply_decode(p, n, &m);
	check_rc(rc);
	if (rc)
		return;
	FUZZ_CHECK(n == PD_EVICT_REPLY_SIZE);
#define ENC(out, cap) pd_evict_reply_encode(&m, out, cap)
	ROUND_TRIP(p, n, ENC);
#undef ENC
}

static void export_req(const uint8_t *p, size_t n)
{
	struct pd_export m;
	int rc = pd_export_decode(p, n, &m);
	check_rc(rc);
	if (rc)
		return;
	FUZZ_CHECK(n == PD_EXPORT_SIZE && !(m.flags & ~(uint32_t)PD_EXPORT_FLAGS));
#define ENC(out, cap) pd_export_encode(&m, out, cap)
	ROUND_TRIP(p, n, ENC);
#undef ENC
}

static void export_reply(const uint8_t *p, size_t n)
{
	struct pd_export_reply m;
	int rc = pd_export_reply_decode(p, n, &m);
	check_rc(rc);
	if (rc)
		return;
	FUZZ_CHECK(n == PD_EXPORT_REPLY_SIZE);
#define ENC(out, cap) pd_export_reply_encode(&m, out, cap)
	ROUND_TRIP(p, n, ENC);
#undef ENC
}

static void import_req(const uint8_t *p, size_t n)
{
	struct pd_import m;
	int rc = pd_import_decode(p, n, &m);
	check_rc(rc);
	if (rc)
		return;
	FUZZ_CHECK(n == PD_IMPORT_SIZE && !(m.flags & ~(uint32_t)PD_IMPORT_FLAGS));
#define ENC(out, cap) pd_import_encode(&m, out, cap)
	ROUND_TRIP(p, n, ENC);
#undef ENC
}

static void import_reply(const uint8_t *p, size_t n)
{
	struct pd_import_reply m;
	int rc = pd_import_reply_decode(p, n, &m);
	check_rc(rc);
	if (rc)
		return;
	FUZZ_CHECK(n == PD_IMPORT_REPLY_SIZE);
#define ENC(out, cap) pd_import_reply_encode(&m, out, cap)
	ROUND_TRIP(p, n, ENC);
#undef ENC
}

static void pin(const uint8_t *p, size_t n)
{
	struct pd_pin m;
	int rc = pd_pin_decode(p, n, &m);
	check_rc(rc);
	if (rc)
		return;
	FUZZ_CHECK(n == PD_PIN_SIZE);
#define ENC(out, cap) pd_pin_encode(&m, out, cap)
	ROUND_TRIP(p, n, ENC);
#undef ENC
}

static void pin_reply(const uint8_t *p, size_t n)
{
	struct pd_pin_reply m;
	int rc = pd_pin_reply_decode(p, n, &m);
	check_rc(rc);
	if (rc)
		return;
	FUZZ_CHECK(n == PD_PIN_REPLY_SIZE);
#define ENC(out, cap) pd_pin_reply_encode(&m, out, cap)
	ROUND_TRIP(p, n, ENC);
#undef ENC
}

static void error_msg(const uint8_t *p, size_t n)
{
	struct pd_error m;
	int rc = pd_error_decode(p, n, &m);
	check_rc(rc);
	if (rc)
		return;
	FUZZ_CHECK(m.len <= PD_MAX_MESSAGE && n == 4 + (size_t)m.len);
	FUZZ_CHECK(inside((const uint8_t *)m.msg, m.len, p, n));
	/* The encoder takes a C string: it ends at the first NUL. */
	char text[PD_MAX_MESSAGE + 1];
	memcpy(text, m.msg, m.len);
	text[m.len] = 0;
	size_t len = strlen(text);
	if (len == m.len) {
#define ENC(out, cap) pd_error_encode(text, out, cap)
		ROUND_TRIP(p, n, ENC);
#undef ENC
	} else {
		uint8_t *out = buf_of(4 + len);
		FUZZ_CHECK(pd_error_encode(text, out, 4 + len) == 4 + len);
		struct pd_error again;
		FUZZ_CHECK(pd_error_decode(out, 4 + len, &again) == 0);
		FUZZ_CHECK(again.len == len && !memcmp(again.msg, text, len));
		free(out);
	}
}

/* ==== Whole frames ==== */

/* The body of a frame with header h, as prefixd (requests) or a client
 * (replies) decodes it. HELLO sets the block size later frames use. */
static void body(const struct pd_hdr *h, const uint8_t *b, size_t n, uint32_t *block_tokens)
{
	if (h->flags & PD_FLAG_REPLY) {
		if (h->status) {
			error_msg(b, n);
			return;
		}
		switch (h->op) {
		case PD_OP_HELLO: hello_reply(b, n); break;
		case PD_OP_MATCH:
			if (h->flags & PD_FLAG_FLIGHT)
				flight_reply(b, n);
			else
				match_reply(b, n);
			break;
		case PD_OP_PUBLISH: publish_reply(b, n); break;
		case PD_OP_STATS: stats_reply(b, n); break;
		case PD_OP_LIST: list_reply(b, n); break;
		case PD_OP_EVICT: evict_reply(b, n); break;
		case PD_OP_PIN: pin_reply(b, n); break;
		case PD_OP_EXPORT: export_reply(b, n); break;
		case PD_OP_IMPORT: import_reply(b, n); break;
		default: break;  /* RELEASE, UNPIN: no body */
		}
		return;
	}
	switch (h->op) {
	case PD_OP_HELLO: hello(b, n, block_tokens); break;
	case PD_OP_MATCH:
		if (h->flags & PD_FLAG_FLIGHT)
			flight(b, n, *block_tokens);
		else
			match(b, n, *block_tokens);
		break;
	case PD_OP_RELEASE: release(b, n); break;
	case PD_OP_PUBLISH: publish(b, n, *block_tokens); break;
	case PD_OP_LIST: list(b, n); break;
	case PD_OP_EVICT: evict(b, n); break;
	case PD_OP_PIN: case PD_OP_UNPIN: pin(b, n); break;
	case PD_OP_EXPORT: export_req(b, n); break;
	case PD_OP_IMPORT: import_req(b, n); break;
	default: break;  /* STATS: no body */
	}
}

/* Frames one after another, as a connection reads them; stops at the first
 * header that does not decode or a body cut short. */
static void frames(const uint8_t *p, size_t n, uint32_t block_tokens)
{
	while (n >= PD_HDR_SIZE) {
		struct pd_hdr h;
		hdr(p, PD_HDR_SIZE);
		if (pd_hdr_decode(p, &h) || h.body_len > n - PD_HDR_SIZE)
			return;
		/* A copy of its own, so that reading past the body is caught
		 * rather than landing in the next frame. */
		uint8_t *b = buf_of(h.body_len);
		memcpy(b, p + PD_HDR_SIZE, h.body_len);
		body(&h, b, h.body_len, &block_tokens);
		free(b);
		p += PD_HDR_SIZE + (size_t)h.body_len;
		n -= PD_HDR_SIZE + (size_t)h.body_len;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < FW_PREFIX)
		return 0;
	enum fw_sel sel = (enum fw_sel)(data[0] % FW_COUNT);
	uint32_t bt = (uint32_t)le(data + 1, 4);
	const uint8_t *p = data + FW_PREFIX;
	size_t n = size - FW_PREFIX;
	switch (sel) {
	case FW_HDR: hdr(p, n); break;
	case FW_HELLO: hello(p, n, NULL); break;
	case FW_HELLO_REPLY: hello_reply(p, n); break;
	case FW_MATCH: match(p, n, bt); break;
	case FW_MATCH_REPLY: match_reply(p, n); break;
	case FW_RELEASE: release(p, n); break;
	case FW_PUBLISH: publish(p, n, bt); break;
	case FW_PUBLISH_REPLY: publish_reply(p, n); break;
	case FW_STATS_REPLY: stats_reply(p, n); break;
	case FW_LIST: list(p, n); break;
	case FW_LIST_REPLY: list_reply(p, n); break;
	case FW_EVICT: evict(p, n); break;
	case FW_EVICT_REPLY: evict_reply(p, n); break;
	case FW_PIN: case FW_UNPIN: pin(p, n); break;
	case FW_PIN_REPLY: pin_reply(p, n); break;
	case FW_EXPORT: export_req(p, n); break;
	case FW_EXPORT_REPLY: export_reply(p, n); break;
	case FW_IMPORT: import_req(p, n); break;
	case FW_IMPORT_REPLY: import_reply(p, n); break;
	case FW_FLIGHT: flight(p, n, bt); break;
	case FW_FLIGHT_REPLY: flight_reply(p, n); break;
	case FW_ERROR: error_msg(p, n); break;
	case FW_FRAME: frames(p, n, bt); break;
	case FW_COUNT: break;
	}
	return 0;
}
