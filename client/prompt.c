/* SPDX-License-Identifier: MIT */
/*
 * A prompt and its hash chain, hashed as tokens are appended: the chain is
 * the one part of matching that grows with the prompt's length (BLAKE2b,
 * ~6 ns a token here), and this way it is paid while the prompt arrives,
 * not when it is matched.
 */
#include "prompt.h"

#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

struct pd_hello pd_hello_of(const struct prefixd_layout *l)
{
	return (struct pd_hello){ PD_VERSION, PD_VERSION, l->block_tokens, l->block_bytes,
				  l->layout ? l->layout : PREFIXD_LAYOUT_F32, l->fingerprint,
				  l->salt_len, l->salt };
}

int pd_layout_root(const struct prefixd_layout *l, uint8_t h0[PD_HASH_SIZE])
{
	struct pd_hello m = pd_hello_of(l);
	int rc = pd_hello_check(&m);
	if (rc == PD_E_LIMIT && l->salt_len > PREFIXD_MAX_SALT)
		return pd_fail(-EINVAL, "a salt of %u bytes is longer than %d", l->salt_len,
			       PREFIXD_MAX_SALT);
	if (rc)
		return pd_fail(-EINVAL,
			       "block_tokens must be a power of two up to %d and block_bytes non-zero",
			       PD_MAX_BLOCK_TOKENS);
	if (!pd_layout_elem_bytes(m.layout))
		return pd_fail(-EINVAL, "layout %u is none of PREFIXD_LAYOUT_F32, _F16, _BF16", m.layout);
	if (sodium_init() < 0)
		return pd_fail(-EIO, "libsodium failed to initialise");
	pd_chain_root(&m, h0);
	return 0;
}

int prefixd_prompt_new(const struct prefixd_layout *layout, struct prefixd_prompt **out)
{
	struct prefixd_prompt *p = calloc(1, sizeof(*p));
	if (!p)
		return pd_fail(-ENOMEM, "out of memory");
	int rc = pd_layout_root(layout, p->h0);
	if (rc) {
		free(p);
		return rc;
	}
	p->block_tokens = layout->block_tokens;
	*out = p;
	return 0;
}

void prefixd_prompt_free(struct prefixd_prompt *p)
{
	if (!p)
		return;
	free(p->tokens);
	free(p->hashes);
	free(p);
}

size_t prefixd_prompt_length(const struct prefixd_prompt *p) { return p->len; }

void prefixd_prompt_truncate(struct prefixd_prompt *p, size_t n)
{
	if (n < p->len)
		p->len = n;
}

static int reserve(struct prefixd_prompt *p, size_t len)
{
	if (len <= p->cap)
		return 0;
	size_t bt = p->block_tokens, cap = p->cap ? p->cap : 16 * bt;
	while (cap < len)
		cap *= 2;
	if (cap > SIZE_MAX / PD_HASH_SIZE / sizeof(uint32_t))
		return pd_fail(-E2BIG, "a prompt of %zu tokens is too long", len);
	uint32_t *t = realloc(p->tokens, cap * sizeof(*t));
	if (t)
		p->tokens = t;
	uint8_t *h = realloc(p->hashes, cap / bt * PD_HASH_SIZE);
	if (h)
		p->hashes = h;
	if (!t || !h)
		return pd_fail(-ENOMEM, "out of memory for a prompt of %zu tokens", len);
	p->cap = cap;
	return 0;
}

int prefixd_prompt_append(struct prefixd_prompt *p, const uint32_t *tokens, size_t n)
{
	if (n > SIZE_MAX / 2 - p->len)
		return pd_fail(-E2BIG, "a prompt of that many tokens is too long");
	int rc = reserve(p, p->len + n);
	if (rc || !n)
		return rc;
	size_t bt = p->block_tokens, done = p->len / bt;
	memcpy(p->tokens + p->len, tokens, n * sizeof(*tokens));
	p->len += n;
	size_t full = p->len / bt;
	if (full > done)
		pd_chain(done ? p->hashes + (done - 1) * PD_HASH_SIZE : p->h0, p->tokens + done * bt,
			 (uint32_t)bt, (uint32_t)(full - done), p->hashes + done * PD_HASH_SIZE);
	return 0;
}

int pd_prompt_set(struct prefixd_prompt *p, const uint32_t *tokens, uint32_t nblocks)
{
	size_t bt = p->block_tokens, have = p->len / bt, same = 0;
	while (same < nblocks && same < have &&
	       !memcmp(tokens + same * bt, p->tokens + same * bt, bt * sizeof(*tokens)))
		same++;
	if (same == nblocks)
		return 0; /* a prefix of what it holds: those hashes are valid */
	p->len = same * bt;
	return prefixd_prompt_append(p, tokens + same * bt, (nblocks - same) * bt);
}
