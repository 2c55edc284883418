/* SPDX-License-Identifier: MIT */
/*
 * The prefixd wire protocol: fixed little-endian frames over a Unix stream
 * socket. docs/PROTOCOL.md describes every message byte by byte; this
 * header is its C form. Decoders validate every length, count and enum
 * before anything is used, and point into the caller's buffer (no copies).
 */
#ifndef PD_WIRE_H
#define PD_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "prefixd_proto.h"

#define PD_MAGIC 0x44584650u        /* "PFXD" as little-endian bytes */
#define PD_VERSION 2
#define PD_HDR_SIZE 32
#define PD_HASH_SIZE PREFIXD_HASH_BYTES
#define PD_FP_SIZE PREFIXD_FINGERPRINT_BYTES

/* Limits, checked before any allocation. */
#define PD_MAX_BODY (4u << 20)
#define PD_MAX_HASHES 4096          /* blocks in one MATCH or PUBLISH */
#define PD_MAX_BLOCK_TOKENS PREFIXD_MAX_BLOCK_TOKENS

/* Bytes of one KV element of a layout; 0 for no layout the protocol knows. */
static inline unsigned pd_layout_elem_bytes(uint32_t layout)
{
	return layout == PREFIXD_LAYOUT_F32 ? 4
	       : layout == PREFIXD_LAYOUT_F16 || layout == PREFIXD_LAYOUT_BF16 ? 2 : 0;
}
#define PD_MAX_SALT PREFIXD_MAX_SALT
#define PD_MAX_ROWS 4096            /* rows of one LIST or STATS reply */
#define PD_MAX_COUNTERS 256         /* counters a STATS reply may carry */
#define PD_MAX_MESSAGE 256          /* error text */
#define PD_MAX_FDS 16               /* descriptors with one reply */

enum pd_op {
	PD_OP_HELLO = 1,
	PD_OP_MATCH = 2,
	PD_OP_RELEASE = 3,
	PD_OP_PUBLISH = 4,
	PD_OP_STATS = 5,
	PD_OP_LIST = 6,      /* admin: cached chains */
	PD_OP_EVICT = 7,     /* admin */
	PD_OP_PIN = 8,       /* admin */
	PD_OP_UNPIN = 9,     /* admin */
	PD_OP_EXPORT = 10,   /* admin: the records of blocks, into a file */
	PD_OP_IMPORT = 11,   /* admin: records from a file */
	PD_OP_MAX = PD_OP_IMPORT,
};

enum pd_flag {
	PD_FLAG_REPLY = 1u << 0,
	PD_FLAG_NOREPLY = 1u << 1,  /* RELEASE only: the client does not wait */
	PD_FLAG_LEASE = 1u << 2,    /* PUBLISH only: lease the chain published */
	PD_FLAG_SHARED = 1u << 3,   /* HELLO only: attach the shared namespace too */
	PD_FLAG_FLIGHT = 1u << 4,   /* MATCH only: single flight (struct pd_flight) */
	PD_FLAGS_KNOWN = PD_FLAG_REPLY | PD_FLAG_NOREPLY | PD_FLAG_LEASE | PD_FLAG_SHARED |
			 PD_FLAG_FLIGHT,
};

/* Reply status; non-zero replies carry an error body (a message). */
enum pd_status {
	PD_OK = 0,
	PD_E_MALFORMED = 1,    /* a frame or body that does not decode */
	PD_E_VERSION = 2,      /* no protocol version in common */
	PD_E_STATE = 3,        /* e.g. MATCH before HELLO */
	PD_E_LIMIT = 4,        /* a count or size past the limits above, or --pin-max */
	PD_E_NOSPACE = 5,      /* HELLO: one block is larger than the budget or the quota */
	PD_E_NOTFOUND = 6,     /* unknown lease, or no such chain or pin (admin) */
	PD_E_LAYOUT = 7,       /* KV layout the daemon cannot store */
	PD_E_INTERNAL = 8,
	PD_E_DENIED = 9,       /* another user's chains, a shared namespace not ours, export/import */
	PD_STATUS_MAX = PD_E_DENIED,
};

/* Sizes of fixed bodies and entries, said once. */
enum pd_size {
	PD_HELLO_REPLY_SIZE = 32,
	PD_PLACE_SIZE = 16,          /* a MATCH reply's place or arena entry */
	PD_MATCH_REPLY_FIXED = 16,
	PD_RELEASE_SIZE = 8,
	PD_PUBLISH_REPLY_SIZE = 16,
	PD_PUBLISH_LEASE_REPLY_SIZE = 24, /* to a PUBLISH with PD_FLAG_LEASE */
	PD_STATS_REPLY_FIXED = 8,
	PD_USAGE_SIZE = 96,          /* a STATS reply's row */
	PD_LIST_SIZE = 56,
	PD_LIST_REPLY_FIXED = 16,
	PD_CHAIN_SIZE = 112,         /* a LIST reply's row */
	PD_EVICT_SIZE = 48,
	PD_EVICT_REPLY_SIZE = 40,
	PD_PIN_SIZE = 40,            /* PIN and UNPIN */
	PD_PIN_REPLY_SIZE = 16,
	PD_EXPORT_SIZE = 80,
	PD_EXPORT_REPLY_SIZE = 16,
	PD_IMPORT_SIZE = 8,
	PD_IMPORT_REPLY_SIZE = 40,
	PD_FLIGHT_SIZE = 8,          /* before a MATCH body with PD_FLAG_FLIGHT */
	PD_FLIGHT_REPLY_SIZE = 8,    /* after its reply */
};

/* Single flight: the 8 bytes a MATCH with PD_FLAG_FLIGHT starts with. */
#define PD_MAX_WAIT_MS 600000u
enum pd_flight_flag {
	PD_FLIGHT_CLAIM = 1u << 0,   /* claim the first missing block if no one has */
	PD_FLIGHT_FLAGS = PD_FLIGHT_CLAIM,
};
struct pd_flight {
	uint32_t wait_ms;        /* at most PD_MAX_WAIT_MS; 0: never wait */
	uint32_t flags;          /* enum pd_flight_flag */
};

/* What a MATCH with PD_FLAG_FLIGHT did, after its reply. */
enum pd_flight_outcome {
	PD_FLIGHT_NONE = 0,      /* nothing claimed, no wait */
	PD_FLIGHT_CLAIMED = 1,   /* this connection holds the claim */
	PD_FLIGHT_WAITED = 2,    /* it waited for another's claim */
	PD_FLIGHT_INHERITED = 3, /* it waited, and the claim passed to it */
	PD_FLIGHT_OUTCOME_MAX = PD_FLIGHT_INHERITED,
};
struct pd_flight_reply {
	uint32_t outcome;        /* enum pd_flight_outcome */
	uint32_t waited_ms;
};

/* Bytes of a MATCH or PUBLISH body of count blocks (PUBLISH: + 8). */
size_t pd_chain_body_size(uint32_t count, uint32_t block_tokens);
/* Bytes of a MATCH reply with hit places and n new arenas. */
size_t pd_match_reply_size(uint32_t hit, uint32_t new_arenas);

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
	uint32_t layout;        /* PREFIXD_LAYOUT_*: [layer][k|v][kv_head][token][head_dim] */
	const uint8_t *fingerprint; /* PD_FP_SIZE */
	uint32_t salt_len;
	const uint8_t *salt;
};

struct pd_hello_reply {
	uint16_t version;
	uint32_t max_hashes;
	uint64_t budget_bytes;
	uint64_t quota_bytes;    /* most one user's blocks may hold */
	uint64_t pin_max_bytes;
};

/* MATCH: the hash chain of a prompt's full blocks and their tokens. */
struct pd_match {
	uint32_t count;
	const uint8_t *hashes;   /* count x PD_HASH_SIZE */
	const uint8_t *tokens;   /* count x block_tokens x u32 LE */
};

struct pd_place {
	uint32_t arena;
	uint32_t flags;          /* enum pd_place_flag */
	uint64_t offset;
};

enum pd_place_flag {
	PD_PLACE_FROM_DISK = 1u << 0, /* read back from the disk tier for this MATCH */
	PD_PLACE_FLAGS = PD_PLACE_FROM_DISK,
};

struct pd_arena_desc {
	uint32_t arena;
	uint64_t size;           /* the descriptor travels as SCM_RIGHTS */
};

struct pd_match_reply {
	uint64_t lease;          /* 0 when hit == 0 */
	uint32_t hit;            /* leading blocks found */
	uint32_t new_arenas;     /* descriptors attached, in this order */
	const uint8_t *places;   /* hit x 16 bytes: u32 arena, u32 flags, u64 offset */
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

/* Why a PUBLISH stopped before its last block. */
enum pd_stop {
	PD_STOP_NONE = 0,       /* every block stored or already there */
	PD_STOP_COLLISION = 1,  /* a block's key is another prompt's */
	PD_STOP_BUDGET = 2,     /* the memory budget is full of leased or pinned blocks */
	PD_STOP_QUOTA = 3,      /* the user's quota is full of their leased or pinned blocks */
	PD_STOP_MAX = PD_STOP_QUOTA,
};

struct pd_publish_reply {
	uint32_t stored, deduplicated;
	uint32_t stop;           /* enum pd_stop */
	uint64_t lease;          /* PD_FLAG_LEASE: the chain through the last block
				    stored or already there; 0 if none */
};

/* STATS reply: counters (PREFIXD_COUNTERS order), then one row of usage
 * per (user, model). */
#define PD_ST_ENUM_(name, kind, help) PD_ST_##name,
enum pd_stat { PREFIXD_COUNTERS(PD_ST_ENUM_) PD_STATS_COUNT };
#undef PD_ST_ENUM_

struct pd_usage {
	uint32_t uid;
	uint8_t fp[PD_FP_SIZE];
	uint64_t blocks, bytes, pinned_bytes, hits, hit_tokens, query_tokens, evictions;
};

struct pd_stats_reply {
	uint32_t ncounters;      /* as sent; counters past PD_STATS_COUNT are ignored */
	uint64_t v[PD_STATS_COUNT]; /* those not sent are 0 */
	uint32_t nrows;
	const uint8_t *rows;     /* nrows x PD_USAGE_SIZE */
};

/* A chain, as LIST names it: its last block's hash in the user's namespace. */
struct pd_id {
	uint8_t key[PD_HASH_SIZE];
	uint32_t uid;
};

enum pd_list_flag {
	PD_LIST_USER = 1u << 0,
	PD_LIST_MODEL = 1u << 1,
};

/* LIST: chains ending at a leaf or at a pin, a page at a time. */
struct pd_list {
	uint64_t cursor;         /* 0 to start; then the reply's next */
	uint32_t max_rows;       /* 1 .. PD_MAX_ROWS */
	uint32_t flags;          /* enum pd_list_flag */
	uint32_t uid;
	uint8_t fp[PD_FP_SIZE];
};

enum pd_chain_flag {
	PD_CHAIN_PINNED = 1u << 0,
	PD_CHAIN_MEMORY = 1u << 1,
	PD_CHAIN_DISK = 1u << 2,
	PD_CHAIN_REMOTE = 1u << 3,  /* its last block: this daemon wrote it to or read it from Redis */
	PD_CHAIN_FLAGS = PD_CHAIN_PINNED | PD_CHAIN_MEMORY | PD_CHAIN_DISK | PD_CHAIN_REMOTE,
};

struct pd_chain_row {
	struct pd_id id;
	uint8_t fp[PD_FP_SIZE];
	uint32_t blocks, tokens, leases, idle_s, flags, pin_ttl_s;
	uint64_t bytes, hits;
};

struct pd_list_reply {
	uint64_t next;           /* 0: no more */
	uint32_t nrows;
	const uint8_t *rows;     /* nrows x PD_CHAIN_SIZE */
};

enum pd_evict_by {
	PD_EVICT_ALL = 1,
	PD_EVICT_ID = 2,
	PD_EVICT_MODEL = 3,
	PD_EVICT_USER = 4,
	PD_EVICT_IDLE = 5,
	PD_EVICT_MAX = PD_EVICT_IDLE,
};

struct pd_evict {
	uint32_t by;             /* enum pd_evict_by */
	uint32_t uid;            /* USER, and ID's namespace */
	uint64_t idle_s;         /* IDLE */
	uint8_t key[PD_HASH_SIZE]; /* ID: the chain's key; MODEL: the fingerprint */
};

struct pd_evict_reply {
	uint64_t blocks, bytes;  /* evicted */
	uint64_t kept_leased, kept_pinned, kept_parent; /* selected blocks that stay */
};

/* EXPORT: the records (docs/FORMAT.md, "Records") of the selected
 * blocks, parents first, written to the one descriptor attached (a
 * regular file open for writing). Selectors combine; none: every block. */
enum pd_export_flag {
	PD_EXPORT_USER = 1u << 0,   /* uid's blocks */
	PD_EXPORT_MODEL = 1u << 1,  /* model fp's blocks */
	PD_EXPORT_ID = 1u << 2,     /* the blocks of chain id, from its first */
	PD_EXPORT_FLAGS = 7,
};

struct pd_export {
	uint32_t flags;
	uint32_t uid;
	uint8_t fp[PD_FP_SIZE];
	struct pd_id id;
};

struct pd_export_reply {
	uint64_t blocks, bytes;  /* records written, and their bytes */
};

/* IMPORT: records read from the one descriptor attached (a regular file),
 * all checked before any is stored. */
enum pd_import_flag {
	PD_IMPORT_USER = 1u << 0,   /* into uid's namespace, whoever's they were */
	PD_IMPORT_FLAGS = 1,
};

struct pd_import {
	uint32_t flags;
	uint32_t uid;
};

struct pd_import_reply {
	uint64_t blocks;         /* stored */
	uint64_t dedup;          /* there already */
	uint64_t skipped;        /* without their parent (in the file or the cache) */
	uint64_t refused;        /* the budget or a quota was full of held blocks */
	uint64_t bytes;          /* KV bytes stored */
};

struct pd_pin {
	struct pd_id id;
	uint32_t ttl_s;          /* PIN: 0 for no end */
};

struct pd_pin_reply {
	uint64_t pinned_bytes, pin_max;
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
/* The first PD_FLIGHT_SIZE bytes of body (the MATCH body follows). */
int pd_flight_decode(const uint8_t *body, size_t len, struct pd_flight *m);
/* The last PD_FLIGHT_REPLY_SIZE bytes of body (the MATCH reply precedes). */
int pd_flight_reply_decode(const uint8_t *body, size_t len, struct pd_flight_reply *m);
int pd_release_decode(const uint8_t *body, size_t len, struct pd_release *m);
int pd_publish_decode(const uint8_t *body, size_t len, uint32_t block_tokens, struct pd_publish *m);
int pd_publish_reply_decode(const uint8_t *body, size_t len, struct pd_publish_reply *m);
int pd_stats_reply_decode(const uint8_t *body, size_t len, struct pd_stats_reply *m);
int pd_list_decode(const uint8_t *body, size_t len, struct pd_list *m);
int pd_list_reply_decode(const uint8_t *body, size_t len, struct pd_list_reply *m);
int pd_evict_decode(const uint8_t *body, size_t len, struct pd_evict *m);
int pd_export_decode(const uint8_t *body, size_t len, struct pd_export *m);
int pd_export_reply_decode(const uint8_t *body, size_t len, struct pd_export_reply *m);
int pd_import_decode(const uint8_t *body, size_t len, struct pd_import *m);
int pd_import_reply_decode(const uint8_t *body, size_t len, struct pd_import_reply *m);
int pd_evict_reply_decode(const uint8_t *body, size_t len, struct pd_evict_reply *m);
int pd_pin_decode(const uint8_t *body, size_t len, struct pd_pin *m);
int pd_pin_reply_decode(const uint8_t *body, size_t len, struct pd_pin_reply *m);
int pd_error_decode(const uint8_t *body, size_t len, struct pd_error *m);

/* Encoders write into out (capacity cap) and return the body length, or 0
 * if it does not fit. */
size_t pd_hello_encode(const struct pd_hello *m, uint8_t *out, size_t cap);
size_t pd_hello_reply_encode(const struct pd_hello_reply *m, uint8_t *out, size_t cap);
size_t pd_match_encode(const struct pd_match *m, uint32_t block_tokens, uint8_t *out, size_t cap);
size_t pd_match_reply_encode(uint64_t lease, uint32_t hit, const struct pd_place *places,
			     uint32_t new_arenas, const struct pd_arena_desc *arenas, uint8_t *out,
			     size_t cap);
size_t pd_flight_encode(const struct pd_flight *m, uint8_t *out, size_t cap);
size_t pd_flight_reply_encode(const struct pd_flight_reply *m, uint8_t *out, size_t cap);
size_t pd_release_encode(const struct pd_release *m, uint8_t *out, size_t cap);
size_t pd_publish_encode(const struct pd_publish *m, uint32_t block_tokens, uint8_t *out, size_t cap);
/* leased: the 24-byte reply to a PUBLISH with PD_FLAG_LEASE. */
size_t pd_publish_reply_encode(const struct pd_publish_reply *m, bool leased, uint8_t *out,
			       size_t cap);
/* rows: nrows usages (the body is PD_STATS_REPLY_FIXED + 8 x PD_STATS_COUNT
 * + nrows x PD_USAGE_SIZE bytes). */
size_t pd_stats_reply_encode(const uint64_t v[PD_STATS_COUNT], const struct pd_usage *rows,
			     uint32_t nrows, uint8_t *out, size_t cap);
size_t pd_list_encode(const struct pd_list *m, uint8_t *out, size_t cap);
size_t pd_list_reply_encode(uint64_t next, const struct pd_chain_row *rows, uint32_t nrows,
			    uint8_t *out, size_t cap);
size_t pd_evict_encode(const struct pd_evict *m, uint8_t *out, size_t cap);
size_t pd_export_encode(const struct pd_export *m, uint8_t *out, size_t cap);
size_t pd_export_reply_encode(const struct pd_export_reply *m, uint8_t *out, size_t cap);
size_t pd_import_encode(const struct pd_import *m, uint8_t *out, size_t cap);
size_t pd_import_reply_encode(const struct pd_import_reply *m, uint8_t *out, size_t cap);
size_t pd_evict_reply_encode(const struct pd_evict_reply *m, uint8_t *out, size_t cap);
size_t pd_pin_encode(const struct pd_pin *m, uint8_t *out, size_t cap);
size_t pd_pin_reply_encode(const struct pd_pin_reply *m, uint8_t *out, size_t cap);
size_t pd_error_encode(const char *msg, uint8_t *out, size_t cap);

/* Entry i of a MATCH reply's places or arenas array. */
struct pd_place pd_place_at(const struct pd_match_reply *m, uint32_t i);
struct pd_arena_desc pd_arena_at(const struct pd_match_reply *m, uint32_t i);
/* Row i of a STATS or LIST reply. */
struct pd_usage pd_usage_at(const struct pd_stats_reply *m, uint32_t i);
struct pd_chain_row pd_chain_at(const struct pd_list_reply *m, uint32_t i);
/* Token t of block b of a MATCH or PUBLISH token array. */
uint32_t pd_token_at(const uint8_t *tokens, uint32_t block_tokens, uint32_t b, uint32_t t);

const char *pd_status_str(int status);

#endif
