/* SPDX-License-Identifier: MIT */
/*
 * The MAC of a signed remote record (remote_impl.h, docs/FORMAT.md): a
 * random 16-byte nonce, then the Poly1305 tag of the record under a
 * one-time key derived from the daemon's key and that nonce.
 *
 * Why this is sound. Poly1305 is a one-time authenticator: under a key
 * used for one message, a forger who saw that message and its tag
 * succeeds with probability at most 8 * ceil(L / 16) / 2^106 per try
 * (L the bytes of the message: about 2^-85 for a 3 MiB record). The
 * one-time key is keyed BLAKE2b-256 (a PRF) of a context string and the
 * nonce, as NaCl's secretbox takes Poly1305's key from a stream cipher
 * under its nonce. A writer draws each nonce from the system's CSPRNG, so
 * a one-time key is used again only when two 128-bit nonces collide:
 * after 2^40 records, a chance below 2^-48. A reader derives the key from
 * the nonce in the value, so a forger picks the nonce, but under a nonce
 * nobody signed with the key is a PRF output never seen (a guess), and
 * under a nonce a writer used, the forger saw one message and tag: the
 * one-time bound. The tag covers the whole record, header and payload.
 *
 * Why not keyed BLAKE2b over the record, as before: it ran at 0.78 GB/s on
 * this 2-core Xeon, 120 ms of CPU for a 2048-token SmolLM-135M prefix
 * (94 MB), the largest part of a fetch; Poly1305 runs at 2.1 GB/s in
 * libsodium (docs/perf/2026-11-29-remote-fetch.md). A MAC over the header
 * and the payload's XXH3 checksum would be cheaper still, and unsound:
 * XXH3 is no collision-resistant hash, so a writer of the Redis could
 * swap in a payload of the same checksum under a genuine MAC.
 */
#include <string.h>

#include "remote_impl.h"

/* Domain separation: no other use of the daemon's key derives this. */
static const char context[] = "prefixd remote record MAC v2";

static void one_time_key(const struct remote *r, const uint8_t *nonce,
			 uint8_t otk[crypto_onetimeauth_KEYBYTES])
{
	crypto_generichash_state st;
	crypto_generichash_init(&st, r->key, sizeof(r->key), crypto_onetimeauth_KEYBYTES);
	crypto_generichash_update(&st, (const uint8_t *)context, sizeof(context) - 1);
	crypto_generichash_update(&st, nonce, MAC_NONCE_BYTES);
	crypto_generichash_final(&st, otk, crypto_onetimeauth_KEYBYTES);
}

void remote_mac_sign(const struct remote *r, const uint8_t *rec, size_t len,
		     uint8_t mac[MAC_BYTES])
{
	uint8_t otk[crypto_onetimeauth_KEYBYTES];
	randombytes_buf(mac, MAC_NONCE_BYTES);
	one_time_key(r, mac, otk);
	crypto_onetimeauth(mac + MAC_NONCE_BYTES, rec, len, otk);
	sodium_memzero(otk, sizeof(otk));
}

bool remote_mac_ok(const struct remote *r, const uint8_t *rec, size_t len,
		   const uint8_t mac[MAC_BYTES])
{
	uint8_t otk[crypto_onetimeauth_KEYBYTES];
	one_time_key(r, mac, otk);
	/* Constant time in the tag. */
	int rc = crypto_onetimeauth_verify(mac + MAC_NONCE_BYTES, rec, len, otk);
	sodium_memzero(otk, sizeof(otk));
	return rc == 0;
}
