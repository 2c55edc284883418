/* SPDX-License-Identifier: MIT */
/*
 * The disk tier: one record file per block in a directory (record.h has
 * the format), written behind the index by one thread through its own
 * io_uring, read back by the MATCH that needs them, and found again at
 * start (restart.c). docs/DESIGN.md, "The disk tier", says why it writes
 * every block soon after it is published rather than when it is evicted.
 *
 * A record is visible only once whole: it is written under a temporary
 * name and renamed, a child's only after its parent's. No fsync per record
 * (but with --disk-sync): a record cut short by a crash of the machine
 * fails its checksum and is dropped, never served; a graceful stop syncs
 * the directory's file system once.
 */
#ifndef PD_TIER_H
#define PD_TIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "index.h"

struct tier;

/* Takes DIR (made if missing) for this daemon. 0, or -errno and *why,
 * what could not be done to DIR ("cannot open the disk directory"); a
 * second daemon on the same DIR is refused with -EBUSY and *holder the
 * first one's pid (0: unknown). */
int tier_open(const char *dir, uint32_t block_tokens, struct tier **out, const char **why,
	      long *holder);
/* The directory's descriptor, for restart.c. */
int tier_dirfd(const struct tier *t);
/* Before tier_start: with sync, every record is synced to the disk
 * before its block counts as written, and a PUBLISH is answered only
 * once its blocks are (--disk-sync); without, records are written behind
 * and a crash or kill -9 loses those not written yet. */
void tier_set_sync(struct tier *t, bool sync);
/* Makes x write its blocks here, and starts the writer thread. 0 or -errno. */
int tier_start(struct tier *t, struct idx *x);
/* Writes every block held only in memory, syncs, and stops the writer (a
 * graceful stop: nothing on disk changes after it but the deletions
 * tier_close makes). Returns how many could not be written (a full disk
 * or budget). */
uint64_t tier_drain(struct tier *t);
/* Stops the writer (what it has not written stays unwritten), closes DIR
 * and lets another daemon have it. NULL is fine. */
void tier_close(struct tier *t);

/* Reads n blocks' records into their slots and checks them: ok[i] is 0
 * or -errno (-EBADMSG, -EACCES, -ENOENT, -ENODATA: the record is bad;
 * others: it could not be read now). For idx_restored. Blocks the
 * calling thread until every read is done. */
void tier_restore(struct tier *t, const struct idx_block *b, uint32_t n, int *ok);

/* Reads block b's whole record (len bytes: its head and payload span)
 * into buf and checks it as a restore does. 0, or -errno and *why. */
int tier_read_record(struct tier *t, const struct idx_block *b, uint8_t *buf, size_t len,
		     const char **why);

/* A record's file name: u<uid>-<hash in hex>.rec (and .tmp while written). */
#define TIER_NAME_MAX 96
void tier_name(uint32_t ns, const uint8_t *hash, const char *ext, char out[TIER_NAME_MAX]);

#endif
