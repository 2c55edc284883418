/* SPDX-License-Identifier: MIT */
/*
 * The disk tier's record of one block: a self-describing, checked byte
 * format (docs/FORMAT.md, "Records", has the layout). Pure code: no
 * I/O, no allocation. Every record read back is untrusted input; a record
 * that fails a check is never served.
 *
 * A record is a head (a fixed 192-byte header, the block's token ids, zero
 * padding to a multiple of REC_ALIGN) and then the payload (the block's KV
 * bytes, zero padding to a multiple of REC_ALIGN). Both parts start and end
 * on REC_ALIGN boundaries, so the payload can be read with O_DIRECT straight
 * into a page-aligned slot and written from one. Two XXH3-64 checksums: one
 * over the head, one over the payload alone, so a restore checks the head
 * before it reads the payload and checks the payload where it landed (no
 * second copy): rec_check_head, read, rec_check_payload. rec_check checks a
 * whole record in one buffer.
 */
#ifndef PD_RECORD_H
#define PD_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "index.h"
#include "wire.h"

#define REC_VERSION 1
#define REC_HDR_SIZE 192            /* the fixed header; tokens follow */
#define REC_ALIGN 4096              /* the head and the payload's extent */
#define REC_MAX_PAYLOAD (1u << 30)  /* bytes of KV in one block */
#define REC_MAX_BLOCK_TOKENS PD_MAX_BLOCK_TOKENS

/* What a record says of its block. rec_encode reads the fields above the
 * line; rec_check and rec_check_head fill them all. */
struct rec_meta {
	uint32_t ns;                 /* the user's namespace (uid) */
	uint32_t block_tokens;
	uint32_t depth;              /* blocks before this one in its chain */
	uint64_t payload;            /* KV bytes */
	uint8_t fp[PD_FP_SIZE];      /* the model's fingerprint */
	uint8_t root[PD_HASH_SIZE];  /* the chain root h0 (pd_chain_root) */
	uint8_t hash[PD_HASH_SIZE];  /* this block's chain hash */
	uint8_t parent[PD_HASH_SIZE]; /* the previous block's; zero when depth is 0 */
	/* ---- set by the checks ---- */
	const uint8_t *tokens;       /* in the checked buffer: block_tokens x u32 LE
				      * (pd_token_at(tokens, block_tokens, 0, t)) */
	uint64_t payload_off;        /* where the payload starts: rec_head_size */
	uint64_t payload_sum;        /* its XXH3-64, for rec_check_payload */
};

/* What the reader asks for; a zero or NULL field accepts any value. A
 * record that is intact but not what was asked for is refused with
 * -EACCES: another user's or model's record planted in the directory, or
 * one filed under another block's name. */
struct rec_expect {
	uint32_t block_tokens;
	uint64_t payload;
	const struct idx_root *root; /* namespace and h0, both must match */
	const uint8_t *fp;           /* PD_FP_SIZE */
	const uint8_t *hash;         /* PD_HASH_SIZE: the block looked for */
};

/* The fields above the line of the record of an index block (b's store
 * gives the payload's size). */
void rec_meta_of(const struct idx_block *b, uint32_t block_tokens, struct rec_meta *m);

/* Bytes of a record's head (header, tokens, padding): where its payload
 * starts. 0 when block_tokens is 0 or past REC_MAX_BLOCK_TOKENS. */
size_t rec_head_size(uint32_t block_tokens);
/* Bytes of the payload's extent: payload rounded up to REC_ALIGN. 0 when
 * payload is 0 or past REC_MAX_PAYLOAD. */
size_t rec_payload_span(uint64_t payload);
/* Bytes of a whole record, a multiple of REC_ALIGN; 0 when a size is out of
 * range (both limits keep it below INT_MAX). */
size_t rec_size(uint32_t block_tokens, uint64_t payload);

/* Little-endian integers of `bytes` bytes, as records (and the disk
 * tier's manifest) store them. */
void rec_put_le(uint8_t *p, uint64_t v, int bytes);
uint64_t rec_get_le(const uint8_t *p, int bytes);

/* The payload's checksum (XXH3-64, seed 0). */
uint64_t rec_payload_sum(const void *payload, uint64_t len);

/*
 * Writes a whole record of m (fields above the line), tokens (block_tokens
 * ids, host order) and payload (m->payload bytes) into out. Returns its
 * size (rec_size), -EINVAL for sizes out of range or a parent that does not
 * fit the depth (zero exactly when depth is 0), -ENOBUFS when cap is less
 * than the size; nothing is written on an error.
 */
int rec_encode(const struct rec_meta *m, const uint32_t *tokens, const void *payload,
	       uint8_t *out, size_t cap);
/* The head alone (rec_head_size bytes), for a writer that writes the
 * payload from where it is: payload_sum is rec_payload_sum of it. Same
 * returns as rec_encode. */
int rec_encode_head(const struct rec_meta *m, const uint32_t *tokens, uint64_t payload_sum,
		    uint8_t *out, size_t cap);

/*
 * Checks a whole record of len bytes against want (NULL: any intact
 * record). Returns 0 and fills *out (tokens points into buf), or:
 *   -EBADMSG  not a record, or a damaged one: magic, header size, flags,
 *             reserved bytes, sizes out of range or not matching len,
 *             payload offset, a checksum, padding not zero, depth and
 *             parent;
 *   -ENOTSUP  a record of another format version;
 *   -EACCES   an intact record, but not the one want describes.
 * *why (if why is not NULL) is then a static string naming the check
 * that failed. Nothing past buf[len) is read; sizes are checked against
 * their limits before any arithmetic.
 */
int rec_check(const uint8_t *buf, size_t len, const struct rec_expect *want,
	      struct rec_meta *out, const char **why);
/* The same checks for the head alone: buf holds at least rec_head_size
 * bytes of the record (what follows is ignored). On 0, out->payload_off
 * and out->payload are where and how much to read next. */
int rec_check_head(const uint8_t *buf, size_t len, const struct rec_expect *want,
		   struct rec_meta *out, const char **why);
/* Checks the payload of a record whose head passed: len is m->payload (the
 * KV alone) or rec_payload_span(m->payload) (with its padding, which must
 * be zero). 0 or -EBADMSG, *why as above. */
int rec_check_payload(const struct rec_meta *m, const void *payload, size_t len,
		      const char **why);

#endif
