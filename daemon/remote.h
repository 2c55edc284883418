/* SPDX-License-Identifier: MIT */
/*
 * The remote tier: blocks of the namespaces that go remote, shared by the
 * daemons of several hosts through Redis (remote/kv.h speaks to it). A
 * published block is written behind, by one thread with its own client, as
 * the disk tier's record (record.h) under one key per block, signed with a
 * MAC when a key file is given (docs/FORMAT.md, "Remote records"). A MATCH
 * that misses memory and disk asks for the chain's next blocks in one
 * pipelined GET, checks each record whole and imports it before its hit
 * is counted: nothing unchecked reaches a client.
 *
 * A slow or dead Redis costs a MATCH at most the timeout, and after a few
 * failures nothing: a circuit breaker stops asking for a backoff that
 * grows, then lets one request probe. Writes queue in a bounded queue and
 * are dropped (and counted) when Redis cannot keep up.
 */
#ifndef PD_REMOTE_H
#define PD_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "index.h"

#define REMOTE_MAX_SEEDS 16
#define REMOTE_DEFAULT_TIMEOUT_MS 50

struct store;

/* The flags (--remote ...), as main parses them. */
struct remote_cfg {
	const char *seeds[REMOTE_MAX_SEEDS];
	uint32_t n_seeds;
	bool cluster;
	const char *key_file;   /* NULL: records unsigned */
	const char *auth_file;  /* NULL: no AUTH */
	bool all_users;         /* per-user namespaces go remote too */
	uint64_t ttl_s;         /* 0: no expiry */
	uint32_t timeout_ms;
	uint32_t index_max;     /* keys the index of Redis's keys holds at most; 0: no index */
};

struct remote_stats {
	uint64_t hits;          /* blocks fetched, checked and imported */
	uint64_t misses;        /* lookups that found no next block */
	uint64_t bytes_in, bytes_out;
	uint64_t writes;        /* records written */
	uint64_t write_drops;   /* blocks not written: the queue was full, or Redis failed */
	uint64_t errors;        /* round trips that failed (timeouts, refused, errors) */
	uint64_t bad_checksum;  /* values that are no intact record (or cut short) */
	uint64_t bad_foreign;   /* intact records of another block, model or namespace */
	uint64_t bad_mac;       /* records without a valid MAC (with a key) */
	uint64_t breaker_opens; /* times the breaker stopped the lookups */
	uint64_t skipped;       /* lookups not made: the breaker was open */
	uint64_t fetch_us;      /* time MATCHes spent on the remote, in all */
	uint64_t index_skips;   /* lookups not made: the index said Redis holds no such key */
	uint64_t index_live;    /* 1 while the index is trusted */
	uint64_t index_keys;    /* keys it holds */
};

struct remote;

/* Checks cfg (seeds, files: a key or password file must be a regular file
 * of the daemon's user that no one else may read) and reads the key and
 * password. No I/O to Redis. 0, or -errno and a message in why. */
int remote_open(const struct remote_cfg *cfg, uint32_t block_tokens, struct remote **out,
		char *why, size_t why_len);
/* Starts the writer, which reads blocks from x. 0 or -errno. */
int remote_start(struct remote *r, struct idx *x);
/* Stops the writer (what is queued is not written). NULL is fine. */
void remote_close(struct remote *r);

/* Whether the blocks of namespace ns go remote. */
bool remote_wants(const struct remote *r, uint32_t ns);

/* Queues the write of the last n blocks of the chain that ends at block
 * `last` of ns (just published). Never waits: a full queue drops them. */
void remote_published(struct remote *r, uint32_t ns, const uint8_t *last, uint32_t n);

/* A MATCH's lookup: the blocks from, from + 1, ... < count of a chain
 * (hashes, tokens of all count blocks) in group g of namespace ns (root
 * h0, model fp), whose blocks before `from` are in the index. */
struct remote_ask {
	struct idx *x;
	struct idx_group *g;
	struct store *store;      /* g's */
	uint64_t block_bytes;
	uint32_t ns;
	const uint8_t *h0, *fp;
	const uint8_t *hashes;
	const uint32_t *tokens;
	uint32_t from, count;
};
/* Fetches, checks and imports the blocks found, in the calling thread's
 * own client, within the timeout: how many (a run from `from`). */
uint32_t remote_fetch(struct remote *r, const struct remote_ask *a);

void remote_get_stats(struct remote *r, struct remote_stats *out);

/* A block's key: pfx2:<ns>:<fp hex>:<block bytes>:<block tokens>:<hash hex>.
 * The prefix names the value's format (FORMAT.md): pfx1 values were
 * signed otherwise, and daemons of the two never read each other's. */
#define REMOTE_KEY_PREFIX "pfx2:"
#define REMOTE_KEY_MAX 192
void remote_key(uint32_t ns, const uint8_t *fp, uint64_t block_bytes, uint32_t block_tokens,
		const uint8_t *hash, char out[REMOTE_KEY_MAX]);

#endif
