/* SPDX-License-Identifier: MIT */
/*
 * The prefix index's insides, for its two halves only (other modules see
 * index.h). They split along how they hold the lock:
 *
 *   index.c        the request path: MATCH, RELEASE, PUBLISH, IMPORT, and
 *                  the tier's spill and load. Each call takes the lock once
 *                  (hot_lock) and does its work under it; the only breaks
 *                  are a publish's copies (do_fill) and its waits for the
 *                  writer (do_wait_tier, do_wait_record), which drop it.
 *   index_admin.c  the admin work: LIST and EVICT run in rounds of a
 *                  bounded number of entries and step aside for waiting
 *                  requests between them (admin_yield); pins, usage, stats
 *                  and the whole-index walks (EXPORT, restart's records).
 *
 * One mutex, x->lock, guards everything below, the groups' stores
 * included (their callbacks run under it). Functions named do_* and
 * idx_do_* expect it held; idx_do_* are the few one half lends the other.
 */
#ifndef PD_INDEX_IMPL_H
#define PD_INDEX_IMPL_H

#include "index.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

/* The lists an entry can be on: the two memory LRU lists of blocks that
 * may leave memory at no loss (written, or no tier), the two of blocks
 * that would be lost unwritten (with a tier), the disk LRU list, and the
 * dirty queue. */
enum { LRU_ALL, LRU_USER, LRU_UALL, LRU_UUSER, LRU_DISK, Q_DIRTY, NLISTS };

struct entry;

struct link {
	struct entry *older, *newer;
};

struct list {
	struct entry *oldest, *newest;
};

struct user {
	uint32_t uid;
	uint64_t bytes;               /* of its blocks */
	uint32_t groups;
	struct list lru;              /* its evictable blocks */
	struct list ulru;             /* its evictable blocks not yet written */
	struct user *next;
};

struct idx_group {
	uint32_t ns;
	uint8_t h0[IDX_HASH_BYTES];
	uint8_t fp[PD_FP_SIZE];
	struct idx_store store;
	struct user *user;
	uint32_t refs;
	uint64_t blocks;              /* entries: the group lives while it has some */
	uint64_t resident, pinned_bytes, hits, hit_blocks, query_blocks, evictions;
	struct idx_group *next;
};

struct entry {
	uint8_t key[IDX_HASH_BYTES];
	uint8_t hash[IDX_HASH_BYTES]; /* whole: what a record names */
	struct idx_group *g;
	struct entry *parent;
	uint32_t children;
	uint32_t res_children;        /* resident ones */
	uint32_t leases;              /* leases holding this entry */
	uint32_t pins;                /* pinned chains through this entry */
	uint32_t exports;             /* exports reading it */
	uint32_t imports;             /* imports holding it for its children */
	uint64_t qseq;                /* its place in the dirty queue */
	uint32_t depth;               /* blocks from the root, this one included */
	uint64_t use;                 /* logical clock of the last use: LRU order */
	uint64_t used_s;              /* monotonic seconds of the last use */
	uint64_t hits;
	uint64_t sum;                 /* the record's payload checksum */
	struct idx_loc loc;           /* while resident or restoring */
	struct entry *hnext;          /* hash bucket chain */
	struct link l[NLISTS];
	bool on[NLISTS];
	bool resident, disk, writing, restoring;
	bool remote;                  /* written to or read from the remote tier (LIST shows it) */
	bool zombie;                  /* removed while writing: freed by idx_spilled */
	uint32_t tokens[];            /* (block_tokens) */
};

struct lease {
	uint64_t id;
	uint32_t n;
	struct lease *next;
	struct entry *blocks[];       /* (n) */
};

struct pin {
	struct entry *e;
	uint64_t expires_ms;          /* monotonic; 0: never */
	struct pin *next;
};

#define LEASE_BUCKETS 1024
#define NBUCKETS (1u << 16)

struct idx {
	/* Guards everything here and in the entries, groups, users, leases
	 * and pins, and the stores' slots (their callbacks run under it).
	 * Taken with no other lock held; the tier's mutex may be taken under
	 * it (x->tier's callbacks). Held across no socket or disk I/O: the
	 * exceptions are punches and new arenas (store callbacks, memory
	 * only) and idx_each_record's fn (a stopping daemon's manifest). */
	pthread_mutex_t lock;
	atomic_uint waiting;          /* requests waiting for the lock (hot_lock) */
	uint32_t block_tokens;
	int key_bytes;
	struct idx_limits lim;
	/* A secret of this index: a user who lists sees where in the table
	 * a page stops, which must not tell whose keys are there. */
	uint8_t bucket_key[crypto_shorthash_KEYBYTES];
	struct entry *buckets[NBUCKETS];
	struct list lru;              /* every evictable block */
	struct list ulru;             /* every evictable block not yet written */
	struct list disk_lru;         /* blocks held only on disk, leaves */
	struct list dirty;            /* blocks to write, oldest queued first */
	uint64_t ndirty, nwriting, qseq;
	struct idx_tier tier;         /* drop NULL: no tier */
	pthread_cond_t spilled;       /* a write ended (idx_spilled); waited on with
				       * lock, which the wait drops (do_wait_*) */
	uint64_t spill_ends;          /* how many have */
	pthread_cond_t filled;        /* a fill ended (an entry stopped `restoring`) */
	bool tier_stuck;              /* the writer cannot write now: nobody waits */
	bool tier_hung;               /* no write ended for TIER_WAIT_MS: nobody waits */
	uint64_t clock;
	struct idx_group *groups;
	struct user *users;
	struct pin *pins;
	struct lease *leases[LEASE_BUCKETS];
	uint64_t next_lease;
	struct idx_stats st;
};

static inline uint64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* Far from 0, so that a last use from before this boot, which a restart
 * brings back, still lies after it (idle times are differences). */
#define USE_CLOCK_BASE_S ((uint64_t)1 << 40)

static inline uint64_t now_s(void)
{
	return now_ms() / 1000 + USE_CLOCK_BASE_S;
}

/* Admin eviction and hollow entries: it can leave the index. */
static inline bool removable(const struct entry *e)
{
	/* One being written goes too: it lingers as a zombie until the
	 * writer is done with its slot (idx_do_remove). */
	return !e->children && !e->leases && !e->pins && !e->restoring && !e->exports &&
	       !e->imports;
}

/* Neither in memory nor on disk: its restore or its fill failed. */
static inline bool hollow(const struct entry *e)
{
	return !e->resident && !e->disk && !e->restoring;
}

static inline void make_key(const struct idx *x, const uint8_t *hash, uint8_t key[IDX_HASH_BYTES])
{
	memset(key, 0, IDX_HASH_BYTES);
	memcpy(key, hash, (size_t)x->key_bytes);
}

/* index.c */
struct entry *idx_do_find(const struct idx *x, uint32_t ns, const uint8_t *key);
/* Puts e on or off the LRU lists after its state changed. */
void idx_do_update(struct idx *x, struct entry *e);
/* Removes a removable entry, and the hollow ancestors it leaves
 * removable; returns the nearest ancestor still in the index. */
struct entry *idx_do_remove(struct idx *x, struct entry *e, bool punch);
/* e as the tier and exports see it (ref: e). */
void idx_do_fill_block(const struct idx *x, const struct entry *e, struct idx_block *b);

/* index_admin.c */
/* Ends the pins whose TTL has run out. */
void idx_do_expire(struct idx *x);

#endif
