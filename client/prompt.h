/* SPDX-License-Identifier: MIT */
/* Internals of struct prefixd_prompt, shared by prompt.c and client.c. */
#ifndef PD_PROMPT_H
#define PD_PROMPT_H

#include "chain.h"
#include "prefixd.h"

struct prefixd_prompt {
	uint8_t h0[PD_HASH_SIZE];
	uint32_t block_tokens;
	uint32_t *tokens;  /* (cap) */
	uint8_t *hashes;   /* (cap / block_tokens) x PD_HASH_SIZE: one per full block */
	size_t len, cap;
};

/* The HELLO that introduces a layout. */
struct pd_hello pd_hello_of(const struct prefixd_layout *l);
/* Checks a layout as HELLO would, and derives its chain root. 0 or -EINVAL
 * with the reason in prefixd_errmsg(). */
int pd_layout_root(const struct prefixd_layout *l, uint8_t h0[PD_HASH_SIZE]);
/* Makes p the prompt of nblocks full blocks of tokens, keeping the hashes
 * of the blocks it already has in common with them. */
int pd_prompt_set(struct prefixd_prompt *p, const uint32_t *tokens, uint32_t nblocks);
/* Sets the calling thread's prefixd_errmsg(); returns rc. */
int pd_fail(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
