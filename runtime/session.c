/* SPDX-License-Identifier: MIT */
/* Session lifecycle and KV block ownership: reserve, rewind, freeze, fork. */
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

int kv_push(struct pfx_session *s, struct kv_block *b)
{
	if (table_grow(s, s->nblocks + 1))
		return -ENOMEM;
	s->blocks[s->nblocks++] = b;
	return 0;
}

/* Drops blocks that hold no position below upto. */
static void kv_trim(struct pfx_session *s, size_t upto)
{
	size_t B = (size_t)s->m->block_tokens, keep = (upto + B - 1) / B;
	while (s->nblocks > keep)
		block_put(s->blocks[--s->nblocks]);
}

int pfx_session_new(struct pfx_model *m, struct pfx_session **out, struct pfx_error *err)
{
	struct pfx_session *s = calloc(1, sizeof(*s));
	if (!s)
		return pfx_errorf(err, -ENOMEM, "out of memory");
	s->m = m;
	*out = s;
	return 0;
}

void pfx_session_free(struct pfx_session *s)
{
	if (!s)
		return;
	kv_trim(s, 0);
	free(s->blocks);
	free(s);
}

size_t pfx_session_length(const struct pfx_session *s) { return s->len; }
size_t pfx_session_frozen(const struct pfx_session *s) { return s->frozen; }
struct pfx_model *pfx_session_model(const struct pfx_session *s) { return s->m; }

static int run(struct pfx_session *s, const int32_t *tokens, size_t n, enum pfx_logits want,
	       float *logits, bool commit, struct pfx_error *err)
{
	struct pfx_batch_item it = {
		.s = s, .tokens = tokens, .n = n, .commit = commit, .want = want, .logits = logits,
	};
	return pfx_forward(s->m, &it, 1, err);
}

int pfx_session_append(struct pfx_session *s, const int32_t *tokens, size_t n,
		       enum pfx_logits want, float *logits, struct pfx_error *err)
{
	return run(s, tokens, n, want, logits, true, err);
}

int pfx_session_decode(struct pfx_session *s, int32_t token, float *logits, struct pfx_error *err)
{
	return run(s, &token, 1, PFX_LOGITS_LAST, logits, true, err);
}

int pfx_session_run(struct pfx_session *s, const int32_t *tokens, size_t n, enum pfx_logits want,
		    float *logits, struct pfx_error *err)
{
	return run(s, tokens, n, want, logits, false, err);
}

int pfx_session_rewind(struct pfx_session *s, size_t len, struct pfx_error *err)
{
	if (len > s->len)
		return pfx_errorf(err, -EINVAL, "cannot rewind to %zu: the session holds %zu tokens",
				  len, s->len);
	if (len < s->frozen)
		return pfx_errorf(err, -EPERM, "cannot rewind to %zu: the first %zu tokens are frozen",
				  len, s->frozen);
	s->len = len;
	kv_trim(s, len);
	return 0;
}

int pfx_session_freeze(struct pfx_session *s, struct pfx_error *err)
{
	s->frozen = s->len;
	return 0;
}

int pfx_session_fork(struct pfx_session *s, struct pfx_session **out, struct pfx_error *err)
{
	struct pfx_session *c;
	int rc = pfx_session_new(s->m, &c, err);
	if (rc)
		return rc;
	size_t B = (size_t)s->m->block_tokens, shared = s->frozen / B;
	size_t need = (s->len + B - 1) / B;
	if (table_grow(c, need)) {
		pfx_session_free(c);
		return pfx_errorf(err, -ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < need; i++) {
		struct kv_block *b;
		if (i < shared) {
			b = s->blocks[i];
			/* relaxed: the new owner got b through s, which we hold. */
			atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
		} else {
			b = block_new(s->m);
			if (!b) {
				pfx_session_free(c);
				return pfx_errorf(err, -ENOMEM, "out of memory");
			}
			memcpy(b->data, s->blocks[i]->data, kv_block_bytes(s->m));
		}
		c->blocks[c->nblocks++] = b;
	}
	c->len = s->len;
	c->frozen = s->frozen;
	*out = c;
	return 0;
}

int pfx_session_kv(const struct pfx_session *s, int layer, int kv, int head, size_t pos,
		   float *out)
{
	const struct pfx_config *c = &s->m->cfg;
	if (layer < 0 || layer >= c->n_layers || kv < 0 || kv > 1 || head < 0 ||
	    head >= c->n_kv_heads || pos >= s->len)
		return -EINVAL;
	size_t B = (size_t)s->m->block_tokens;
	pfx_wmat_to_f32(kv_at(s->m, s->blocks[pos / B]->data,
			      kv_offset(s->m, layer, kv, head, (int)(pos % B))),
			(size_t)c->head_dim, out);
	return 0;
}
