/* SPDX-License-Identifier: MIT */
/*
 * The prefix hash chain (BLAKE2b-256, libsodium). Clients and the daemon
 * compute it the same way: the daemon derives each connection's root from
 * its HELLO, and checks that published hashes follow the chain, so no
 * client can file a block under a key that names another prompt.
 *
 *   h0  = H("prefixd-chain-v1" || u32 layout || u32 block_tokens ||
 *           u64 block_bytes || fingerprint[32] || u32 salt_len || salt)
 *   h_i = H(h_{i-1} || tokens of block i as u32 little-endian)
 */
#ifndef PD_CHAIN_H
#define PD_CHAIN_H

#include <stdint.h>

#include "wire.h"

void pd_chain_root(const struct pd_hello *hello, uint8_t h0[PD_HASH_SIZE]);
/* out may equal prev. */
void pd_chain_next(const uint8_t prev[PD_HASH_SIZE], const uint32_t *tokens,
		   uint32_t block_tokens, uint8_t out[PD_HASH_SIZE]);
/* hashes[i] = h_{i+1} for nblocks consecutive blocks of tokens, from prev. */
void pd_chain(const uint8_t prev[PD_HASH_SIZE], const uint32_t *tokens, uint32_t block_tokens,
	      uint32_t nblocks, uint8_t *hashes);

#endif
