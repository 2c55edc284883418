/* SPDX-License-Identifier: MIT */
/*
 * The remote tier's view of Redis: a blocking client over hiredis that
 * speaks to one standalone server or to a Redis Cluster with the cluster's
 * own protocol (the slot map from CLUSTER SLOTS, CRC16 key slots with hash
 * tags, MOVED and ASK followed, the map fetched again when a MOVED says it
 * changed). Keys are strings, values opaque bytes. It knows nothing of
 * records or of the daemon: daemon/remote.c does.
 *
 * Every call is bounded: connecting waits at most the timeout given at
 * open, and a node that moves no byte for the timeout (from the start of a
 * round, or since its last byte) is given up, so a slow, stopped or dead
 * node turns into an error for the keys it holds, never a longer wait; a
 * large transfer that keeps flowing is not cut short. A call is one round,
 * plus one per redirect (5 at most). Connections are made on first use
 * and made again on the next call after an error. Name resolution of a
 * host name is not bounded: give IP addresses where that matters.
 *
 * Not thread-safe: each thread that talks to Redis opens its own kv.
 */
#ifndef PD_REMOTE_KV_H
#define PD_REMOTE_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kv;

struct kv_opts {
	const char *const *seeds; /* "redis://HOST:PORT[/DB]" or "unix:PATH", n_seeds >= 1 */
	uint32_t n_seeds;         /* more than one only with cluster */
	bool cluster;             /* the seeds are nodes of a Redis Cluster (DB must be 0) */
	const char *password;     /* for AUTH; NULL: none */
	uint32_t timeout_ms;      /* connecting, and each round trip; > 0 */
};

/* Checks one seed's syntax (for flag validation): 0, or -EINVAL and a
 * message naming what is wrong in why. */
int kv_parse_seed(const char *seed, char *why, size_t why_len);

/* Validates o and makes the client; no I/O (an unreachable Redis is not an
 * error here: the daemon starts, and the remote answers with misses). 0, or
 * -errno and a message in why. */
int kv_open(const struct kv_opts *o, struct kv **out, char *why, size_t why_len);
/* NULL is fine. */
void kv_close(struct kv *k);

/*
 * GET of n keys, pipelined: one round trip to each node that holds any of
 * them. For each i, res[i] is 0 (vals[i] and lens[i] are the value; it
 * stays valid until the next call on k or kv_close), -ENOENT (no such key),
 * or the reason it could not be read: -ETIMEDOUT, -ECONNREFUSED (no node
 * answered), -EACCES (AUTH refused or wanted), -EPROTO (another error
 * reply, a reply of the wrong type, too many redirects). Returns
 * 0 when every key got an answer (found or not), else the first res[i] that
 * is neither 0 nor -ENOENT.
 */
int kv_get(struct kv *k, uint32_t n, const char *const *keys, const uint8_t **vals,
	   size_t *lens, int *res);

/*
 * kv_get, and each value found handed to fn(ctx, i, value, len) as soon as
 * it has arrived whole, before the replies after it are read: the caller
 * works on one value while the next ones come (Redis sends them all the
 * while, on another CPU). Values come in the order of each node's
 * replies; a key redirected comes in a later round. fn returns true when
 * it is done with the value: the value is not kept (vals[i] is NULL after
 * the call, res[i] 0) and its room in the client's buffer is read into
 * again, so a long stream of values taken as they come holds one or two of
 * them at a time. A value fn returns false for stays valid until the next
 * call on k, as kv_get's; res, and lens, are filled as kv_get fills them.
 * window > 0: each node has at most that many GETs unanswered, the next
 * sent as a reply comes (before it is handed to fn): Redis then holds that
 * many values' replies, not the whole pipeline's, and starts sending
 * sooner; 0: all sent at once, as kv_get. For large values, 2 or 3.
 */
typedef bool (*kv_value_fn)(void *ctx, uint32_t i, const uint8_t *val, size_t len);
int kv_get_each(struct kv *k, uint32_t n, const char *const *keys, const uint8_t **vals,
		size_t *lens, int *res, uint32_t window, kv_value_fn fn, void *ctx);

/* SET of n keys, pipelined as kv_get, each with an expiry of ttl_ms (0:
 * none). res[i] 0 or -errno as kv_get; the same return. */
int kv_set(struct kv *k, uint32_t n, const char *const *keys, const uint8_t *const *vals,
	   const size_t *lens, uint64_t ttl_ms, int *res);

/* What the client did since open, for the daemon's counters. */
struct kv_stats {
	uint64_t round_trips;     /* pipelines sent */
	uint64_t redirects;       /* MOVED and ASK followed */
	uint64_t map_refreshes;   /* slot maps fetched (cluster) */
	uint64_t connects;        /* connections made, first ones included */
	uint64_t errors;          /* keys answered with an error other than -ENOENT */
};
void kv_stats(const struct kv *k, struct kv_stats *out);
/* The words of the last error met (a node's, a key's), for the log; ""
 * when none yet. Valid until the next call on k. */
const char *kv_errmsg(const struct kv *k);

#endif
