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
static struct kv_block *block_new(const struct pfx_model *m)
{
	struct kv_block *b = malloc(sizeof(*b));
	size_t bytes = kv_block_bytes(m);
	bytes = (bytes + 63) & ~(size_t)63;
	if (!b)
		return NULL;
	b->data = aligned_alloc(64, bytes);
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

static void block_put(struct kv_block *b)
{
	/* acq_rel: the last owner must see every other owner's use finished. */
	if (b && atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1) {
		if (b->lease)
			kv_lease_put(b->lease);
		else
			free(b->data);
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
		block_put(s->blocks[--s->nblocks]);
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
