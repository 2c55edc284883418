/* SPDX-License-Identifier: MIT */
/* The crash loop of the disk tier (crashloop_case.c): Criterion and the TSan driver run it. */
#ifndef PFX_CRASHLOOP_CASE_H
#define PFX_CRASHLOOP_CASE_H

#include <stddef.h>

/* Rounds for PREFIXD_CRASHLOOP_SECONDS seconds (default 3): 0, or -1
 * with why. *rounds: how many ran. */
int case_crash_loop(char *why, size_t len, int *rounds);

#endif
