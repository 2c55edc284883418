/* SPDX-License-Identifier: MIT */
/*
 * Arenas of POSIX shared memory, made with memfd_create: no name in any
 * file system, so no other user can open one; it reaches a client only as a
 * descriptor the daemon sends.
 *
 * Protection, in layers:
 *  - F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL: the size is fixed, so a
 *    mapping can never fault on truncation (a client cannot be killed by
 *    another's ftruncate);
 *  - clients receive a descriptor reopened O_RDONLY, which cannot be mapped
 *    PROT_WRITE, mprotect'ed to it, or written with write(2);
 *  - the memfd's mode is then cleared: a memfd is made 0777, and anyone who
 *    holds a descriptor of it could otherwise reopen it read-write through
 *    /proc/self/fd. With mode 0 only its owner (the daemon's user, who can
 *    change the mode back) and root can; other users cannot.
 *
 * F_SEAL_FUTURE_WRITE would also stop the owner, but it forbids punching
 * pages out (FALLOC_FL_PUNCH_HOLE), and evicted blocks must give their
 * memory back to the budget, whichever partition publishes next
 * (docs/perf/2026-11-22-punch-holes.md). Clients of the daemon's own user
 * are trusted no less than the daemon is: they could ptrace it.
 *
 * An arena's pages are resident only once written. A freed slot is either
 * kept resident (the store reuses it at once) or punched out.
 */
#include "arena.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

struct shm_arena {
	uint32_t id;
	int fd;
	int ro_fd;                /* read-only, duplicated for each client */
	uint8_t *base;            /* (size) read-write, the daemon's view */
	size_t size, slot_bytes;
	uint32_t nslots;
	uint32_t touched;         /* slots [0, touched) have been handed out */
	/* Freed slots, a stack each: still resident, and punched out. */
	uint32_t nresident, nholes;
	uint32_t *resident, *holes; /* (nslots) */
	uint8_t *used;            /* (nslots) 1 when allocated */
};

int shm_arena_create(uint32_t id, size_t slot_bytes, uint32_t nslots, struct shm_arena **out)
{
	if (!slot_bytes || !nslots || slot_bytes > SIZE_MAX / nslots)
		return -EINVAL;
	long page = sysconf(_SC_PAGESIZE);
	/* Page-aligned slots: each block starts on its own page. */
	slot_bytes = (slot_bytes + (size_t)page - 1) & ~((size_t)page - 1);
	int rc;
	struct shm_arena *a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->id = id;
	a->fd = a->ro_fd = -1;
	a->slot_bytes = slot_bytes;
	a->nslots = nslots;
	a->size = slot_bytes * nslots;
	/* Large arenas have large tables; pages of them untouched stay free. */
	a->resident = malloc(nslots * sizeof(*a->resident));
	a->holes = malloc(nslots * sizeof(*a->holes));
	a->used = calloc(nslots, 1);
	if (!a->resident || !a->holes || !a->used) {
		rc = -ENOMEM;
		goto fail;
	}
	a->fd = memfd_create("prefixd-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (a->fd < 0 || ftruncate(a->fd, (off_t)a->size)) {
		rc = -errno;
		goto fail;
	}
	a->base = mmap(NULL, a->size, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, 0);
	if (a->base == MAP_FAILED) {
		a->base = NULL;
		rc = -errno;
		goto fail;
	}
	if (fcntl(a->fd, F_ADD_SEALS, SEALS)) {
		rc = -errno;
		goto fail;
	}
	/* Reopening through /proc is the only way to a read-only description
	 * of a memfd; do it once, and hand out duplicates (much cheaper). */
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", a->fd);
	a->ro_fd = open(path, O_RDONLY | O_CLOEXEC);
	if (a->ro_fd < 0 || fchmod(a->fd, 0)) {
		rc = -errno;
		goto fail;
	}
	*out = a;
	return 0;
fail:
	shm_arena_free(a);
	return rc;
}

void shm_arena_free(struct shm_arena *a)
{
	if (!a)
		return;
	if (a->base)
		munmap(a->base, a->size);
	if (a->fd >= 0)
		close(a->fd);
	if (a->ro_fd >= 0)
		close(a->ro_fd);
	free(a->resident);
	free(a->holes);
	free(a->used);
	free(a);
}

uint32_t shm_arena_id(const struct shm_arena *a) { return a->id; }
int shm_arena_fd(const struct shm_arena *a) { return a->fd; }
size_t shm_arena_size(const struct shm_arena *a) { return a->size; }
size_t shm_arena_slot_bytes(const struct shm_arena *a) { return a->slot_bytes; }
uint32_t shm_arena_slots_free(const struct shm_arena *a)
{
	return a->nresident + a->nholes + a->nslots - a->touched;
}

uint32_t shm_arena_slots_resident_free(const struct shm_arena *a) { return a->nresident; }
uint8_t *shm_arena_base(const struct shm_arena *a) { return a->base; }

int shm_arena_ro_fd(const struct shm_arena *a)
{
	int fd = fcntl(a->ro_fd, F_DUPFD_CLOEXEC, 0);
	return fd < 0 ? -errno : fd;
}

static uint64_t take(struct shm_arena *a, uint32_t s)
{
	a->used[s] = 1;
	return (uint64_t)s * a->slot_bytes;
}

int shm_arena_slot_reuse(struct shm_arena *a, uint64_t *offset)
{
	if (!a->nresident)
		return -ENOSPC;
	*offset = take(a, a->resident[--a->nresident]);
	return 0;
}

int shm_arena_slot_new(struct shm_arena *a, uint64_t *offset)
{
	if (a->nholes)
		*offset = take(a, a->holes[--a->nholes]);
	else if (a->touched < a->nslots)
		*offset = take(a, a->touched++);
	else
		return -ENOSPC;
	return 0;
}

int shm_arena_slot_free(struct shm_arena *a, uint64_t offset, bool punch)
{
	if (offset % a->slot_bytes || offset / a->slot_bytes >= a->nslots)
		return -EINVAL;
	uint32_t s = (uint32_t)(offset / a->slot_bytes);
	if (!a->used[s])
		return -EINVAL;
	a->used[s] = 0;
	/* A failed punch leaves the pages resident: the slot is kept as such. */
	if (punch && !fallocate(a->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)offset,
				(off_t)a->slot_bytes)) {
		a->holes[a->nholes++] = s;
		return 0;
	}
	a->resident[a->nresident++] = s;
	return punch ? -errno : 0;
}

int shm_map_ro(int fd, size_t size, const void **out)
{
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0)
		return -errno;
	if ((seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
		return -EPERM;
	struct stat st;
	if (fstat(fd, &st))
		return -errno;
	if ((size_t)st.st_size < size || !size)
		return -EINVAL;
	void *p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	*out = p;
	return 0;
}

void shm_unmap(const void *p, size_t size)
{
	if (p)
		munmap((void *)p, size);
}
