/* SPDX-License-Identifier: MIT */
/*
 * Sessions on top of prefixd: a prompt's leading full blocks are attached
 * read-only from the daemon's shared memory (zero-copy), the rest is
 * computed, and the new full blocks are published for the next process.
 */
#ifndef PFX_CACHE_H
#define PFX_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "session.h"

#ifdef __cplusplus
extern "C" {
#endif

struct pfx_cache;

/*
 * Connects to prefixd (socket NULL: its default socket) for model m.
 * Blocks are shared only with processes of the same user running the same
 * model (weights and config, see pfx_model_fingerprint) with the same
 * block size and salt (may be NULL). Fails with a message when no daemon
 * answers or it refuses the layout; sessions then simply run alone.
 */
int pfx_cache_open(struct pfx_model *m, const char *socket, const void *salt, size_t salt_len,
		   struct pfx_cache **out, struct pfx_error *err);

/* Options of pfx_cache_open_flags. */
enum pfx_cache_flag {
	/* The daemon's shared namespace too (prefixd --shared-group; libprefixd's
	 * PREFIXD_CONNECT_SHARED): prompts attach this user's own cached blocks
	 * or, with none, the shared ones, and publish into the shared namespace,
	 * which only its publishers may (the prefill then reports -EACCES). */
	PFX_CACHE_SHARED = 1u << 0,
	/* No single flight: pfx_session_prefill neither waits for another process that
	 * computes the same prompt's blocks nor claims them (libprefixd's
	 * prefixd_match_wait), and computes and publishes its rest at once.
	 * By default it waits up to PFX_CACHE_WAIT_MS for a process of this
	 * user that started the prompt first, claims the blocks no one
	 * computes, and prefills in chunks of PFX_PREFILL_CHUNK tokens,
	 * publishing each chunk's full blocks as it goes, so that waiters
	 * start early and a crash loses at most a chunk. A prefill that
	 * waits holds the cache's connection: other threads' calls on the
	 * same cache wait behind it. */
	PFX_CACHE_NO_WAIT = 1u << 1,
};
#define PFX_CACHE_WAIT_MS 60000
#define PFX_PREFILL_CHUNK 512
/* pfx_cache_open with options (enum pfx_cache_flag). */
int pfx_cache_open_flags(struct pfx_model *m, const char *socket, const void *salt,
			 size_t salt_len, unsigned flags, struct pfx_cache **out,
			 struct pfx_error *err);
/* A new connection to the same daemon with c's model, salt and flags: a
 * thread that waits (pfx_session_attach_wait) on a connection of its own
 * holds up no other thread's calls. Close it as any cache. */
int pfx_cache_clone(struct pfx_cache *c, struct pfx_cache **out, struct pfx_error *err);
/* Drops the caller's reference: the connection closes once no session
 * holds attached blocks any more. NULL is fine. */
void pfx_cache_close(struct pfx_cache *c);

/* What a prefill did. published + deduplicated + unpublished are the
 * prompt's full blocks after the attached ones, when a publish was tried. */
struct pfx_prefill_info {
	size_t attached;            /* prompt tokens attached from the cache */
	size_t computed;            /* prompt tokens computed here */
	uint32_t published;         /* new full blocks the daemon stored (as its
				     * own counters count them) */
	uint32_t deduplicated;      /* full blocks the daemon already had */
	uint32_t unpublished;       /* full blocks computed here that the daemon did
				     * not store (after an error of the connection:
				     * did not say it stored); publish_rc says why */
	int cache_rc;               /* 0, or the -errno of the lookup (MATCH) that
				     * failed, cache_err saying why: then nothing was
				     * attached or published and the whole prompt was
				     * computed alone. 0 as well when no lookup was
				     * tried: no cache, a session that was not empty,
				     * or a prompt under 2 tokens (computed alone too,
				     * with nothing to report) */
	int publish_rc;             /* 0 when unpublished is 0; else why publishing
				     * stopped after published + deduplicated blocks:
				     * -ENOSPC (the daemon's memory budget is full of
				     * leased or pinned blocks), -EDQUOT (this user's
				     * quota is), -EEXIST (a block's key is another
				     * prompt's, a hash collision: nothing wrong was
				     * stored) or another -errno (the connection, say);
				     * cache_err says it in words. The prompt's result
				     * is unaffected */
	uint32_t from_disk;         /* of the attached blocks, those prefixd read back
				     * from its disk tier for this prompt */
	size_t recomputed;          /* of computed: tokens of the prompt's last block,
				     * which the daemon already had but which was
				     * computed again, since a prompt that ends on a
				     * block boundary must compute its last token
				     * (so a one-block prompt attaches nothing) */
};

/*
 * Runs a prompt on an empty session through the cache c (NULL: alone):
 * attaches the longest cached run of its full blocks, always leaving at
 * least one token to compute, appends the rest, and publishes the prompt's
 * new full blocks. Attached tokens are frozen. want: PFX_LOGITS_LAST, or
 * PFX_LOGITS_ALL for rows of positions info->attached .. n - 1 only.
 * A cache failure is not an error: the prompt is computed alone and
 * info->cache_rc and cache_err say why; a publish the daemon cut short
 * leaves the prompt's result untouched, and info->unpublished,
 * info->publish_rc and cache_err say how many blocks and why. On a session
 * that is not empty, this is pfx_session_append.
 */
int pfx_session_prefill(struct pfx_session *s, struct pfx_cache *c, const int32_t *tokens,
			size_t n, enum pfx_logits want, float *logits,
			struct pfx_prefill_info *info, struct pfx_error *cache_err,
			struct pfx_error *err);

/*
 * The two halves of pfx_session_prefill, for callers that compute the rest
 * themselves (in their own batches, in chunks).
 *
 * pfx_session_attach: on an empty session, attaches from c (NULL: nothing)
 * the longest cached run of the prompt tokens[0, n)'s full blocks, always
 * leaving at least one token to compute. It never waits for another
 * process (no single flight, whatever the cache's flags: a caller's own
 * batches must not stall on it). info->attached (frozen tokens now
 * in s), from_disk and cache_rc (a cache failure is not an error: nothing
 * is attached and cache_err says why) are as pfx_session_prefill reports
 * them; computed is n - attached. -EINVAL for a session that is not empty
 * or a token outside the vocabulary.
 *
 * pfx_session_publish: once s holds the prompt's full blocks (its first
 * n / block tokens are tokens[0, n)'s, which the caller guarantees),
 * publishes those it did not attach to c (NULL: nothing), continuing the
 * attach's lease when s holds all of its blocks (else from the prompt's
 * beginning: the daemon counts the blocks it has). A prompt being
 * computed may be published as it grows (n larger each time): a publish
 * sends only the blocks after those an earlier one of s to c sent, and
 * reports only those. Sets info's published,
 * deduplicated, unpublished, publish_rc and recomputed as
 * pfx_session_prefill does (a publish cut short is not an error);
 * -EINVAL when s holds fewer tokens than the full blocks or a token is
 * outside the vocabulary.
 */
int pfx_session_attach(struct pfx_session *s, struct pfx_cache *c, const int32_t *tokens,
		       size_t n, struct pfx_prefill_info *info, struct pfx_error *cache_err,
		       struct pfx_error *err);
int pfx_session_publish(struct pfx_session *s, struct pfx_cache *c, const int32_t *tokens,
			size_t n, struct pfx_prefill_info *info, struct pfx_error *cache_err,
			struct pfx_error *err);

/*
 * pfx_session_attach with single flight (libprefixd's prefixd_match_wait):
 * when the prompt's blocks are missing, waits up to wait_ms (at most
 * PFX_ATTACH_WAIT_MAX_MS; 0: pfx_session_attach) for another connection
 * of this user that claimed them to publish them, or claims them for this
 * one. *flight says which:
 *   PFX_FLIGHT_NONE: matched as pfx_session_attach would;
 *   PFX_FLIGHT_CLAIMED, _INHERITED: c's connection holds the claim on the
 *     blocks after those attached (inherited: from a claimant that closed
 *     or stalled). Compute them and publish them as they complete
 *     (pfx_session_publish, as often as wanted: each sends only the new
 *     blocks and moves the claim's deadline, prefixd --claim-timeout), and
 *     keep c open until done: closing it hands the claim to a waiter;
 *   PFX_FLIGHT_WAITED: it waited for another's claim and attached what
 *     was cached when the wait ended (all, or less when wait_ms ran out:
 *     compute the rest, or call again to wait on).
 * A prompt that ends on a block boundary asks for its last block too, and
 * when it hit, that block is a private copy with all but its last token
 * committed (info->attached is n - 1). The wait holds c's connection: use
 * a cache of its own (pfx_cache_clone) where other threads share it.
 */
enum pfx_flight {
	PFX_FLIGHT_NONE = 0,
	PFX_FLIGHT_CLAIMED = 1,
	PFX_FLIGHT_WAITED = 2,
	PFX_FLIGHT_INHERITED = 3,
};
#define PFX_ATTACH_WAIT_MAX_MS 600000u
int pfx_session_attach_wait(struct pfx_session *s, struct pfx_cache *c, const int32_t *tokens,
			    size_t n, uint32_t wait_ms, enum pfx_flight *flight,
			    struct pfx_prefill_info *info, struct pfx_error *cache_err,
			    struct pfx_error *err);

/* Pins the chain of the prompt's full blocks in the daemon against
 * eviction, for ttl_s seconds (0: until unpinned): the chain of this
 * user, or of the shared namespace for a cache opened with
 * PFX_CACHE_SHARED (its publishers and root only; -EACCES otherwise).
 * Pins hold at most the daemon's --pin-max, and one user's at most their
 * quota (-E2BIG past either). *pinned_bytes: what pins hold in the daemon
 * now (for a user other than the daemon's and root: the pins of the
 * chain's namespace). */
int pfx_cache_pin(struct pfx_cache *c, const int32_t *tokens, size_t n, uint32_t ttl_s,
		  uint64_t *pinned_bytes, struct pfx_error *err);

#ifdef __cplusplus
}
#endif

#endif
