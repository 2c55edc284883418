/* SPDX-License-Identifier: MIT */
/*
 * The prefixd wire protocol: fixed little-endian frames over a Unix stream
 * socket. docs/PROTOCOL.md describes every message byte by byte; this
 * header is its C form. Decoders validate every length, count and enum
 * before anything is used, and point into the caller's buffer (no copies).
 */
#ifndef PD_WIRE_H
#define PD_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define PD_MAGIC 0x44584650u        /* "PFXD" as little-endian bytes */
#define PD_VERSION 1
#define PD_HDR_SIZE 32
#define PD_HASH_SIZE 32             /* BLAKE2b-256 */
#define PD_FP_SIZE 32               /* model fingerprint */

/* Limits, checked before any allocation. */
#define PD_MAX_BODY (4u << 20)
#define PD_MAX_HASHES 4096          /* blocks in one MATCH or PUBLISH */
#define PD_MAX_BLOCK_TOKENS 4096
#define PD_MAX_SALT 64
#define PD_MAX_MESSAGE 256          /* error text */
#define PD_MAX_FDS 16               /* descriptors with one reply */

enum pd_op {
	PD_OP_HELLO = 1,
	PD_OP_MATCH = 2,
	PD_OP_RELEASE = 3,
	PD_OP_PUBLISH = 4,
	PD_OP_STATS = 5,
	PD_OP_MAX = PD_OP_STATS,
};

enum pd_flag {
	PD_FLAG_REPLY = 1u << 0,
	PD_FLAG_NOREPLY = 1u << 1,  /* RELEASE only: the client does not wait */
	PD_FLAGS_KNOWN = PD_FLAG_REPLY | PD_FLAG_NOREPLY,
};

/* Reply status; non-zero replies carry an error body (a message). */
enum pd_status {
	PD_OK = 0,
	PD_E_MALFORMED = 1,    /* a frame or body that does not decode */
	PD_E_VERSION = 2,      /* no protocol version in common */
	PD_E_STATE = 3,        /* e.g. MATCH before HELLO */
	PD_E_LIMIT = 4,        /* a count or size past the limits above */
	PD_E_NOSPACE = 5,      /* the memory budget is full of leased blocks */
	PD_E_NOTFOUND = 6,     /* unknown lease */
	PD_E_LAYOUT = 7,       /* KV layout the daemon cannot store */
	PD_E_INTERNAL = 8,
	PD_E_DENIED = 9,       /* an admin request from another user */
	PD_STATUS_MAX = PD_E_DENIED,
};

struct pd_hdr {
	uint32_t magic;
	uint16_t version;
	uint8_t op;
	uint8_t flags;
	uint32_t status;
	uint32_t opaque;    /* echoed in the reply */
	uint32_t body_len;
	/* 12 reserved bytes, zero on the wire */
};

/* HELLO: who the client is and what its blocks look like. */
struct pd_hello {
	uint16_t version_min, version_max;
	uint32_t block_tokens;
	uint64_t block_bytes;
	uint32_t layout;        /* 1: [layer][k|v][kv_head][token][head_dim] f32 */
	const uint8_t *fingerprint; /* PD_FP_SIZE */
	uint32_t salt_len;
	const uint8_t *salt;
};

struct pd_hello_reply {
	uint16_t version;
	uint32_t max_hashes;
	uint64_t budget_bytes;
};

/* MATCH: the hash chain of a prompt's full blocks and their tokens. */
struct pd_match {
	uint32_t count;
	const uint8_t *hashes;   /* count x PD_HASH_SIZE */
	const uint8_t *tokens;   /* count x block_tokens x u32 LE */
};

struct pd_place {
	uint32_t arena;
	uint64_t offset;
};

struct pd_arena_desc {
	uint32_t arena;
	uint64_t size;           /* the descriptor travels as SCM_RIGHTS */
};

struct pd_match_reply {
	uint64_t lease;          /* 0 when hit == 0 */
	uint32_t hit;            /* leading blocks found */
	uint32_t new_arenas;     /* descriptors attached, in this order */
	const uint8_t *places;   /* hit x 16 bytes: u32 arena, u32 0, u64 offset */
	const uint8_t *arenas;   /* new_arenas x 16 bytes: u32 arena, u32 0, u64 size */
};

struct pd_release {
	uint64_t lease;
};

/* PUBLISH: blocks whose KV is in the attached staging descriptor, block i
 * at offset i x block_bytes. They continue the prompt right after the last
 * block of `lease` (the client's MATCH hit), or from the root when lease is
 * 0: the parent is a block the daemon confirmed token by token, never a
 * hash the client names, so a hash collision cannot graft a block onto
 * another prompt. */
struct pd_publish {
	uint64_t lease;
	uint32_t count;
	const uint8_t *hashes;   /* count x PD_HASH_SIZE */
	const uint8_t *tokens;   /* count x block_tokens x u32 LE */
};

struct pd_publish_reply {
	uint32_t stored, deduplicated;
};

#define PD_STATS_COUNT 16
/* STATS reply: PD_STATS_COUNT u64 counters, in this order. */
enum pd_stat {
	PD_ST_HITS, PD_ST_MISSES, PD_ST_HIT_TOKENS, PD_ST_BLOCKS, PD_ST_BYTES_USED,
	PD_ST_BUDGET, PD_ST_PUBLISHED, PD_ST_DEDUP, PD_ST_EVICTIONS, PD_ST_CONNECTIONS,
	PD_ST_LEASES, PD_ST_MATCHES, PD_ST_ERRORS, PD_ST_ARENAS, PD_ST_COLLISIONS,
	PD_ST_RESERVED,
};

struct pd_error {
	uint32_t len;
	const char *msg;         /* not NUL-terminated */
};

/* ==== Frames ==== */

/* Writes a header into out[PD_HDR_SIZE]. */
void pd_hdr_encode(const struct pd_hdr *h, uint8_t *out);
/* Decodes and validates a header: magic, known op and flags, zero reserved
 * bytes, body_len <= PD_MAX_BODY, status known. Returns 0 or a PD_E_*. */
int pd_hdr_decode(const uint8_t *in, struct pd_hdr *h);

/* ==== Bodies ====
 * Decoders take the body bytes and return 0 or PD_E_MALFORMED/PD_E_LIMIT;
 * pointers in the result point into body. block_tokens comes from HELLO. */
int pd_hello_decode(const uint8_t *body, size_t len, struct pd_hello *m);
/* The values of a HELLO: versions in order, block_tokens a power of two up
 * to PD_MAX_BLOCK_TOKENS, block_bytes non-zero, the salt within its limit.
 * 0 or the status to answer with (the decoder applies it). */
int pd_hello_check(const struct pd_hello *m);
int pd_hello_reply_decode(const uint8_t *body, size_t len, struct pd_hello_reply *m);
int pd_match_decode(const uint8_t *body, size_t len, uint32_t block_tokens, struct pd_match *m);
int pd_match_reply_decode(const uint8_t *body, size_t len, struct pd_match_reply *m);
int pd_release_decode(const uint8_t *body, size_t len, struct pd_release *m);
int pd_publish_decode(const uint8_t *body, size_t len, uint32_t block_tokens, struct pd_publish *m);
int pd_publish_reply_decode(const uint8_t *body, size_t len, struct pd_publish_reply *m);
int pd_stats_reply_decode(const uint8_t *body, size_t len, uint64_t out[PD_STATS_COUNT]);
int pd_error_decode(const uint8_t *body, size_t len, struct pd_error *m);

/* Encoders write into out (capacity cap) and return the body length, or 0
 * if it does not fit. */
size_t pd_hello_encode(const struct pd_hello *m, uint8_t *out, size_t cap);
size_t pd_hello_reply_encode(const struct pd_hello_reply *m, uint8_t *out, size_t cap);
size_t pd_match_encode(const struct pd_match *m, uint32_t block_tokens, uint8_t *out, size_t cap);
size_t pd_match_reply_encode(uint64_t lease, uint32_t hit, const struct pd_place *places,
			     uint32_t new_arenas, const struct pd_arena_desc *arenas, uint8_t *out,
			     size_t cap);
size_t pd_release_encode(const struct pd_release *m, uint8_t *out, size_t cap);
size_t pd_publish_encode(const struct pd_publish *m, uint32_t block_tokens, uint8_t *out, size_t cap);
size_t pd_publish_reply_encode(const struct pd_publish_reply *m, uint8_t *out, size_t cap);
size_t pd_stats_reply_encode(const uint64_t in[PD_STATS_COUNT], uint8_t *out, size_t cap);
size_t pd_error_encode(const char *msg, uint8_t *out, size_t cap);

/* Entry i of a MATCH reply's places or arenas array. */
struct pd_place pd_place_at(const struct pd_match_reply *m, uint32_t i);
struct pd_arena_desc pd_arena_at(const struct pd_match_reply *m, uint32_t i);
/* Token t of block b of a MATCH or PUBLISH token array. */
uint32_t pd_token_at(const uint8_t *tokens, uint32_t block_tokens, uint32_t b, uint32_t t);

const char *pd_status_str(int status);

#endif
