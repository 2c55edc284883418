/* SPDX-License-Identifier: MIT */
/* Groups made without a connection (groups.h). */
#include "groups.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct group_held {
	struct partition *p;
	struct idx_group *g;
	uint32_t ns;
	uint8_t h0[PD_HASH_SIZE];
};

struct idx_group *group_set_get(struct group_set *s, struct daemon *d, uint32_t ns,
				const uint8_t *h0, const uint8_t *fp, uint64_t block_bytes,
				struct pd_store **store, int *err)
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
