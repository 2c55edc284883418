/* SPDX-License-Identifier: MIT */
/*
 * Shared-memory arenas: anonymous memfd segments that only the daemon can
 * write. Clients get a read-only descriptor and can only map it PROT_READ.
 * An arena is cut into equal slots, one KV block each.
 */
#ifndef SHM_ARENA_H
#define SHM_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct shm_arena;

/*
 * Creates an arena of nslots slots of slot_bytes each, mapped read-write for
 * the caller, sealed so its size can never change (no client mapping can
 * fault on truncation), its mode cleared so that no other user can reopen a
 * read-only descriptor for writing. Returns 0 or -errno.
 */
int shm_arena_create(uint32_t id, size_t slot_bytes, uint32_t nslots, struct shm_arena **out);
void shm_arena_free(struct shm_arena *a);

uint32_t shm_arena_id(const struct shm_arena *a);
size_t shm_arena_size(const struct shm_arena *a);
size_t shm_arena_slot_bytes(const struct shm_arena *a);
uint32_t shm_arena_slots_free(const struct shm_arena *a);
/* Free slots whose pages are still resident. */
uint32_t shm_arena_slots_resident_free(const struct shm_arena *a);
/* The writable view: only the daemon has it. */
uint8_t *shm_arena_base(const struct shm_arena *a);
/* The writable descriptor (the arena's own: do not close it), to fill a
 * slot by copy_file_range, which writes the pages without faulting each
 * into the view. */
int shm_arena_fd(const struct shm_arena *a);

/* A new read-only descriptor of the arena, for a client (the caller closes
 * it after sending). Returns the fd or -errno. */
int shm_arena_ro_fd(const struct shm_arena *a);

/*
 * Takes a slot: 0 and its byte offset, or -ENOSPC. Not thread-safe: the
 * owner of the arena serialises slot changes. _reuse takes only a slot
 * freed with its pages resident, _new only one whose pages are not (never
 * handed out, or punched out; they become resident when written).
 */
int shm_arena_slot_reuse(struct shm_arena *a, uint64_t *offset);
int shm_arena_slot_new(struct shm_arena *a, uint64_t *offset);
/* Returns a slot; with punch, its pages are punched out and their memory
 * freed, even while clients map the arena (they read zeros there). -EINVAL
 * for an offset that is not a used slot; -errno when the punch failed (the
 * slot is then free and resident). */
int shm_arena_slot_free(struct shm_arena *a, uint64_t offset, bool punch);

/*
 * Client side: checks that fd is a sealed arena of at least size bytes and
 * maps it read-only. Returns 0 and *out, or -errno (-EPERM when the fd is
 * not sealed against shrinking, -EINVAL when it is too small).
 */
int shm_map_ro(int fd, size_t size, const void **out);
void shm_unmap(const void *p, size_t size);

#endif
