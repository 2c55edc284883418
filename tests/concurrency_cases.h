/* SPDX-License-Identifier: MIT */
/*
 * Concurrency checks shared by the Criterion suite and by a plain driver
 * for ThreadSanitizer (Criterion's forking runner cannot start under TSan:
 * "Could not initialize inheritable arena"). Each returns 0, or -1 with
 * why filled in.
 */
#ifndef PFX_CONCURRENCY_CASES_H
#define PFX_CONCURRENCY_CASES_H

#include <stddef.h>

int case_pool_runs_every_task_once(char *why, size_t len);
/* Forward passes of one model from 4 threads, forks freed across them:
 * for the fixture of every architecture. */
int case_one_model_many_threads(const char *fixtures, char *why, size_t len);

#endif
