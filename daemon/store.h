/* SPDX-License-Identifier: MIT */
/*
 * Block storage for the index: shared-memory arenas of one slot size, whose
 * slots are charged to a budget as they are first used.
 */
#ifndef PD_STORE_H
#define PD_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "index.h"

struct store;

/* Arenas one store may have: their ids are 0 .. STORE_MAX_ARENAS - 1. */
#define STORE_MAX_ARENAS 4096

/* Memory that several stores (one per partition) draw their slots from:
 * the bytes of all resident slots never exceed limit. */
struct store_budget {
	_Atomic uint64_t charged;       /* no lock: a compare-and-swap against limit */
	uint64_t limit;
};

/* Slots of block_bytes (rounded to pages) in arenas of slots_per_arena
 * slots, each slot charged to the budget while its pages are resident. 0
 * or -errno (-ENOSPC when not even one slot fits). */
int store_new(size_t block_bytes, struct store_budget *budget, uint32_t slots_per_arena,
	      struct store **out);
void store_free(struct store *s);

/* idx_store callbacks: a slot (a resident free one if any, else a new one
 * if the budget allows), or -ENOSPC; and its return, with punch giving its
 * memory back to the budget. */
int store_alloc(void *store, struct idx_loc *loc);
void store_release(void *store, struct idx_loc loc, bool punch);

/* Users of a store: connections and index groups (an idx_store hold
 * callback). A store nobody holds has no blocks and can be freed. */
void store_hold(void *store, int delta);
uint32_t store_holders(const struct store *s);

/* The daemon's writable view of a slot; NULL for a place outside the arenas. */
uint8_t *store_slot(struct store *s, struct idx_loc loc);
/* The same slot as its arena's writable descriptor (not to close) and the
 * offset in it: -EINVAL for a place outside the arenas. */
int store_slot_file(struct store *s, struct idx_loc loc, int *fd, uint64_t *offset);
/* One block's bytes to copy into the slot an idx_import places it in
 * (the import of a file's records, a remote fetch): store_fill_copy is
 * its fill callback, -EINVAL for a place outside the arenas. */
struct store_copy {
	struct store *store;
	const uint8_t *payload;
	uint64_t len;
};
int store_fill_copy(void *ctx, uint32_t i, struct idx_loc loc);
/*
 * Keeps up to slots (STORE_POOL_MAX at most; a larger earlier target
 * stays) free slots resident ahead of need: a thread of the store's
 * writes fresh slots' pages in and frees them as resident, which
 * store_alloc hands out first. They are charged to the budget; none is
 * taken while the budget's room is short of POOL_ROOM (4) times the
 * target (store.c). Started by the first call; stopped by store_free.
 * 0 or -errno (the thread could not start: no pool, the store works).
 */
#define STORE_POOL_MAX 64
int store_pool(struct store *s, uint32_t slots);
struct store_pool_stats {
	uint32_t target;
	uint32_t ready;   /* resident free slots now (the pool's, and slots freed unpunched) */
	uint64_t filled;  /* slots the thread populated */
	uint64_t taken;   /* store_alloc calls served by a resident slot while the pool ran */
};
void store_pool_stats(struct store *s, struct store_pool_stats *out);
/* Arena by id (ids are 0 .. store_arenas() - 1), for sending to clients. */
struct shm_arena *store_arena(struct store *s, uint32_t id);
uint32_t store_arenas(const struct store *s);
/* Bytes of blocks stored, and of resident slots (what it holds of the budget). */
uint64_t store_bytes_used(const struct store *s);
uint64_t store_bytes_charged(const struct store *s);
/* What one block holds of the budget: block_bytes rounded up to pages. */
uint64_t store_slot_bytes(const struct store *s);

#endif
