/* SPDX-License-Identifier: MIT */
/* libprefixd's admin calls: statistics, listing, eviction, pins. */
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "connection.h"

/* One admin request with a fixed body; the reply body is the caller's. */
static int admin_call_fd(struct prefixd *c, int op, const uint8_t *body, size_t len, int fd,
			 uint8_t **rb, uint32_t *rlen)
{
	pthread_mutex_lock(&c->lock);
	int rc = pd_call(c, op, body, len, fd, rb, rlen, NULL, NULL);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

static int admin_call(struct prefixd *c, int op, const uint8_t *body, size_t len,
		      uint8_t **rb, uint32_t *rlen)
{
	return admin_call_fd(c, op, body, len, -1, rb, rlen);
}

static int undecodable(uint8_t *rb, const char *what)
{
	free(rb);
	return pd_fail(-EBADMSG, "prefixd sent a %s reply that does not decode", what);
}

int prefixd_stats_usage(struct prefixd *c, struct prefixd_stats *out,
			struct prefixd_usage **usage, size_t *n)
{
	uint8_t *rb;
	uint32_t rlen = 0;
	if (usage)
		*usage = NULL;
	if (n)
		*n = 0;
	int rc = admin_call(c, PD_OP_STATS, NULL, 0, &rb, &rlen);
	if (rc)
		return rc;
	struct pd_stats_reply r;
	if (pd_stats_reply_decode(rb, rlen, &r))
		return undecodable(rb, "STATS");
	uint64_t *f = (uint64_t *)out;
	_Static_assert(sizeof(*out) == PD_STATS_COUNT * sizeof(uint64_t), "one field per counter");
	memcpy(f, r.v, sizeof(r.v));
	if (usage && r.nrows) {
		struct prefixd_usage *u = calloc(r.nrows, sizeof(*u));
		if (!u) {
			free(rb);
			return pd_fail(-ENOMEM, "out of memory");
		}
		for (uint32_t i = 0; i < r.nrows; i++) {
			struct pd_usage w = pd_usage_at(&r, i);
			u[i] = (struct prefixd_usage){ w.uid, { 0 }, w.blocks, w.bytes, w.pinned_bytes,
						       w.hits, w.hit_tokens, w.query_tokens, w.evictions };
			memcpy(u[i].model, w.fp, PD_FP_SIZE);
		}
		*usage = u;
		*n = r.nrows;
	}
	free(rb);
	return 0;
}

int prefixd_stats(struct prefixd *c, struct prefixd_stats *out)
{
	return prefixd_stats_usage(c, out, NULL, NULL);
}

/* What a user's printed ids are masked with (docs/PROTOCOL.md, "Chain
 * ids"): a key does not depend on the user, so one prompt's ids of two
 * users would otherwise share every digit before the user's. */
static void id_mask(uint32_t user, uint8_t mask[PREFIXD_HASH_BYTES])
{
	static const char tag[] = "prefixd-id-v1";
	uint8_t in[sizeof(tag) - 1 + 4];
	memcpy(in, tag, sizeof(tag) - 1);
	for (int i = 0; i < 4; i++)
		in[sizeof(tag) - 1 + i] = (uint8_t)(user >> 8 * i);
	/* BLAKE2b runs without sodium_init (which only picks a faster
	 * implementation), so this cannot fail. */
	crypto_generichash(mask, PREFIXD_HASH_BYTES, in, sizeof(in), NULL, 0);
}

void prefixd_id_format(const struct prefixd_id *id, char out[PREFIXD_ID_CHARS + 1])
{
	uint8_t mask[PREFIXD_HASH_BYTES];
	id_mask(id->user, mask);
	for (int i = 0; i < PREFIXD_HASH_BYTES; i++)
		sprintf(out + 2 * i, "%02x", id->key[i] ^ mask[i]);
	sprintf(out + 2 * PREFIXD_HASH_BYTES, "%08x", (unsigned)id->user);
}

static int hexval(char ch)
{
	return ch >= '0' && ch <= '9' ? ch - '0'
	       : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
	       : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
}

int prefixd_id_parse(const char *s, struct prefixd_id *out)
{
	if (strlen(s) != PREFIXD_ID_CHARS)
		return pd_fail(-EINVAL, "a chain id has %d hex digits, '%s' has %zu", PREFIXD_ID_CHARS,
			       s, strlen(s));
	uint32_t user = 0;
	for (int i = 0; i < PREFIXD_ID_CHARS; i++) {
		int v = hexval(s[i]);
		if (v < 0)
			return pd_fail(-EINVAL, "a chain id is hex digits; '%s' is not", s);
		if (i < 2 * PREFIXD_HASH_BYTES)
			out->key[i / 2] = (uint8_t)(i % 2 ? out->key[i / 2] | v : v << 4);
		else
			user = user << 4 | (uint32_t)v;
	}
	out->user = user;
	uint8_t mask[PREFIXD_HASH_BYTES];
	id_mask(user, mask);
	for (int i = 0; i < PREFIXD_HASH_BYTES; i++)
		out->key[i] ^= mask[i];
	return 0;
}

int prefixd_prompt_id(const struct prefixd_prompt *p, struct prefixd_id *out)
{
	size_t n = p->len / p->block_tokens;
	if (!n)
		return pd_fail(-EINVAL, "the prompt has no full block");
	memcpy(out->key, p->hashes + (n - 1) * PD_HASH_SIZE, PD_HASH_SIZE);
	out->user = (uint32_t)geteuid(); /* what SO_PEERCRED gives the daemon */
	return 0;
}

static struct prefixd_chain chain_of(const struct pd_chain_row *r)
{
	struct prefixd_chain ch = {
		.id = { .user = r->id.uid },
		.blocks = r->blocks,
		.tokens = r->tokens,
		.bytes = r->bytes,
		.hits = r->hits,
		.leases = r->leases,
		.idle_s = r->idle_s,
		.pinned = !!(r->flags & PD_CHAIN_PINNED),
		.pin_ttl_s = r->pin_ttl_s,
		.where = (r->flags & PD_CHAIN_MEMORY ? PREFIXD_IN_MEMORY : 0) |
			 (r->flags & PD_CHAIN_DISK ? PREFIXD_ON_DISK : 0) |
			 (r->flags & PD_CHAIN_REMOTE ? PREFIXD_REMOTE : 0),
	};
	memcpy(ch.id.key, r->id.key, PD_HASH_SIZE);
	memcpy(ch.model, r->fp, PD_FP_SIZE);
	return ch;
}

int prefixd_list(struct prefixd *c, const struct prefixd_filter *filter,
		 struct prefixd_chain **out, size_t *n)
{
	struct pd_list m = { .max_rows = PD_MAX_ROWS };
	if (filter && filter->by_user) {
		m.flags |= PD_LIST_USER;
		m.uid = filter->user;
	}
	if (filter && filter->by_model) {
		m.flags |= PD_LIST_MODEL;
		memcpy(m.fp, filter->model, PD_FP_SIZE);
	}
	struct prefixd_chain *all = NULL;
	size_t have = 0, cap = 0;
	int rc = 0;
	do {
		uint8_t body[PD_LIST_SIZE], *rb;
		uint32_t rlen = 0;
		pd_list_encode(&m, body, sizeof(body));
		if ((rc = admin_call(c, PD_OP_LIST, body, sizeof(body), &rb, &rlen)))
			break;
		struct pd_list_reply r;
		if (pd_list_reply_decode(rb, rlen, &r) || (r.next && r.next <= m.cursor)) {
			rc = undecodable(rb, "LIST");
			break;
		}
		if (have + r.nrows > cap) {
			size_t ncap = cap ? 2 * cap : 256;
			while (ncap < have + r.nrows)
				ncap *= 2;
			struct prefixd_chain *a = realloc(all, ncap * sizeof(*a));
			if (!a) {
				free(rb);
				rc = pd_fail(-ENOMEM, "out of memory");
				break;
			}
			all = a;
			cap = ncap;
		}
		for (uint32_t i = 0; i < r.nrows; i++) {
			struct pd_chain_row row = pd_chain_at(&r, i);
			all[have++] = chain_of(&row);
		}
		m.cursor = r.next;
		free(rb);
	} while (m.cursor);
	if (rc) {
		free(all);
		all = NULL;
		have = 0;
	}
	*out = all;
	*n = have;
	return rc;
}

int prefixd_evict(struct prefixd *c, const struct prefixd_evict_sel *sel,
		  struct prefixd_evicted *out)
{
	struct pd_evict m = { .by = (uint32_t)sel->by, .uid = sel->user, .idle_s = sel->idle_s };
	if (sel->by < PREFIXD_EVICT_ALL || sel->by > PREFIXD_EVICT_IDLE)
		return pd_fail(-EINVAL, "unknown eviction selector %d", (int)sel->by);
	if (sel->by == PREFIXD_EVICT_ID) {
		memcpy(m.key, sel->id.key, PD_HASH_SIZE);
		m.uid = sel->id.user;
	} else if (sel->by == PREFIXD_EVICT_MODEL) {
		memcpy(m.key, sel->model, PD_FP_SIZE);
	}
	uint8_t body[PD_EVICT_SIZE], *rb;
	uint32_t rlen = 0;
	pd_evict_encode(&m, body, sizeof(body));
	int rc = admin_call(c, PD_OP_EVICT, body, sizeof(body), &rb, &rlen);
	if (rc)
		return rc;
	struct pd_evict_reply r;
	if (pd_evict_reply_decode(rb, rlen, &r))
		return undecodable(rb, "EVICT");
	free(rb);
	*out = (struct prefixd_evicted){ r.blocks, r.bytes, r.kept_leased, r.kept_pinned,
					 r.kept_parent };
	return 0;
}

static int pin_call(struct prefixd *c, int op, const struct prefixd_id *id, uint32_t ttl_s,
		    uint64_t *pinned_bytes)
{
	struct pd_pin m = { .id.uid = id->user, .ttl_s = ttl_s };
	memcpy(m.id.key, id->key, PD_HASH_SIZE);
	uint8_t body[PD_PIN_SIZE], *rb;
	uint32_t rlen = 0;
	pd_pin_encode(&m, body, sizeof(body));
	int rc = admin_call(c, op, body, sizeof(body), &rb, &rlen);
	if (rc)
		return rc;
	struct pd_pin_reply r = { 0, 0 };
	if (op == PD_OP_PIN && pd_pin_reply_decode(rb, rlen, &r))
		return undecodable(rb, "PIN");
	if (op == PD_OP_UNPIN && rlen)
		return undecodable(rb, "UNPIN");
	free(rb);
	if (pinned_bytes)
		*pinned_bytes = r.pinned_bytes;
	return 0;
}

int prefixd_pin(struct prefixd *c, const struct prefixd_id *id, uint32_t ttl_s,
		uint64_t *pinned_bytes)
{
	return pin_call(c, PD_OP_PIN, id, ttl_s, pinned_bytes);
}

int prefixd_unpin(struct prefixd *c, const struct prefixd_id *id)
{
	return pin_call(c, PD_OP_UNPIN, id, 0, NULL);
}

int prefixd_export(struct prefixd *c, const struct prefixd_filter *filter,
		   const struct prefixd_id *id, int fd, uint64_t *blocks, uint64_t *bytes)
{
	struct pd_export m = { 0 };
	if (filter && filter->by_user) {
		m.flags |= PD_EXPORT_USER;
		m.uid = filter->user;
	}
	if (filter && filter->by_model) {
		m.flags |= PD_EXPORT_MODEL;
		memcpy(m.fp, filter->model, PD_FP_SIZE);
	}
	if (id) {
		m.flags |= PD_EXPORT_ID;
		memcpy(m.id.key, id->key, PD_HASH_SIZE);
		m.id.uid = id->user;
	}
	if (fd < 0)
		return pd_fail(-EBADF, "no file to export to");
	uint8_t body[PD_EXPORT_SIZE], *rb;
	uint32_t rlen = 0;
	pd_export_encode(&m, body, sizeof(body));
	int rc = admin_call_fd(c, PD_OP_EXPORT, body, sizeof(body), fd, &rb, &rlen);
	if (rc)
		return rc;
	struct pd_export_reply r;
	if (pd_export_reply_decode(rb, rlen, &r))
		return undecodable(rb, "EXPORT");
	free(rb);
	if (blocks)
		*blocks = r.blocks;
	if (bytes)
		*bytes = r.bytes;
	return 0;
}

int prefixd_import(struct prefixd *c, int fd, const uint32_t *user, struct prefixd_imported *out)
{
	struct pd_import m = { user ? PD_IMPORT_USER : 0, user ? *user : 0 };
	if (fd < 0)
		return pd_fail(-EBADF, "no file to import from");
	uint8_t body[PD_IMPORT_SIZE], *rb;
	uint32_t rlen = 0;
	pd_import_encode(&m, body, sizeof(body));
	int rc = admin_call_fd(c, PD_OP_IMPORT, body, sizeof(body), fd, &rb, &rlen);
	if (rc)
		return rc;
	struct pd_import_reply r;
	if (pd_import_reply_decode(rb, rlen, &r))
		return undecodable(rb, "IMPORT");
	free(rb);
	if (out)
		*out = (struct prefixd_imported){ r.blocks, r.bytes, r.dedup, r.skipped, r.refused };
	return 0;
}
