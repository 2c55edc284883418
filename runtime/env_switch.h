/* SPDX-License-Identifier: MIT */
/*
 * Switches read once from the environment, to compare whole programs with
 * and without a path (PFX_NO_KV_PREFETCH, PFX_NO_ATT_SPLIT,
 * PFX_NO_POPULATE): set, and not "0", turns the path off. `once` holds
 * the answer, -1 until read (a race only reads the variable twice).
 */
#ifndef PFX_ENV_SWITCH_H
#define PFX_ENV_SWITCH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

static inline bool env_switch_off(_Atomic int *once, const char *name)
{
	int v = atomic_load_explicit(once, memory_order_relaxed);
	if (v < 0) {
		const char *no = getenv(name);
		v = no && *no && *no != '0';
		atomic_store_explicit(once, v, memory_order_relaxed);
	}
	return v;
}

#endif
