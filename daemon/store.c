/* SPDX-License-Identifier: MIT */
/*
 * The arena pool. Creating and first-touching a 64 MiB segment costs
 * 44-55 ms here, and each arena costs a client a descriptor and a mapping
 * (bench/share: ~30 us), so a store has one large arena, made when its
 * first block comes, and another only when that one has no slot left. The
 * budget is charged by slot, as slots are first written: an arena's size is
 * address space, its untouched pages cost nothing. A slot freed with a
 * punch gives its pages, and its charge, back to the budget; one freed
 * without stays charged and is the store's next. Callers serialise (the
 * index calls these under its lock).
 */
#include "store.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_ARENAS STORE_MAX_ARENAS

struct store {
	size_t slot_bytes;          /* block_bytes rounded up to pages */
	struct store_budget *budget;
	uint32_t slots_per_arena;
	struct shm_arena *arenas[MAX_ARENAS]; /* each set before narenas counts it */
	/* No lock of its own: slots change under the index lock (the
	 * callbacks run under it). Atomic so that statistics, and workers
	 * that send arenas to clients, read them without it. */
	_Atomic uint32_t narenas;
	_Atomic uint64_t used_slots;
	_Atomic uint64_t charged_slots; /* resident: used, or freed without a punch */
	_Atomic uint32_t holders;       /* store_hold: connections and groups, any lock or none */
};

int store_new(size_t block_bytes, struct store_budget *budget, uint32_t slots_per_arena,
	      struct store **out)
{
	if (!block_bytes || !slots_per_arena)
		return -EINVAL;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t slot = (block_bytes + page - 1) / page * page;
	if (slot > budget->limit)
		return -ENOSPC;
	struct store *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->slot_bytes = slot;
	s->budget = budget;
	s->slots_per_arena = slots_per_arena;
	*out = s;
	return 0;
}

void store_hold(void *store, int delta)
{
	struct store *s = store;
	atomic_fetch_add(&s->holders, (uint32_t)delta);
}

uint32_t store_holders(const struct store *s)
{
	return atomic_load(&s->holders);
}

void store_free(struct store *s)
{
	if (!s)
		return;
	atomic_fetch_sub(&s->budget->charged, s->charged_slots * s->slot_bytes);
	for (uint32_t i = 0; i < s->narenas; i++)
		shm_arena_free(s->arenas[i]);
	free(s);
}

static bool charge(struct store_budget *b, uint64_t bytes)
{
	uint64_t have = atomic_load(&b->charged);
	do {
		if (have > b->limit || b->limit - have < bytes)
			return false;
	} while (!atomic_compare_exchange_weak(&b->charged, &have, have + bytes));
	return true;
}

int store_alloc(void *store, struct idx_loc *loc)
{
	struct store *s = store;
	/* A slot freed without a punch: its memory is charged already. */
	for (uint32_t i = 0; i < s->narenas; i++)
		if (!shm_arena_slot_reuse(s->arenas[i], &loc->offset)) {
			loc->arena = i;
			s->used_slots++;
			return 0;
		}
	if (!charge(s->budget, s->slot_bytes))
		return -ENOSPC;
	uint32_t last = s->narenas - 1;
	/* Punched-out slots of any arena, then untouched ones of the last. */
	for (uint32_t i = 0; i + 1 < s->narenas; i++)
		if (!shm_arena_slot_new(s->arenas[i], &loc->offset)) {
			loc->arena = i;
			s->used_slots++;
			s->charged_slots++;
			return 0;
		}
	if (!s->narenas || shm_arena_slot_new(s->arenas[last], &loc->offset)) {
		int rc = s->narenas < MAX_ARENAS ? shm_arena_create(s->narenas, s->slot_bytes,
								    s->slots_per_arena,
								    &s->arenas[s->narenas])
						 : -ENOSPC;
		if (rc) {
			/* Not the budget: evicting others would not help. */
			atomic_fetch_sub(&s->budget->charged, s->slot_bytes);
			return rc;
		}
		last = s->narenas++;
		shm_arena_slot_new(s->arenas[last], &loc->offset);
	}
	loc->arena = last;
	s->used_slots++;
	s->charged_slots++;
	return 0;
}

void store_release(void *store, struct idx_loc loc, bool punch)
{
	struct store *s = store;
	if (loc.arena >= s->narenas)
		return;
	int rc = shm_arena_slot_free(s->arenas[loc.arena], loc.offset, punch);
	if (rc == -EINVAL)
		return;
	s->used_slots--;
	if (punch && !rc) {
		s->charged_slots--;
		atomic_fetch_sub(&s->budget->charged, s->slot_bytes);
	}
}

uint8_t *store_slot(struct store *s, struct idx_loc loc)
{
	if (loc.arena >= s->narenas || loc.offset % shm_arena_slot_bytes(s->arenas[loc.arena]) ||
	    loc.offset >= shm_arena_size(s->arenas[loc.arena]))
		return NULL;
	return shm_arena_base(s->arenas[loc.arena]) + loc.offset;
}

int store_slot_file(struct store *s, struct idx_loc loc, int *fd, uint64_t *offset)
{
	if (!store_slot(s, loc))
		return -EINVAL;
	*fd = shm_arena_fd(s->arenas[loc.arena]);
	*offset = loc.offset;
	return 0;
}

int store_fill_copy(void *ctx, uint32_t i, struct idx_loc loc)
{
	const struct store_copy *f = ctx;
	(void)i;
	uint8_t *dst = store_slot(f->store, loc);
	if (!dst)
		return -EINVAL;
	memcpy(dst, f->payload, f->len);
	return 0;
}

struct shm_arena *store_arena(struct store *s, uint32_t id)
{
	return id < s->narenas ? s->arenas[id] : NULL;
}

uint32_t store_arenas(const struct store *s) { return s->narenas; }

uint64_t store_bytes_used(const struct store *s)
{
	return s->used_slots * s->slot_bytes;
}

uint64_t store_bytes_charged(const struct store *s)
{
	return s->charged_slots * s->slot_bytes;
}

uint64_t store_slot_bytes(const struct store *s) { return s->slot_bytes; }
