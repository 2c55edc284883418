/* SPDX-License-Identifier: MIT */
/*
 * Arenas of POSIX shared memory, made with memfd_create: no name in any
 * file system, so no other user can open one; it reaches a client only as a
 * descriptor the daemon sends.
 *
 * Protection, in layers:
 *  - F_SEAL_SHRINK | F_SEAL_GROW: the size is fixed, so a mapping can never
 *    fault on truncation (a client cannot be killed by another's ftruncate);
 *  - F_SEAL_FUTURE_WRITE, set after the daemon's own writable mapping: no
 *    new writable mapping or write(2) through any descriptor;
 *  - clients receive a descriptor reopened O_RDONLY, which cannot be mapped
 *    PROT_WRITE (or mprotect'ed to it) even without the seal.
 *
 * An arena's pages are resident only once written, and the seals forbid
 * punching them out again, so slots a block has used are told apart from
 * slots never touched: reusing the former costs no new memory.
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

#define SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL)

struct shm_arena {
	uint32_t id;
	int fd;
	int ro_fd;                /* read-only, duplicated for each client */
	uint8_t *base;            /* (size) read-write, the daemon's view */
	size_t size, slot_bytes;
	uint32_t nslots, nfree;
	uint32_t touched;         /* slots [0, touched) have been handed out */
	uint32_t *free_list;      /* (nslots) stack of freed slot indices */
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
	a->free_list = malloc(nslots * sizeof(*a->free_list));
	a->used = calloc(nslots, 1);
	if (!a->free_list || !a->used) {
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
	if (a->ro_fd < 0) {
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
	free(a->free_list);
	free(a->used);
	free(a);
}

uint32_t shm_arena_id(const struct shm_arena *a) { return a->id; }
size_t shm_arena_size(const struct shm_arena *a) { return a->size; }
size_t shm_arena_slot_bytes(const struct shm_arena *a) { return a->slot_bytes; }
uint32_t shm_arena_slots_free(const struct shm_arena *a) { return a->nfree + a->nslots - a->touched; }
uint8_t *shm_arena_base(const struct shm_arena *a) { return a->base; }

int shm_arena_ro_fd(const struct shm_arena *a)
{
	int fd = fcntl(a->ro_fd, F_DUPFD_CLOEXEC, 0);
	return fd < 0 ? -errno : fd;
}

int shm_arena_slot_reuse(struct shm_arena *a, uint64_t *offset)
{
	if (!a->nfree)
		return -ENOSPC;
	uint32_t s = a->free_list[--a->nfree];
	a->used[s] = 1;
	*offset = (uint64_t)s * a->slot_bytes;
	return 0;
}

int shm_arena_slot_new(struct shm_arena *a, uint64_t *offset)
{
	if (a->touched == a->nslots)
		return -ENOSPC;
	uint32_t s = a->touched++;
	a->used[s] = 1;
	*offset = (uint64_t)s * a->slot_bytes;
	return 0;
}

int shm_arena_slot_free(struct shm_arena *a, uint64_t offset)
{
	if (offset % a->slot_bytes || offset / a->slot_bytes >= a->nslots)
		return -EINVAL;
	uint32_t s = (uint32_t)(offset / a->slot_bytes);
	if (!a->used[s])
		return -EINVAL;
	a->used[s] = 0;
	a->free_list[a->nfree++] = s;
	return 0;
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
