/* SPDX-License-Identifier: MIT */
/*
 * Admin requests: statistics, listing, eviction and pins. All of them are
 * for the daemon's own user and root, checked in one place (admitted()):
 * another user would see or steer blocks that are not theirs.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "peer.h"

int admin_admitted(struct conn *c, const char *what)
{
	uid_t u = c->cred.uid;
	if (u == 0 || u == c->d->admin_uid)
		return 0;
	return conn_fail(c, PD_E_DENIED, "%s: only for the daemon's user (uid %u) and root, not uid %u",
			 what, (unsigned)c->d->admin_uid, (unsigned)u) ? -1 : 1;
}

static int bad_body(struct conn *c, int rc)
{
	return conn_fail(c, rc, "%s", conn_decode_error(rc));
}

int admin_stats(struct conn *c)
{
	struct daemon *d = c->d;
	ADMIT(c, "statistics");
	if (c->h.body_len)
		return conn_fail(c, PD_E_MALFORMED, "STATS has an empty body");
	struct idx_stats s;
	uint64_t charged, arenas;
	idx_get_stats(d->idx, &s);
	partitions_usage(&d->parts, &charged, &arenas);
	uint64_t v[PD_STATS_COUNT] = {
		[PD_ST_hits] = s.hits,
		[PD_ST_misses] = s.misses,
		[PD_ST_hit_tokens] = s.hit_blocks * d->block_tokens,
		[PD_ST_blocks] = s.blocks,
		[PD_ST_bytes_used] = s.bytes,
		[PD_ST_budget] = d->parts.budget.limit,
		[PD_ST_published] = s.published,
		[PD_ST_dedup] = s.dedup,
		[PD_ST_evictions] = s.evictions,
		[PD_ST_connections] = atomic_load(&d->connections),
		[PD_ST_leases] = s.leases,
		[PD_ST_matches] = atomic_load(&d->matches),
		[PD_ST_errors] = atomic_load(&d->errors),
		[PD_ST_arenas] = arenas,
		[PD_ST_collisions] = s.collisions,
		[PD_ST_query_tokens] = s.query_blocks * d->block_tokens,
		[PD_ST_quota] = d->lim.quota,
		[PD_ST_pin_max] = d->lim.pin_max,
		[PD_ST_pinned_bytes] = s.pinned_bytes,
		[PD_ST_pins] = s.pins,
		[PD_ST_idle_bytes] = s.bytes - s.leased_bytes,
		[PD_ST_refused_blocks] = s.refused_blocks,
		[PD_ST_admin_evictions] = s.admin_evictions,
		[PD_ST_pins_expired] = s.pins_expired,
		[PD_ST_disk_blocks] = s.disk_blocks,
		[PD_ST_disk_bytes] = s.disk_bytes,
		[PD_ST_disk_budget] = d->tier ? d->lim.disk_budget : 0,
		[PD_ST_spills] = s.spills,
		[PD_ST_restores] = s.restores,
		[PD_ST_restore_bytes] = s.restore_bytes,
		[PD_ST_disk_corrupt] = s.disk_corrupt,
		[PD_ST_disk_evictions] = s.disk_evictions,
		[PD_ST_disk_pending] = s.disk_pending,
		[PD_ST_unwritten_evictions] = s.unwritten_evictions,
	};
	struct pd_usage *rows;
	uint32_t n;
	if (idx_usage(d->idx, &rows, &n))
		return conn_fail(c, PD_E_INTERNAL, "out of memory");
	size_t len = PD_STATS_REPLY_FIXED + 8 * (size_t)PD_STATS_COUNT + (size_t)n * PD_USAGE_SIZE;
	uint8_t *b = conn_reply(c, PD_OK, len);
	int rc = b && pd_stats_reply_encode(v, rows, n, b, len) == len ? 0 : -1;
	free(rows);
	return rc;
}

int admin_list(struct conn *c)
{
	ADMIT(c, "listing");
	struct pd_list m;
	int rc = pd_list_decode(c->body, c->h.body_len, &m);
	if (rc)
		return bad_body(c, rc);
	struct pd_chain_row *rows = malloc(m.max_rows * sizeof(*rows));
	if (!rows)
		return conn_fail(c, PD_E_INTERNAL, "out of memory");
	uint32_t n;
	uint64_t next;
	idx_list(c->d->idx, &m, rows, &n, &next);
	size_t len = PD_LIST_REPLY_FIXED + (size_t)n * PD_CHAIN_SIZE;
	uint8_t *b = conn_reply(c, PD_OK, len);
	rc = b && pd_list_reply_encode(next, rows, n, b, len) == len ? 0 : -1;
	free(rows);
	return rc;
}

int admin_evict(struct conn *c)
{
	ADMIT(c, "eviction");
	struct pd_evict m;
	int rc = pd_evict_decode(c->body, c->h.body_len, &m);
	if (rc)
		return bad_body(c, rc);
	struct pd_evict_reply r;
	if (idx_evict(c->d->idx, &m, &r))
		return conn_fail(c, PD_E_NOTFOUND, "no chain with that id is cached");
	pd_log("uid %u evicted %llu blocks (%llu bytes); kept %llu leased, %llu pinned, %llu parents",
	       (unsigned)c->cred.uid, (unsigned long long)r.blocks, (unsigned long long)r.bytes,
	       (unsigned long long)r.kept_leased, (unsigned long long)r.kept_pinned,
	       (unsigned long long)r.kept_parent);
	uint8_t *b = conn_reply(c, PD_OK, PD_EVICT_REPLY_SIZE);
	return b && pd_evict_reply_encode(&r, b, PD_EVICT_REPLY_SIZE) == PD_EVICT_REPLY_SIZE ? 0 : -1;
}

int admin_pin(struct conn *c)
{
	ADMIT(c, "pins");
	struct pd_pin m;
	int rc = pd_pin_decode(c->body, c->h.body_len, &m);
	if (rc)
		return bad_body(c, rc);
	struct pd_pin_reply r = { 0, c->d->lim.pin_max };
	rc = idx_pin(c->d->idx, &m.id, m.ttl_s, &r.pinned_bytes);
	if (rc == -ENOENT)
		return conn_fail(c, PD_E_NOTFOUND, "no chain with that id is cached");
	if (rc == -E2BIG)
		return conn_fail(c, PD_E_LIMIT, "pins would hold %llu bytes, past the daemon's --pin-max of %llu bytes: unpin something or start prefixd with a larger --pin-max",
				 (unsigned long long)r.pinned_bytes, (unsigned long long)r.pin_max);
	if (rc)
		return conn_fail(c, PD_E_INTERNAL, "out of memory");
	uint8_t *b = conn_reply(c, PD_OK, PD_PIN_REPLY_SIZE);
	return b && pd_pin_reply_encode(&r, b, PD_PIN_REPLY_SIZE) == PD_PIN_REPLY_SIZE ? 0 : -1;
}

int admin_unpin(struct conn *c)
{
	ADMIT(c, "pins");
	struct pd_pin m;
	int rc = pd_pin_decode(c->body, c->h.body_len, &m);
	if (rc || m.ttl_s)
		return bad_body(c, rc ? rc : PD_E_MALFORMED);
	if (idx_unpin(c->d->idx, &m.id))
		return conn_fail(c, PD_E_NOTFOUND, "no pinned chain with that id");
	return conn_reply(c, PD_OK, 0) ? 0 : -1;
}
