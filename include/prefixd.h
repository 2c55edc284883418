/* SPDX-License-Identifier: MIT */
/*
 * libprefixd: a process's connection to the prefixd daemon, which keeps
 * frozen prefix KV caches in shared memory.
 *
 * A prompt's KV is cut into blocks of block_tokens tokens. prefixd_match()
 * finds how many leading full blocks of a prompt are cached and maps them
 * read-only into this process (zero-copy: the pointers are into memory the
 * daemon owns; writing through them faults). prefixd_publish() hands the
 * blocks this process computed to the daemon. Blocks are shared only
 * between clients of the same user whose layouts (model fingerprint, block
 * size and bytes, salt) are equal, and a hit is confirmed by comparing
 * token ids: a hash collision can never serve another prompt's KV.
 *
 * Every call is thread-safe (one request at a time per connection).
 * Calls return 0 or a negative errno; prefixd_errmsg() then says why:
 *   -ECONNREFUSED, -ENOENT (connect)  no daemon at that socket
 *   -EPROTONOSUPPORT                  no protocol version in common
 *   -EINVAL                           a layout the daemon does not store
 *   -ENOSPC                           the daemon's memory is full of leased or pinned blocks
 *                                     (publish), or one block is larger than it (connect)
 *   -EDQUOT                           this user's quota is full of their leased or pinned blocks
 *   -ENOENT (release, publish)        a lease this connection does not hold
 *   -EACCES                           another user's chains (admin calls), export or
 *                                     import by a user other than the daemon's and
 *                                     root, the shared namespace (connect, publish)
 *   -ENOENT (admin)                   no such chain (or pin)
 *   -E2BIG                            over a daemon limit: blocks per call, connections,
 *                                     leases, block sizes of one user, --pin-max
 *   -EBADMSG, -EPROTO                 the daemon and the client disagree on the protocol
 *   -EIO                              the daemon failed
 *   other                             the system call's errno
 */
#ifndef PREFIXD_H
#define PREFIXD_H

#include <stddef.h>
#include <stdint.h>

#include "prefixd_proto.h"  /* sizes, limits and the list of counters */

#ifdef __cplusplus
extern "C" {
#endif

struct prefixd;

/* What this process's blocks are. */
struct prefixd_layout {
	uint8_t fingerprint[PREFIXD_FINGERPRINT_BYTES]; /* of the model (weights and config) */
	uint32_t block_tokens;  /* a power of two; must equal the daemon's --block-tokens */
	uint64_t block_bytes;   /* bytes of one block: [layer][k|v][kv_head][token][head_dim] */
	uint32_t layout;        /* the elements: PREFIXD_LAYOUT_F32 (also 0), _F16 or _BF16 */
	const void *salt;       /* optional: clients with other salts never share */
	uint32_t salt_len;      /* at most PREFIXD_MAX_SALT */
};

/* Daemon-wide counters (prefixctl stats): one field per entry of
 * PREFIXD_COUNTERS, in its order, with its help text there. */
struct prefixd_stats {
#define PREFIXD_FIELD_(name, kind, help) uint64_t name;
	PREFIXD_COUNTERS(PREFIXD_FIELD_)
#undef PREFIXD_FIELD_
};

/* Room for any socket path (a sockaddr_un's sun_path). */
#define PREFIXD_SOCKET_PATH_MAX 108

/* The socket prefixd_connect(NULL, ...) connects to: $PREFIXD_SOCKET, else
 * $XDG_RUNTIME_DIR/prefixd.sock, else /run/prefixd.sock, written into buf.
 * -ENAMETOOLONG when it does not fit in cap. */
int prefixd_default_socket(char *buf, size_t cap);

/* Connects to the daemon's socket (NULL: prefixd_default_socket()) and, with a
 * layout, introduces this client. A connection without a layout can only
 * make the admin calls (stats, list, evict, pin, unpin). */
int prefixd_connect(const char *socket_path, const struct prefixd_layout *layout,
		    struct prefixd **out);
/* Options of prefixd_connect_flags. */
enum prefixd_connect_flag {
	/* Attach the daemon's shared namespace too (prefixd --shared-group):
	 * a match looks in this user's own prefixes and, when nothing of the
	 * prompt is there, in the shared ones; a publish from the start of a
	 * prompt, or continuing a shared match, goes into the shared namespace,
	 * which only its publishers (prefixd --shared-publishers) and root may
	 * do (-EACCES otherwise). -EACCES at connect for a user who is neither
	 * a member of the shared group nor a publisher, or when the daemon has
	 * no shared namespace. */
	PREFIXD_CONNECT_SHARED = 1u << 0,
};
/* prefixd_connect with options (enum prefixd_connect_flag); a layout is
 * needed for any. */
int prefixd_connect_flags(const char *socket_path, const struct prefixd_layout *layout,
			  unsigned flags, struct prefixd **out);
/* Closes the connection: the daemon releases every lease it held, and the
 * mapped blocks go away. NULL is fine. */
void prefixd_close(struct prefixd *c);

/*
 * Longest run of cached leading blocks of a prompt. tokens holds nblocks
 * full blocks (nblocks x block_tokens ids). On return *hit blocks are
 * attached: kv[i] (i < *hit; kv has room for nblocks) points to block i's
 * read-only KV, block_bytes long, valid until *lease is released. *lease is
 * 0 when nothing hit. At most 4096 blocks are looked at.
 */
int prefixd_match(struct prefixd *c, const uint32_t *tokens, uint32_t nblocks, uint64_t *lease,
		  uint32_t *hit, const void **kv);
/* prefixd_match() that also says, in *from_disk (NULL is fine), how many
 * of the *hit attached blocks the daemon read back from its disk tier for
 * it (they were evicted from memory, or the daemon restarted). */
int prefixd_match2(struct prefixd *c, const uint32_t *tokens, uint32_t nblocks, uint64_t *lease,
		   uint32_t *hit, uint32_t *from_disk, const void **kv);
/*
 * Single flight: when several processes start the same prompt at once,
 * one computes each block and the others wait for it. With wait_ms > 0, a
 * match that misses claims the missing blocks for this connection, or,
 * when another connection of this user (or a publisher of the shared
 * namespace) claimed them first, waits up to wait_ms for it to publish
 * them, and attaches what it published. info (NULL is fine) says what
 * happened. After PREFIXD_FLIGHT_CLAIMED or _INHERITED, compute the rest
 * and publish it (in parts as you go: each publish wakes the waiters;
 * prefixd --claim-timeout is how long one may take), or close the
 * connection: the waiters then take over. wait_ms 0 is prefixd_match2.
 * At most 600000 ms are waited; meanwhile the connection serves no other
 * call (one request at a time): threads that must not wait on each other
 * use connections of their own.
 */
enum prefixd_flight {
	PREFIXD_FLIGHT_NONE = 0,      /* nothing claimed, no wait */
	PREFIXD_FLIGHT_CLAIMED = 1,   /* this connection claimed the blocks after *hit */
	PREFIXD_FLIGHT_WAITED = 2,    /* it waited for another's claim: compute what is missing */
	PREFIXD_FLIGHT_INHERITED = 3, /* it waited, and the claim passed to it */
};
struct prefixd_match_info {
	uint32_t from_disk;     /* of the attached blocks, read back from disk */
	uint32_t flight;        /* enum prefixd_flight */
	uint32_t waited_ms;     /* how long the daemon kept the match waiting */
};
int prefixd_match_wait(struct prefixd *c, const uint32_t *tokens, uint32_t nblocks,
		       uint32_t wait_ms, uint64_t *lease, uint32_t *hit, const void **kv,
		       struct prefixd_match_info *info);
/* Kept for programs built before prefixd_match2(): *from_disk of the
 * calling thread's last prefixd_match() or prefixd_match_prompt(). */
uint32_t prefixd_match_from_disk(void);

/*
 * A prompt and the hashes that name its full blocks, computed as tokens are
 * appended. Hashing is the one part of a match that grows with the prompt
 * (~6 ns a token on a 2-vCPU AMD EPYC): a prompt built while it is read or
 * tokenized is then matched for the cost of the round trip. prefixd_match() keeps one such
 * prompt per connection (the last one it saw) and rehashes only the blocks
 * that differ from it. A prompt has one owner: calls on one prompt must not
 * run concurrently.
 */
struct prefixd_prompt;

/* An empty prompt for a layout (the one of the connections it will be
 * matched on). */
int prefixd_prompt_new(const struct prefixd_layout *layout, struct prefixd_prompt **out);
/* Appends n tokens, hashing each block they complete. */
int prefixd_prompt_append(struct prefixd_prompt *p, const uint32_t *tokens, size_t n);
/* Keeps the first n tokens (a rewind, or the next question after a shared
 * prefix); nothing when n is not less than the length. */
void prefixd_prompt_truncate(struct prefixd_prompt *p, size_t n);
size_t prefixd_prompt_length(const struct prefixd_prompt *p);
/* NULL is fine. */
void prefixd_prompt_free(struct prefixd_prompt *p);

/* prefixd_match() of the prompt's full blocks, at most max_blocks of them:
 * kv has room for max_blocks pointers. -EINVAL when the prompt was made
 * for another layout. */
int prefixd_match_prompt(struct prefixd *c, const struct prefixd_prompt *p, uint32_t max_blocks,
			 uint64_t *lease, uint32_t *hit, const void **kv);
/* prefixd_match_prompt() with *from_disk, as prefixd_match2(). */
int prefixd_match_prompt2(struct prefixd *c, const struct prefixd_prompt *p, uint32_t max_blocks,
			  uint64_t *lease, uint32_t *hit, uint32_t *from_disk, const void **kv);
/* prefixd_match_prompt() with single flight, as prefixd_match_wait(). */
int prefixd_match_prompt_wait(struct prefixd *c, const struct prefixd_prompt *p,
			      uint32_t max_blocks, uint32_t wait_ms, uint64_t *lease,
			      uint32_t *hit, const void **kv, struct prefixd_match_info *info);

/* Ends a lease: its kv pointers must not be used any more. One-way (no
 * round trip): later requests on this connection see the lease ended;
 * other connections see it once the daemon has read it. */
int prefixd_release(struct prefixd *c, uint64_t lease);

/*
 * Publishes blocks first .. first + n - 1 of a prompt: tokens holds the
 * prompt's first + n full blocks, kv[i] the KV of block first + i. The
 * first `first` blocks must be the ones `lease` holds (first == 0 and
 * lease == 0 to start at the prompt's beginning). The daemon copies the
 * bytes; blocks another client published first are counted in *dedup.
 * More than 8 MiB of blocks go in parts through one 8 MiB staging area,
 * each part continuing the last through a lease of its own (released
 * before this returns), so the call's memory stays small; such a publish
 * needs one of the connection's lease slots free (the daemon allows 1024
 * leases a connection). Returns 0 with stored + dedup < n when the daemon
 * stopped early at a block whose key another prompt holds (a hash
 * collision; nothing wrong was stored). -ENOSPC (the daemon's memory
 * budget) or -EDQUOT (this user's quota) when it stopped because every
 * block that could make room is leased or pinned. On any error *stored
 * and *dedup say what the parts before it did (blocks first .. first +
 * stored + dedup - 1 are in the cache), and prefixd_errmsg() why.
 */
int prefixd_publish(struct prefixd *c, uint64_t lease, const uint32_t *tokens, uint32_t first,
		    uint32_t n, const void *const *kv, uint32_t *stored, uint32_t *dedup);

/* What the daemon announced at HELLO (a connection with a layout). */
struct prefixd_limits {
	uint64_t budget;        /* memory for blocks of every user */
	uint64_t quota;         /* most one user's blocks may hold */
	uint64_t pin_max;       /* most pinned blocks may hold */
	uint32_t max_blocks;    /* blocks per match or publish */
};
int prefixd_limits(struct prefixd *c, struct prefixd_limits *out);

/* Why the calling thread's last failed call failed. */
const char *prefixd_errmsg(void);

/* ==== Administration ====
 * The daemon's own user and root see and steer every user's chains. Any
 * other user sees only their own (and the shared namespace's, when they
 * may attach it) and evicts and pins only their own (and the shared
 * namespace's, as its publisher): naming another's gets -EACCES, and
 * their statistics count their own blocks only. Export and import are for
 * the daemon's user and root alone. These take a connection with or
 * without a layout. */

/* The daemon's counters. */
int prefixd_stats(struct prefixd *c, struct prefixd_stats *out);

/* What one user's blocks of one model hold and did. */
struct prefixd_usage {
	uint32_t user;
	uint8_t model[PREFIXD_FINGERPRINT_BYTES];
	uint64_t blocks, bytes, pinned_bytes, hits, hit_tokens, query_tokens, evictions;
};
/* The counters, and one usage row per (user, model) in *usage (malloc'd,
 * free() it; NULL when *n is 0). */
int prefixd_stats_usage(struct prefixd *c, struct prefixd_stats *out,
			struct prefixd_usage **usage, size_t *n);

/* A cached chain (a prefix from its root) as the admin calls name it: its
 * last block's hash in its user's namespace (PREFIXD_SHARED_USER: the
 * shared namespace). */
struct prefixd_id {
	uint8_t key[PREFIXD_HASH_BYTES];
	uint32_t user;
};
#define PREFIXD_ID_CHARS (2 * PREFIXD_HASH_BYTES + 8) /* hex: the key, then the user */
/* The key's 64 digits are masked by the user's (docs/PROTOCOL.md, "Chain
 * ids"), so that one prompt's chains of two users differ from the first
 * digit, as short ids are printed; the user's 8 digits come last. */
void prefixd_id_format(const struct prefixd_id *id, char out[PREFIXD_ID_CHARS + 1]);
/* 0, or -EINVAL for a string that is not PREFIXD_ID_CHARS hex digits. */
int prefixd_id_parse(const char *s, struct prefixd_id *out);
/* The id of a prompt's chain of full blocks, for this process's user.
 * -EINVAL when it has no full block. */
int prefixd_prompt_id(const struct prefixd_prompt *p, struct prefixd_id *out);

enum prefixd_where {
	PREFIXD_IN_MEMORY = 1u << 0,
	PREFIXD_ON_DISK = 1u << 1,
	PREFIXD_REMOTE = 1u << 2,   /* also in the remote tier: the daemon wrote or read it there */
};

/* A chain that ends at a leaf (no cached block continues it) or at a pin. */
struct prefixd_chain {
	struct prefixd_id id;
	uint8_t model[PREFIXD_FINGERPRINT_BYTES];
	uint32_t blocks, tokens;
	uint64_t bytes;         /* of its blocks; blocks shared with other chains count in each */
	uint64_t hits;          /* MATCHes that attached its last block */
	uint32_t leases;        /* leases on its last block */
	uint32_t idle_s;        /* seconds since its last block was used */
	int pinned;
	uint32_t pin_ttl_s;     /* seconds left of a pin with a TTL; 0: none */
	unsigned where;         /* enum prefixd_where */
};

struct prefixd_filter {
	int by_user;
	uint32_t user;
	int by_model;
	uint8_t model[PREFIXD_FINGERPRINT_BYTES];
};

/* Every cached chain (that the filter, which may be NULL, selects) into
 * *out (malloc'd, free() it). Read page by page: the daemon keeps serving
 * in between, so chains may come and go while it runs. */
int prefixd_list(struct prefixd *c, const struct prefixd_filter *filter,
		 struct prefixd_chain **out, size_t *n);

enum prefixd_evict_by {
	PREFIXD_EVICT_ALL = 1,
	PREFIXD_EVICT_ID,       /* a chain's blocks that no other chain continues */
	PREFIXD_EVICT_MODEL,
	PREFIXD_EVICT_USER,
	PREFIXD_EVICT_IDLE,     /* blocks unused for idle_s seconds or more */
};

struct prefixd_evict_sel {
	enum prefixd_evict_by by;
	struct prefixd_id id;
	uint8_t model[PREFIXD_FINGERPRINT_BYTES];
	uint32_t user;
	uint64_t idle_s;
};

/* What an eviction removed, and the selected blocks it kept. */
struct prefixd_evicted {
	uint64_t blocks, bytes;
	uint64_t kept_leased, kept_pinned;
	uint64_t kept_parent;   /* parents of blocks that stay */
};

/* Evicts the unleased, unpinned blocks a selector names. -ENOENT for an id
 * that names no cached chain. */
int prefixd_evict(struct prefixd *c, const struct prefixd_evict_sel *sel,
		  struct prefixd_evicted *out);

/* Pins a chain against eviction for ttl_s seconds (0: until unpinned);
 * pinning it again sets the TTL anew. *pinned_bytes (may be NULL): what
 * pins hold now (for a user other than the daemon's and root: the pins of
 * the chain's namespace). -E2BIG past the daemon's --pin-max or the
 * namespace's quota. */
int prefixd_pin(struct prefixd *c, const struct prefixd_id *id, uint32_t ttl_s,
		uint64_t *pinned_bytes);
/* -ENOENT when that chain is not pinned. */
int prefixd_unpin(struct prefixd *c, const struct prefixd_id *id);

/*
 * Writes the records of cached blocks (memory or disk) to fd, a regular
 * file open for writing, parents first, in the disk tier's format: the
 * blocks filter selects (NULL: all), or with id, that chain's blocks from
 * its first. *blocks and *bytes (may be NULL): what was written. -ENOENT
 * for an unknown id.
 */
int prefixd_export(struct prefixd *c, const struct prefixd_filter *filter,
		   const struct prefixd_id *id, int fd, uint64_t *blocks, uint64_t *bytes);

struct prefixd_imported {
	uint64_t blocks, bytes;  /* stored, and their KV bytes */
	uint64_t deduplicated;   /* already cached */
	uint64_t skipped;        /* whose parent was neither in the file nor cached */
	uint64_t refused;        /* memory or a quota full of held blocks */
};
/* Stores the records of an export read from fd (a regular file open for
 * reading), each in its own user's namespace, or with user not NULL in
 * *user's. The daemon checks every record before it stores any: -EBADMSG
 * (prefixd_errmsg() says which record and why) for a damaged file, one of
 * another block size, or not an export at all. */
int prefixd_import(struct prefixd *c, int fd, const uint32_t *user, struct prefixd_imported *out);

#ifdef __cplusplus
}
#endif

#endif
