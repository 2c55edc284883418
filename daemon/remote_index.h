/* SPDX-License-Identifier: MIT */
/*
 * Which record keys Redis holds, as far as the daemon knows: a set of
 * 56-bit fingerprints of key names (XXH3), each with the master that last
 * said it holds the key (remote/kv_watch.h). It decides only whether a
 * MATCH asks Redis, never what is served: a false "held" (a fingerprint
 * shared, a deletion missed) costs a round trip that finds nothing; a
 * false "not held" would cost a hit, so the set is trusted only while
 * live (every master subscribed and scanned) and under its cap.
 *
 * Thread-safe: the watcher and the writer add and drop, MATCH threads ask.
 */
#ifndef PD_REMOTE_INDEX_H
#define PD_REMOTE_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A key this daemon wrote: held, by whichever master serves it. */
#define REMOTE_INDEX_ANY_NODE 255
/* Keys the index holds by default (16 MiB of table at most: 8 bytes a
 * slot, half of the slots used at most). */
#define REMOTE_INDEX_DEFAULT_MAX 1000000u
#define REMOTE_INDEX_MAX_MAX 100000000u

struct remote_index;

/* An empty index, not live, of max_keys at most. 0 or -ENOMEM. */
int remote_index_new(uint32_t max_keys, struct remote_index **out);
void remote_index_free(struct remote_index *ix);

/* Key (len bytes) held, by master node. Past the cap, the index is over
 * (never live again until reset): true when this key made it so. */
bool remote_index_put(struct remote_index *ix, const char *key, size_t len, uint8_t node);
/* Key gone from master node: dropped unless another master holds it. */
void remote_index_drop(struct remote_index *ix, const char *key, size_t len, uint8_t node);
/* Forgets every key; not live. */
void remote_index_reset(struct remote_index *ix);
/* Live from now (unless over the cap): every key held was put. */
void remote_index_set_live(struct remote_index *ix);

/* Whether Redis may hold key: true unless the index is live and says it
 * does not. */
bool remote_index_may_hold(struct remote_index *ix, const char *key, size_t len);

struct remote_index_stats {
	bool live;
	bool over;      /* the cap was reached since the last reset */
	uint64_t keys;
};
void remote_index_stats(struct remote_index *ix, struct remote_index_stats *out);

#endif
