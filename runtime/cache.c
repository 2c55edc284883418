/* SPDX-License-Identifier: MIT */
/*
 * Sessions through prefixd. Ownership: an attached block holds a reference
 * on its kv_lease; the lease holds one on the cache; the last block to go
 * releases the lease, and the last lease (or the caller's close) closes the
 * connection. So forks may outlive the session that attached, and a cache
 * closed early stays open for the blocks still in use.
 */
#include "cache.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"
#include "prefixd.h"
#include "profile.h"

struct pfx_cache {
	atomic_int refs;
	struct prefixd *c;
	const struct pfx_model *m;
	struct prefixd_layout layout; /* its salt points into salt[] */
	unsigned flags;               /* enum pfx_cache_flag */
	char *socket;                 /* NULL: the default; for pfx_cache_clone */
	uint64_t id;                  /* unique in the process, from 1 (kv.h) */
	uint8_t salt[PREFIXD_MAX_SALT];
};

struct kv_lease {
	atomic_int refs;
	struct pfx_cache *cache;
	uint64_t id;
	uint32_t blocks;  /* the daemon's count: a publish continues its last */
};

static _Atomic uint64_t cache_ids;

static void cache_put(struct pfx_cache *c)
{
	if (c && atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) == 1) {
		prefixd_close(c->c);
		free(c->socket);
		free(c);
	}
}

int pfx_cache_open(struct pfx_model *m, const char *socket, const void *salt, size_t salt_len,
		   struct pfx_cache **out, struct pfx_error *err)
{
	return pfx_cache_open_flags(m, socket, salt, salt_len, 0, out, err);
}

int pfx_cache_open_flags(struct pfx_model *m, const char *socket, const void *salt,
			 size_t salt_len, unsigned flags, struct pfx_cache **out,
			 struct pfx_error *err)
{
	if (flags & ~(unsigned)(PFX_CACHE_SHARED | PFX_CACHE_NO_WAIT))
		return pfx_errorf(err, -EINVAL, "unknown cache flags %#x", flags);
	/* KV computed on the bf16 matmul is off the f32 products' by more than
	 * the f32 path's fidelity: its chains are kept apart by a salt of their
	 * own, so that neither kind of process attaches the other's blocks. */
	static const char bf16_tag[] = "prefixd matmul bf16"; /* with its NUL */
	uint8_t tagged[PREFIXD_MAX_SALT];
	if (m->matmul_bf16) {
		if (salt_len > sizeof(tagged) - sizeof(bf16_tag))
			return pfx_errorf(err, -EINVAL,
					  "a salt of %zu bytes is too long: with the bf16 matmul it "
					  "may have %zu at most",
					  salt_len, sizeof(tagged) - sizeof(bf16_tag));
		memcpy(tagged, bf16_tag, sizeof(bf16_tag));
		if (salt_len)
			memcpy(tagged + sizeof(bf16_tag), salt, salt_len);
		salt = tagged;
		salt_len += sizeof(bf16_tag);
	}
	struct prefixd_layout l = {
		.block_tokens = (uint32_t)pfx_model_block_tokens(m),
		.block_bytes = kv_block_bytes(m),
		.layout = PREFIXD_LAYOUT_F32 + (uint32_t)m->kv_type,
		.salt = salt,
		.salt_len = (uint32_t)salt_len,
	};
	memcpy(l.fingerprint, pfx_model_fingerprint(m), sizeof(l.fingerprint));
	struct pfx_cache *c = calloc(1, sizeof(*c));
	if (!c || (socket && !(c->socket = strdup(socket)))) {
		free(c);
		return pfx_errorf(err, -ENOMEM, "out of memory");
	}
	int rc = prefixd_connect_flags(socket, &l,
				       flags & PFX_CACHE_SHARED ? PREFIXD_CONNECT_SHARED : 0, &c->c);
	if (rc) {
		free(c->socket);
		free(c);
		return pfx_errorf(err, rc, "%s", prefixd_errmsg());
	}
	atomic_init(&c->refs, 1);
	c->id = atomic_fetch_add(&cache_ids, 1) + 1;
	c->m = m;
	c->flags = flags;
	/* A chain's ids cover the salt: keep a copy for pfx_cache_pin. */
	c->layout = l;
	if (salt_len)
		memcpy(c->salt, salt, salt_len);
	c->layout.salt = c->salt;
	*out = c;
	return 0;
}

int pfx_cache_clone(struct pfx_cache *c, struct pfx_cache **out, struct pfx_error *err)
{
	if (!c)
		return pfx_errorf(err, -EINVAL, "no cache to clone");
	struct pfx_cache *d = calloc(1, sizeof(*d));
	if (!d || (c->socket && !(d->socket = strdup(c->socket)))) {
		free(d);
		return pfx_errorf(err, -ENOMEM, "out of memory");
	}
	*d = (struct pfx_cache){ .m = c->m, .layout = c->layout, .flags = c->flags,
				 .socket = d->socket };
	memcpy(d->salt, c->salt, sizeof(d->salt));
	d->layout.salt = d->salt;
	int rc = prefixd_connect_flags(c->socket, &d->layout,
				       c->flags & PFX_CACHE_SHARED ? PREFIXD_CONNECT_SHARED : 0,
				       &d->c);
	if (rc) {
		free(d->socket);
		free(d);
		return pfx_errorf(err, rc, "%s", prefixd_errmsg());
	}
	atomic_init(&d->refs, 1);
	d->id = atomic_fetch_add(&cache_ids, 1) + 1;
	*out = d;
	return 0;
}

void pfx_cache_close(struct pfx_cache *c) { cache_put(c); }

void kv_lease_put(struct kv_lease *l)
{
	if (atomic_fetch_sub_explicit(&l->refs, 1, memory_order_acq_rel) == 1) {
		/* A failed release is harmless: the daemon ends the lease when
		 * the connection closes anyway. */
		prefixd_release(l->cache->c, l->id);
		cache_put(l->cache);
		free(l);
	}
}

/* Attaches the cached leading blocks of tokens[0 .. nblocks * B) to the
 * empty session s. copy_last: when all nblocks hit, the last one is copied
 * into a private block instead, all but its last token committed (the
 * caller computes that token, whose logits are the answer). Returns the
 * tokens attached, or -errno. */
static int attach(struct pfx_session *s, struct pfx_cache *c, const uint32_t *tokens,
		  uint32_t nblocks, uint32_t wait_ms, bool copy_last, uint32_t *from_disk,
		  uint32_t *flight, struct pfx_error *err)
{
	const void **kv = malloc((nblocks + 1) * sizeof(*kv));
	struct kv_lease *l = malloc(sizeof(*l));
	uint32_t hit = 0;
	uint64_t lease_id = 0;
	/* Single flight: wait for a process computing these blocks, or
	 * claim them for this one. */
	struct prefixd_match_info mi;
	int rc = kv && l ? prefixd_match_wait(c->c, tokens, nblocks, wait_ms, &lease_id, &hit, kv, &mi)
			 : -ENOMEM;
	*from_disk = rc ? 0 : mi.from_disk;
	*flight = rc ? PFX_FLIGHT_NONE : mi.flight;
	if (rc || !hit) {
		free(kv);
		free(l);
		return rc ? pfx_errorf(err, rc, "%s", rc == -ENOMEM ? "out of memory" : prefixd_errmsg())
			  : 0;
	}
	atomic_init(&l->refs, 1); /* ours until the blocks hold it */
	atomic_fetch_add(&c->refs, 1);
	l->cache = c;
	l->id = lease_id;
	l->blocks = hit;
	bool copy = copy_last && hit == nblocks;
	uint32_t frozen = copy ? hit - 1 : hit, i = 0;
	s->pub_cache = c->id; /* the leased blocks are the daemon's already */
	s->pub_blocks = 0;
	for (; i < frozen; i++) {
		struct kv_block *b = kv_block_attached(kv[i], l);
		if (!b || kv_attach_frozen(s, b)) {
			free(b);
			break;
		}
		atomic_fetch_add(&l->refs, 1);
	}
	size_t B = (size_t)pfx_model_block_tokens(s->m), got = (size_t)i * B;
	/* Copied while the lease still holds it: a private block the forward
	 * pass may write, as if its tokens but the last were computed here. */
	if (copy && i == frozen && !kv_reserve(s, (size_t)hit * B)) {
		memcpy(s->blocks[i]->data, kv[i], kv_block_bytes(s->m));
		kv_commit(s, B - 1);
		got += B - 1;
	}
	kv_populate(s->m, kv, i);
	/* Out of memory half-way: what is attached stays, consistently (a
	 * publish then starts from the prompt's beginning, see publish). */
	s->pub_blocks = i;
	kv_lease_put(l);
	free(kv);
	return got || !hit ? (int)got : pfx_errorf(err, -ENOMEM, "out of memory");
}

/* tokens as the daemon's ids, after checking them against the vocabulary. */
static int ids_of(const struct pfx_session *s, const int32_t *tokens, size_t n, uint32_t **out,
		  struct pfx_error *err)
{
	int V = pfx_model_config(s->m)->vocab;
	for (size_t i = 0; i < n; i++)
		if (tokens[i] < 0 || tokens[i] >= V)
			return pfx_errorf(err, -EINVAL, "token %zu is %d, outside the vocabulary [0, %d)",
					  i, tokens[i], V);
	uint32_t *ids = malloc((n ? n : 1) * sizeof(*ids));
	if (!ids)
		return pfx_errorf(err, -ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		ids[i] = (uint32_t)tokens[i];
	*out = ids;
	return 0;
}

/* pfx_session_attach; wait_ms > 0: with single flight, *flight saying
 * what it did. */
static int do_attach(struct pfx_session *s, struct pfx_cache *c, const int32_t *tokens, size_t n,
		     uint32_t wait_ms, uint32_t *flight, struct pfx_prefill_info *info,
		     struct pfx_error *cache_err, struct pfx_error *err)
{
	memset(info, 0, sizeof(*info));
	*flight = PFX_FLIGHT_NONE;
	if (s->len)
		return pfx_errorf(err, -EINVAL,
				  "cannot attach cached blocks to a session that holds %zu tokens",
				  s->len);
	info->computed = n;
	if (!c || n < 2)
		return 0;
	uint32_t *ids;
	int rc = ids_of(s, tokens, n, &ids, err);
	if (rc)
		return rc;
	/* Leave at least one token to compute: its logits are the answer.
	 * With single flight, a prompt that ends on a block boundary asks for
	 * its last block too, and computes only its last token again: the
	 * processes that waited for another's prefill then compute one token,
	 * not a block. */
	size_t B = (size_t)pfx_model_block_tokens(s->m), matchable = (n - 1) / B;
	bool whole = wait_ms && n % B == 0;
	uint32_t from_disk = 0;
	struct pfx_profile *prof = s->m->prof; /* set by this thread, before (profile.h) */
	double t0 = prof ? pfx_profile_now() : 0, c0 = prof ? pfx_profile_cpu() : 0;
	int got = attach(s, c, ids, (uint32_t)(whole ? n / B : matchable), wait_ms, whole, &from_disk,
			 flight, cache_err);
	if (prof) {
		prof->attach_s += pfx_profile_now() - t0;
		prof->attach_cpu_s += pfx_profile_cpu() - c0;
	}
	free(ids);
	if (got < 0) {
		info->cache_rc = got;
		return 0;
	}
	info->attached = (size_t)got;
	info->from_disk = got > 0 ? from_disk : 0;
	info->computed = n - info->attached;
	return 0;
}

/* Never waits: a caller that computes in its own batches (a server's
 * engine) must not stall them on another process. */
int pfx_session_attach(struct pfx_session *s, struct pfx_cache *c, const int32_t *tokens,
		       size_t n, struct pfx_prefill_info *info, struct pfx_error *cache_err,
		       struct pfx_error *err)
{
	uint32_t flight;
	return do_attach(s, c, tokens, n, 0, &flight, info, cache_err, err);
}

int pfx_session_attach_wait(struct pfx_session *s, struct pfx_cache *c, const int32_t *tokens,
			    size_t n, uint32_t wait_ms, enum pfx_flight *flight,
			    struct pfx_prefill_info *info, struct pfx_error *cache_err,
			    struct pfx_error *err)
{
	if (wait_ms > PFX_ATTACH_WAIT_MAX_MS)
		return pfx_errorf(err, -EINVAL, "a wait of %u ms is past the longest, %u ms", wait_ms,
				  PFX_ATTACH_WAIT_MAX_MS);
	uint32_t f;
	int rc = do_attach(s, c, tokens, n, wait_ms, &f, info, cache_err, err);
	/* A daemon's unknown answer is none the caller can act on. */
	*flight = f <= PFX_FLIGHT_INHERITED ? (enum pfx_flight)f : PFX_FLIGHT_NONE;
	return rc;
}

/* The leading blocks of s attached through one lease of c, all of those
 * the lease holds: a publish may continue it from there. 0 otherwise (a
 * session that attached nothing, forked a part of a lease, ran out of
 * memory half-way through an attach, or attached from another cache):
 * the publish then starts at the prompt's beginning and the daemon counts
 * the blocks it has as deduplicated. */
static uint32_t continuable(const struct pfx_session *s, const struct pfx_cache *c,
			    uint64_t *lease)
{
	*lease = 0;
	if (!s->nblocks || !s->blocks[0]->lease || s->blocks[0]->lease->cache != c)
		return 0;
	const struct kv_lease *l = s->blocks[0]->lease;
	uint32_t k = 0;
	while (k < s->nblocks && s->blocks[k]->lease == l)
		k++;
	if (k != l->blocks)
		return 0;
	*lease = l->id;
	return k;
}

/* Publishes the session's blocks [have, full), which continue blocks an
 * earlier chunk published: a lease on those (a plain MATCH, which the
 * daemon counts as one) lets the publish send only the new ones. *from:
 * where the publish started (before have when the daemon lost some). */
static int publish_next(struct pfx_session *s, struct pfx_cache *c, const uint32_t *ids,
			uint32_t have, uint32_t full, uint32_t *from, uint32_t *stored,
			uint32_t *dedup)
{
	const void **kv = malloc(full * sizeof(*kv));
	uint64_t lease = 0;
	uint32_t hit = 0;
	*stored = *dedup = 0;
	int rc = kv ? prefixd_match(c->c, ids, have, &lease, &hit, kv) : -ENOMEM;
	*from = hit;
	if (!rc) {
		for (uint32_t i = hit; i < full; i++)
			kv[i - hit] = s->blocks[i]->data;
		rc = prefixd_publish(c->c, lease, ids, hit, full - hit, kv, stored, dedup);
		if (!rc && *stored + *dedup < full - hit)
			rc = -EEXIST; /* a hash collision stopped it */
	}
	if (lease)
		prefixd_release(c->c, lease);
	free(kv);
	return rc;
}

/* The report's words for a publish that stopped with prc. */
static int publish_error(struct pfx_error *cache_err, int prc)
{
	if (prc == -ENOSPC)
		return pfx_errorf(cache_err, prc,
				  "prefixd's memory budget is full of leased or pinned blocks");
	if (prc == -EDQUOT)
		return pfx_errorf(cache_err, prc,
				  "this user's quota in prefixd is full of their leased or pinned blocks");
	if (prc == -EEXIST)
		return pfx_errorf(cache_err, prc,
				  "a block's key in prefixd is another prompt's (a hash collision; nothing wrong was stored)");
	return pfx_errorf(cache_err, prc, "%s", prc == -ENOMEM ? "out of memory" : prefixd_errmsg());
}

int pfx_session_publish(struct pfx_session *s, struct pfx_cache *c, const int32_t *tokens,
			size_t n, struct pfx_prefill_info *info, struct pfx_error *cache_err,
			struct pfx_error *err)
{
	info->published = info->deduplicated = info->unpublished = 0;
	info->publish_rc = 0;
	info->recomputed = 0;
	size_t B = (size_t)pfx_model_block_tokens(s->m), full = n / B;
	if (full * B > s->len)
		return pfx_errorf(err, -EINVAL,
				  "cannot publish %zu blocks of a prompt: the session holds %zu tokens",
				  full, s->len);
	if (!c)
		return 0;
	uint64_t lease;
	uint32_t first = continuable(s, c, &lease);
	/* Blocks attached from the cache are the daemon's already. */
	size_t attached = 0;
	while (attached < s->nblocks && attached < full && s->blocks[attached]->lease)
		attached++;
	/* Blocks an earlier publish of this growing prompt sent: a lease on
	 * them lets this one send only the new ones. */
	size_t sent = s->pub_cache == c->id && s->pub_blocks > first ? s->pub_blocks : 0;
	size_t known = attached > sent ? attached : sent;
	if (full <= known)
		return 0;
	uint32_t *ids;
	int rc = ids_of(s, tokens, full * B, &ids, err);
	if (rc)
		return rc;
	int prc;
	uint32_t start = first, again = (uint32_t)(attached - first);
	if (sent) {
		prc = publish_next(s, c, ids, (uint32_t)sent, (uint32_t)full, &start,
				   &info->published, &info->deduplicated);
		again = start < known ? (uint32_t)(known - start) : 0;
	} else {
		uint32_t todo = (uint32_t)(full - first);
		const void **kv = malloc(todo * sizeof(*kv));
		for (size_t i = first; kv && i < full; i++)
			kv[i - first] = s->blocks[i]->data;
		prc = kv ? prefixd_publish(c->c, lease, ids, first, todo, kv, &info->published,
					   &info->deduplicated)
			 : -ENOMEM;
		free(kv);
	}
	/* The daemon now holds the leading blocks this publish reached. */
	uint32_t reached = start + info->published + info->deduplicated;
	if (reached > s->pub_blocks || s->pub_cache != c->id) {
		s->pub_cache = c->id;
		s->pub_blocks = reached;
	}
	/* The report counts the blocks computed here and not sent before:
	 * those a publish from further back sent again are the daemon's own. */
	info->deduplicated = info->deduplicated > again ? info->deduplicated - again : 0;
	uint32_t mine = (uint32_t)(full - known);
	uint32_t done = info->published + info->deduplicated;
	info->unpublished = mine > done ? mine - done : 0;
	/* The client library's messages repeat the counts; the report has
	 * them already, so say only why. */
	if (prc)
		info->publish_rc = publish_error(cache_err, prc);
	else if (info->unpublished)
		info->publish_rc = publish_error(cache_err, -EEXIST);
	/* A prompt that ends on a block boundary leaves its last block to
	 * compute (its last token's logits are the answer): say so when that
	 * block was cached all along. */
	if (n % B == 0 && mine == 1 && info->deduplicated == 1)
		info->recomputed = B;
	free(ids);
	return 0;
}

/*
 * The rest of a long prompt after the attach, in chunks that end on block
 * boundaries, publishing the full blocks after each: processes waiting for
 * this prompt's blocks (single flight) wake at each chunk, and a crash
 * loses at most a chunk. The first publish continues the attach (as
 * pfx_session_publish does), the later ones the chunks before.
 */
static int prefill_chunks(struct pfx_session *s, struct pfx_cache *c, const int32_t *tokens,
			  size_t n, enum pfx_logits want, float *logits,
			  struct pfx_prefill_info *info, struct pfx_error *cache_err,
			  struct pfx_error *err)
{
	size_t B = (size_t)pfx_model_block_tokens(s->m), attached = info->attached;
	size_t V = (size_t)pfx_model_config(s->m)->vocab, chunk = PFX_PREFILL_CHUNK / B * B;
	if (!chunk)
		chunk = B;
	uint32_t *ids;
	int rc = ids_of(s, tokens, n, &ids, err);
	if (rc)
		return rc;
	uint32_t have = 0; /* leading blocks published (or attached) so far */
	bool publishing = true;
	struct pfx_prefill_info step = *info;
	for (size_t done = attached; done < n;) {
		size_t end = (done / chunk + 1) * chunk;
		/* No short chunk at the end: the last takes up to 1.5 chunks. */
		if (end >= n || n - end < chunk / 2)
			end = n;
		enum pfx_logits w = want == PFX_LOGITS_ALL ? PFX_LOGITS_ALL
				    : end == n              ? want
							    : PFX_LOGITS_NONE;
		float *rows = w == PFX_LOGITS_NONE	 ? NULL
			      : want == PFX_LOGITS_ALL ? logits + (done - attached) * V
						       : logits;
		if ((rc = pfx_session_append(s, tokens + done, end - done, w, rows, err))) {
			pfx_session_rewind(s, attached, NULL);
			free(ids);
			return rc;
		}
		done = end;
		uint32_t full = (uint32_t)(done / B);
		if (!publishing || full * B <= attached)
			continue;
		if (!have) {
			pfx_session_publish(s, c, tokens, done, &step, cache_err, NULL);
			info->published = step.published;
			info->deduplicated = step.deduplicated;
			info->recomputed = step.recomputed;
			if ((info->publish_rc = step.publish_rc))
				publishing = false;
		} else {
			uint32_t stored, dedup, from;
			int prc = publish_next(s, c, ids, have, full, &from, &stored, &dedup);
			info->published += stored;
			info->deduplicated += dedup;
			s->pub_blocks = from + stored + dedup;
			if (prc) {
				info->publish_rc = pfx_errorf(cache_err, prc, "%s",
							      prc == -EEXIST ? "a block's key in prefixd is another prompt's (a hash collision; nothing wrong was stored)"
							      : prc == -ENOMEM ? "out of memory"
									       : prefixd_errmsg());
				publishing = false;
			}
		}
		have = full;
	}
	free(ids);
	/* A publish cut short leaves the later chunks' blocks unsent too. */
	uint32_t mine = (uint32_t)(n / B - attached / B);
	uint32_t sent = info->published + info->deduplicated;
	info->unpublished = mine > sent ? mine - sent : 0;
	return 0;
}

int pfx_session_prefill(struct pfx_session *s, struct pfx_cache *c, const int32_t *tokens,
			size_t n, enum pfx_logits want, float *logits,
			struct pfx_prefill_info *info, struct pfx_error *cache_err,
			struct pfx_error *err)
{
	memset(info, 0, sizeof(*info));
	if (!c || s->len || n < 2) {
		info->computed = n;
		return pfx_session_append(s, tokens, n, want, logits, err);
	}
	bool flight = !(c->flags & PFX_CACHE_NO_WAIT);
	uint32_t how;
	int rc = do_attach(s, c, tokens, n, flight ? PFX_CACHE_WAIT_MS : 0, &how, info, cache_err,
			   err);
	if (rc)
		return rc;
	size_t done = info->attached;
	if (flight && !info->cache_rc &&
	    n - done > PFX_PREFILL_CHUNK + PFX_PREFILL_CHUNK / 2)
		return prefill_chunks(s, c, tokens, n, want, logits, info, cache_err, err);
	rc = pfx_session_append(s, tokens + done, n - done, want, logits, err);
	if (rc) {
		pfx_session_rewind(s, done, NULL);
		return rc;
	}
	/* Publish the prompt's full blocks computed here; the daemon copies
	 * them, so these stay private and writable. A last block copied from
	 * the cache (attach) is the daemon's already. */
	size_t B = (size_t)pfx_model_block_tokens(s->m);
	if (!info->cache_rc && !(n % B == 0 && done == n - 1))
		pfx_session_publish(s, c, tokens, n, info, cache_err, NULL);
	return 0;
}

int pfx_cache_pin(struct pfx_cache *c, const int32_t *tokens, size_t n, uint32_t ttl_s,
		  uint64_t *pinned_bytes, struct pfx_error *err)
{
	struct prefixd_prompt *p;
	struct prefixd_id id;
	int rc = prefixd_prompt_new(&c->layout, &p);
	if (rc)
		return pfx_errorf(err, rc, "%s", prefixd_errmsg());
	/* Token ids were checked against the vocabulary by the prefill. */
	for (size_t i = 0; !rc && i < n; i++) {
		uint32_t t = (uint32_t)tokens[i];
		rc = prefixd_prompt_append(p, &t, 1);
	}
	if (!rc)
		rc = prefixd_prompt_id(p, &id);
	prefixd_prompt_free(p);
	/* What it published went into the shared namespace. */
	if (c->flags & PFX_CACHE_SHARED)
		id.user = PREFIXD_SHARED_USER;
	if (!rc)
		rc = prefixd_pin(c->c, &id, ttl_s, pinned_bytes);
	return rc ? pfx_errorf(err, rc, "%s", prefixd_errmsg()) : 0;
}
