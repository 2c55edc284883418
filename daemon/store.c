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
 * index calls these under its lock); the store's own mutex orders them
 * with the pool thread.
 *
 * The pool (store_pool): a fresh slot's pages cost the thread that first
 * writes them 0.5 s a GB here, 2-3 s on a loaded machine (the host backs
 * each guest page as it is cleared), the largest part of a remote fetch
 * into a daemon that just started (docs/perf/2026-11-30-remote-fetch-2.md).
 * A thread of the store's keeps a few fresh slots populated and freed
 * as resident, which store_alloc hands out first (to a fetch, a restore,
 * a publish alike), so that work runs on the other CPU before, or while,
 * the blocks come. Its slots are charged to the budget like any resident
 * one, at most the target's, and it takes none unless the budget has
 * room for POOL_ROOM times the target beyond them: a full budget reuses
 * resident slots anyway.
 */
#include "store.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAX_ARENAS STORE_MAX_ARENAS
#define POOL_ROOM 4

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
	/* Slot state (arenas, their stacks, the counts' changes) between the
	 * index's callers and the pool thread. */
	pthread_mutex_t mu;
	pthread_cond_t cv;      /* the pool thread waits on it for a slot taken */
	pthread_t pool;
	bool pool_on, stop;
	uint32_t pool_target;   /* resident free slots the thread keeps */
	_Atomic uint64_t pool_filled, pool_taken;
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
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
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
	if (s->pool_on) {
		pthread_mutex_lock(&s->mu);
		s->stop = true;
		pthread_cond_signal(&s->cv);
		pthread_mutex_unlock(&s->mu);
		pthread_join(s->pool, NULL);
	}
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->mu);
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

/* A slot whose pages are not resident, charged: 0, or -ENOSPC (budget),
 * or the arena's error. Under s->mu. */
static int slot_fresh(struct store *s, struct idx_loc *loc)
{
	if (!charge(s->budget, s->slot_bytes))
		return -ENOSPC;
	uint32_t last = s->narenas - 1;
	/* Punched-out slots of any arena, then untouched ones of the last. */
	for (uint32_t i = 0; i + 1 < s->narenas; i++)
		if (!shm_arena_slot_new(s->arenas[i], &loc->offset)) {
			loc->arena = i;
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
	s->charged_slots++;
	return 0;
}

int store_alloc(void *store, struct idx_loc *loc)
{
	struct store *s = store;
	int rc = -ENOSPC;
	pthread_mutex_lock(&s->mu);
	/* A slot freed without a punch, or populated by the pool: its memory
	 * is charged (and resident) already. */
	for (uint32_t i = 0; rc && i < s->narenas; i++)
		if (!shm_arena_slot_reuse(s->arenas[i], &loc->offset)) {
			loc->arena = i;
			rc = 0;
		}
	if (!rc && s->pool_on)
		atomic_fetch_add(&s->pool_taken, 1);
	if (rc)
		rc = slot_fresh(s, loc);
	if (!rc)
		s->used_slots++;
	if (s->pool_on)
		pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return rc;
}

void store_release(void *store, struct idx_loc loc, bool punch)
{
	struct store *s = store;
	pthread_mutex_lock(&s->mu);
	int rc = loc.arena < s->narenas
			 ? shm_arena_slot_free(s->arenas[loc.arena], loc.offset, punch)
			 : -EINVAL;
	if (rc != -EINVAL)
		s->used_slots--;
	if (rc != -EINVAL && punch && !rc) {
		s->charged_slots--;
		atomic_fetch_sub(&s->budget->charged, s->slot_bytes);
	}
	pthread_mutex_unlock(&s->mu);
}

/* Resident free slots: what store_alloc hands out without a fault. */
static uint32_t resident_free(const struct store *s)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < s->narenas; i++)
		n += shm_arena_slots_resident_free(s->arenas[i]);
	return n;
}

/* Room for one more pooled slot, and POOL_ROOM times the target after it. */
static bool pool_room(const struct store *s)
{
	uint64_t have = atomic_load(&s->budget->charged), want =
		(uint64_t)(POOL_ROOM * s->pool_target + 1) * s->slot_bytes;
	return have <= s->budget->limit && s->budget->limit - have >= want;
}

/* Writes the slot's pages in: one call, or (a kernel before 5.14 says
 * EINVAL) a byte a page; a fresh slot is zeros, so zeros are written. */
static void populate(struct store *s, struct idx_loc loc)
{
	uint8_t *p = store_slot(s, loc);
	if (!p || !madvise(p, s->slot_bytes, MADV_POPULATE_WRITE))
		return;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	for (size_t off = 0; off < s->slot_bytes; off += page)
		((volatile uint8_t *)p)[off] = 0;
}

static void *pool_main(void *arg)
{
	struct store *s = arg;
	pthread_mutex_lock(&s->mu);
	while (!s->stop) {
		struct idx_loc loc;
		if (resident_free(s) >= s->pool_target || !pool_room(s) || slot_fresh(s, &loc)) {
			pthread_cond_wait(&s->cv, &s->mu);
			continue;
		}
		/* The slot is the thread's (used in its arena, in no free
		 * list): its pages are written without the lock. */
		pthread_mutex_unlock(&s->mu);
		populate(s, loc);
		pthread_mutex_lock(&s->mu);
		shm_arena_slot_free(s->arenas[loc.arena], loc.offset, false);
		atomic_fetch_add(&s->pool_filled, 1);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

int store_pool(struct store *s, uint32_t slots)
{
	int rc = 0;
	slots = slots > STORE_POOL_MAX ? STORE_POOL_MAX : slots;
	pthread_mutex_lock(&s->mu);
	if (slots > s->pool_target)
		s->pool_target = slots;
	if (!s->pool_on && s->pool_target) {
		rc = -pthread_create(&s->pool, NULL, pool_main, s);
		s->pool_on = !rc;
	}
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return rc;
}

void store_pool_stats(struct store *s, struct store_pool_stats *out)
{
	pthread_mutex_lock(&s->mu);
	*out = (struct store_pool_stats){ .target = s->pool_target, .ready = resident_free(s),
					  .filled = atomic_load(&s->pool_filled),
					  .taken = atomic_load(&s->pool_taken) };
	pthread_mutex_unlock(&s->mu);
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
