/* SPDX-License-Identifier: MIT */
/*
 * Admin requests: statistics, listing, eviction and pins. The daemon's own
 * user and root see and steer every chain; any other user only their own
 * (and, as its publisher, the shared namespace's), and sees the shared
 * namespace's chains when they may attach them. Who may do what is said
 * here, in one place: a user must never see or steer blocks that are not
 * theirs.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "peer.h"
#include "remote.h"

static bool is_admin(const struct conn *c)
{
	return c->cred.uid == 0 || c->cred.uid == c->d->admin_uid;
}

enum shared_role conn_shared_role(struct conn *c)
{
	if (c->shared_role == SHARED_UNKNOWN)
		c->shared_role = (int)shared_role_of(&c->d->shared, c->fd, &c->cred);
	return (enum shared_role)c->shared_role;
}

/* Whether the peer may list namespace ns's chains and their counters. */
static bool may_see(struct conn *c, uint32_t ns)
{
	return is_admin(c) || ns == c->cred.uid ||
	       (ns == PD_NS_SHARED && conn_shared_role(c) != SHARED_NONE);
}

/* Whether the peer may evict or pin namespace ns's chains. */
static bool may_steer(struct conn *c, uint32_t ns)
{
	return is_admin(c) || ns == c->cred.uid ||
	       (ns == PD_NS_SHARED && conn_shared_role(c) == SHARED_PUBLISHER);
}

/* The namespaces a peer that is not an admin sees. */
static struct idx_view view_of(struct conn *c)
{
	struct idx_view v = { { c->cred.uid, PD_NS_SHARED }, 1 };
	if (conn_shared_role(c) != SHARED_NONE)
		v.n = 2;
	return v;
}

static int not_theirs(struct conn *c, const char *what, uint32_t ns)
{
	if (ns == PD_NS_SHARED)
		return conn_fail(c, PD_E_DENIED, "%s: uid %u may not act on the shared namespace's chains: its group's members list them, and only its publishers, root and the daemon's user (uid %u) evict and pin them",
				 what, (unsigned)c->cred.uid, (unsigned)c->d->admin_uid);
	return conn_fail(c, PD_E_DENIED, "%s: uid %u may act on its own chains only, not uid %u's (root and the daemon's user, uid %u, act on everyone's)",
			 what, (unsigned)c->cred.uid, (unsigned)ns, (unsigned)c->d->admin_uid);
}

int admin_admitted(struct conn *c, const char *what)
{
	uid_t u = c->cred.uid;
	if (is_admin(c))
		return 0;
	return conn_fail(c, PD_E_DENIED, "%s: only for the daemon's user (uid %u) and root, not uid %u",
			 what, (unsigned)c->d->admin_uid, (unsigned)u) ? -1 : 1;
}

static int bad_body(struct conn *c, int rc)
{
	return conn_fail(c, rc, "%s", conn_decode_error(rc));
}

/* What a user who is not an admin sees of STATS: the usage rows they may
 * see, and counters that are the sums of their own rows, with the limits
 * every HELLO announces anyway; the daemon-wide rest reads 0. */
static void own_stats(struct conn *c, uint64_t *v, const struct pd_usage *rows, uint32_t n)
{
	uint64_t keep[] = { v[PD_ST_budget], v[PD_ST_quota], v[PD_ST_pin_max], v[PD_ST_disk_budget] };
	memset(v, 0, PD_STATS_COUNT * sizeof(*v));
	v[PD_ST_budget] = keep[0];
	v[PD_ST_quota] = keep[1];
	v[PD_ST_pin_max] = keep[2];
	v[PD_ST_disk_budget] = keep[3];
	for (uint32_t i = 0; i < n; i++) {
		if (rows[i].uid == c->cred.uid) {
			v[PD_ST_blocks] += rows[i].blocks;
			v[PD_ST_bytes_used] += rows[i].bytes;
			v[PD_ST_pinned_bytes] += rows[i].pinned_bytes;
			v[PD_ST_hits] += rows[i].hits;
			v[PD_ST_hit_tokens] += rows[i].hit_tokens;
			v[PD_ST_query_tokens] += rows[i].query_tokens;
			v[PD_ST_evictions] += rows[i].evictions;
		}
	}
}

int admin_stats(struct conn *c)
{
	struct daemon *d = c->d;
	if (c->h.body_len)
		return conn_fail(c, PD_E_MALFORMED, "STATS has an empty body");
	struct idx_stats s;
	struct flight_stats fs;
	uint64_t charged, arenas;
	idx_get_stats(d->idx, &s);
	flight_get_stats(d->flight, &fs);
	struct remote_stats rs;
	remote_get_stats(d->remote, &rs);
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
		[PD_ST_claims] = fs.claims,
		[PD_ST_waits] = fs.waits,
		[PD_ST_wait_ms] = fs.wait_ms,
		[PD_ST_claims_inherited] = fs.inherited,
		[PD_ST_claims_expired] = fs.expired,
		[PD_ST_remote_hits] = rs.hits,
		[PD_ST_remote_misses] = rs.misses,
		[PD_ST_remote_bytes_in] = rs.bytes_in,
		[PD_ST_remote_bytes_out] = rs.bytes_out,
		[PD_ST_remote_writes] = rs.writes,
		[PD_ST_remote_write_drops] = rs.write_drops,
		[PD_ST_remote_errors] = rs.errors,
		[PD_ST_remote_bad_checksum] = rs.bad_checksum,
		[PD_ST_remote_bad_foreign] = rs.bad_foreign,
		[PD_ST_remote_bad_mac] = rs.bad_mac,
		[PD_ST_remote_breaker_opens] = rs.breaker_opens,
		[PD_ST_remote_skipped] = rs.skipped,
		[PD_ST_remote_us] = rs.fetch_us,
		[PD_ST_remote_index_skips] = rs.index_skips,
		[PD_ST_remote_index_live] = rs.index_live,
		[PD_ST_remote_index_keys] = rs.index_keys,
	};
	struct pd_usage *rows;
	uint32_t n;
	struct idx_view view = view_of(c);
	if (idx_usage_in(d->idx, is_admin(c) ? NULL : &view, &rows, &n))
		return conn_fail(c, PD_E_INTERNAL, "out of memory");
	if (!is_admin(c))
		own_stats(c, v, rows, n);
	size_t len = PD_STATS_REPLY_FIXED + 8 * (size_t)PD_STATS_COUNT + (size_t)n * PD_USAGE_SIZE;
	uint8_t *b = conn_reply(c, PD_OK, len);
	int rc = b && pd_stats_reply_encode(v, rows, n, b, len) == len ? 0 : -1;
	free(rows);
	return rc;
}

int admin_list(struct conn *c)
{
	struct pd_list m;
	int rc = pd_list_decode(c->body, c->h.body_len, &m);
	if (rc)
		return bad_body(c, rc);
	if ((m.flags & PD_LIST_USER) && !may_see(c, m.uid))
		return not_theirs(c, "listing", m.uid);
	struct pd_chain_row *rows = malloc(m.max_rows * sizeof(*rows));
	if (!rows)
		return conn_fail(c, PD_E_INTERNAL, "out of memory");
	uint32_t n;
	uint64_t next;
	/* Others' chains are skipped by the index, not filtered from a
	 * page: pages that ended at them would count them. */
	struct idx_view view = view_of(c);
	idx_list_in(c->d->idx, &m, is_admin(c) ? NULL : &view, rows, &n, &next);
	size_t len = PD_LIST_REPLY_FIXED + (size_t)n * PD_CHAIN_SIZE;
	uint8_t *b = conn_reply(c, PD_OK, len);
	rc = b && pd_list_reply_encode(next, rows, n, b, len) == len ? 0 : -1;
	free(rows);
	return rc;
}

int admin_evict(struct conn *c)
{
	struct pd_evict m;
	int rc = pd_evict_decode(c->body, c->h.body_len, &m);
	if (rc)
		return bad_body(c, rc);
	/* A user's ALL, MODEL and IDLE are of their own blocks; USER and ID
	 * name a namespace, which must be one they may steer. */
	uint32_t ns = c->cred.uid;
	if (m.by == PD_EVICT_USER || m.by == PD_EVICT_ID) {
		if (!may_steer(c, m.uid))
			return not_theirs(c, "eviction", m.uid);
		ns = m.uid;
	}
	struct pd_evict_reply r;
	if (idx_evict_ns(c->d->idx, &m, is_admin(c) ? NULL : &ns, &r))
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
	struct pd_pin m;
	int rc = pd_pin_decode(c->body, c->h.body_len, &m);
	if (rc)
		return bad_body(c, rc);
	if (!may_steer(c, m.id.uid))
		return not_theirs(c, "pins", m.id.uid);
	struct pd_pin_reply r = { 0, c->d->lim.pin_max };
	/* A user's pins hold at most their quota (pinned blocks count
	 * against it, and could not be evicted to make room for their own). */
	uint64_t ns_max = is_admin(c) ? UINT64_MAX : c->d->lim.quota;
	rc = idx_pin_ns(c->d->idx, &m.id, m.ttl_s, ns_max, &r.pinned_bytes);
	if (rc == -ENOENT)
		return conn_fail(c, PD_E_NOTFOUND, "no chain with that id is cached");
	/* Every user's pins count against --pin-max, but a user is told only
	 * what their own hold. */
	if (rc == -E2BIG && is_admin(c))
		return conn_fail(c, PD_E_LIMIT, "pins would hold %llu bytes, past the daemon's --pin-max of %llu bytes: unpin something or start prefixd with a larger --pin-max",
				 (unsigned long long)r.pinned_bytes, (unsigned long long)r.pin_max);
	if (rc == -E2BIG)
		return conn_fail(c, PD_E_LIMIT, "the pins of every user would pass the daemon's --pin-max of %llu bytes: unpin something, or ask for a larger --pin-max",
				 (unsigned long long)r.pin_max);
	if (rc == -EDQUOT)
		return conn_fail(c, PD_E_LIMIT, "the pins of %s %u would hold %llu bytes, past its quota of %llu bytes (prefixd --quota): unpin something first",
				 m.id.uid == PD_NS_SHARED ? "the shared namespace, uid" : "uid",
				 (unsigned)m.id.uid, (unsigned long long)r.pinned_bytes,
				 (unsigned long long)c->d->lim.quota);
	if (rc)
		return conn_fail(c, PD_E_INTERNAL, "out of memory");
	uint8_t *b = conn_reply(c, PD_OK, PD_PIN_REPLY_SIZE);
	return b && pd_pin_reply_encode(&r, b, PD_PIN_REPLY_SIZE) == PD_PIN_REPLY_SIZE ? 0 : -1;
}

int admin_unpin(struct conn *c)
{
	struct pd_pin m;
	int rc = pd_pin_decode(c->body, c->h.body_len, &m);
	if (rc || m.ttl_s)
		return bad_body(c, rc ? rc : PD_E_MALFORMED);
	if (!may_steer(c, m.id.uid))
		return not_theirs(c, "pins", m.id.uid);
	if (idx_unpin(c->d->idx, &m.id))
		return conn_fail(c, PD_E_NOTFOUND, "no pinned chain with that id");
	return conn_reply(c, PD_OK, 0) ? 0 : -1;
}
