/* SPDX-License-Identifier: MIT */
/*
 * Encoding and decoding of prefixd frames. A cursor (struct rd / struct wr)
 * carries a sticky error, so a decoder reads every field and checks once:
 * no field is used unless the whole body decoded within its length.
 */
#include "wire.h"

#include <string.h>

/* ==== Little-endian cursors ==== */

struct rd {
	const uint8_t *p;
	size_t len, pos;
	int bad;
};

struct wr {
	uint8_t *p;
	size_t cap, pos;
	int bad;
};

static const uint8_t *rd_take(struct rd *r, size_t n)
{
	if (r->bad || n > r->len - r->pos) {
		r->bad = 1;
		return NULL;
	}
	const uint8_t *p = r->p + r->pos;
	r->pos += n;
	return p;
}

static uint64_t rd_le(struct rd *r, int bytes)
{
	const uint8_t *p = rd_take(r, (size_t)bytes);
	uint64_t v = 0;
	for (int i = bytes - 1; p && i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint16_t rd_u16(struct rd *r) { return (uint16_t)rd_le(r, 2); }
static uint32_t rd_u32(struct rd *r) { return (uint32_t)rd_le(r, 4); }
static uint64_t rd_u64(struct rd *r) { return rd_le(r, 8); }

/* The body must be consumed exactly: trailing bytes are malformed too. */
static int rd_done(const struct rd *r)
{
	return r->bad || r->pos != r->len ? PD_E_MALFORMED : 0;
}

static uint8_t *wr_take(struct wr *w, size_t n)
{
	if (w->bad || n > w->cap - w->pos) {
		w->bad = 1;
		return NULL;
	}
	uint8_t *p = w->p + w->pos;
	w->pos += n;
	return p;
}

static void wr_le(struct wr *w, uint64_t v, int bytes)
{
	uint8_t *p = wr_take(w, (size_t)bytes);
	for (int i = 0; p && i < bytes; i++, v >>= 8)
		p[i] = (uint8_t)v;
}

static void wr_bytes(struct wr *w, const void *src, size_t n)
{
	uint8_t *p = wr_take(w, n);
	if (p && n)
		memcpy(p, src, n);
}

static size_t wr_done(const struct wr *w)
{
	return w->bad ? 0 : w->pos;
}

/* ==== Header ==== */

void pd_hdr_encode(const struct pd_hdr *h, uint8_t *out)
{
	struct wr w = { out, PD_HDR_SIZE, 0, 0 };
	wr_le(&w, h->magic, 4);
	wr_le(&w, h->version, 2);
	wr_le(&w, h->op, 1);
	wr_le(&w, h->flags, 1);
	wr_le(&w, h->status, 4);
	wr_le(&w, h->opaque, 4);
	wr_le(&w, h->body_len, 4);
	memset(out + w.pos, 0, PD_HDR_SIZE - w.pos);
}

int pd_hdr_decode(const uint8_t *in, struct pd_hdr *h)
{
	struct rd r = { in, PD_HDR_SIZE, 0, 0 };
	h->magic = rd_u32(&r);
	h->version = rd_u16(&r);
	h->op = (uint8_t)rd_le(&r, 1);
	h->flags = (uint8_t)rd_le(&r, 1);
	h->status = rd_u32(&r);
	h->opaque = rd_u32(&r);
	h->body_len = rd_u32(&r);
	const uint8_t *reserved = rd_take(&r, PD_HDR_SIZE - 20);
	if (r.bad || h->magic != PD_MAGIC)
		return PD_E_MALFORMED;
	for (int i = 0; i < PD_HDR_SIZE - 20; i++)
		if (reserved[i])
			return PD_E_MALFORMED;
	if (h->op < 1 || h->op > PD_OP_MAX || (h->flags & ~PD_FLAGS_KNOWN) ||
	    h->status > PD_STATUS_MAX)
		return PD_E_MALFORMED;
	if (h->body_len > PD_MAX_BODY)
		return PD_E_LIMIT;
	return 0;
}

/* ==== HELLO ==== */

size_t pd_hello_encode(const struct pd_hello *m, uint8_t *out, size_t cap)
{
	struct wr w = { out, cap, 0, m->salt_len > PD_MAX_SALT };
	wr_le(&w, m->version_min, 2);
	wr_le(&w, m->version_max, 2);
	wr_le(&w, m->block_tokens, 4);
	wr_le(&w, m->block_bytes, 8);
	wr_le(&w, m->layout, 4);
	wr_bytes(&w, m->fingerprint, PD_FP_SIZE);
	wr_le(&w, m->salt_len, 4);
	wr_bytes(&w, m->salt, m->salt_len);
	return wr_done(&w);
}

int pd_hello_decode(const uint8_t *body, size_t len, struct pd_hello *m)
{
	struct rd r = { body, len, 0, 0 };
	m->version_min = rd_u16(&r);
	m->version_max = rd_u16(&r);
	m->block_tokens = rd_u32(&r);
	m->block_bytes = rd_u64(&r);
	m->layout = rd_u32(&r);
	m->fingerprint = rd_take(&r, PD_FP_SIZE);
	m->salt_len = rd_u32(&r);
	if (r.bad)
		return PD_E_MALFORMED;
	if (m->salt_len > PD_MAX_SALT)
		return PD_E_LIMIT;
	m->salt = rd_take(&r, m->salt_len);
	int rc = rd_done(&r);
	return rc ? rc : pd_hello_check(m);
}

int pd_hello_check(const struct pd_hello *m)
{
	if (m->version_min > m->version_max || !m->block_tokens ||
	    (m->block_tokens & (m->block_tokens - 1)) || !m->block_bytes)
		return PD_E_MALFORMED;
	if (m->block_tokens > PD_MAX_BLOCK_TOKENS || m->salt_len > PD_MAX_SALT)
		return PD_E_LIMIT;
	return 0;
}

size_t pd_hello_reply_encode(const struct pd_hello_reply *m, uint8_t *out, size_t cap)
{
	struct wr w = { out, cap, 0, 0 };
	wr_le(&w, m->version, 2);
	wr_le(&w, 0, 2);
	wr_le(&w, m->max_hashes, 4);
	wr_le(&w, m->budget_bytes, 8);
	return wr_done(&w);
}

int pd_hello_reply_decode(const uint8_t *body, size_t len, struct pd_hello_reply *m)
{
	struct rd r = { body, len, 0, 0 };
	m->version = rd_u16(&r);
	uint16_t pad = rd_u16(&r);
	m->max_hashes = rd_u32(&r);
	m->budget_bytes = rd_u64(&r);
	return rd_done(&r) || pad ? PD_E_MALFORMED : 0;
}

/* ==== MATCH and PUBLISH ==== */

static int hashes_and_tokens(struct rd *r, uint32_t count, uint32_t block_tokens,
			     const uint8_t **hashes, const uint8_t **tokens)
{
	if (count > PD_MAX_HASHES || block_tokens > PD_MAX_BLOCK_TOKENS)
		return PD_E_LIMIT;
	/* Both products fit easily in size_t after the limits above. */
	*hashes = rd_take(r, (size_t)count * PD_HASH_SIZE);
	*tokens = rd_take(r, (size_t)count * block_tokens * 4);
	return rd_done(r);
}

/* The count, hashes and tokens that MATCH and PUBLISH share. */
static void wr_chain(struct wr *w, uint32_t count, const uint8_t *hashes, const uint8_t *tokens,
		     uint32_t block_tokens)
{
	if (count > PD_MAX_HASHES || block_tokens > PD_MAX_BLOCK_TOKENS)
		w->bad = 1;
	wr_le(w, count, 4);
	wr_bytes(w, hashes, (size_t)count * PD_HASH_SIZE);
	wr_bytes(w, tokens, (size_t)count * block_tokens * 4);
}

size_t pd_match_encode(const struct pd_match *m, uint32_t block_tokens, uint8_t *out, size_t cap)
{
	struct wr w = { out, cap, 0, 0 };
	wr_chain(&w, m->count, m->hashes, m->tokens, block_tokens);
	return wr_done(&w);
}

int pd_match_decode(const uint8_t *body, size_t len, uint32_t block_tokens, struct pd_match *m)
{
	struct rd r = { body, len, 0, 0 };
	m->count = rd_u32(&r);
	if (r.bad)
		return PD_E_MALFORMED;
	return hashes_and_tokens(&r, m->count, block_tokens, &m->hashes, &m->tokens);
}

size_t pd_publish_encode(const struct pd_publish *m, uint32_t block_tokens, uint8_t *out, size_t cap)
{
	struct wr w = { out, cap, 0, 0 };
	wr_le(&w, m->lease, 8);
	wr_chain(&w, m->count, m->hashes, m->tokens, block_tokens);
	return wr_done(&w);
}

int pd_publish_decode(const uint8_t *body, size_t len, uint32_t block_tokens, struct pd_publish *m)
{
	struct rd r = { body, len, 0, 0 };
	m->lease = rd_u64(&r);
	m->count = rd_u32(&r);
	if (r.bad)
		return PD_E_MALFORMED;
	if (!m->count)
		return PD_E_MALFORMED;
	return hashes_and_tokens(&r, m->count, block_tokens, &m->hashes, &m->tokens);
}

size_t pd_match_reply_encode(uint64_t lease, uint32_t hit, const struct pd_place *places,
			     uint32_t new_arenas, const struct pd_arena_desc *arenas, uint8_t *out,
			     size_t cap)
{
	struct wr w = { out, cap, 0, hit > PD_MAX_HASHES || new_arenas > PD_MAX_FDS };
	wr_le(&w, lease, 8);
	wr_le(&w, hit, 4);
	wr_le(&w, new_arenas, 4);
	for (uint32_t i = 0; i < hit && !w.bad; i++) {
		wr_le(&w, places[i].arena, 4);
		wr_le(&w, 0, 4);
		wr_le(&w, places[i].offset, 8);
	}
	for (uint32_t i = 0; i < new_arenas && !w.bad; i++) {
		wr_le(&w, arenas[i].arena, 4);
		wr_le(&w, 0, 4);
		wr_le(&w, arenas[i].size, 8);
	}
	return wr_done(&w);
}

int pd_match_reply_decode(const uint8_t *body, size_t len, struct pd_match_reply *m)
{
	struct rd r = { body, len, 0, 0 };
	m->lease = rd_u64(&r);
	m->hit = rd_u32(&r);
	m->new_arenas = rd_u32(&r);
	if (r.bad)
		return PD_E_MALFORMED;
	if (m->hit > PD_MAX_HASHES || m->new_arenas > PD_MAX_FDS)
		return PD_E_LIMIT;
	m->places = rd_take(&r, (size_t)m->hit * 16);
	m->arenas = rd_take(&r, (size_t)m->new_arenas * 16);
	int rc = rd_done(&r);
	if (rc)
		return rc;
	if (!m->hit != !m->lease)
		return PD_E_MALFORMED;
	for (uint32_t i = 0; i < m->hit + m->new_arenas; i++) {
		const uint8_t *e = i < m->hit ? m->places + 16 * i : m->arenas + 16 * (i - m->hit);
		if (e[4] | e[5] | e[6] | e[7])
			return PD_E_MALFORMED;
	}
	return 0;
}

static struct pd_place entry(const uint8_t *e)
{
	struct rd r = { e, 16, 0, 0 };
	struct pd_place p;
	p.arena = rd_u32(&r);
	rd_u32(&r);
	p.offset = rd_u64(&r);
	return p;
}

struct pd_place pd_place_at(const struct pd_match_reply *m, uint32_t i)
{
	return entry(m->places + 16 * (size_t)i);
}

struct pd_arena_desc pd_arena_at(const struct pd_match_reply *m, uint32_t i)
{
	struct pd_place p = entry(m->arenas + 16 * (size_t)i);
	return (struct pd_arena_desc){ p.arena, p.offset };
}

uint32_t pd_token_at(const uint8_t *tokens, uint32_t block_tokens, uint32_t b, uint32_t t)
{
	struct rd r = { tokens + ((size_t)b * block_tokens + t) * 4, 4, 0, 0 };
	return rd_u32(&r);
}

/* ==== Small messages ==== */

size_t pd_release_encode(const struct pd_release *m, uint8_t *out, size_t cap)
{
	struct wr w = { out, cap, 0, 0 };
	wr_le(&w, m->lease, 8);
	return wr_done(&w);
}

int pd_release_decode(const uint8_t *body, size_t len, struct pd_release *m)
{
	struct rd r = { body, len, 0, 0 };
	m->lease = rd_u64(&r);
	return rd_done(&r) || !m->lease ? PD_E_MALFORMED : 0;
}

size_t pd_publish_reply_encode(const struct pd_publish_reply *m, uint8_t *out, size_t cap)
{
	struct wr w = { out, cap, 0, 0 };
	wr_le(&w, m->stored, 4);
	wr_le(&w, m->deduplicated, 4);
	return wr_done(&w);
}

int pd_publish_reply_decode(const uint8_t *body, size_t len, struct pd_publish_reply *m)
{
	struct rd r = { body, len, 0, 0 };
	m->stored = rd_u32(&r);
	m->deduplicated = rd_u32(&r);
	return rd_done(&r);
}

size_t pd_stats_reply_encode(const uint64_t in[PD_STATS_COUNT], uint8_t *out, size_t cap)
{
	struct wr w = { out, cap, 0, 0 };
	for (int i = 0; i < PD_STATS_COUNT; i++)
		wr_le(&w, in[i], 8);
	return wr_done(&w);
}

int pd_stats_reply_decode(const uint8_t *body, size_t len, uint64_t out[PD_STATS_COUNT])
{
	struct rd r = { body, len, 0, 0 };
	for (int i = 0; i < PD_STATS_COUNT; i++)
		out[i] = rd_u64(&r);
	return rd_done(&r);
}

size_t pd_error_encode(const char *msg, uint8_t *out, size_t cap)
{
	size_t n = strnlen(msg, PD_MAX_MESSAGE);
	struct wr w = { out, cap, 0, 0 };
	wr_le(&w, n, 4);
	wr_bytes(&w, msg, n);
	return wr_done(&w);
}

int pd_error_decode(const uint8_t *body, size_t len, struct pd_error *m)
{
	struct rd r = { body, len, 0, 0 };
	m->len = rd_u32(&r);
	if (r.bad)
		return PD_E_MALFORMED;
	if (m->len > PD_MAX_MESSAGE)
		return PD_E_LIMIT;
	m->msg = (const char *)rd_take(&r, m->len);
	return rd_done(&r);
}

const char *pd_status_str(int status)
{
	static const char *const names[] = {
		"ok", "malformed message", "no common protocol version", "not allowed now",
		"over a protocol limit", "memory budget full", "not found", "unsupported KV layout",
		"internal error", "permission denied",
	};
	return status >= 0 && status <= PD_STATUS_MAX ? names[status] : "unknown status";
}
