/* SPDX-License-Identifier: MIT */
/* The session API: run, rewind, freeze, fork, over its KV (kv.c). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"

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
	kv_free(s);
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
	kv_rewind(s, len);
	return 0;
}

int pfx_session_freeze(struct pfx_session *s, struct pfx_error *err)
{
	kv_freeze(s);
	return 0;
}

int pfx_session_fork(struct pfx_session *s, struct pfx_session **out, struct pfx_error *err)
{
	struct pfx_session *c;
	int rc = pfx_session_new(s->m, &c, err);
	if (rc)
		return rc;
	if (kv_copy(c, s)) {
		pfx_session_free(c);
		return pfx_errorf(err, -ENOMEM, "out of memory");
	}
	*out = c;
	return 0;
}

int pfx_session_freeze_at(struct pfx_session *s, size_t len, struct pfx_error *err)
{
	if (len < s->frozen || len > s->len)
		return pfx_errorf(err, -EINVAL,
				  "cannot freeze the first %zu tokens: the session holds %zu, %zu of them frozen",
				  len, s->len, s->frozen);
	kv_freeze_at(s, len);
	return 0;
}

int pfx_session_fork_prefix(struct pfx_session *s, size_t len, struct pfx_session **out,
			    struct pfx_error *err)
{
	size_t B = (size_t)s->m->block_tokens;
	if (len % B || len > s->frozen)
		return pfx_errorf(err, -EINVAL,
				  "cannot fork the first %zu tokens: a prefix must be whole blocks of %zu "
				  "and frozen (%zu are)",
				  len, B, s->frozen);
	struct pfx_session *c;
	int rc = pfx_session_new(s->m, &c, err);
	if (rc)
		return rc;
	if (kv_share_prefix(c, s, len)) {
		pfx_session_free(c);
		return pfx_errorf(err, -ENOMEM, "out of memory");
	}
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
	kern_wmat_to_f32(kv_at(s->m, s->blocks[pos / B]->data,
			      kv_offset(s->m, layer, kv, head, (int)(pos % B))),
			(size_t)c->head_dim, out);
	return 0;
}
