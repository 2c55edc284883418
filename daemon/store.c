/* SPDX-License-Identifier: MIT */
/*
 * The arena pool. Creating and first-touching a 64 MiB segment costs
 * 44-55 ms here, so arenas are few and large, made only when every slot of
 * the existing ones is taken, and the sum of their sizes never exceeds the
 * budget: the budget holds however the slots are used. Callers serialise
 * (the index calls these under its lock).
 */
#include "store.h"

#include <errno.h>
#include <stdlib.h>

#define MAX_ARENAS 4096

struct pd_store {
	size_t block_bytes;
	uint64_t budget;
	uint32_t slots_per_arena;
	struct shm_arena *arenas[MAX_ARENAS];
	uint32_t narenas;
	uint64_t used_slots;
};

int store_new(size_t block_bytes, uint64_t budget_bytes, uint32_t slots_per_arena,
	      struct pd_store **out)
{
	if (!block_bytes || !slots_per_arena)
		return -EINVAL;
	struct pd_store *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->block_bytes = block_bytes;
	s->budget = budget_bytes;
	s->slots_per_arena = slots_per_arena;
	/* Probe the real (page-rounded) arena size with a first arena. */
	int rc = shm_arena_create(0, block_bytes, slots_per_arena, &s->arenas[0]);
	if (rc) {
		free(s);
		return rc;
	}
	if (shm_arena_size(s->arenas[0]) > budget_bytes) {
		store_free(s);
		return -EINVAL;
	}
	s->narenas = 1;
	*out = s;
	return 0;
}

void store_free(struct pd_store *s)
{
	if (!s)
		return;
	for (uint32_t i = 0; i < MAX_ARENAS && s->arenas[i]; i++)
		shm_arena_free(s->arenas[i]);
	free(s);
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
	uint64_t arena_size = shm_arena_size(s->arenas[0]);
	if (s->narenas == MAX_ARENAS || (s->narenas + 1) * arena_size > s->budget)
		return -ENOSPC;
	int rc = shm_arena_create(s->narenas, s->block_bytes, s->slots_per_arena,
				  &s->arenas[s->narenas]);
	if (rc)
		return rc == -ENOMEM ? -ENOSPC : rc;
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
	return s->used_slots * shm_arena_slot_bytes(s->arenas[0]);
}

uint64_t store_bytes_mapped(const struct pd_store *s)
{
	return (uint64_t)s->narenas * shm_arena_size(s->arenas[0]);
}
