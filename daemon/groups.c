/* SPDX-License-Identifier: MIT */
/* Groups made without a connection (groups.h). */
#include "groups.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "chain.h"

struct group_held {
	struct partition *p;
	struct idx_group *g;
	uint32_t ns;
	uint8_t h0[PD_HASH_SIZE];
};

struct idx_group *group_set_get(struct group_set *s, struct daemon *d, uint32_t ns,
				const uint8_t *h0, const uint8_t *fp, uint64_t block_bytes,
				struct store **store, int *err)
{
	/* Records come in runs of one chain: the last one first. */
	for (size_t i = s->n; i-- > 0;)
		if (s->v[i].ns == ns && !memcmp(s->v[i].h0, h0, PD_HASH_SIZE) &&
		    s->v[i].p->block_bytes == block_bytes) {
			if (store)
				*store = s->v[i].p->store;
			return s->v[i].g;
		}
	if (s->n == s->cap) {
		size_t c = s->cap ? 2 * s->cap : 16;
		struct group_held *v = realloc(s->v, c * sizeof(*v));
		if (!v) {
			*err = -ENOMEM;
			return NULL;
		}
		s->v = v;
		s->cap = c;
	}
	struct group_held *h = &s->v[s->n];
	if ((*err = partitions_get(&d->parts, ns, block_bytes, &h->p)))
		return NULL;
	struct idx_store ops;
	partition_ops(h->p, d->block_tokens, &ops);
	struct idx_root root = { .ns = ns };
	memcpy(root.h0, h0, PD_HASH_SIZE);
	if ((*err = idx_group_get(d->idx, &root, fp, &ops, &h->g))) {
		partitions_put(&d->parts, h->p);
		return NULL;
	}
	if (!idx_group_has_store(h->g, h->p->store)) {
		/* The root's blocks are of another size here: a forged record. */
		idx_group_put(d->idx, h->g);
		partitions_put(&d->parts, h->p);
		*err = -EXDEV;
		return NULL;
	}
	h->ns = ns;
	memcpy(h->h0, h0, PD_HASH_SIZE);
	s->n++;
	if (store)
		*store = h->p->store;
	return h->g;
}

void group_set_release(struct group_set *s, struct daemon *d)
{
	for (size_t i = 0; i < s->n; i++) {
		idx_group_put(d->idx, s->v[i].g);
		partitions_put(&d->parts, s->v[i].p);
	}
	free(s->v);
	*s = (struct group_set){ 0 };
}

int groups_record_block(const struct rec_meta *m, uint32_t block_tokens, uint32_t *tokens,
			struct idx_block *b, const char **why)
{
	if (m->payload % ((uint64_t)block_tokens * 4)) {
		*why = "its payload is not a whole number of f32 values per token";
		return -EBADMSG;
	}
	for (uint32_t i = 0; i < block_tokens; i++)
		tokens[i] = pd_token_at(m->tokens, block_tokens, 0, i);
	uint8_t h[PD_HASH_SIZE];
	pd_chain_next(m->depth ? m->parent : m->root, tokens, block_tokens, h);
	if (memcmp(h, m->hash, PD_HASH_SIZE)) {
		*why = "its hash does not follow its chain";
		return -EBADMSG;
	}
	*b = (struct idx_block){ .ns = m->ns, .depth = m->depth, .tokens = tokens,
				 .sum = m->payload_sum };
	memcpy(b->hash, m->hash, PD_HASH_SIZE);
	memcpy(b->parent, m->parent, PD_HASH_SIZE);
	memcpy(b->h0, m->root, PD_HASH_SIZE);
	memcpy(b->fp, m->fp, PD_FP_SIZE);
	return 0;
}
