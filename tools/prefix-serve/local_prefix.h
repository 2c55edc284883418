/* SPDX-License-Identifier: MIT */
/*
 * The process's own frozen prompts: sessions holding a prompt's full
 * blocks, from which later sequences fork the longest shared part
 * (identical system prompts computed once per process even without
 * prefixd). Kept under a byte budget, least recently used evicted first.
 * Used by the engine thread alone.
 */
#ifndef SERVE_LOCAL_PREFIX_H
#define SERVE_LOCAL_PREFIX_H

#include <stddef.h>
#include <stdint.h>

#include <prefixd-runtime/session.h>

struct local_prefix;

/* budget: KV bytes (counted as tokens times bytes_per_token). -ENOMEM. */
int local_prefix_new(size_t budget, size_t block_tokens, size_t bytes_per_token,
		     struct local_prefix **out);
void local_prefix_free(struct local_prefix *l);

/* The session holding the longest run of whole blocks of p[0, n), at most
 * max tokens, and that length in *len; NULL (and 0) when none. Valid
 * until the next local_prefix_put. */
struct pfx_session *local_prefix_find(struct local_prefix *l, const int32_t *p, size_t n,
				      size_t max, size_t *len);
/* Keeps the first len tokens of s (frozen, whole blocks), which are p's,
 * sharing their blocks. 0, or -errno with err (nothing kept then). */
int local_prefix_put(struct local_prefix *l, struct pfx_session *s, const int32_t *p, size_t len,
		     struct pfx_error *err);
/* Bytes kept, entries. */
size_t local_prefix_bytes(const struct local_prefix *l);
size_t local_prefix_count(const struct local_prefix *l);

#endif
