/* SPDX-License-Identifier: MIT */
#include "chain.h"

#include <sodium.h>
#include <string.h>

static void put_le(crypto_generichash_state *st, uint64_t v, int bytes)
{
	uint8_t b[8];
	for (int i = 0; i < bytes; i++)
		b[i] = (uint8_t)(v >> 8 * i);
	crypto_generichash_update(st, b, (size_t)bytes);
}

void pd_chain_root(const struct pd_hello *m, uint8_t h0[PD_HASH_SIZE])
{
	static const char tag[] = "prefixd-chain-v1";
	crypto_generichash_state st;
	crypto_generichash_init(&st, NULL, 0, PD_HASH_SIZE);
	crypto_generichash_update(&st, (const uint8_t *)tag, sizeof(tag) - 1);
	put_le(&st, m->layout, 4);
	put_le(&st, m->block_tokens, 4);
	put_le(&st, m->block_bytes, 8);
	crypto_generichash_update(&st, m->fingerprint, PD_FP_SIZE);
	put_le(&st, m->salt_len, 4);
	if (m->salt_len)
		crypto_generichash_update(&st, m->salt, m->salt_len);
	crypto_generichash_final(&st, h0, PD_HASH_SIZE);
}

void pd_chain_next(const uint8_t prev[PD_HASH_SIZE], const uint32_t *tokens,
		   uint32_t block_tokens, uint8_t out[PD_HASH_SIZE])
{
	crypto_generichash_state st;
	crypto_generichash_init(&st, NULL, 0, PD_HASH_SIZE);
	crypto_generichash_update(&st, prev, PD_HASH_SIZE);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	crypto_generichash_update(&st, (const uint8_t *)tokens, (size_t)block_tokens * 4);
#else
	/* Little-endian whatever the host, in chunks that stay on the stack. */
	uint8_t buf[1024];
	size_t n = 0;
	for (uint32_t t = 0; t < block_tokens; t++) {
		for (int i = 0; i < 4; i++)
			buf[n++] = (uint8_t)(tokens[t] >> 8 * i);
		if (n == sizeof(buf)) {
			crypto_generichash_update(&st, buf, n);
			n = 0;
		}
	}
	crypto_generichash_update(&st, buf, n);
#endif
	crypto_generichash_final(&st, out, PD_HASH_SIZE);
}

void pd_chain(const uint8_t prev[PD_HASH_SIZE], const uint32_t *tokens, uint32_t block_tokens,
	      uint32_t nblocks, uint8_t *hashes)
{
	for (uint32_t b = 0; b < nblocks; b++)
		pd_chain_next(b ? hashes + (size_t)(b - 1) * PD_HASH_SIZE : prev,
			      tokens + (size_t)b * block_tokens, block_tokens,
			      hashes + (size_t)b * PD_HASH_SIZE);
}
