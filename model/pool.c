/* SPDX-License-Identifier: MIT */
/*
 * Worker pool for the forward pass.
 *
 * DESIGN. A decode step issues a few hundred short parallel loops (one per
 * matrix product), so handing out work must cost microseconds, not a futex
 * round trip each time. Workers therefore spin briefly on the job
 * generation before sleeping on a condition variable. Every worker
 * acknowledges every job (finished++), and the caller waits for all of
 * them: a worker can never carry a stale view of one job into the next.
 */
#include "pool.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define SPIN_ITERS 20000

struct pfx_pool {
	int n;
	pthread_t *tids;           /* (n - 1) */
	pthread_mutex_t mu;        /* guards sleeping on cv; gen changes under it */
	pthread_cond_t cv;
	/* gen is bumped (release) after fn/ctx/ntasks/next are set, so a worker
	 * that reads gen (acquire) sees the job it announces. */
	atomic_uint gen;
	atomic_int next;           /* next unclaimed task */
	atomic_int finished;       /* workers done with the current job */
	pfx_pool_fn fn;
	void *ctx;
	int ntasks;
	bool stop;                 /* under mu */
};

struct worker_arg {
	struct pfx_pool *p;
	int id;
};

static void drain(struct pfx_pool *p, pfx_pool_fn fn, void *ctx, int ntasks, int id)
{
	int t;
	while ((t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed)) < ntasks)
		fn(ctx, t, id);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static void *worker_main(void *arg)
{
	struct worker_arg wa = *(struct worker_arg *)arg;
	free(arg);
	struct pfx_pool *p = wa.p;
	unsigned seen = 0;
	for (;;) {
		unsigned g;
		int spins = 0;
		while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
		       spins < SPIN_ITERS) {
			cpu_relax();
			spins++;
		}
		if (g == seen) {
			pthread_mutex_lock(&p->mu);
			while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
			       !p->stop)
				pthread_cond_wait(&p->cv, &p->mu);
			bool stop = p->stop;
			pthread_mutex_unlock(&p->mu);
			if (stop)
				return NULL;
		}
		seen = g;
		drain(p, p->fn, p->ctx, p->ntasks, wa.id);
		/* Release: our task results are visible to the caller's acquire. */
		atomic_fetch_add_explicit(&p->finished, 1, memory_order_release);
	}
}

int pfx_cpu_count(void)
{
	cpu_set_t set;
	if (!sched_getaffinity(0, sizeof(set), &set) && CPU_COUNT(&set) > 0)
		return CPU_COUNT(&set);
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

int pfx_pool_new(int n, struct pfx_pool **out)
{
	if (n < 1 || n > 1024)
		return -EINVAL;
	struct pfx_pool *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->n = n;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	p->tids = calloc((size_t)n, sizeof(*p->tids));
	if (!p->tids) {
		pfx_pool_free(p);
		return -ENOMEM;
	}
	for (int i = 1; i < n; i++) {
		struct worker_arg *wa = malloc(sizeof(*wa));
		int rc = ENOMEM;
		if (wa) {
			wa->p = p;
			wa->id = i;
			rc = pthread_create(&p->tids[i - 1], NULL, worker_main, wa);
		}
		if (rc) {
			free(wa);
			p->n = i; /* only the first i - 1 workers exist */
			pfx_pool_free(p);
			return -rc;
		}
		char name[16];
		snprintf(name, sizeof(name), "pfx-work-%d", i % 10000);
		pthread_setname_np(p->tids[i - 1], name);
	}
	*out = p;
	return 0;
}

void pfx_pool_free(struct pfx_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	for (int i = 1; i < p->n; i++)
		pthread_join(p->tids[i - 1], NULL);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p->tids);
	free(p);
}

int pfx_pool_threads(const struct pfx_pool *p)
{
	return p->n;
}

void pfx_pool_run(struct pfx_pool *p, pfx_pool_fn fn, void *ctx, int ntasks)
{
	if (ntasks <= 0)
		return;
	if (p->n == 1 || ntasks == 1) {
		for (int t = 0; t < ntasks; t++)
			fn(ctx, t, 0);
		return;
	}
	p->fn = fn;
	p->ctx = ctx;
	p->ntasks = ntasks;
	atomic_store_explicit(&p->next, 0, memory_order_relaxed);
	atomic_store_explicit(&p->finished, 0, memory_order_relaxed);
	pthread_mutex_lock(&p->mu);
	/* Release: publishes the job fields above to workers' acquire of gen. */
	atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	drain(p, fn, ctx, ntasks, 0);
	int spins = 0;
	/* Acquire: pairs with each worker's release of finished. */
	while (atomic_load_explicit(&p->finished, memory_order_acquire) < p->n - 1) {
		if (++spins < SPIN_ITERS)
			cpu_relax();
		else
			sched_yield();
	}
}
