/* SPDX-License-Identifier: MIT */
/*
 * Redis Cluster's protocol, over plain hiredis contexts (hiredis 0.14 has
 * no cluster support, and hiredis-cluster is not in Debian 12):
 *
 * - A key lives in slot CRC16(key or its {hash tag}) % 16384 (crc16.c);
 *   each slot is served by one master. The map comes from CLUSTER SLOTS,
 *   asked of any node that answers; it is fetched when the client first
 *   needs it, after a MOVED (once per call), and after a node failed (no
 *   more than once a second: a dead master would otherwise cost a fetch on
 *   every call while the daemon keeps asking).
 * - MOVED slot host:port: the slot has a new owner for good: the slot is
 *   pointed there, the key retried there, and the whole map fetched again,
 *   since a reshard moves ranges, not single slots.
 * - ASK slot host:port: the slot is being migrated and this key has gone
 *   already: ASKING then the command on that node, for this key only; the
 *   map does not change until the migration ends (then MOVED says so).
 * - TRYAGAIN (a multi-key command mid-migration) and CLUSTERDOWN are
 *   errors for the key: the daemon computes instead, which is what a miss
 *   costs anyway, rather than waiting on the cluster.
 * Redirects are bounded per call (kv.c), so a map that flaps costs errors,
 * never a loop.
 */
#include "kv_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REFRESH_GAP_NS 1000000000u

/* "HOST:PORT" (HOST may hold ':' for IPv6: the port is after the last). */
static int parse_addr(const char *s, size_t len, struct kv_endpoint *e)
{
	memset(e, 0, sizeof(*e));
	const char *colon = NULL;
	for (size_t i = 0; i < len; i++)
		if (s[i] == ':')
			colon = s + i;
	if (!colon || colon == s || (size_t)(colon - s) >= sizeof(e->host))
		return -EPROTO;
	size_t hl = (size_t)(colon - s);
	if (s[0] == '[' && hl >= 2 && s[hl - 1] == ']') /* [::1]:port */
		memcpy(e->host, s + 1, hl -= 2);
	else
		memcpy(e->host, s, hl);
	e->host[hl] = 0;
	long port = 0;
	const char *p = colon + 1, *end = s + len;
	if (p == end)
		return -EPROTO;
	for (; p < end && *p >= '0' && *p <= '9' && port <= 65535; p++)
		port = port * 10 + (*p - '0');
	if (p != end || port < 1 || port > 65535)
		return -EPROTO;
	e->port = (int)port;
	return 0;
}

int kv_cluster_redirect(struct kv *k, const char *msg, size_t len, unsigned *slot,
			int32_t *node)
{
	int kind;
	const char *p;
	if (len > 6 && !memcmp(msg, "MOVED ", 6))
		kind = 1, p = msg + 6;
	else if (len > 4 && !memcmp(msg, "ASK ", 4))
		kind = 2, p = msg + 4;
	else
		return 0;
	const char *end = msg + len;
	unsigned s = 0;
	const char *d = p;
	for (; p < end && *p >= '0' && *p <= '9' && s < KV_SLOTS; p++)
		s = s * 10 + (unsigned)(*p - '0');
	if (p == d || p == end || *p != ' ' || s >= KV_SLOTS)
		return -EPROTO;
	struct kv_endpoint e;
	if (parse_addr(p + 1, (size_t)(end - p - 1), &e))
		return -EPROTO;
	int i = kv_node_get(k, &e);
	if (i < 0)
		return i;
	*slot = s;
	*node = i;
	return kind;
}

static bool is_int(const redisReply *r, long long lo, long long hi)
{
	return r->type == REDIS_REPLY_INTEGER && r->integer >= lo && r->integer <= hi;
}

/* CLUSTER SLOTS's reply into map (node indices): 0 or -EPROTO. Each entry
 * is [first, last, [host, port, id...], replicas...]; a host that is empty
 * or "?" is the node asked (a node that does not know its own address). */
static int parse_slots(struct kv *k, uint32_t asked, const redisReply *r, int32_t *map)
{
	if (r->type != REDIS_REPLY_ARRAY)
		return -EPROTO;
	for (unsigned s = 0; s < KV_SLOTS; s++)
		map[s] = -1;
	for (size_t i = 0; i < r->elements; i++) {
		const redisReply *e = r->element[i];
		if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
		    !is_int(e->element[0], 0, KV_SLOTS - 1) ||
		    !is_int(e->element[1], e->element[0]->integer, KV_SLOTS - 1))
			return -EPROTO;
		const redisReply *m = e->element[2];
		if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
		    m->element[0]->type != REDIS_REPLY_STRING || !is_int(m->element[1], 1, 65535) ||
		    m->element[0]->len >= KV_HOST_MAX)
			return -EPROTO;
		struct kv_endpoint ep = { .port = (int)m->element[1]->integer };
		const redisReply *h = m->element[0];
		if (h->len == 0 || (h->len == 1 && h->str[0] == '?')) {
			if (k->nodes[asked].ep.is_unix)
				continue; /* its TCP address is unknown: MOVED will say */
			strcpy(ep.host, k->nodes[asked].ep.host);
		} else {
			memcpy(ep.host, h->str, h->len);
			ep.host[h->len] = 0;
		}
		int node = kv_node_get(k, &ep);
		if (node < 0)
			return node;
		for (long long s = e->element[0]->integer; s <= e->element[1]->integer; s++)
			map[s] = node;
	}
	return 0;
}

/* Drops the nodes (not seeds) that the new map does not name. */
static void prune(struct kv *k, int32_t *map)
{
	int32_t *to = calloc(k->n_nodes, sizeof(*to));
	if (!to)
		return; /* kept: harmless */
	for (uint32_t i = 0; i < k->n_seeds; i++)
		to[i] = 1;
	for (unsigned s = 0; s < KV_SLOTS; s++)
		if (map[s] >= 0)
			to[map[s]] = 1;
	uint32_t n = 0;
	for (uint32_t i = 0; i < k->n_nodes; i++) {
		if (!to[i]) {
			kv_node_free(&k->nodes[i]);
			to[i] = -1;
			continue;
		}
		k->nodes[n] = k->nodes[i];
		to[i] = (int32_t)n++;
	}
	k->n_nodes = n;
	for (unsigned s = 0; s < KV_SLOTS; s++)
		if (map[s] >= 0)
			map[s] = to[map[s]];
	free(to);
}

static int ask_slots(struct kv *k, uint32_t i, uint64_t deadline, int32_t *map)
{
	int rc = kv_node_connect(k, i, deadline);
	if (rc)
		return rc;
	kv_node_deadline(k, i, deadline);
	redisReply *r = redisCommand(k->nodes[i].c, "CLUSTER SLOTS");
	if (!r)
		return kv_node_fail(k, i, errno);
	rc = parse_slots(k, i, r, map);
	if (rc == -EPROTO)
		rc = kv_reply_errno(k, i, r->type == REDIS_REPLY_ERROR ? r->str : NULL, r->len);
	freeReplyObject(r);
	return rc;
}

int kv_cluster_refresh(struct kv *k, bool prune_nodes)
{
	uint64_t now = kv_now_ns(), deadline = now + (uint64_t)k->timeout_ms * 1000000u;
	int32_t *map = malloc(KV_SLOTS * sizeof(*map));
	if (!map)
		return -ENOMEM;
	k->st.map_refreshes++;
	k->next_refresh_ns = now + REFRESH_GAP_NS;
	int rc = -ECONNREFUSED;
	bool tried[KV_NODES_MAX] = { false };
	/* Connected nodes first (no connect to pay), then the others (nodes
	 * can be added while asking: n_nodes is read each time). */
	for (int pass = 0; pass < 2 && rc; pass++)
		for (uint32_t i = 0; i < k->n_nodes && rc; i++) {
			if (tried[i] || (k->nodes[i].c != NULL) != (pass == 0))
				continue;
			tried[i] = true;
			rc = ask_slots(k, i, deadline, map);
			if (rc && kv_now_ns() >= deadline)
				goto out;
		}
	if (!rc) {
		if (prune_nodes)
			prune(k, map);
		memcpy(k->slots, map, KV_SLOTS * sizeof(*map));
		k->map_loaded = true;
		k->map_stale = false;
	}
out:
	free(map);
	return rc;
}
