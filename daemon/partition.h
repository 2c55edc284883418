/* SPDX-License-Identifier: MIT */
/*
 * The daemon's blocks, partitioned by user and block size: one index and
 * one store per (uid, block_bytes), all drawing on one memory budget. A
 * client maps whole arenas, so an arena must only ever hold its own user's
 * blocks. A partition is made at the first HELLO that needs it and lives
 * until the daemon stops; there are at most PARTITIONS_MAX.
 */
#ifndef PD_PARTITION_H
#define PD_PARTITION_H

#include <pthread.h>
#include <stdint.h>

#include "index.h"
#include "store.h"

#define PARTITIONS_MAX 64

struct partition {
	uint32_t uid;
	uint64_t block_bytes;
	struct pd_index *idx;
	struct pd_store *store;
	struct partition *next;
};

struct partitions {
	pthread_mutex_t lock;
	struct partition *head;
	int count;
	struct store_budget budget;
	uint32_t block_tokens;
	int key_bytes;          /* < 32 only in tests: a deliberately weak hash */
	uint64_t arena_bytes;   /* target arena size */
};

void partitions_init(struct partitions *ps, uint64_t budget, uint32_t block_tokens,
		     int key_bytes, uint64_t arena_bytes);
void partitions_destroy(struct partitions *ps);
/* The partition of (uid, block_bytes), made on first use. 0, -ENOSPC (a
 * block larger than the budget), -EMFILE (PARTITIONS_MAX reached) or
 * -ENOMEM. */
int partitions_get(struct partitions *ps, uint32_t uid, uint64_t block_bytes,
		   struct partition **out);
/* Sums over partitions; bytes_used/arenas may be NULL. */
void partitions_stats(struct partitions *ps, struct idx_stats *st, uint64_t *bytes_used,
		      uint64_t *arenas);

#endif
