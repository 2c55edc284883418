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

static void wr_bytes(struct wr *w, const void *src, size_t n)
{
	uint8_t *p = wr_take(w, n);
	if (p && n)
		memcpy(p, src, n);
}

static void wr_le(struct wr *w, uint64_t v, int bytes)
{
	uint8_t le[8];
	for (int i = 0; i < bytes; i++, v >>= 8)
		le[i] = (uint8_t)v;
	wr_bytes(w, le, (size_t)bytes);
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
	wr_le(&w, m->quota_bytes, 8);
	wr_le(&w, m->pin_max_bytes, 8);
	return wr_done(&w);
}

int pd_hello_reply_decode(const uint8_t *body, size_t len, struct pd_hello_reply *m)
{
	struct rd r = { body, len, 0, 0 };
	m->version = rd_u16(&r);
	uint16_t pad = rd_u16(&r);
	m->max_hashes = rd_u32(&r);
	m->budget_bytes = rd_u64(&r);
	m->quota_bytes = rd_u64(&r);
	m->pin_max_bytes = rd_u64(&r);
	return rd_done(&r) || pad ? PD_E_MALFORMED : 0;
}

/* ==== MATCH and PUBLISH ==== */

size_t pd_chain_body_size(uint32_t count, uint32_t block_tokens)
{
	return 4 + (size_t)count * (PD_HASH_SIZE + 4 * (size_t)block_tokens);
}

size_t pd_match_reply_size(uint32_t hit, uint32_t new_arenas)
{
	return PD_MATCH_REPLY_FIXED + PD_PLACE_SIZE * ((size_t)hit + new_arenas);
}

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
		wr_le(&w, places[i].flags, 4);
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
	m->places = rd_take(&r, (size_t)m->hit * PD_PLACE_SIZE);
	m->arenas = rd_take(&r, (size_t)m->new_arenas * PD_PLACE_SIZE);
	int rc = rd_done(&r);
	if (rc)
		return rc;
	if (!m->hit != !m->lease)
		return PD_E_MALFORMED;
	for (uint32_t i = 0; i < m->hit + m->new_arenas; i++) {
		const uint8_t *e = i < m->hit ? m->places + PD_PLACE_SIZE * i
					      : m->arenas + PD_PLACE_SIZE * (i - m->hit);
		uint32_t unknown = i < m->hit ? ~(uint32_t)PD_PLACE_FLAGS : ~0u;
		if (((uint32_t)e[4] | (uint32_t)e[5] << 8 | (uint32_t)e[6] << 16 |
		     (uint32_t)e[7] << 24) & unknown)
			return PD_E_MALFORMED;
	}
	return 0;
}

/* ==== Single flight ==== */

int pd_flight_decode(const uint8_t *body, size_t len, struct pd_flight *m)
{
	struct rd r = { body, len < PD_FLIGHT_SIZE ? len : PD_FLIGHT_SIZE, 0, 0 };
	m->wait_ms = rd_u32(&r);
	m->flags = rd_u32(&r);
	if (rd_done(&r) || (m->flags & ~(uint32_t)PD_FLIGHT_FLAGS))
		return PD_E_MALFORMED;
	return m->wait_ms > PD_MAX_WAIT_MS ? PD_E_LIMIT : 0;
}

size_t pd_flight_encode(const struct pd_flight *m, uint8_t *out, size_t cap)
{
	struct wr w = { out, cap, 0, m->wait_ms > PD_MAX_WAIT_MS || (m->flags & ~(uint32_t)PD_FLIGHT_FLAGS) };
	wr_le(&w, m->wait_ms, 4);
	wr_le(&w, m->flags, 4);
	return wr_done(&w);
}

int pd_flight_reply_decode(const uint8_t *body, size_t len, struct pd_flight_reply *m)
{
	if (len < PD_FLIGHT_REPLY_SIZE)
		return PD_E_MALFORMED;
	struct rd r = { body + len - PD_FLIGHT_REPLY_SIZE, PD_FLIGHT_REPLY_SIZE, 0, 0 };
	m->outcome = rd_u32(&r);
	m->waited_ms = rd_u32(&r);
	return rd_done(&r) || m->outcome > PD_FLIGHT_OUTCOME_MAX ? PD_E_MALFORMED : 0;
}

size_t pd_flight_reply_encode(const struct pd_flight_reply *m, uint8_t *out, size_t cap)
{
	struct wr w = { out, cap, 0, m->outcome > PD_FLIGHT_OUTCOME_MAX };
	wr_le(&w, m->outcome, 4);
	wr_le(&w, m->waited_ms, 4);
	return wr_done(&w);
}

static struct pd_place entry(const uint8_t *e)
{
	struct rd r = { e, PD_PLACE_SIZE, 0, 0 };
	struct pd_place p;
	p.arena = rd_u32(&r);
	p.flags = rd_u32(&r);
	p.offset = rd_u64(&r);
	return p;
}

struct pd_place pd_place_at(const struct pd_match_reply *m, uint32_t i)
{
	return entry(m->places + PD_PLACE_SIZE * (size_t)i);
}

struct pd_arena_desc pd_arena_at(const struct pd_match_reply *m, uint32_t i)
{
	struct pd_place p = entry(m->arenas + PD_PLACE_SIZE * (size_t)i);
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

size_t pd_publish_reply_encode(const struct pd_publish_reply *m, bool leased, uint8_t *out,
			       size_t cap)
{
	struct wr w = { out, cap, 0, 0 };
	wr_le(&w, m->stored, 4);
	wr_le(&w, m->deduplicated, 4);
	wr_le(&w, m->stop, 4);
	wr_le(&w, 0, 4);
	if (leased)
		wr_le(&w, m->lease, 8);
	return wr_done(&w);
}

int pd_publish_reply_decode(const uint8_t *body, size_t len, struct pd_publish_reply *m)
{
	struct rd r = { body, len, 0, 0 };
	m->stored = rd_u32(&r);
	m->deduplicated = rd_u32(&r);
	m->stop = rd_u32(&r);
	uint32_t pad = rd_u32(&r);
	m->lease = len == PD_PUBLISH_LEASE_REPLY_SIZE ? rd_u64(&r) : 0;
	return rd_done(&r) || pad || m->stop > PD_STOP_MAX ? PD_E_MALFORMED : 0;
}

size_t pd_stats_reply_encode(const uint64_t v[PD_STATS_COUNT], const struct pd_usage *rows,
			     uint32_t nrows, uint8_t *out, size_t cap)
{
	struct wr w = { out, cap, 0, nrows > PD_MAX_ROWS };
	wr_le(&w, PD_STATS_COUNT, 4);
	wr_le(&w, nrows, 4);
	for (int i = 0; i < PD_STATS_COUNT; i++)
		wr_le(&w, v[i], 8);
	for (uint32_t i = 0; i < nrows && !w.bad; i++) {
		const struct pd_usage *u = &rows[i];
		wr_le(&w, u->uid, 4);
		wr_le(&w, 0, 4);
		wr_bytes(&w, u->fp, PD_FP_SIZE);
		wr_le(&w, u->blocks, 8);
		wr_le(&w, u->bytes, 8);
		wr_le(&w, u->pinned_bytes, 8);
		wr_le(&w, u->hits, 8);
		wr_le(&w, u->hit_tokens, 8);
		wr_le(&w, u->query_tokens, 8);
		wr_le(&w, u->evictions, 8);
	}
	return wr_done(&w);
}

int pd_stats_reply_decode(const uint8_t *body, size_t len, struct pd_stats_reply *m)
{
	struct rd r = { body, len, 0, 0 };
	memset(m, 0, sizeof(*m));
	m->ncounters = rd_u32(&r);
	m->nrows = rd_u32(&r);
	if (r.bad)
		return PD_E_MALFORMED;
	if (m->ncounters > PD_MAX_COUNTERS || m->nrows > PD_MAX_ROWS)
		return PD_E_LIMIT;
	/* A newer daemon may count more: keep the ones this side knows. */
	for (uint32_t i = 0; i < m->ncounters; i++) {
		uint64_t v = rd_u64(&r);
		if (i < PD_STATS_COUNT)
			m->v[i] = v;
	}
	m->rows = rd_take(&r, (size_t)m->nrows * PD_USAGE_SIZE);
	if (rd_done(&r))
		return PD_E_MALFORMED;
	for (uint32_t i = 0; i < m->nrows; i++)
		if (memcmp(m->rows + (size_t)i * PD_USAGE_SIZE + 4, "\0\0\0\0", 4))
			return PD_E_MALFORMED;
	return 0;
}

struct pd_usage pd_usage_at(const struct pd_stats_reply *m, uint32_t i)
{
	struct rd r = { m->rows + (size_t)i * PD_USAGE_SIZE, PD_USAGE_SIZE, 0, 0 };
	struct pd_usage u;
	u.uid = rd_u32(&r);
	rd_u32(&r);
	memcpy(u.fp, rd_take(&r, PD_FP_SIZE), PD_FP_SIZE);
	u.blocks = rd_u64(&r);
	u.bytes = rd_u64(&r);
	u.pinned_bytes = rd_u64(&r);
	u.hits = rd_u64(&r);
	u.hit_tokens = rd_u64(&r);
	u.query_tokens = rd_u64(&r);
	u.evictions = rd_u64(&r);
	return u;
}

/* ==== Admin: LIST, EVICT, PIN, UNPIN ==== */

size_t pd_list_encode(const struct pd_list *m, uint8_t *out, size_t cap)
{
	struct wr w = { out, cap, 0, 0 };
	wr_le(&w, m->cursor, 8);
	wr_le(&w, m->max_rows, 4);
	wr_le(&w, m->flags, 4);
	wr_le(&w, m->uid, 4);
	wr_le(&w, 0, 4);
	wr_bytes(&w, m->fp, PD_FP_SIZE);
	return wr_done(&w);
}

int pd_list_decode(const uint8_t *body, size_t len, struct pd_list *m)
{
	struct rd r = { body, len, 0, 0 };
	m->cursor = rd_u64(&r);
	m->max_rows = rd_u32(&r);
	m->flags = rd_u32(&r);
	m->uid = rd_u32(&r);
	uint32_t pad = rd_u32(&r);
	const uint8_t *fp = rd_take(&r, PD_FP_SIZE);
	if (rd_done(&r) || pad || (m->flags & ~(uint32_t)(PD_LIST_USER | PD_LIST_MODEL)))
		return PD_E_MALFORMED;
	if (!m->max_rows || m->max_rows > PD_MAX_ROWS)
		return PD_E_LIMIT;
	memcpy(m->fp, fp, PD_FP_SIZE);
	return 0;
}

size_t pd_list_reply_encode(uint64_t next, const struct pd_chain_row *rows, uint32_t nrows,
			    uint8_t *out, size_t cap)
{
	struct wr w = { out, cap, 0, nrows > PD_MAX_ROWS };
	wr_le(&w, next, 8);
	wr_le(&w, nrows, 4);
	wr_le(&w, 0, 4);
	for (uint32_t i = 0; i < nrows && !w.bad; i++) {
		const struct pd_chain_row *c = &rows[i];
		wr_bytes(&w, c->id.key, PD_HASH_SIZE);
		wr_le(&w, c->id.uid, 4);
		wr_le(&w, c->blocks, 4);
		wr_bytes(&w, c->fp, PD_FP_SIZE);
		wr_le(&w, c->tokens, 4);
		wr_le(&w, c->leases, 4);
		wr_le(&w, c->bytes, 8);
		wr_le(&w, c->hits, 8);
		wr_le(&w, c->idle_s, 4);
		wr_le(&w, c->flags, 4);
		wr_le(&w, c->pin_ttl_s, 4);
		wr_le(&w, 0, 4);
	}
	return wr_done(&w);
}

int pd_list_reply_decode(const uint8_t *body, size_t len, struct pd_list_reply *m)
{
	struct rd r = { body, len, 0, 0 };
	m->next = rd_u64(&r);
	m->nrows = rd_u32(&r);
	uint32_t pad = rd_u32(&r);
	if (r.bad || pad)
		return PD_E_MALFORMED;
	if (m->nrows > PD_MAX_ROWS)
		return PD_E_LIMIT;
	m->rows = rd_take(&r, (size_t)m->nrows * PD_CHAIN_SIZE);
	if (rd_done(&r))
		return PD_E_MALFORMED;
	for (uint32_t i = 0; i < m->nrows; i++) {
		struct pd_chain_row c = pd_chain_at(m, i);
		const uint8_t *last = m->rows + (size_t)(i + 1) * PD_CHAIN_SIZE - 4;
		if ((c.flags & ~(uint32_t)PD_CHAIN_FLAGS) || !c.blocks ||
		    (last[0] | last[1] | last[2] | last[3]))
			return PD_E_MALFORMED;
	}
	return 0;
}

struct pd_chain_row pd_chain_at(const struct pd_list_reply *m, uint32_t i)
{
	struct rd r = { m->rows + (size_t)i * PD_CHAIN_SIZE, PD_CHAIN_SIZE, 0, 0 };
	struct pd_chain_row c;
	memcpy(c.id.key, rd_take(&r, PD_HASH_SIZE), PD_HASH_SIZE);
	c.id.uid = rd_u32(&r);
	c.blocks = rd_u32(&r);
	memcpy(c.fp, rd_take(&r, PD_FP_SIZE), PD_FP_SIZE);
	c.tokens = rd_u32(&r);
	c.leases = rd_u32(&r);
	c.bytes = rd_u64(&r);
	c.hits = rd_u64(&r);
	c.idle_s = rd_u32(&r);
	c.flags = rd_u32(&r);
	c.pin_ttl_s = rd_u32(&r);
	return c;
}

size_t pd_evict_encode(const struct pd_evict *m, uint8_t *out, size_t cap)
{
	struct wr w = { out, cap, 0, 0 };
	wr_le(&w, m->by, 4);
	wr_le(&w, m->uid, 4);
	wr_le(&w, m->idle_s, 8);
	wr_bytes(&w, m->key, PD_HASH_SIZE);
	return wr_done(&w);
}

int pd_evict_decode(const uint8_t *body, size_t len, struct pd_evict *m)
{
	struct rd r = { body, len, 0, 0 };
	m->by = rd_u32(&r);
	m->uid = rd_u32(&r);
	m->idle_s = rd_u64(&r);
	const uint8_t *key = rd_take(&r, PD_HASH_SIZE);
	if (rd_done(&r) || m->by < PD_EVICT_ALL || m->by > PD_EVICT_MAX)
		return PD_E_MALFORMED;
	memcpy(m->key, key, PD_HASH_SIZE);
	return 0;
}

size_t pd_evict_reply_encode(const struct pd_evict_reply *m, uint8_t *out, size_t cap)
{
	struct wr w = { out, cap, 0, 0 };
	wr_le(&w, m->blocks, 8);
	wr_le(&w, m->bytes, 8);
	wr_le(&w, m->kept_leased, 8);
	wr_le(&w, m->kept_pinned, 8);
	wr_le(&w, m->kept_parent, 8);
	return wr_done(&w);
}

int pd_evict_reply_decode(const uint8_t *body, size_t len, struct pd_evict_reply *m)
{
	struct rd r = { body, len, 0, 0 };
	m->blocks = rd_u64(&r);
	m->bytes = rd_u64(&r);
	m->kept_leased = rd_u64(&r);
	m->kept_pinned = rd_u64(&r);
	m->kept_parent = rd_u64(&r);
	return rd_done(&r);
}

size_t pd_export_encode(const struct pd_export *m, uint8_t *out, size_t cap)
{
	struct wr w = { out, cap, 0, 0 };
	wr_le(&w, m->flags, 4);
	wr_le(&w, m->uid, 4);
	wr_bytes(&w, m->fp, PD_FP_SIZE);
	wr_bytes(&w, m->id.key, PD_HASH_SIZE);
	wr_le(&w, m->id.uid, 4);
	wr_le(&w, 0, 4);
	return wr_done(&w);
}

int pd_export_decode(const uint8_t *body, size_t len, struct pd_export *m)
{
	struct rd r = { body, len, 0, 0 };
	m->flags = rd_u32(&r);
	m->uid = rd_u32(&r);
	const uint8_t *fp = rd_take(&r, PD_FP_SIZE), *key = rd_take(&r, PD_HASH_SIZE);
	m->id.uid = rd_u32(&r);
	uint32_t zero = rd_u32(&r);
	if (rd_done(&r) || zero || (m->flags & ~(uint32_t)PD_EXPORT_FLAGS))
		return PD_E_MALFORMED;
	memcpy(m->fp, fp, PD_FP_SIZE);
	memcpy(m->id.key, key, PD_HASH_SIZE);
	return 0;
}

size_t pd_export_reply_encode(const struct pd_export_reply *m, uint8_t *out, size_t cap)
{
	struct wr w = { out, cap, 0, 0 };
	wr_le(&w, m->blocks, 8);
	wr_le(&w, m->bytes, 8);
	return wr_done(&w);
}

int pd_export_reply_decode(const uint8_t *body, size_t len, struct pd_export_reply *m)
{
	struct rd r = { body, len, 0, 0 };
	m->blocks = rd_u64(&r);
	m->bytes = rd_u64(&r);
	return rd_done(&r);
}

size_t pd_import_encode(const struct pd_import *m, uint8_t *out, size_t cap)
{
	struct wr w = { out, cap, 0, 0 };
	wr_le(&w, m->flags, 4);
	wr_le(&w, m->uid, 4);
	return wr_done(&w);
}

int pd_import_decode(const uint8_t *body, size_t len, struct pd_import *m)
{
	struct rd r = { body, len, 0, 0 };
	m->flags = rd_u32(&r);
	m->uid = rd_u32(&r);
	if (rd_done(&r) || (m->flags & ~(uint32_t)PD_IMPORT_FLAGS))
		return PD_E_MALFORMED;
	return 0;
}

size_t pd_import_reply_encode(const struct pd_import_reply *m, uint8_t *out, size_t cap)
{
	struct wr w = { out, cap, 0, 0 };
	wr_le(&w, m->blocks, 8);
	wr_le(&w, m->dedup, 8);
	wr_le(&w, m->skipped, 8);
	wr_le(&w, m->refused, 8);
	wr_le(&w, m->bytes, 8);
	return wr_done(&w);
}

int pd_import_reply_decode(const uint8_t *body, size_t len, struct pd_import_reply *m)
{
	struct rd r = { body, len, 0, 0 };
	m->blocks = rd_u64(&r);
	m->dedup = rd_u64(&r);
	m->skipped = rd_u64(&r);
	m->refused = rd_u64(&r);
	m->bytes = rd_u64(&r);
	return rd_done(&r);
}

size_t pd_pin_encode(const struct pd_pin *m, uint8_t *out, size_t cap)
{
	struct wr w = { out, cap, 0, 0 };
	wr_bytes(&w, m->id.key, PD_HASH_SIZE);
	wr_le(&w, m->id.uid, 4);
	wr_le(&w, m->ttl_s, 4);
	return wr_done(&w);
}

int pd_pin_decode(const uint8_t *body, size_t len, struct pd_pin *m)
{
	struct rd r = { body, len, 0, 0 };
	const uint8_t *key = rd_take(&r, PD_HASH_SIZE);
	m->id.uid = rd_u32(&r);
	m->ttl_s = rd_u32(&r);
	if (rd_done(&r))
		return PD_E_MALFORMED;
	memcpy(m->id.key, key, PD_HASH_SIZE);
	return 0;
}

size_t pd_pin_reply_encode(const struct pd_pin_reply *m, uint8_t *out, size_t cap)
{
	struct wr w = { out, cap, 0, 0 };
	wr_le(&w, m->pinned_bytes, 8);
	wr_le(&w, m->pin_max, 8);
	return wr_done(&w);
}

int pd_pin_reply_decode(const uint8_t *body, size_t len, struct pd_pin_reply *m)
{
	struct rd r = { body, len, 0, 0 };
	m->pinned_bytes = rd_u64(&r);
	m->pin_max = rd_u64(&r);
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
		"over a limit", "block larger than the memory budget or quota", "not found", "unsupported KV layout",
		"internal error", "permission denied",
	};
	return status >= 0 && status <= PD_STATUS_MAX ? names[status] : "unknown status";
}
