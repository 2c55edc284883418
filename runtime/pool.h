/* SPDX-License-Identifier: MIT */
/*
 * A fixed pool of worker threads that run one parallel loop at a time. The
 * calling thread takes part, so a pool of n runs on n threads in all.
 */
#ifndef PFX_POOL_H
#define PFX_POOL_H

/* fn runs once for every task in [0, ntasks); thread is in [0, n). */
typedef void (*pool_fn)(void *ctx, int task, int thread);

struct pool;

/* n >= 1 threads including the caller. Returns 0 or -errno. */
int pool_new(int n, struct pool **out);
void pool_free(struct pool *p);
int pool_threads(const struct pool *p);
/* Runs all tasks and returns when every one has finished. Not reentrant:
 * one caller at a time (the model serialises its forward passes). */
void pool_run(struct pool *p, pool_fn fn, void *ctx, int ntasks);

/* Online CPUs this process may run on. */
int pool_cpu_count(void);

#endif
