/* SPDX-License-Identifier: MIT */
/*
 * The daemon's arenas, partitioned by user and block size: one store per
 * (uid, block_bytes), all drawing on one memory budget. A client maps
 * whole arenas, so an arena must only ever hold its own user's blocks. A
 * partition is made at the first HELLO that needs it and lives while a
 * connection or an index group (a block) uses its store; an unused one is
 * freed when a new one is made. There are at most PARTITIONS_MAX, and at
 * most PARTITIONS_PER_USER of one user, so that no user can take them all
 * (each costs the daemon an address range as large as the budget). Which blocks a store
 * holds is the index's business (index.h): its eviction chooses across
 * partitions, and the memory of a victim goes back to the budget.
 */
#ifndef PD_PARTITION_H
#define PD_PARTITION_H

#include <pthread.h>
#include <stdint.h>

#include "store.h"

#define PARTITIONS_MAX 64
#define PARTITIONS_PER_USER 8

struct partition {
	uint32_t uid;
	uint64_t block_bytes;
	struct store *store;
	struct partition *next;
};

struct partitions {
	/* Guards head and count (the list, and the making and freeing of its
	 * partitions; a store's holders are atomic, and its slots are the
	 * index's). A leaf: taken with no lock held, none taken under it. */
	pthread_mutex_t lock;
	struct partition *head;
	int count;
	struct store_budget budget;
	uint64_t arena_bytes;   /* target arena size */
};

void partitions_init(struct partitions *ps, uint64_t budget, uint64_t arena_bytes);
/* The index must have freed its blocks first. */
void partitions_destroy(struct partitions *ps);
/* The partition of (uid, block_bytes), made on first use, held for the
 * caller until partitions_put. 0, -ENOSPC (a block larger than the
 * budget), -EMFILE (PARTITIONS_MAX in use), -EUSERS (the user has
 * PARTITIONS_PER_USER in use) or -ENOMEM. */
int partitions_get(struct partitions *ps, uint32_t uid, uint64_t block_bytes,
		   struct partition **out);
/* partitions_get of a partition that exists only: -ENOENT otherwise. */
int partitions_find(struct partitions *ps, uint32_t uid, uint64_t block_bytes,
		    struct partition **out);
void partitions_put(struct partitions *ps, struct partition *p);
/* The index's view of p's store (with the size of a block's disk record). */
void partition_ops(const struct partition *p, uint32_t block_tokens, struct idx_store *ops);
/* Bytes charged to the budget (resident slots) and arenas, over all. */
void partitions_usage(struct partitions *ps, uint64_t *charged, uint64_t *arenas);

#endif
