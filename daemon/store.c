/* SPDX-License-Identifier: MIT */
/*
 * The arena pool. Creating and first-touching a 64 MiB segment costs
 * 44-55 ms here, so arenas are few and large, made only when every slot of
 * the existing ones is taken, and the sum of all stores' arena sizes never
 * exceeds the shared budget: the budget holds however the slots are used.
 * Arenas are never given back (clients keep them mapped), so memory once
 * given to one block size stays with it. Callers serialise
 * (the index calls these under its lock).
 */
#include "store.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_ARENAS 4096

struct pd_store {
	size_t slot_bytes;          /* block_bytes rounded up to pages */
	struct store_budget *budget;
	uint32_t slots_per_arena;
	struct shm_arena *arenas[MAX_ARENAS];
	/* Changed under the index lock; atomic so statistics read them freely. */
	_Atomic uint32_t narenas;
	_Atomic uint64_t used_slots;
};

int store_new(size_t block_bytes, struct store_budget *budget, uint32_t slots_per_arena,
	      struct pd_store **out)
{
	if (!block_bytes || !slots_per_arena)
		return -EINVAL;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t slot = (block_bytes + page - 1) / page * page;
	if (slot > budget->limit)
		return -ENOSPC;
	struct pd_store *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->slot_bytes = slot;
	s->budget = budget;
	s->slots_per_arena = slots_per_arena;
	*out = s;
	return 0;
}

void store_free(struct pd_store *s)
{
	if (!s)
		return;
	for (uint32_t i = 0; i < s->narenas; i++) {
		atomic_fetch_sub(&s->budget->reserved, shm_arena_size(s->arenas[i]));
		shm_arena_free(s->arenas[i]);
	}
	free(s);
}

/* Takes room for up to slots_per_arena slots from the shared budget: the
 * last arena is smaller when that is all the budget has left. */
static uint32_t reserve_slots(struct pd_store *s)
{
	uint64_t have = atomic_load(&s->budget->reserved);
	for (;;) {
		uint64_t room = have < s->budget->limit ? s->budget->limit - have : 0;
		uint64_t n = room / s->slot_bytes;
		if (n > s->slots_per_arena)
			n = s->slots_per_arena;
		if (!n)
			return 0;
		if (atomic_compare_exchange_weak(&s->budget->reserved, &have,
						 have + n * s->slot_bytes))
			return (uint32_t)n;
	}
}

int store_alloc(void *store, struct idx_loc *loc)
{
	struct pd_store *s = store;
	for (uint32_t i = 0; i < s->narenas; i++)
		if (!shm_arena_slot_alloc(s->arenas[i], &loc->offset)) {
			loc->arena = i;
			s->used_slots++;
			return 0;
		}
	uint32_t n = s->narenas < MAX_ARENAS ? reserve_slots(s) : 0;
	if (!n)
		return -ENOSPC;
	int rc = shm_arena_create(s->narenas, s->slot_bytes, n, &s->arenas[s->narenas]);
	if (rc) {
		atomic_fetch_sub(&s->budget->reserved, (uint64_t)n * s->slot_bytes);
		return rc == -ENOMEM ? -ENOSPC : rc;
	}
	loc->arena = s->narenas++;
	shm_arena_slot_alloc(s->arenas[loc->arena], &loc->offset);
	s->used_slots++;
	return 0;
}

void store_release(void *store, struct idx_loc loc)
{
	struct pd_store *s = store;
	if (loc.arena < s->narenas && !shm_arena_slot_free(s->arenas[loc.arena], loc.offset))
		s->used_slots--;
}

uint8_t *store_slot(struct pd_store *s, struct idx_loc loc)
{
	if (loc.arena >= s->narenas || loc.offset % shm_arena_slot_bytes(s->arenas[loc.arena]) ||
	    loc.offset >= shm_arena_size(s->arenas[loc.arena]))
		return NULL;
	return shm_arena_base(s->arenas[loc.arena]) + loc.offset;
}

struct shm_arena *store_arena(struct pd_store *s, uint32_t id)
{
	return id < s->narenas ? s->arenas[id] : NULL;
}

uint32_t store_arenas(const struct pd_store *s) { return s->narenas; }

uint64_t store_bytes_used(const struct pd_store *s)
{
	return s->used_slots * s->slot_bytes;
}

uint64_t store_bytes_mapped(const struct pd_store *s)
{
	uint64_t n = 0;
	for (uint32_t i = 0; i < s->narenas; i++)
		n += shm_arena_size(s->arenas[i]);
	return n;
}
