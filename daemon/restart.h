/* SPDX-License-Identifier: MIT */
/*
 * Warm restart: the index rebuilt from the records a disk tier's
 * directory holds, before the daemon serves anyone. Each record's head is
 * checked (record.h), its name must be its own, its hash must follow its
 * chain from its parent's, and its parent must be there; what fails is
 * deleted and counted. Payloads are checked when a MATCH reads them.
 */
#ifndef PD_RESTART_H
#define PD_RESTART_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon.h"
#include "tier.h"

struct restart_report {
	uint64_t records;     /* found */
	uint64_t loaded, bytes;
	uint64_t corrupt;     /* failed a check */
	uint64_t torn;        /* temporary files of a write a stop cut short */
	uint64_t dropped;     /* intact, but of another block size, without their
			       * parent, past the disk budget or a partition limit */
	uint64_t over_budget, over_budget_bytes; /* of those, past the disk budget, or
						  * continuing a block that was */
	uint64_t pins;        /* pins kept from the last run (its manifest) */
	uint64_t pins_expired, pins_lost; /* ended while it was down; past --pin-max */
	double ms;
	bool manifest;        /* read from the manifest of a graceful stop, not a scan */
};

/* Loads d->idx from t's directory. 0 or -errno (-ENOMEM; a directory
 * that cannot be read). */
int restart_load(struct daemon *d, struct tier *t, struct restart_report *r);
/* After a graceful stop's tier_drain: the manifest of every record on
 * disk, so that the next start reads one file instead of every record's
 * head (docs/perf/2026-11-23-disk-tier.md has both timings). 0 or -errno; *records listed. */
int restart_save(struct daemon *d, struct tier *t, uint64_t *records);

#endif
