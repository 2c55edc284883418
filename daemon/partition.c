/* SPDX-License-Identifier: MIT */
#include "partition.h"

#include "record.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void partitions_init(struct partitions *ps, uint64_t budget, uint64_t arena_bytes)
{
	memset(ps, 0, sizeof(*ps));
	pthread_mutex_init(&ps->lock, NULL);
	ps->budget.limit = budget;
	ps->arena_bytes = arena_bytes;
}

void partitions_destroy(struct partitions *ps)
{
	while (ps->head) {
		struct partition *p = ps->head;
		ps->head = p->next;
		store_free(p->store);
		free(p);
	}
	pthread_mutex_destroy(&ps->lock);
}

static int make(struct partitions *ps, uint32_t uid, uint64_t block_bytes,
		struct partition **out)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	if (block_bytes > ps->budget.limit)
		return -ENOSPC;
	struct partition *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->uid = uid;
	p->block_bytes = block_bytes;
	/* Slots are whole pages: count them as the store will. */
	uint64_t slots = ps->arena_bytes / ((block_bytes + page - 1) / page * page);
	slots = slots < 1 ? 1 : slots > UINT32_MAX ? UINT32_MAX : slots;
	int rc = store_new(block_bytes, &ps->budget, (uint32_t)slots, &p->store);
	if (rc) {
		free(p);
		return rc;
	}
	*out = p;
	return 0;
}

/* Frees the partitions nobody holds: no connection, no block (caller
 * holds ps->lock; a holder is only ever added under it, or by an index
 * group made for a connection that holds the partition already). */
static void sweep(struct partitions *ps)
{
	for (struct partition **pp = &ps->head; *pp;) {
		struct partition *p = *pp;
		if (store_holders(p->store)) {
			pp = &p->next;
			continue;
		}
		*pp = p->next;
		ps->count--;
		store_free(p->store);
		free(p);
	}
}

int partitions_get(struct partitions *ps, uint32_t uid, uint64_t block_bytes,
		   struct partition **out)
{
	int rc = 0, mine = 0;
	pthread_mutex_lock(&ps->lock);
	struct partition *p = ps->head;
	while (p && (p->uid != uid || p->block_bytes != block_bytes))
		p = p->next;
	if (!p) {
		sweep(ps);
		for (struct partition *q = ps->head; q; q = q->next)
			mine += q->uid == uid;
		if (ps->count >= PARTITIONS_MAX)
			rc = -EMFILE;
		else if (mine >= PARTITIONS_PER_USER)
			rc = -EUSERS;
		else if (!(rc = make(ps, uid, block_bytes, &p))) {
			p->next = ps->head;
			ps->head = p;
			ps->count++;
		}
	}
	if (!rc)
		store_hold(p->store, 1);
	pthread_mutex_unlock(&ps->lock);
	*out = rc ? NULL : p;
	return rc;
}

int partitions_find(struct partitions *ps, uint32_t uid, uint64_t block_bytes,
		    struct partition **out)
{
	pthread_mutex_lock(&ps->lock);
	struct partition *p = ps->head;
	while (p && (p->uid != uid || p->block_bytes != block_bytes))
		p = p->next;
	if (p)
		store_hold(p->store, 1);
	pthread_mutex_unlock(&ps->lock);
	*out = p;
	return p ? 0 : -ENOENT;
}

void partitions_put(struct partitions *ps, struct partition *p)
{
	(void)ps;
	if (p)
		store_hold(p->store, -1);
}

void partitions_usage(struct partitions *ps, uint64_t *charged, uint64_t *arenas)
{
	uint64_t c = 0, n = 0;
	pthread_mutex_lock(&ps->lock);
	for (struct partition *p = ps->head; p; p = p->next) {
		c += store_bytes_charged(p->store);
		n += store_arenas(p->store);
	}
	pthread_mutex_unlock(&ps->lock);
	*charged = c;
	*arenas = n;
}

void partition_ops(const struct partition *p, uint32_t block_tokens, struct idx_store *ops)
{
	*ops = (struct idx_store){ .alloc = store_alloc, .free = store_release, .ctx = p->store,
				   .slot_bytes = store_slot_bytes(p->store), .hold = store_hold,
				   .block_bytes = p->block_bytes,
				   .record_bytes = rec_size(block_tokens, p->block_bytes) };
}
