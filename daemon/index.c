/* SPDX-License-Identifier: MIT */
/*
 * The prefix index.
 *
 * DESIGN. Entries live in a chained hash table keyed by (namespace, key),
 * where key is the client's chain hash (truncated in test builds). Every
 * entry points to its parent entry and counts its children, so the set of
 * entries is a forest of prefix trees, one root per (namespace, h0). A
 * MATCH walks the client's chain and accepts entry i only if its tokens
 * equal the client's and its parent is entry i - 1: hash keys find
 * candidates, never decide. Eviction keeps the forest intact by taking only
 * leaves (no children) that no lease holds, oldest use first (a global LRU
 * list, touched on every hit and store).
 *
 * Locking: `lock` guards everything here. One lock is the simplest thing
 * that is correct; bench/daemon decides whether it needs striping.
 */
#include "index.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct entry {
	uint8_t key[IDX_HASH_BYTES];
	uint32_t ns;
	uint8_t h0[IDX_HASH_BYTES];   /* root context; only for parentless entries */
	struct entry *parent;
	uint32_t children;
	uint32_t leases;              /* leases holding this entry */
	struct idx_loc loc;
	struct entry *hnext;          /* hash bucket chain */
	struct entry *older, *newer;  /* LRU list */
	uint32_t tokens[];            /* (block_tokens) */
};

struct lease {
	uint64_t id;
	uint32_t n;
	struct lease *next;
	struct entry *blocks[];       /* (n) */
};

#define LEASE_BUCKETS 1024

struct pd_index {
	pthread_mutex_t lock;
	uint32_t block_tokens;
	int key_bytes;
	struct idx_store store;
	struct entry **buckets;       /* (nbuckets) */
	size_t nbuckets;
	struct entry *oldest, *newest;
	struct lease *leases[LEASE_BUCKETS];
	uint64_t next_lease;
	struct idx_stats st;
};

int idx_new(uint32_t block_tokens, int key_bytes, const struct idx_store *store,
	    struct pd_index **out)
{
	if (!block_tokens || key_bytes < 1 || key_bytes > IDX_HASH_BYTES)
		return -EINVAL;
	struct pd_index *x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	x->nbuckets = 1 << 16;
	x->buckets = calloc(x->nbuckets, sizeof(*x->buckets));
	if (!x->buckets) {
		free(x);
		return -ENOMEM;
	}
	pthread_mutex_init(&x->lock, NULL);
	x->block_tokens = block_tokens;
	x->key_bytes = key_bytes;
	x->store = *store;
	x->next_lease = 1;
	*out = x;
	return 0;
}

void idx_free(struct pd_index *x)
{
	if (!x)
		return;
	for (int b = 0; b < LEASE_BUCKETS; b++)
		while (x->leases[b]) {
			struct lease *l = x->leases[b];
			x->leases[b] = l->next;
			free(l);
		}
	struct entry *e = x->oldest;
	while (e) {
		struct entry *n = e->newer;
		x->store.free(x->store.ctx, e->loc);
		free(e);
		e = n;
	}
	free(x->buckets);
	pthread_mutex_destroy(&x->lock);
	free(x);
}

/* ==== Entries (caller holds lock) ==== */

static void make_key(const struct pd_index *x, const uint8_t *hash, uint8_t key[IDX_HASH_BYTES])
{
	memset(key, 0, IDX_HASH_BYTES);
	memcpy(key, hash, (size_t)x->key_bytes);
}

static size_t bucket_of(const struct pd_index *x, uint32_t ns, const uint8_t *key)
{
	uint64_t h = ns * 0x9e3779b97f4a7c15ull;
	for (int i = 0; i < x->key_bytes; i++)
		h = (h ^ key[i]) * 0x100000001b3ull;
	return (size_t)(h ^ h >> 29) & (x->nbuckets - 1);
}

static struct entry *do_find(const struct pd_index *x, uint32_t ns, const uint8_t *key)
{
	for (struct entry *e = x->buckets[bucket_of(x, ns, key)]; e; e = e->hnext)
		if (e->ns == ns && !memcmp(e->key, key, IDX_HASH_BYTES))
			return e;
	return NULL;
}

/* The exact test: same tokens, same parent (or same root context). */
static int do_confirms(const struct pd_index *x, const struct entry *e, const struct entry *parent,
		       const struct idx_root *root, const uint32_t *tokens)
{
	if (e->parent != parent)
		return 0;
	if (!parent && memcmp(e->h0, root->h0, IDX_HASH_BYTES))
		return 0;
	return !memcmp(e->tokens, tokens, x->block_tokens * sizeof(uint32_t));
}

static void lru_unlink(struct pd_index *x, struct entry *e)
{
	if (e->older)
		e->older->newer = e->newer;
	else
		x->oldest = e->newer;
	if (e->newer)
		e->newer->older = e->older;
	else
		x->newest = e->older;
	e->older = e->newer = NULL;
}

static void lru_push(struct pd_index *x, struct entry *e)
{
	e->older = x->newest;
	e->newer = NULL;
	if (x->newest)
		x->newest->newer = e;
	else
		x->oldest = e;
	x->newest = e;
}

static void do_touch(struct pd_index *x, struct entry *e)
{
	lru_unlink(x, e);
	lru_push(x, e);
}

static void do_remove(struct pd_index *x, struct entry *e)
{
	struct entry **pp = &x->buckets[bucket_of(x, e->ns, e->key)];
	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	lru_unlink(x, e);
	if (e->parent)
		e->parent->children--;
	x->store.free(x->store.ctx, e->loc);
	x->st.blocks--;
	free(e);
}

/* Frees the least recently used block that is neither leased nor a parent. */
static int do_evict_one(struct pd_index *x)
{
	for (struct entry *e = x->oldest; e; e = e->newer)
		if (!e->leases && !e->children) {
			do_remove(x, e);
			x->st.evictions++;
			return 0;
		}
	return -ENOSPC;
}

/* A slot for a new block, evicting as needed; `keep` must survive. */
static int do_alloc(struct pd_index *x, struct entry *keep, struct idx_loc *loc)
{
	int rc;
	/* The parent we are about to extend must not be evicted meanwhile. */
	if (keep)
		keep->leases++;
	while ((rc = x->store.alloc(x->store.ctx, loc)) == -ENOSPC)
		if (do_evict_one(x))
			break;
	if (keep)
		keep->leases--;
	return rc;
}

/* ==== Leases (caller holds lock) ==== */

static struct lease **do_lease_slot(struct pd_index *x, uint64_t id)
{
	struct lease **pp = &x->leases[id % LEASE_BUCKETS];
	while (*pp && (*pp)->id != id)
		pp = &(*pp)->next;
	return pp;
}

/* ==== Public calls ==== */

int idx_match(struct pd_index *x, const struct idx_root *root, const uint8_t *hashes,
	      const uint32_t *tokens, uint32_t count, uint64_t *lease, struct idx_loc *locs,
	      uint32_t *hit)
{
	struct lease *l = malloc(sizeof(*l) + count * sizeof(l->blocks[0]));
	if (!l)
		return -ENOMEM;
	uint8_t key[IDX_HASH_BYTES];
	struct entry *parent = NULL;
	uint32_t n = 0;
	pthread_mutex_lock(&x->lock);
	for (; n < count; n++) {
		make_key(x, hashes + (size_t)n * IDX_HASH_BYTES, key);
		struct entry *e = do_find(x, root->ns, key);
		const uint32_t *t = tokens + (size_t)n * x->block_tokens;
		if (!e)
			break;
		if (!do_confirms(x, e, parent, root, t)) {
			x->st.collisions++;
			break;
		}
		l->blocks[n] = e;
		locs[n] = e->loc;
		parent = e;
	}
	*hit = n;
	*lease = 0;
	if (n) {
		for (uint32_t i = 0; i < n; i++) {
			l->blocks[i]->leases++;
			do_touch(x, l->blocks[i]);
		}
		l->id = x->next_lease++;
		l->n = n;
		struct lease **slot = do_lease_slot(x, l->id);
		l->next = NULL;
		*slot = l;
		*lease = l->id;
		x->st.leases++;
		x->st.hits++;
		x->st.hit_blocks += n;
		l = NULL;
	} else {
		x->st.misses++;
	}
	pthread_mutex_unlock(&x->lock);
	free(l);
	return 0;
}

int idx_release(struct pd_index *x, uint64_t lease)
{
	pthread_mutex_lock(&x->lock);
	struct lease **pp = do_lease_slot(x, lease), *l = *pp;
	if (l) {
		*pp = l->next;
		for (uint32_t i = 0; i < l->n; i++)
			l->blocks[i]->leases--;
		x->st.leases--;
	}
	pthread_mutex_unlock(&x->lock);
	free(l);
	return l ? 0 : -ENOENT;
}

int idx_publish(struct pd_index *x, const struct idx_root *root, uint64_t lease,
		const uint8_t *hashes, const uint32_t *tokens, uint32_t count,
		int (*fill)(void *ctx, uint32_t i, struct idx_loc loc), void *ctx,
		uint32_t *stored, uint32_t *dedup)
{
	int rc = 0;
	*stored = *dedup = 0;
	size_t esize = sizeof(struct entry) + x->block_tokens * sizeof(uint32_t);
	pthread_mutex_lock(&x->lock);
	struct entry *parent = NULL;
	if (lease) {
		struct lease *l = *do_lease_slot(x, lease);
		if (!l) {
			rc = -ENOENT;
			goto out;
		}
		parent = l->blocks[l->n - 1];
	}
	for (uint32_t i = 0; i < count; i++) {
		uint8_t key[IDX_HASH_BYTES];
		const uint32_t *t = tokens + (size_t)i * x->block_tokens;
		make_key(x, hashes + (size_t)i * IDX_HASH_BYTES, key);
		struct entry *e = do_find(x, root->ns, key);
		if (e) {
			if (!do_confirms(x, e, parent, root, t)) {
				x->st.collisions++;
				rc = -EEXIST;
				break;
			}
			(*dedup)++;
			x->st.dedup++;
			do_touch(x, e);
			parent = e;
			continue;
		}
		struct idx_loc loc;
		if ((rc = do_alloc(x, parent, &loc)))
			break;
		/* Copy before the entry is visible: nobody can match a half block. */
		if ((rc = fill(ctx, i, loc))) {
			x->store.free(x->store.ctx, loc);
			break;
		}
		e = calloc(1, esize);
		if (!e) {
			x->store.free(x->store.ctx, loc);
			rc = -ENOMEM;
			break;
		}
		memcpy(e->key, key, IDX_HASH_BYTES);
		e->ns = root->ns;
		if (!parent)
			memcpy(e->h0, root->h0, IDX_HASH_BYTES);
		e->parent = parent;
		if (parent)
			parent->children++;
		e->loc = loc;
		memcpy(e->tokens, t, x->block_tokens * sizeof(uint32_t));
		size_t b = bucket_of(x, e->ns, e->key);
		e->hnext = x->buckets[b];
		x->buckets[b] = e;
		lru_push(x, e);
		x->st.blocks++;
		x->st.published++;
		(*stored)++;
		parent = e;
	}
out:
	pthread_mutex_unlock(&x->lock);
	return rc;
}

void idx_get_stats(struct pd_index *x, struct idx_stats *out)
{
	pthread_mutex_lock(&x->lock);
	*out = x->st;
	pthread_mutex_unlock(&x->lock);
}
