/* SPDX-License-Identifier: MIT */
/*
 * The requests of a client: HELLO introduces its layout, MATCH leases the
 * cached run of a prompt, RELEASE ends a lease, PUBLISH stores blocks. A
 * connection's leases live here too.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chain.h"
#include "peer.h"
#include "remote.h"
#include "tier.h"

/* Leases one connection may hold at once: each pins blocks and costs the
 * index memory, so an endless MATCH loop must not. */
#define MAX_LEASES 1024

/* Ends what HELLO set up; the connection may HELLO again. */
static void hello_undo(struct conn *c)
{
	idx_group_put(c->d->idx, c->group);
	partitions_put(&c->d->parts, c->part);
	c->group = NULL;
	c->part = NULL;
}

/* Joins the shared namespace's arenas and chain root. A publisher makes
 * them on first use; a member only finds them, so that no member can take
 * the namespace's block sizes (one whose size has none yet joins at a
 * later MATCH). 0; -ENOENT (none yet), -EILSEQ (blocks of another size
 * under this root), or partitions_get's error. */
static int shared_join_as(struct conn *c, bool make)
{
	struct daemon *d = c->d;
	struct partition *p;
	uint64_t bb = c->part->block_bytes;
	int rc = make ? partitions_get(&d->parts, PD_NS_SHARED, bb, &p)
		      : partitions_find(&d->parts, PD_NS_SHARED, bb, &p);
	if (rc)
		return rc;
	struct idx_root root = { .ns = PD_NS_SHARED };
	memcpy(root.h0, c->h0, PD_HASH_SIZE);
	struct idx_store ops;
	partition_ops(p, d->block_tokens, &ops);
	if (idx_group_get(d->idx, &root, c->shared_fp, &ops, &c->shared_group)) {
		partitions_put(&d->parts, p);
		return -ENOMEM;
	}
	if (!idx_group_has_store(c->shared_group, p->store)) {
		idx_group_put(d->idx, c->shared_group);
		c->shared_group = NULL;
		partitions_put(&d->parts, p);
		return -EILSEQ;
	}
	c->shared_part = p;
	return 0;
}

static int shared_join(struct conn *c)
{
	return shared_join_as(c, conn_shared_role(c) == SHARED_PUBLISHER);
}

static void shared_leave(struct conn *c)
{
	idx_group_put(c->d->idx, c->shared_group);
	partitions_put(&c->d->parts, c->shared_part);
	c->shared_group = NULL;
	c->shared_part = NULL;
}

/* The shared namespace for a HELLO that asks for it, after the
 * connection's own (set up). 0; or the refusal queued (1, or -1 to close),
 * and the own group undone. */
static int attach_shared(struct conn *c, const struct pd_hello *m)
{
	struct daemon *d = c->d;
	int rc;
	if (!d->shared.on)
		rc = conn_fail(c, PD_E_DENIED, "this prefixd has no shared namespace (start it with --shared-group)");
	else if (conn_shared_role(c) == SHARED_NONE)
		rc = conn_fail(c, PD_E_DENIED, "uid %u is neither a member of the shared namespace's group (gid %u) nor one of its publishers",
			       (unsigned)c->cred.uid, (unsigned)d->shared.gid);
	else {
		memcpy(c->shared_fp, m->fingerprint, PD_FP_SIZE);
		int e = shared_join(c);
		if (!e || e == -ENOENT) {
			c->shared_wanted = true;
			return 0;
		}
		rc = e == -EILSEQ ? conn_fail(c, PD_E_LAYOUT, "the shared blocks of this model and layout are of another size (an imported file claimed them): evict them first")
		     : e == -EMFILE ? conn_fail(c, PD_E_LIMIT, "the shared namespace: this daemon serves too many (user, block size) pairs")
		     : e == -EUSERS ? conn_fail(c, PD_E_LIMIT, "the shared namespace: it has too many block sizes in use")
				    : conn_fail(c, PD_E_INTERNAL, "the shared namespace: out of memory");
	}
	hello_undo(c);
	return rc ? -1 : 1;
}

int req_hello(struct conn *c)
{
	struct daemon *d = c->d;
	if (c->group)
		return conn_fail(c, PD_E_STATE, "HELLO was already sent on this connection");
	struct pd_hello m;
	int rc = pd_hello_decode(c->body, c->h.body_len, &m);
	if (rc)
		return conn_fail(c, rc, "%s", conn_decode_error(rc));
	if (m.version_min > PD_VERSION || m.version_max < PD_VERSION)
		return conn_fail(c, PD_E_VERSION, "this daemon speaks protocol version %d; the client offers %u to %u",
			    PD_VERSION, m.version_min, m.version_max);
	unsigned elem = pd_layout_elem_bytes(m.layout);
	if (!elem)
		return conn_fail(c, PD_E_LAYOUT, "KV layout %u is not supported ([layer][k|v][kv_head][token][head_dim] of 1: f32, 2: f16, 3: bf16)",
			    m.layout);
	if (m.block_tokens != d->block_tokens)
		return conn_fail(c, PD_E_LAYOUT, "this daemon stores blocks of %u tokens, the client's are %u tokens: start prefixd with --block-tokens %u or the client with %u-token blocks",
			    d->block_tokens, m.block_tokens, m.block_tokens, d->block_tokens);
	if (m.block_bytes % ((uint64_t)m.block_tokens * elem))
		return conn_fail(c, PD_E_LAYOUT, "a block of %llu bytes is not a whole number of %s values per token",
			    (unsigned long long)m.block_bytes, elem == 4 ? "f32" : "16-bit");
	/* A block holds whole pages of the quota, as the store charges it. */
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t slot = (m.block_bytes + page - 1) / page * page;
	if (slot > d->lim.quota && d->lim.quota < d->lim.budget)
		return conn_fail(c, PD_E_NOSPACE, "one block (%llu bytes, %llu in whole pages) is larger than a user's quota (%llu bytes)",
				 (unsigned long long)m.block_bytes, (unsigned long long)slot,
				 (unsigned long long)d->lim.quota);
	struct partition *p;
	if ((rc = partitions_get(&d->parts, c->cred.uid, m.block_bytes, &p)))
		return rc == -ENOSPC ? conn_fail(c, PD_E_NOSPACE, "one block (%llu bytes) is larger than the memory budget (%llu bytes)",
						 (unsigned long long)m.block_bytes,
						 (unsigned long long)d->parts.budget.limit)
		       : rc == -EMFILE ? conn_fail(c, PD_E_LIMIT, "this daemon already serves %d (user, block size) pairs: try again when some are unused",
						   PARTITIONS_MAX)
		       : rc == -EUSERS ? conn_fail(c, PD_E_LIMIT, "this user already has %d block sizes in use, the most one user may: close the connections or evict the blocks of another",
						   PARTITIONS_PER_USER)
				       : conn_fail(c, PD_E_INTERNAL, "out of memory");
	/* The namespace comes from the peer's credentials, never the client. */
	struct idx_root root = { .ns = c->cred.uid };
	pd_chain_root(&m, root.h0);
	struct idx_store ops;
	partition_ops(p, d->block_tokens, &ops);
	if (idx_group_get(d->idx, &root, m.fingerprint, &ops, &c->group)) {
		partitions_put(&d->parts, p);
		return conn_fail(c, PD_E_INTERNAL, "out of memory");
	}
	if (!idx_group_has_store(c->group, p->store)) {
		/* Only a forged import can file blocks of another size under a
		 * root that commits to this one: never mix them. */
		idx_group_put(d->idx, c->group);
		c->group = NULL;
		partitions_put(&d->parts, p);
		return conn_fail(c, PD_E_LAYOUT, "the cached blocks of this model and layout are of another size (an imported file claimed them): evict them first");
	}
	c->part = p;
	memcpy(c->h0, root.h0, PD_HASH_SIZE);
	memcpy(c->fp, m.fingerprint, PD_FP_SIZE);
	if ((c->h.flags & PD_FLAG_SHARED) && (rc = attach_shared(c, &m)))
		return rc < 0 ? -1 : 0;
	struct pd_hello_reply r = { PD_VERSION, PD_MAX_HASHES, d->parts.budget.limit, d->lim.quota,
				    d->lim.pin_max };
	uint8_t *b = conn_reply(c, PD_OK, PD_HELLO_REPLY_SIZE);
	return b && pd_hello_reply_encode(&r, b, PD_HELLO_REPLY_SIZE) == PD_HELLO_REPLY_SIZE ? 0 : -1;
}

/* Tokens of a MATCH or PUBLISH body in host order: in place on a
 * little-endian host (the body is malloc'd and they start at a multiple of
 * 4), else in a copy left in *owned to free. NULL when out of memory. */
static const uint32_t *tokens_of(const uint8_t *le, uint32_t count, uint32_t block_tokens,
				 uint32_t **owned)
{
	*owned = NULL;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	(void)count;
	(void)block_tokens;
	return (const uint32_t *)(const void *)le;
#else
	size_t n = (size_t)count * block_tokens;
	uint32_t *t = *owned = malloc(n * sizeof(*t) + 1);
	for (size_t i = 0; t && i < n; i++)
		t[i] = pd_token_at(le, block_tokens, (uint32_t)(i / block_tokens),
				   (uint32_t)(i % block_tokens));
	return t;
#endif
}

static bool was_sent(const struct conn *c, uint32_t arena)
{
	return arena / 8 < c->sent_bytes && (c->sent[arena / 8] >> arena % 8 & 1);
}

static int mark_sent(struct conn *c, uint32_t arena)
{
	if (arena / 8 >= c->sent_bytes) {
		size_t n = arena / 8 + 64;
		uint8_t *s = realloc(c->sent, n);
		if (!s)
			return -1;
		memset(s + c->sent_bytes, 0, n - c->sent_bytes);
		c->sent = s;
		c->sent_bytes = n;
	}
	c->sent[arena / 8] |= (uint8_t)(1u << arena % 8);
	return 0;
}

/* Arenas among locs[0 .. *hit) this connection has not received, at most
 * PD_MAX_FDS of them; *hit is cut to the blocks they cover. */
static uint32_t new_arenas(const struct conn *c, const struct idx_loc *locs, uint32_t *hit,
			   uint32_t ids[PD_MAX_FDS])
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < *hit; i++) {
		uint32_t a = locs[i].arena;
		bool listed = was_sent(c, a);
		for (uint32_t j = 0; j < n && !listed; j++)
			listed = ids[j] == a;
		if (listed)
			continue;
		if (n == PD_MAX_FDS) {
			*hit = i;
			break;
		}
		ids[n++] = a;
	}
	return n;
}

static int add_lease(struct conn *c, uint64_t id, const uint8_t *last, bool shared)
{
	if (c->nleases == c->cap_leases) {
		size_t cap = c->cap_leases ? 2 * c->cap_leases : 8;
		struct held_lease *l = realloc(c->leases, cap * sizeof(*l));
		if (!l)
			return -1;
		c->leases = l;
		c->cap_leases = cap;
	}
	c->leases[c->nleases].id = id;
	memcpy(c->leases[c->nleases].last, last, PD_HASH_SIZE);
	c->leases[c->nleases].shared = shared;
	c->nleases++;
	return 0;
}

static struct held_lease *find_lease(struct conn *c, uint64_t id)
{
	for (size_t i = 0; i < c->nleases; i++)
		if (c->leases[i].id == id)
			return &c->leases[i];
	return NULL;
}

/* A namespace a MATCH looks in: the connection's own or the shared one. */
struct ns_view {
	struct idx_group *g;
	struct store *store;
	uint32_t arena_base;      /* of its arena ids on the wire */
	bool shared;
};

static int match_reply(struct conn *c, const struct ns_view *v, uint64_t lease, uint32_t hit,
		       const struct idx_loc *locs, const bool *from_disk, uint32_t nnew,
		       const uint32_t *ids, const struct pd_flight_reply *fr)
{
	struct pd_place places[PD_MAX_HASHES];
	struct pd_arena_desc arenas[PD_MAX_FDS];
	struct store *s = v->store;
	for (uint32_t i = 0; i < hit; i++)
		places[i] = (struct pd_place){ locs[i].arena,
					       from_disk && from_disk[i] ? PD_PLACE_FROM_DISK : 0,
					       locs[i].offset };
	for (uint32_t i = 0; i < nnew; i++) {
		struct shm_arena *a = store_arena(s, ids[i] - v->arena_base);
		int fd = shm_arena_ro_fd(a);
		if (fd < 0) {
			conn_close_fds(c->out_fds, &c->out_nfds);
			if (hit) { /* the lease just taken, last in the list */
				idx_release(c->d->idx, lease);
				c->nleases--;
			}
			return conn_fail(c, PD_E_INTERNAL, "cannot open arena %u read-only: %s", ids[i],
				    strerror(-fd));
		}
		c->out_fds[c->out_nfds++] = fd;
		arenas[i] = (struct pd_arena_desc){ ids[i], shm_arena_size(a) };
	}
	size_t n = pd_match_reply_size(hit, nnew);
	uint8_t *b = conn_reply(c, PD_OK, n + (fr ? PD_FLIGHT_REPLY_SIZE : 0));
	if (!b || pd_match_reply_encode(lease, hit, places, nnew, arenas, b, n) != n ||
	    (fr && pd_flight_reply_encode(fr, b + n, PD_FLIGHT_REPLY_SIZE) != PD_FLIGHT_REPLY_SIZE))
		return -1;
	for (uint32_t i = 0; i < nnew; i++)
		if (mark_sent(c, ids[i]))
			return -1;
	return 0;
}

/* Reads the blocks idx_match found only on disk and confirms the hit;
 * from_disk[i] is set for each block i that came back. */
static void restore(struct conn *c, struct idx_block *fetch, uint32_t nfetch, uint64_t *lease,
		    uint32_t *hit, bool *from_disk)
{
	int ok[PD_MAX_HASHES];
	tier_restore(c->d->tier, fetch, nfetch, ok);
	idx_restored(c->d->idx, lease, hit, fetch, nfetch, ok);
	for (uint32_t i = 0; i < nfetch && !ok[i]; i++)
		if (fetch[i].pos < *hit)
			from_disk[fetch[i].pos] = true;
}

/* The remote tier for the blocks of v that follow the hit: how many it
 * imported into memory (a MATCH that runs again finds them there). */
static uint32_t ask_remote(struct conn *c, const struct ns_view *v, const struct pd_match *m,
			   const uint32_t *tokens, uint32_t hit, uint32_t count)
{
	struct daemon *d = c->d;
	uint32_t ns = v->shared ? PD_NS_SHARED : c->cred.uid;
	if (!remote_wants(d->remote, ns) || hit >= count)
		return 0;
	struct partition *p = v->shared ? c->shared_part : c->part;
	struct remote_ask a = { d->idx, v->g, v->store, p->block_bytes, ns, c->h0, c->fp,
				m->hashes, tokens, hit, count };
	return remote_fetch(d->remote, &a);
}

/* The longest run of m's blocks in one namespace, cut to the arenas one
 * reply can carry: *lease and *hit, locs with wire arena ids, the new
 * arenas in ids. 0 or -ENOMEM. */
static int match_in(struct conn *c, const struct ns_view *v, const struct pd_match *m,
		    const uint32_t *tokens, uint64_t *lease, uint32_t *hit, struct idx_loc *locs,
		    bool *from_disk, uint32_t ids[PD_MAX_FDS], uint32_t *nnew)
{
	/* Only with a tier; without memory for it, blocks on disk miss. */
	struct idx_block *fetch = c->d->tier ? malloc(m->count * sizeof(*fetch)) : NULL;
	uint32_t count = m->count, nfetch = 0;
	bool asked = false;
	int rc = 0;
	*lease = 0;
	*hit = 0;
	*nnew = 0;
	/* More new arenas than one reply carries: lease a shorter run (what
	 * was restored stays in memory, and is found there). */
	while (!rc && count) {
		if ((rc = idx_match(c->d->idx, v->g, m->hashes, tokens, count, lease, locs, hit,
				    fetch, &nfetch)))
			break;
		if (nfetch)
			restore(c, fetch, nfetch, lease, hit, from_disk);
		/* Past memory and disk, once: what the remote has is imported,
		 * and the run made again finds it in memory. */
		if (!asked && *hit < count) {
			asked = true;
			if (ask_remote(c, v, m, tokens, *hit, count)) {
				if (*lease)
					idx_release(c->d->idx, *lease);
				idx_uncount_match(c->d->idx, v->g, count, *hit);
				*lease = 0;
				*hit = 0;
				continue;
			}
		}
		for (uint32_t i = 0; i < *hit; i++)
			locs[i].arena += v->arena_base;
		uint32_t fit = *hit;
		*nnew = new_arenas(c, locs, &fit, ids);
		if (fit == *hit)
			break;
		idx_release(c->d->idx, *lease);
		*lease = 0;
		*hit = 0;
		count = fit;
	}
	free(fetch);
	return rc;
}

/* Where a MATCH's PUBLISH would go, and so its claim: the namespace it
 * hit in, or with no hit the one a PUBLISH from the root goes to. false:
 * none it may claim or wait in (a member's shared namespace not made yet). */
static bool flight_ns(struct conn *c, const struct ns_view *v, uint32_t hit, uint32_t *ns,
		      bool *may_claim)
{
	bool shared = v->shared || (!hit && c->shared_wanted);
	if (shared && !c->shared_group)
		return false;
	*ns = shared ? PD_NS_SHARED : c->cred.uid;
	/* The shared namespace is claimed by its publishers alone: a member
	 * waits only on theirs. */
	*may_claim = !shared || conn_shared_role(c) == SHARED_PUBLISHER;
	return true;
}

/* One run of a MATCH: the longest cached run, own namespace first. */
static int match_run(struct conn *c, const struct pd_match *m, const uint32_t *tokens,
		     struct ns_view *v, uint64_t *lease, uint32_t *hit, struct idx_loc *locs,
		     bool *from_disk, uint32_t ids[PD_MAX_FDS], uint32_t *nnew)
{
	*v = (struct ns_view){ c->group, c->part->store, 0, false };
	int rc = match_in(c, v, m, tokens, lease, hit, locs, from_disk, ids, nnew);
	/* The user's own namespace first; with nothing there, the shared one
	 * (the miss then counts once, there). */
	if (!rc && !*hit && c->shared_wanted && !c->shared_group)
		shared_join(c); /* a member's: something may have been published since */
	/* Nothing of the shared namespace here yet, but maybe in the remote
	 * tier: a member makes its arenas only for blocks fetched, checked and
	 * imported there (they commit to this block size), else lets go. */
	if (!rc && !*hit && c->shared_wanted && !c->shared_group &&
	    remote_wants(c->d->remote, PD_NS_SHARED) && !shared_join_as(c, true)) {
		struct ns_view sv = { c->shared_group, c->shared_part->store, STORE_MAX_ARENAS, true };
		if (!ask_remote(c, &sv, m, tokens, 0, m->count))
			shared_leave(c);
	}
	if (!rc && !*hit && c->shared_group) {
		idx_uncount_miss(c->d->idx, c->group, m->count);
		*v = (struct ns_view){ c->shared_group, c->shared_part->store, STORE_MAX_ARENAS, true };
		rc = match_in(c, v, m, tokens, lease, hit, locs, from_disk, ids, nnew);
	}
	return rc;
}

/* The MATCH of a parked connection is answered (or failed): its wait ends. */
static void wait_over(struct conn *c, struct pd_flight_reply *fr)
{
	if (!c->waited)
		return;
	uint64_t ms = conn_now_ms() - c->wait_start_ms;
	flight_wait_done(c->d->flight, &c->fl, ms);
	c->waited = false;
	if (fr)
		fr->waited_ms = ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms;
}

int req_match(struct conn *c)
{
	struct daemon *d = c->d;
	/* A run after a wait: off its claim first. */
	bool dropped = c->waited && flight_unpark(d->flight, &c->fl);
	if (!c->group)
		return conn_fail(c, PD_E_STATE, "MATCH before HELLO");
	uint32_t bt = d->block_tokens;
	const uint8_t *body = c->body;
	size_t blen = c->h.body_len;
	bool flight = c->h.flags & PD_FLAG_FLIGHT;
	struct pd_flight fl = { 0 };
	int rc;
	if (flight && (rc = pd_flight_decode(body, blen, &fl)))
		return conn_fail(c, rc, rc == PD_E_LIMIT ? "a MATCH may wait %u ms at most"
							  : "the FLIGHT fields do not decode (short, or unknown flags)",
				 PD_MAX_WAIT_MS);
	if (flight) {
		body += PD_FLIGHT_SIZE;
		blen -= PD_FLIGHT_SIZE;
	}
	struct pd_match m;
	if ((rc = pd_match_decode(body, blen, bt, &m)))
		return conn_fail(c, rc, "%s (at most %d blocks of %u tokens)", conn_decode_error(rc),
			    PD_MAX_HASHES, bt);
	if (c->nleases >= MAX_LEASES) {
		wait_over(c, NULL);
		return conn_fail(c, PD_E_LIMIT, "this connection holds %d leases already: release some",
			    MAX_LEASES);
	}
	if (!c->waited) { /* the first run counts the request */
		atomic_fetch_add(&d->matches, 1);
		c->wait_start_ms = conn_now_ms();
		c->wait_end_ms = c->wait_start_ms + fl.wait_ms;
	}
	uint32_t *owned;
	const uint32_t *tokens = tokens_of(m.tokens, m.count, bt, &owned);
	struct idx_loc locs[PD_MAX_HASHES];
	bool from_disk[PD_MAX_HASHES];
	uint64_t lease = 0;
	uint32_t hit = 0, ids[PD_MAX_FDS], nnew = 0;
	struct ns_view v;
	struct pd_flight_reply fr = { PD_FLIGHT_NONE, 0 };
	for (int attempt = 0;; attempt++) {
		uint64_t seq = flight ? flight_seq(d->flight) : 0;
		memset(from_disk, 0, m.count * sizeof(*from_disk));
		rc = tokens ? match_run(c, &m, tokens, &v, &lease, &hit, locs, from_disk, ids, &nnew)
			    : -ENOMEM;
		uint32_t ns;
		bool may_claim;
		if (rc || !flight || hit == m.count || !flight_ns(c, &v, hit, &ns, &may_claim))
			break;
		uint64_t now = conn_now_ms(), wake_at = 0;
		/* A body that draws on the daemon's request memory is not kept
		 * while it waits: waiters must not hold it from others. */
		struct flight_ask a = { ns, m.hashes + (size_t)hit * PD_HASH_SIZE, m.count - hit,
					may_claim && (fl.flags & PD_FLIGHT_CLAIM) && !dropped,
					!dropped && !c->body_charged && now < c->wait_end_ms, seq };
		enum flight_verdict verdict = flight_decide(d->flight, &c->fl, &a, now, &wake_at);
		if (verdict == FLIGHT_CLAIMED || verdict == FLIGHT_INHERITED) {
			fr.outcome = verdict == FLIGHT_CLAIMED ? PD_FLIGHT_CLAIMED : PD_FLIGHT_INHERITED;
			break;
		}
		if (verdict == FLIGHT_NONE || (verdict == FLIGHT_RETRY && attempt == 3))
			break;
		/* Matched again later: this run neither leases nor counts. */
		if (lease)
			idx_release(d->idx, lease);
		idx_uncount_match(d->idx, v.g, m.count, hit);
		lease = 0;
		hit = 0;
		if (verdict == FLIGHT_RETRY)
			continue;
		if (!c->waited) {
			c->waited = true;
			flight_count_wait(d->flight);
		}
		c->parked = true;
		c->wake_at_ms = wake_at < c->wait_end_ms ? wake_at : c->wait_end_ms;
		free(owned);
		return 0;
	}
	free(owned);
	if (c->waited && fr.outcome == PD_FLIGHT_NONE)
		fr.outcome = PD_FLIGHT_WAITED;
	wait_over(c, &fr);
	if (!rc && hit && add_lease(c, lease, m.hashes + (size_t)(hit - 1) * PD_HASH_SIZE, v.shared))
		rc = -ENOMEM;
	if (rc) {
		if (lease)
			idx_release(d->idx, lease);
		return conn_fail(c, PD_E_INTERNAL, "out of memory");
	}
	return match_reply(c, &v, lease, hit, locs, from_disk, nnew, ids, flight ? &fr : NULL);
}

int req_release(struct conn *c)
{
	if (!c->group)
		return conn_fail(c, PD_E_STATE, "RELEASE before HELLO");
	struct pd_release m;
	int rc = pd_release_decode(c->body, c->h.body_len, &m);
	if (rc)
		return conn_fail(c, rc, "%s", conn_decode_error(rc));
	struct held_lease *l = find_lease(c, m.lease);
	if (!l)
		return conn_fail(c, PD_E_NOTFOUND, "lease %llu is not held by this connection",
			    (unsigned long long)m.lease);
	idx_release(c->d->idx, m.lease);
	*l = c->leases[--c->nleases];
	return conn_reply(c, PD_OK, 0) ? 0 : -1;
}

struct staging {
	int fd;
	uint64_t block_bytes;
	struct store *store;
};

/* Copies block i from the publisher's staging memory into its slot
 * (without the index lock; from shared memory only, so a peer cannot make
 * it block). File to file first: the kernel copies page to page, where a
 * pread into the slot's view takes a page fault for each new page of it
 * (bench/serve's distinct workload publishes 94 MB a request into new
 * slots: 61 against 91 ms of the daemon's CPU). Whatever that copy cannot
 * do (a kernel without it between memfds) goes through the view. */
static int fill_from_staging(void *ctx, uint32_t i, struct idx_loc loc)
{
	struct staging *st = ctx;
	uint8_t *dst = store_slot(st->store, loc);
	uint64_t done = 0;
	int afd;
	uint64_t aoff;
	if (!store_slot_file(st->store, loc, &afd, &aoff))
		while (done < st->block_bytes) {
			loff_t in = (loff_t)(i * st->block_bytes + done), out = (loff_t)(aoff + done);
			ssize_t r = copy_file_range(st->fd, &in, afd, &out, st->block_bytes - done, 0);
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				break; /* the rest through the view, which says why if it fails */
			done += (uint64_t)r;
		}
	while (done < st->block_bytes) {
		ssize_t r = pread(st->fd, dst + done, st->block_bytes - done,
				  (off_t)(i * st->block_bytes + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -EIO; /* the publisher shrank its memory meanwhile */
		done += (uint64_t)r;
	}
	return 0;
}

int req_publish(struct conn *c)
{
	if (!c->group)
		return conn_fail(c, PD_E_STATE, "PUBLISH before HELLO");
	uint32_t bt = c->d->block_tokens;
	uint64_t bb = c->part->block_bytes;
	struct pd_publish m;
	int rc = pd_publish_decode(c->body, c->h.body_len, bt, &m);
	if (rc)
		return conn_fail(c, rc, "%s (at most %d blocks of %u tokens)", conn_decode_error(rc),
			    PD_MAX_HASHES, bt);
	if (c->nfds != 1 || c->extra_fds)
		return conn_fail(c, PD_E_MALFORMED, "PUBLISH carries exactly one descriptor (the staging memory)");
	struct stat sb;
	/* Only shared memory: a read from it cannot block the daemon. */
	if (fcntl(c->fds[0], F_GET_SEALS) < 0 || fstat(c->fds[0], &sb))
		return conn_fail(c, PD_E_MALFORMED, "the staging descriptor is not a memfd");
	if ((uint64_t)sb.st_size < m.count * bb)
		return conn_fail(c, PD_E_MALFORMED, "the staging memory holds %lld bytes; %u blocks need %llu",
			    (long long)sb.st_size, m.count, (unsigned long long)(m.count * bb));
	const uint8_t *prev = c->h0;
	/* A connection that attached the shared namespace publishes there,
	 * unless it continues a lease of its own namespace. */
	bool shared = c->shared_wanted;
	if (m.lease) {
		struct held_lease *l = find_lease(c, m.lease);
		if (!l)
			return conn_fail(c, PD_E_NOTFOUND, "lease %llu is not held by this connection",
				    (unsigned long long)m.lease);
		prev = l->last;
		shared = l->shared;
	}
	if (shared && conn_shared_role(c) != SHARED_PUBLISHER)
		return conn_fail(c, PD_E_DENIED, "uid %u may attach the shared namespace's prefixes but not publish into it: only root and the users of prefixd --shared-publishers may",
				 (unsigned)c->cred.uid);
	struct idx_group *g = shared ? c->shared_group : c->group;
	struct partition *part = shared ? c->shared_part : c->part;
	if (!g) /* a publisher joins at HELLO */
		return conn_fail(c, PD_E_INTERNAL, "the shared namespace is not attached");
	bool leased = c->h.flags & PD_FLAG_LEASE;
	if (leased && c->nleases >= MAX_LEASES)
		return conn_fail(c, PD_E_LIMIT, "this connection holds %d leases already: release some",
			    MAX_LEASES);
	uint32_t *owned;
	const uint32_t *tokens = tokens_of(m.tokens, m.count, bt, &owned);
	if (!tokens)
		return conn_fail(c, PD_E_INTERNAL, "out of memory");
	/* A block is filed under its hash: it must be the chain's, or one
	 * client could squat on the key of another's prompt. */
	uint8_t h[PD_HASH_SIZE];
	for (uint32_t i = 0; i < m.count; i++) {
		pd_chain_next(prev, tokens + (size_t)i * bt, bt, h);
		prev = m.hashes + (size_t)i * PD_HASH_SIZE;
		if (memcmp(h, prev, PD_HASH_SIZE)) {
			free(owned);
			return conn_fail(c, PD_E_MALFORMED, "the hash of block %u does not follow the chain", i);
		}
	}
	struct staging st = { c->fds[0], bb, part->store };
	uint32_t stored, dedup;
	uint64_t lease = 0;
	rc = idx_publish_leased(c->d->idx, g, m.lease, m.hashes, tokens, m.count,
				fill_from_staging, &st, &stored, &dedup, leased ? &lease : NULL);
	free(owned);
	/* A validated memfd: closing it cannot block, and it must not
	 * outlive the request (reaper.h is for descriptors of any kind). */
	close(c->fds[0]);
	c->nfds = 0;
	uint32_t stop = !rc ? PD_STOP_NONE
		      : rc == -EEXIST ? PD_STOP_COLLISION
		      : rc == -ENOSPC ? PD_STOP_BUDGET
		      : rc == -EDQUOT ? PD_STOP_QUOTA : PD_STOP_MAX + 1;
	/* The lease ends at block stored + dedup - 1 (idx_publish); a
	 * publish that fails the connection (the errors below) gives it back. */
	if (lease && (stop > PD_STOP_MAX ||
		      add_lease(c, lease, m.hashes + (size_t)(stored + dedup - 1) * PD_HASH_SIZE,
				shared))) {
		idx_release(c->d->idx, lease);
		lease = 0;
	}
	/* Single flight: claims on these blocks move on, or end. */
	uint32_t ns = shared ? PD_NS_SHARED : c->cred.uid;
	if (stored + dedup)
		flight_published(c->d->flight, ns, m.hashes, stored + dedup, conn_now_ms());
	/* Written behind, after the reply's way is clear: only a queue entry. */
	if (stored)
		remote_published(c->d->remote, ns,
				 m.hashes + (size_t)(stored + dedup - 1) * PD_HASH_SIZE, stored + dedup);
	if (stop != PD_STOP_NONE && stored + dedup < m.count)
		flight_dropped(c->d->flight, ns, m.hashes + (size_t)(stored + dedup) * PD_HASH_SIZE);
	if (rc == -EIO)
		return conn_fail(c, PD_E_MALFORMED, "the staging memory shrank while it was read: %u of %u blocks stored",
				 stored + dedup, m.count);
	if (stop > PD_STOP_MAX)
		return conn_fail(c, PD_E_INTERNAL, "%s", strerror(-rc));
	static struct pd_log_limit cut;
	if (stop == PD_STOP_BUDGET || stop == PD_STOP_QUOTA)
		pd_log_limited(&cut, "pid %d uid %u: PUBLISH: %u of %u blocks stored: the %s is full of leased or pinned blocks",
			       (int)c->cred.pid, (unsigned)c->cred.uid, stored + dedup, m.count,
			       stop == PD_STOP_BUDGET ? "memory budget" : "user's quota");
	/* A collision stops a publish too: the client has lost nothing. */
	struct pd_publish_reply r = { stored, dedup, stop, lease };
	size_t n = leased ? PD_PUBLISH_LEASE_REPLY_SIZE : PD_PUBLISH_REPLY_SIZE;
	uint8_t *b = conn_reply(c, PD_OK, n);
	return b && pd_publish_reply_encode(&r, leased, b, n) == n ? 0 : -1;
}

void req_end(struct conn *c)
{
	for (size_t i = 0; i < c->nleases; i++)
		idx_release(c->d->idx, c->leases[i].id);
	c->nleases = 0;
	idx_group_put(c->d->idx, c->shared_group);
	c->shared_group = NULL;
	partitions_put(&c->d->parts, c->shared_part);
	c->shared_part = NULL;
	c->shared_wanted = false;
	hello_undo(c);
}
