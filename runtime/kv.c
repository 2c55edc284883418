/* SPDX-License-Identifier: MIT */
/*
 * A session's KV: its table of blocks and the two lengths that say which of
 * them hold what. Only this file writes len and frozen, so that a block
 * shared between sessions (below frozen) is never written.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"

/*
 * Spare blocks. A pass writes its new tokens' K and V into a block of its
 * own, and a fresh block's pages fault on those writes. Under KVM these
 * can cost far more than the guest's own work (the time is spent outside
 * the guest kernel, likely the host backing the pages): in bench/share the 539
 * faults of a 32-token suffix's new block took 2-23 ms (4-42 us each,
 * against 1.5 us for pages the guest had used before), which is most of
 * the warm pass outside its products and attention. So the model keeps up
 * to KV_SPARE_MAX blocks' data with their pages written once: filled at
 * the load, refilled by the private blocks sessions drop. Their contents
 * are stale, as aligned_alloc's would be: a pass reads only positions it
 * or an earlier one wrote.
 */
static size_t block_alloc_bytes(const struct pfx_model *m)
{
	return (kv_block_bytes(m) + 63) & ~(size_t)63;
}

static void *spare_take(struct pfx_model *m)
{
	void *p = NULL;
	pthread_mutex_lock(&m->spare.lock);
	if (m->spare.n > 0)
		p = m->spare.data[--m->spare.n];
	pthread_mutex_unlock(&m->spare.lock);
	return p;
}

/* Keeps p as a spare, or frees it when there are enough. */
static void spare_give(struct pfx_model *m, void *p)
{
	pthread_mutex_lock(&m->spare.lock);
	if (m->spare.n < KV_SPARE_MAX) {
		m->spare.data[m->spare.n++] = p;
		p = NULL;
	}
	pthread_mutex_unlock(&m->spare.lock);
	free(p);
}

int kv_spare_fill(struct pfx_model *m)
{
	size_t bytes = block_alloc_bytes(m);
	while (m->spare.n < KV_SPARE_MAX) {
		void *p = aligned_alloc(64, bytes);
		if (!p)
			return -ENOMEM;
		memset(p, 0, bytes); /* the page faults, here rather than in a pass */
		m->spare.data[m->spare.n++] = p;
	}
	return 0;
}

void kv_spare_free(struct pfx_model *m)
{
	for (int i = 0; i < m->spare.n; i++)
		free(m->spare.data[i]);
	m->spare.n = 0;
	pthread_mutex_destroy(&m->spare.lock);
}

int kv_spare_count(struct pfx_model *m)
{
	pthread_mutex_lock(&m->spare.lock);
	int n = m->spare.n;
	pthread_mutex_unlock(&m->spare.lock);
	return n;
}

static struct kv_block *block_new(struct pfx_model *m)
{
	struct kv_block *b = malloc(sizeof(*b));
	if (!b)
		return NULL;
	b->data = spare_take(m);
	if (!b->data)
		b->data = aligned_alloc(64, block_alloc_bytes(m));
	if (!b->data) {
		free(b);
		return NULL;
	}
	atomic_init(&b->refs, 1);
	b->lease = NULL;
	return b;
}

struct kv_block *kv_block_attached(const void *data, struct kv_lease *lease)
{
	struct kv_block *b = malloc(sizeof(*b));
	if (!b)
		return NULL;
	atomic_init(&b->refs, 1);
	/* Never written: attached blocks are frozen, and the mapping is
	 * PROT_READ, so a stray write faults instead of corrupting. */
	b->data = (void *)data;
	b->lease = lease;
	return b;
}

/* m: the model of every session that holds b. */
static void block_put(struct pfx_model *m, struct kv_block *b)
{
	/* acq_rel: the last owner must see every other owner's use finished. */
	if (b && atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1) {
		if (b->lease)
			kv_lease_put(b->lease);
		else
			spare_give(m, b->data);
		free(b);
	}
}

static int table_grow(struct pfx_session *s, size_t n)
{
	if (n <= s->cap)
		return 0;
	size_t cap = s->cap ? s->cap : 16;
	while (cap < n)
		cap *= 2;
	struct kv_block **nb = realloc(s->blocks, cap * sizeof(*nb));
	if (!nb)
		return -ENOMEM;
	s->blocks = nb;
	s->cap = cap;
	return 0;
}

int kv_reserve(struct pfx_session *s, size_t upto)
{
	size_t B = (size_t)s->m->block_tokens, need = (upto + B - 1) / B;
	if (table_grow(s, need))
		return -ENOMEM;
	while (s->nblocks < need) {
		struct kv_block *b = block_new(s->m);
		if (!b)
			return -ENOMEM;
		s->blocks[s->nblocks++] = b;
	}
	return 0;
}

/* Drops blocks that hold no position below upto. */
static void kv_trim(struct pfx_session *s, size_t upto)
{
	size_t B = (size_t)s->m->block_tokens, keep = (upto + B - 1) / B;
	while (s->nblocks > keep)
		block_put(s->m, s->blocks[--s->nblocks]);
}

int kv_attach_frozen(struct pfx_session *s, struct kv_block *b)
{
	size_t B = (size_t)s->m->block_tokens;
	if (s->len != s->nblocks * B || s->frozen != s->len)
		return -EINVAL;
	if (table_grow(s, s->nblocks + 1))
		return -ENOMEM;
	s->blocks[s->nblocks++] = b;
	s->len = s->frozen = s->nblocks * B;
	return 0;
}

void kv_commit(struct pfx_session *s, size_t n)
{
	s->len += n;
}

void kv_rewind(struct pfx_session *s, size_t len)
{
	s->len = len;
	kv_trim(s, len);
	if (s->pub_blocks * (size_t)s->m->block_tokens > len)
		s->pub_blocks = len / (size_t)s->m->block_tokens;
}

void kv_freeze(struct pfx_session *s)
{
	s->frozen = s->len;
}

void kv_freeze_at(struct pfx_session *s, size_t len)
{
	s->frozen = len;
}

int kv_share_prefix(struct pfx_session *c, const struct pfx_session *s, size_t len)
{
	size_t B = (size_t)s->m->block_tokens, n = len / B;
	if (table_grow(c, n))
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		/* relaxed: the new owner got the block through s, which we hold. */
		atomic_fetch_add_explicit(&s->blocks[i]->refs, 1, memory_order_relaxed);
		c->blocks[i] = s->blocks[i];
	}
	c->nblocks = n;
	c->len = c->frozen = len;
	return 0;
}

void kv_free(struct pfx_session *s)
{
	kv_trim(s, 0);
	free(s->blocks);
	s->blocks = NULL;
	s->cap = 0;
}

int kv_copy(struct pfx_session *c, const struct pfx_session *s)
{
	size_t B = (size_t)s->m->block_tokens, shared = s->frozen / B;
	size_t need = (s->len + B - 1) / B;
	if (table_grow(c, need))
		return -ENOMEM;
	for (size_t i = 0; i < need; i++) {
		struct kv_block *b;
		if (i < shared) {
			b = s->blocks[i];
			/* relaxed: the new owner got b through s, which we hold. */
			atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
		} else {
			b = block_new(s->m);
			if (!b)
				return -ENOMEM;
			memcpy(b->data, s->blocks[i]->data, kv_block_bytes(s->m));
		}
		c->blocks[c->nblocks++] = b;
	}
	c->len = s->len;
	c->frozen = s->frozen;
	return 0;
}
