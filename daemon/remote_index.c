/* SPDX-License-Identifier: MIT */
/*
 * The remote index (remote_index.h): an open-addressing table of 64-bit
 * entries, fingerprint << 8 | master, linear probing, deletion by
 * backward shift (no tombstones to pile up under a churn of writes and
 * evictions), doubled at half full up to the cap. One mutex: a MATCH's
 * lookup is one probe run, far below a round trip.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "remote_index.h"
#include "xxh.h"

#define MIN_SLOTS 1024u

struct remote_index {
	pthread_mutex_t mu;
	uint64_t *slots; /* 0: empty */
	uint64_t mask;   /* slots - 1, a power of two minus one */
	uint64_t n, max;
	bool over;
	_Atomic bool live;
};

static uint64_t fp_of(const char *key, size_t len)
{
	uint64_t f = XXH3_64bits(key, len) >> 8;
	return f ? f : 1;
}

int remote_index_new(uint32_t max_keys, struct remote_index **out)
{
	struct remote_index *ix = calloc(1, sizeof(*ix));
	if (!ix || !(ix->slots = calloc(MIN_SLOTS, sizeof(uint64_t)))) {
		free(ix);
		return -ENOMEM;
	}
	ix->mask = MIN_SLOTS - 1;
	ix->max = max_keys ? max_keys : 1;
	pthread_mutex_init(&ix->mu, NULL);
	*out = ix;
	return 0;
}

void remote_index_free(struct remote_index *ix)
{
	if (!ix)
		return;
	pthread_mutex_destroy(&ix->mu);
	free(ix->slots);
	free(ix);
}

/* The slot of fingerprint f, or of the empty slot where it would go. */
static uint64_t find(const struct remote_index *ix, uint64_t f)
{
	uint64_t i = f & ix->mask;
	while (ix->slots[i] && ix->slots[i] >> 8 != f)
		i = (i + 1) & ix->mask;
	return i;
}

/* Twice the slots: 0, or -ENOMEM (the table is kept). */
static int grow(struct remote_index *ix)
{
	uint64_t slots = (ix->mask + 1) * 2;
	uint64_t *old = ix->slots, old_slots = ix->mask + 1;
	uint64_t *s = calloc(slots, sizeof(*s));
	if (!s)
		return -ENOMEM;
	ix->slots = s;
	ix->mask = slots - 1;
	for (uint64_t i = 0; i < old_slots; i++)
		if (old[i])
			s[find(ix, old[i] >> 8)] = old[i];
	free(old);
	return 0;
}

bool remote_index_put(struct remote_index *ix, const char *key, size_t len, uint8_t node)
{
	uint64_t f = fp_of(key, len);
	pthread_mutex_lock(&ix->mu);
	uint64_t i = find(ix, f);
	if (!ix->slots[i]) {
		if (ix->n == ix->max || ((ix->n + 1) * 2 > ix->mask + 1 && grow(ix))) {
			/* A key it cannot hold: no longer the whole truth. */
			bool was = ix->over;
			ix->over = true;
			atomic_store(&ix->live, false);
			pthread_mutex_unlock(&ix->mu);
			return !was;
		}
		i = find(ix, f);
		ix->n++;
	}
	ix->slots[i] = f << 8 | node;
	pthread_mutex_unlock(&ix->mu);
	return false;
}

void remote_index_drop(struct remote_index *ix, const char *key, size_t len, uint8_t node)
{
	uint64_t f = fp_of(key, len);
	pthread_mutex_lock(&ix->mu);
	uint64_t i = find(ix, f), holder = ix->slots[i] & 0xff;
	/* A key moved by a reshard: its old master's deletion may come after
	 * the new master said it holds it. */
	if (!ix->slots[i] || (holder != node && holder != REMOTE_INDEX_ANY_NODE &&
			      node != REMOTE_INDEX_ANY_NODE)) {
		pthread_mutex_unlock(&ix->mu);
		return;
	}
	/* Backward shift: each entry after the hole that may move into it
	 * (its home slot is not in the cyclic range (hole, j]) does. */
	ix->slots[i] = 0;
	ix->n--;
	for (uint64_t j = (i + 1) & ix->mask; ix->slots[j]; j = (j + 1) & ix->mask) {
		uint64_t home = (ix->slots[j] >> 8) & ix->mask;
		if (((j - home) & ix->mask) >= ((j - i) & ix->mask)) {
			ix->slots[i] = ix->slots[j];
			ix->slots[j] = 0;
			i = j;
		}
	}
	pthread_mutex_unlock(&ix->mu);
}

void remote_index_reset(struct remote_index *ix)
{
	pthread_mutex_lock(&ix->mu);
	atomic_store(&ix->live, false);
	uint64_t *s = ix->mask + 1 > MIN_SLOTS ? calloc(MIN_SLOTS, sizeof(*s)) : NULL;
	if (s) {
		free(ix->slots);
		ix->slots = s;
		ix->mask = MIN_SLOTS - 1;
	} else {
		memset(ix->slots, 0, (ix->mask + 1) * sizeof(*ix->slots));
	}
	ix->n = 0;
	ix->over = false;
	pthread_mutex_unlock(&ix->mu);
}

void remote_index_set_live(struct remote_index *ix)
{
	pthread_mutex_lock(&ix->mu);
	atomic_store(&ix->live, !ix->over);
	pthread_mutex_unlock(&ix->mu);
}

bool remote_index_may_hold(struct remote_index *ix, const char *key, size_t len)
{
	if (!atomic_load(&ix->live))
		return true;
	uint64_t f = fp_of(key, len);
	pthread_mutex_lock(&ix->mu);
	/* Live again under the lock: a reset may have come in between. */
	bool held = !atomic_load(&ix->live) || ix->slots[find(ix, f)];
	pthread_mutex_unlock(&ix->mu);
	return held;
}

void remote_index_stats(struct remote_index *ix, struct remote_index_stats *out)
{
	pthread_mutex_lock(&ix->mu);
	*out = (struct remote_index_stats){ atomic_load(&ix->live), ix->over, ix->n };
	pthread_mutex_unlock(&ix->mu);
}
