/* SPDX-License-Identifier: MIT */
/*
 * Block storage for the index: a pool of shared-memory arenas of one slot
 * size, grown on demand while their total size stays within the budget.
 */
#ifndef PD_STORE_H
#define PD_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "index.h"

struct pd_store;

/* Memory that several stores (one per block size) draw their arenas from:
 * the sum of all their arenas' sizes never exceeds limit. */
struct store_budget {
	_Atomic uint64_t reserved;
	uint64_t limit;
};

/* Slots of block_bytes (rounded to pages) in arenas of up to
 * slots_per_arena slots (fewer when the budget has less room), created
 * while the budget allows. 0 or -errno (-ENOSPC when not even one slot
 * fits). */
int store_new(size_t block_bytes, struct store_budget *budget, uint32_t slots_per_arena,
	      struct pd_store **out);
void store_free(struct pd_store *s);

/* idx_store callbacks: a slot (creating an arena if the budget allows), or
 * -ENOSPC; and its return. */
int store_alloc(void *store, struct idx_loc *loc);
void store_release(void *store, struct idx_loc loc);

/* The daemon's writable view of a slot; NULL for a place outside the arenas. */
uint8_t *store_slot(struct pd_store *s, struct idx_loc loc);
/* Arena by id (ids are 0 .. store_arenas() - 1), for sending to clients. */
struct shm_arena *store_arena(struct pd_store *s, uint32_t id);
uint32_t store_arenas(const struct pd_store *s);
uint64_t store_bytes_used(const struct pd_store *s);
uint64_t store_bytes_mapped(const struct pd_store *s);

#endif
