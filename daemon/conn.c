/* SPDX-License-Identifier: MIT */
/*
 * One connection. Input is read in two steps, header then body, so nothing
 * is allocated for a body before its header validated; a reply is queued
 * whole and nothing more is read until it is sent (one request at a time
 * per connection keeps a slow reader from making the daemon buffer).
 *
 * Errors the peer can act on are replies with a status and a message; only
 * a frame that cannot be parsed closes the connection, since nothing after
 * it can be trusted to be in sync.
 */
#include "conn.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buf.h"
#include "chain.h"
#include "reaper.h"
#include "sock.h"
#include "wire.h"

/* Leases one connection may hold at once: each pins blocks and costs the
 * index memory, so an endless MATCH loop must not. */
#define MAX_LEASES 1024

struct held_lease {
	uint64_t id;
	uint8_t last[PD_HASH_SIZE]; /* chain hash of its last block: a publish continues it */
};

struct conn {
	struct daemon *d;
	int fd;
	struct ucred cred;
	/* Set by HELLO. */
	struct partition *part;
	struct idx_root root;
	/* Leases this connection holds; released when it closes. */
	struct held_lease *leases;
	size_t nleases, cap_leases;
	/* Arena ids whose descriptor this connection has received. */
	uint8_t *sent;
	size_t sent_bytes;
	/* The request being read. */
	uint8_t hdr[PD_HDR_SIZE];
	size_t hdr_got;
	struct pd_hdr h;
	uint8_t *body;
	size_t body_got;
	int fds[PD_MAX_FDS];
	int nfds;
	bool extra_fds;            /* descriptors beyond what the request takes came */
	/* The reply being sent; its descriptors go with its first byte. */
	uint8_t *out;             /* the reply being sent, or NULL */
	size_t out_len, out_pos;
	struct pd_buf body_buf, out_buf; /* what body and out point into */
	int out_fds[PD_MAX_FDS];
	int out_nfds;
	bool close_after_reply;
};

struct conn *conn_new(struct daemon *d, int fd, const struct ucred *cred)
{
	struct conn *c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return NULL;
	}
	c->d = d;
	c->fd = fd;
	c->cred = *cred;
	atomic_fetch_add(&d->connections, 1);
	return c;
}

static void close_fds(int *fds, int *n)
{
	for (int i = 0; i < *n; i++)
		close(fds[i]);
	*n = 0;
}

/* Descriptors a client sent: their close may block (reaper.h). */
static void drop_client_fds(struct conn *c)
{
	for (int i = 0; i < c->nfds; i++)
		reaper_close(c->fds[i]);
	c->nfds = 0;
}

void conn_free(struct conn *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->nleases; i++)
		idx_release(c->part->idx, c->leases[i].id);
	drop_client_fds(c);
	close_fds(c->out_fds, &c->out_nfds);
	free(c->leases);
	free(c->sent);
	pd_buf_free(&c->body_buf);
	pd_buf_free(&c->out_buf);
	close(c->fd);
	atomic_fetch_sub(&c->d->connections, 1);
	free(c);
}

int conn_fd(const struct conn *c) { return c->fd; }

bool conn_output_pending(const struct conn *c) { return c->out != NULL; }

/* ==== Replies ==== */

/* Queues a reply whose body the caller writes at the returned pointer. */
static uint8_t *reply_begin(struct conn *c, int status, size_t body_len)
{
	if ((c->out = pd_buf_reserve(&c->out_buf, PD_HDR_SIZE + body_len)) == NULL)
		return NULL;
	struct pd_hdr h = { PD_MAGIC, PD_VERSION, c->h.op, PD_FLAG_REPLY, (uint32_t)status,
			    c->h.opaque, (uint32_t)body_len };
	pd_hdr_encode(&h, c->out);
	c->out_len = PD_HDR_SIZE + body_len;
	c->out_pos = 0;
	return c->out + PD_HDR_SIZE;
}

static const char *const op_names[] = { "?", "HELLO", "MATCH", "RELEASE", "PUBLISH", "STATS" };

/* An error reply; also logged, with the peer, so an operator can see it. */
__attribute__((format(printf, 3, 4))) static int fail(struct conn *c, int status,
						      const char *fmt, ...)
{
	char msg[PD_MAX_MESSAGE + 1];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	atomic_fetch_add(&c->d->errors, 1);
	pd_log("pid %d uid %u: %s: %s: %s", (int)c->cred.pid, (unsigned)c->cred.uid,
	       op_names[c->h.op], pd_status_str(status), msg);
	size_t n = 4 + strlen(msg);
	uint8_t *b = reply_begin(c, status, n);
	if (!b)
		return -1;
	pd_error_encode(msg, b, n);
	return 0;
}

static const char *decode_error(int rc)
{
	return rc == PD_E_LIMIT ? "a count is over the protocol's limit"
				: "the body does not decode (short, trailing bytes or bad values)";
}

/* ==== Requests ==== */

static int on_hello(struct conn *c)
{
	struct daemon *d = c->d;
	if (c->part)
		return fail(c, PD_E_STATE, "HELLO was already sent on this connection");
	struct pd_hello m;
	int rc = pd_hello_decode(c->body, c->h.body_len, &m);
	if (rc)
		return fail(c, rc, "%s", decode_error(rc));
	if (m.version_min > PD_VERSION || m.version_max < PD_VERSION)
		return fail(c, PD_E_VERSION, "this daemon speaks protocol version %d; the client offers %u to %u",
			    PD_VERSION, m.version_min, m.version_max);
	if (m.layout != 1)
		return fail(c, PD_E_LAYOUT, "KV layout %u is not supported (1: [layer][k|v][kv_head][token][head_dim] f32)",
			    m.layout);
	if (m.block_tokens != d->block_tokens)
		return fail(c, PD_E_LAYOUT, "this daemon stores blocks of %u tokens, the client's are %u tokens: start prefixd with --block-tokens %u or the client with %u-token blocks",
			    d->block_tokens, m.block_tokens, m.block_tokens, d->block_tokens);
	if (m.block_bytes % ((uint64_t)m.block_tokens * 4))
		return fail(c, PD_E_LAYOUT, "a block of %llu bytes is not a whole number of f32 values per token",
			    (unsigned long long)m.block_bytes);
	struct partition *p;
	if ((rc = partitions_get(&d->parts, c->cred.uid, m.block_bytes, &p)))
		return rc == -ENOSPC ? fail(c, PD_E_NOSPACE, "one block (%llu bytes) is larger than the memory budget (%llu bytes)",
					    (unsigned long long)m.block_bytes,
					    (unsigned long long)d->parts.budget.limit)
		       : rc == -EMFILE ? fail(c, PD_E_LIMIT, "this daemon already serves %d (user, block size) pairs",
					      PARTITIONS_MAX)
				       : fail(c, PD_E_INTERNAL, "out of memory");
	c->part = p;
	c->root.ns = c->cred.uid; /* the namespace: never chosen by the client */
	pd_chain_root(&m, c->root.h0);
	struct pd_hello_reply r = { PD_VERSION, PD_MAX_HASHES, d->parts.budget.limit };
	uint8_t *b = reply_begin(c, PD_OK, 16);
	return b && pd_hello_reply_encode(&r, b, 16) == 16 ? 0 : -1;
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

static int add_lease(struct conn *c, uint64_t id, const uint8_t *last)
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

static int match_reply(struct conn *c, uint64_t lease, uint32_t hit, const struct idx_loc *locs,
		       uint32_t nnew, const uint32_t *ids)
{
	struct pd_place places[PD_MAX_HASHES];
	struct pd_arena_desc arenas[PD_MAX_FDS];
	struct pd_store *s = c->part->store;
	for (uint32_t i = 0; i < hit; i++)
		places[i] = (struct pd_place){ locs[i].arena, locs[i].offset };
	for (uint32_t i = 0; i < nnew; i++) {
		struct shm_arena *a = store_arena(s, ids[i]);
		int fd = shm_arena_ro_fd(a);
		if (fd < 0) {
			close_fds(c->out_fds, &c->out_nfds);
			if (hit) { /* the lease just taken, last in the list */
				idx_release(c->part->idx, lease);
				c->nleases--;
			}
			return fail(c, PD_E_INTERNAL, "cannot open arena %u read-only: %s", ids[i],
				    strerror(-fd));
		}
		c->out_fds[c->out_nfds++] = fd;
		arenas[i] = (struct pd_arena_desc){ ids[i], shm_arena_size(a) };
	}
	size_t n = 16 + 16 * (size_t)(hit + nnew);
	uint8_t *b = reply_begin(c, PD_OK, n);
	if (!b || pd_match_reply_encode(lease, hit, places, nnew, arenas, b, n) != n)
		return -1;
	for (uint32_t i = 0; i < nnew; i++)
		if (mark_sent(c, ids[i]))
			return -1;
	return 0;
}

static int on_match(struct conn *c)
{
	if (!c->part)
		return fail(c, PD_E_STATE, "MATCH before HELLO");
	uint32_t bt = c->d->block_tokens;
	struct pd_match m;
	int rc = pd_match_decode(c->body, c->h.body_len, bt, &m);
	if (rc)
		return fail(c, rc, "%s (at most %d blocks of %u tokens)", decode_error(rc),
			    PD_MAX_HASHES, bt);
	if (c->nleases >= MAX_LEASES)
		return fail(c, PD_E_LIMIT, "this connection holds %d leases already: release some",
			    MAX_LEASES);
	atomic_fetch_add(&c->d->matches, 1);
	uint32_t *owned;
	const uint32_t *tokens = tokens_of(m.tokens, m.count, bt, &owned);
	struct idx_loc locs[PD_MAX_HASHES];
	uint64_t lease = 0;
	uint32_t hit = 0, count = m.count, ids[PD_MAX_FDS], nnew = 0;
	rc = tokens ? 0 : -ENOMEM;
	/* More new arenas than one reply carries: lease a shorter run. */
	while (!rc && count) {
		if ((rc = idx_match(c->part->idx, &c->root, m.hashes, tokens, count, &lease, locs,
				    &hit)))
			break;
		uint32_t fit = hit;
		nnew = new_arenas(c, locs, &fit, ids);
		if (fit == hit)
			break;
		idx_release(c->part->idx, lease);
		lease = 0;
		hit = 0;
		count = fit;
	}
	free(owned);
	if (!rc && hit && add_lease(c, lease, m.hashes + (size_t)(hit - 1) * PD_HASH_SIZE))
		rc = -ENOMEM;
	if (rc) {
		if (lease)
			idx_release(c->part->idx, lease);
		return fail(c, PD_E_INTERNAL, "out of memory");
	}
	return match_reply(c, lease, hit, locs, nnew, ids);
}

static int on_release(struct conn *c)
{
	if (!c->part)
		return fail(c, PD_E_STATE, "RELEASE before HELLO");
	struct pd_release m;
	int rc = pd_release_decode(c->body, c->h.body_len, &m);
	if (rc)
		return fail(c, rc, "%s", decode_error(rc));
	struct held_lease *l = find_lease(c, m.lease);
	if (!l)
		return fail(c, PD_E_NOTFOUND, "lease %llu is not held by this connection",
			    (unsigned long long)m.lease);
	idx_release(c->part->idx, m.lease);
	*l = c->leases[--c->nleases];
	return reply_begin(c, PD_OK, 0) ? 0 : -1;
}

struct staging {
	int fd;
	uint64_t block_bytes;
	struct pd_store *store;
};

/* Copies block i from the publisher's staging memory into its slot. Runs
 * under the index lock: pread from shmem never blocks on a peer. */
static int fill_from_staging(void *ctx, uint32_t i, struct idx_loc loc)
{
	struct staging *st = ctx;
	uint8_t *dst = store_slot(st->store, loc);
	uint64_t done = 0;
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

static int on_publish(struct conn *c)
{
	if (!c->part)
		return fail(c, PD_E_STATE, "PUBLISH before HELLO");
	uint32_t bt = c->d->block_tokens;
	uint64_t bb = c->part->block_bytes;
	struct pd_publish m;
	int rc = pd_publish_decode(c->body, c->h.body_len, bt, &m);
	if (rc)
		return fail(c, rc, "%s (at most %d blocks of %u tokens)", decode_error(rc),
			    PD_MAX_HASHES, bt);
	if (c->nfds != 1 || c->extra_fds)
		return fail(c, PD_E_MALFORMED, "PUBLISH carries exactly one descriptor (the staging memory)");
	struct stat sb;
	/* Only shared memory: a read from it cannot block the daemon. */
	if (fcntl(c->fds[0], F_GET_SEALS) < 0 || fstat(c->fds[0], &sb))
		return fail(c, PD_E_MALFORMED, "the staging descriptor is not a memfd");
	if ((uint64_t)sb.st_size < m.count * bb)
		return fail(c, PD_E_MALFORMED, "the staging memory holds %lld bytes; %u blocks need %llu",
			    (long long)sb.st_size, m.count, (unsigned long long)(m.count * bb));
	const uint8_t *prev = c->root.h0;
	if (m.lease) {
		struct held_lease *l = find_lease(c, m.lease);
		if (!l)
			return fail(c, PD_E_NOTFOUND, "lease %llu is not held by this connection",
				    (unsigned long long)m.lease);
		prev = l->last;
	}
	uint32_t *owned;
	const uint32_t *tokens = tokens_of(m.tokens, m.count, bt, &owned);
	if (!tokens)
		return fail(c, PD_E_INTERNAL, "out of memory");
	/* A block is filed under its hash: it must be the chain's, or one
	 * client could squat on the key of another's prompt. */
	uint8_t h[PD_HASH_SIZE];
	for (uint32_t i = 0; i < m.count; i++) {
		pd_chain_next(prev, tokens + (size_t)i * bt, bt, h);
		prev = m.hashes + (size_t)i * PD_HASH_SIZE;
		if (memcmp(h, prev, PD_HASH_SIZE)) {
			free(owned);
			return fail(c, PD_E_MALFORMED, "the hash of block %u does not follow the chain", i);
		}
	}
	struct staging st = { c->fds[0], bb, c->part->store };
	uint32_t stored, dedup;
	rc = idx_publish(c->part->idx, &c->root, m.lease, m.hashes, tokens, m.count,
			 fill_from_staging, &st, &stored, &dedup);
	free(owned);
	if (rc == -ENOSPC)
		return fail(c, PD_E_NOSPACE, "the memory budget (%llu bytes) is full of leased blocks and their parents: %u of %u blocks stored",
			    (unsigned long long)c->d->parts.budget.limit, stored + dedup, m.count);
	if (rc == -EIO)
		return fail(c, PD_E_MALFORMED, "the staging memory shrank while it was read: %u of %u blocks stored",
			    stored + dedup, m.count);
	/* -EEXIST: a block's key is another prompt's (a hash collision): stop
	 * there and say how far it got; the client has lost nothing. */
	if (rc && rc != -EEXIST)
		return fail(c, PD_E_INTERNAL, "%s", strerror(-rc));
	struct pd_publish_reply r = { stored, dedup };
	uint8_t *b = reply_begin(c, PD_OK, 8);
	return b && pd_publish_reply_encode(&r, b, 8) == 8 ? 0 : -1;
}

static int on_stats(struct conn *c)
{
	struct daemon *d = c->d;
	if (c->cred.uid != 0 && c->cred.uid != d->admin_uid)
		return fail(c, PD_E_DENIED, "statistics are for the daemon's user (uid %u) and root",
			    (unsigned)d->admin_uid);
	if (c->h.body_len)
		return fail(c, PD_E_MALFORMED, "STATS has an empty body");
	struct idx_stats s;
	uint64_t used, arenas, v[PD_STATS_COUNT] = { 0 };
	partitions_stats(&d->parts, &s, &used, &arenas);
	v[PD_ST_HITS] = s.hits;
	v[PD_ST_MISSES] = s.misses;
	v[PD_ST_HIT_TOKENS] = s.hit_blocks * d->block_tokens;
	v[PD_ST_BLOCKS] = s.blocks;
	v[PD_ST_BYTES_USED] = used;
	v[PD_ST_BUDGET] = d->parts.budget.limit;
	v[PD_ST_PUBLISHED] = s.published;
	v[PD_ST_DEDUP] = s.dedup;
	v[PD_ST_EVICTIONS] = s.evictions;
	v[PD_ST_CONNECTIONS] = atomic_load(&d->connections);
	v[PD_ST_LEASES] = s.leases;
	v[PD_ST_MATCHES] = atomic_load(&d->matches);
	v[PD_ST_ERRORS] = atomic_load(&d->errors);
	v[PD_ST_ARENAS] = arenas;
	v[PD_ST_COLLISIONS] = s.collisions;
	size_t n = 8 * PD_STATS_COUNT;
	uint8_t *b = reply_begin(c, PD_OK, n);
	return b && pd_stats_reply_encode(v, b, n) == n ? 0 : -1;
}

static int handle(struct conn *c)
{
	if (c->h.version != PD_VERSION)
		return fail(c, PD_E_VERSION, "frame of protocol version %u; this daemon speaks %d",
			    c->h.version, PD_VERSION);
	switch (c->h.op) {
	case PD_OP_HELLO: return on_hello(c);
	case PD_OP_MATCH: return on_match(c);
	case PD_OP_RELEASE: return on_release(c);
	case PD_OP_PUBLISH: return on_publish(c);
	case PD_OP_STATS: return on_stats(c);
	}
	return -1; /* pd_hdr_decode admits no other op */
}

/* ==== Socket I/O ==== */

int conn_on_output(struct conn *c)
{
	while (c->out_pos < c->out_len) {
		struct iovec iov = { c->out + c->out_pos, c->out_len - c->out_pos };
		ssize_t w = pd_send_some(c->fd, &iov, 1, c->out_fds, c->out_nfds);
		if (w == -EAGAIN)
			return 0;
		if (w < 0)
			return -1;
		close_fds(c->out_fds, &c->out_nfds);
		c->out_pos += (size_t)w;
	}
	c->out = NULL;
	pd_buf_trim(&c->out_buf);
	return c->close_after_reply ? -1 : 0;
}

/* Reads into buf[*got .. want). 1 when complete, 0 for later, -1 to close. */
static int read_part(struct conn *c, uint8_t *buf, size_t want, size_t *got)
{
	ssize_t r = pd_recv_some(c->fd, buf + *got, want - *got, c->fds, &c->nfds);
	if (r == -EAGAIN)
		return 0;
	if (r <= 0)
		return -1;
	*got += (size_t)r;
	return *got == want;
}

int conn_on_input(struct conn *c)
{
	int rc;
	if (c->hdr_got < PD_HDR_SIZE) {
		if ((rc = read_part(c, c->hdr, PD_HDR_SIZE, &c->hdr_got)) <= 0)
			return rc;
		rc = pd_hdr_decode(c->hdr, &c->h);
		if (rc == PD_E_LIMIT) {
			/* The body cannot be skipped: answer, then close. */
			c->close_after_reply = true;
			if (fail(c, PD_E_LIMIT, "a body of %u bytes is over the limit of %u",
				 c->h.body_len, PD_MAX_BODY))
				return -1;
			return conn_on_output(c);
		}
		bool oneway = c->h.flags & PD_FLAG_NOREPLY;
		if (rc || (c->h.flags & PD_FLAG_REPLY) || c->h.status ||
		    (oneway && c->h.op != PD_OP_RELEASE)) {
			atomic_fetch_add(&c->d->errors, 1);
			pd_log("pid %d uid %u: malformed frame header; closing the connection",
			       (int)c->cred.pid, (unsigned)c->cred.uid);
			return -1;
		}
		c->body_got = 0;
		if (c->h.body_len &&
		    !(c->body = pd_buf_reserve(&c->body_buf, c->h.body_len)))
			return -1;
	}
	/* Only PUBLISH takes a descriptor: hold no more than that while a
	 * body is coming, or a few slow clients could exhaust the daemon's. */
	if (c->nfds > (c->h.op == PD_OP_PUBLISH)) {
		for (int i = c->h.op == PD_OP_PUBLISH; i < c->nfds; i++)
			reaper_close(c->fds[i]);
		c->nfds = c->h.op == PD_OP_PUBLISH;
		c->extra_fds = true;
	}
	if (c->body_got < c->h.body_len &&
	    (rc = read_part(c, c->body, c->h.body_len, &c->body_got)) <= 0)
		return rc;
	rc = handle(c);
	c->extra_fds = false;
	c->body = NULL;
	pd_buf_trim(&c->body_buf);
	c->hdr_got = 0;
	drop_client_fds(c);
	if (c->h.flags & PD_FLAG_NOREPLY) {
		/* One-way: an error was logged and counted by fail(). */
		c->out = NULL;
		c->out_len = c->out_pos = 0;
		close_fds(c->out_fds, &c->out_nfds);
	}
	return rc ? rc : conn_on_output(c);
}
