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
 *   -ENOSPC                           the daemon's memory is full of leased blocks
 *   -ENOENT (release, publish)        a lease this connection does not hold
 *   -EACCES                           an admin call from another user
 *   -E2BIG                            more blocks than one call takes
 *   -EBADMSG, -EPROTO                 the daemon and the client disagree on the protocol
 *   -EIO                              the daemon failed
 *   other                             the system call's errno
 */
#ifndef PREFIXD_H
#define PREFIXD_H

#include <stddef.h>
#include <stdint.h>

#define PREFIXD_FINGERPRINT_BYTES 32
#define PREFIXD_MAX_SALT 64

struct prefixd;

/* What this process's blocks are. */
struct prefixd_layout {
	uint8_t fingerprint[PREFIXD_FINGERPRINT_BYTES]; /* of the model (weights and config) */
	uint32_t block_tokens;  /* a power of two; must equal the daemon's --block-tokens */
	uint64_t block_bytes;   /* bytes of one block: [layer][k|v][kv_head][token][head_dim] f32 */
	const void *salt;       /* optional: clients with other salts never share */
	uint32_t salt_len;      /* at most PREFIXD_MAX_SALT */
};

/* Daemon-wide counters (prefixctl stats). */
struct prefixd_stats {
	uint64_t hits, misses, hit_tokens, blocks, bytes_used, budget, published, dedup,
		evictions, connections, leases, matches, errors, arenas, collisions;
};

/* Connects to the daemon's socket (NULL: $XDG_RUNTIME_DIR/prefixd.sock, else
 * /run/prefixd.sock) and, with a layout, introduces this client. A
 * connection without a layout can only ask for statistics. */
int prefixd_connect(const char *socket_path, const struct prefixd_layout *layout,
		    struct prefixd **out);
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

/*
 * A prompt and the hashes that name its full blocks, computed as tokens are
 * appended. Hashing is the one part of a match that grows with the prompt
 * (~6 ns a token): a prompt built while it is read or tokenized is then
 * matched for the cost of the round trip. prefixd_match() keeps one such
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

/* prefixd_match() of the prompt's full blocks (kv has room for them, or
 * for 4096). -EINVAL when it was made for another layout. */
int prefixd_match_prompt(struct prefixd *c, const struct prefixd_prompt *p, uint64_t *lease,
			 uint32_t *hit, const void **kv);

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
 * stored + dedup < n when the daemon stopped early at a block whose key
 * another prompt holds (a hash collision); nothing wrong was stored.
 */
int prefixd_publish(struct prefixd *c, uint64_t lease, const uint32_t *tokens, uint32_t first,
		    uint32_t n, const void *const *kv, uint32_t *stored, uint32_t *dedup);

/* The daemon's counters. Only for the daemon's own user and root. */
int prefixd_stats(struct prefixd *c, struct prefixd_stats *out);

/* Why the calling thread's last failed call failed. */
const char *prefixd_errmsg(void);

#endif
