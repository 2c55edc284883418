/* SPDX-License-Identifier: MIT */
/*
 * Sessions: a sequence's KV state on top of a model, and the forward pass.
 *
 * A session's KV lives in blocks of pfx_model_block_tokens() tokens laid
 * out [layer][k|v][kv_head][token][head_dim]. Positions are implied by the
 * session's length: callers never pass them, and batches are ragged (no
 * padding, no masks). A frozen prefix can no longer change; forks share it.
 *
 * A session is used by one thread at a time; different sessions of one
 * model may be used from different threads (forward passes of one model
 * are serialised internally, so batch them for throughput).
 */
#ifndef PFX_SESSION_H
#define PFX_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

struct pfx_session;

enum pfx_logits {
	PFX_LOGITS_NONE,  /* compute the KV only */
	PFX_LOGITS_LAST,  /* vocab floats: the last new position */
	PFX_LOGITS_ALL,   /* n x vocab floats: every new position */
};

/* Returns 0 and *out (free with pfx_session_free), or -ENOMEM. */
int pfx_session_new(struct pfx_model *m, struct pfx_session **out, struct pfx_error *err);
void pfx_session_free(struct pfx_session *s);

size_t pfx_session_length(const struct pfx_session *s);
size_t pfx_session_frozen(const struct pfx_session *s);
struct pfx_model *pfx_session_model(const struct pfx_session *s);

/*
 * Runs n >= 1 tokens at positions length .. length + n - 1 and commits
 * them (length grows by n). logits receives what `want` asks for and may be
 * NULL for PFX_LOGITS_NONE. On error nothing is committed.
 */
int pfx_session_append(struct pfx_session *s, const int32_t *tokens, size_t n,
		       enum pfx_logits want, float *logits, struct pfx_error *err);
/* One token, logits of its position (vocab floats). */
int pfx_session_decode(struct pfx_session *s, int32_t token, float *logits,
		       struct pfx_error *err);
/* As append, but the tokens are not committed: length and the KV of
 * positions below it are unchanged (TransformerLens' frozen-cache use). */
int pfx_session_run(struct pfx_session *s, const int32_t *tokens, size_t n,
		    enum pfx_logits want, float *logits, struct pfx_error *err);
/* Sets the length back to len (>= the frozen length). */
int pfx_session_rewind(struct pfx_session *s, size_t len, struct pfx_error *err);
/* Freezes the current length: later calls can neither rewind below it nor
 * change its KV, and forks share those blocks instead of copying them. */
int pfx_session_freeze(struct pfx_session *s, struct pfx_error *err);
/* A new session with the same tokens: frozen full blocks are shared, the
 * private tail is copied. */
int pfx_session_fork(struct pfx_session *s, struct pfx_session **out, struct pfx_error *err);

/* Freezes the first len tokens (frozen length <= len <= length): as
 * pfx_session_freeze at that length, while the tokens after it stay
 * private (a prompt's full blocks kept, its last partial block and what
 * follows still growing). 0, or -EINVAL out of that range. */
int pfx_session_freeze_at(struct pfx_session *s, size_t len, struct pfx_error *err);
/* A new session holding the first len tokens of s, sharing their blocks
 * (attached ones too, which keep their lease): len must be a multiple of
 * the block size and at most s's frozen length (-EINVAL), so that a
 * frozen prompt can start any number of sequences. -ENOMEM. */
int pfx_session_fork_prefix(struct pfx_session *s, size_t len, struct pfx_session **out,
			    struct pfx_error *err);

/* Copies the head_dim values of K (kv = 0) or V (kv = 1) of one layer, kv
 * head and position < length into out as f32 (keys after rotary; 16-bit KV
 * converted). 0, or -EINVAL if out of range. */
int pfx_session_kv(const struct pfx_session *s, int layer, int kv, int head, size_t pos,
		   float *out);

/* One entry of a ragged batch. */
struct pfx_batch_item {
	struct pfx_session *s;
	const int32_t *tokens;
	size_t n;
	bool commit;
	enum pfx_logits want;
	float *logits;
};

/*
 * Runs every item's tokens through the model together: the projections see
 * all new tokens of all sessions as one matrix, attention runs per session.
 * Each session may appear once. On error nothing is committed.
 */
int pfx_forward(struct pfx_model *m, struct pfx_batch_item *items, size_t nitems,
		struct pfx_error *err);

#ifdef __cplusplus
}
#endif

#endif
