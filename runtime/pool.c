/* SPDX-License-Identifier: MIT */
/*
 * Worker pool for the forward pass.
 *
 * DESIGN. A decode step issues ~150 short parallel loops (one per matrix
 * product or attention pass), so handing out work must cost microseconds,
 * not a futex round trip each time. Workers therefore spin briefly on the
 * job word before sleeping on a condition variable.
 *
 * The caller waits for the job's tasks, not for every worker: on a shared
 * machine a worker is sometimes descheduled for milliseconds, and waiting
 * for it to acknowledge jobs it had no part in stalled every loop of the
 * step (decode ran at a fifth of its speed while another process used the
 * CPUs). A task is claimed by a compare-and-swap on one word holding the
 * job's generation and its next task, so a late worker either claims a task
 * of the current job or nothing. Jobs alternate between two descriptors: a
 * late worker may read the descriptor of job g while job g + 1 is being
 * set up in the other one, and the descriptor of g is rewritten (for g + 2)
 * only after the generation has moved past g, which its claim checks.
 */
#include "pool.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define SPIN_ITERS 20000

/* Atomic (relaxed) only because a late worker may read a descriptor while
 * it is rewritten; what it read is then never used. */
struct job {
	_Atomic(pool_fn) fn;
	_Atomic(void *) ctx;
	atomic_int ntasks;
};

struct pool {
	int n;
	pthread_t *tids;           /* (n - 1) */
	pthread_mutex_t mu;        /* guards sleeping on cv */
	pthread_cond_t cv;
	struct job jobs[2];        /* job g is jobs[g & 1] */
	/* g << 32 | next unclaimed task of job g. Stored (release) after the
	 * descriptor is written, so a worker that reads it (acquire) sees the
	 * job it announces. */
	_Atomic uint64_t claim;
	atomic_int done;           /* tasks of the current job finished */
	atomic_int sleeping;       /* workers on (or going to) cv */
	bool stop;                 /* under mu */
};

struct worker_arg {
	struct pool *p;
	int id;
};

static uint32_t gen_of(uint64_t claim)
{
	return (uint32_t)(claim >> 32);
}

/* Runs tasks of job g until none is left; returns at once if g is over. */
static void run_job(struct pool *p, uint32_t g, int id)
{
	uint64_t c = atomic_load_explicit(&p->claim, memory_order_acquire);
	if (gen_of(c) != g)
		return;
	/* Possibly another job's if g is already over; then every claim below fails. */
	struct job *j = &p->jobs[g & 1];
	pool_fn fn = atomic_load_explicit(&j->fn, memory_order_relaxed);
	void *ctx = atomic_load_explicit(&j->ctx, memory_order_relaxed);
	int ntasks = atomic_load_explicit(&j->ntasks, memory_order_relaxed);
	for (;;) {
		if (gen_of(c) != g || (int)(uint32_t)c >= ntasks)
			return;
		if (atomic_compare_exchange_weak_explicit(&p->claim, &c, c + 1, memory_order_acq_rel,
							  memory_order_acquire)) {
			fn(ctx, (int)(uint32_t)c, id);
			/* Release: the task's results are visible to the caller's acquire. */
			atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
			c = atomic_load_explicit(&p->claim, memory_order_acquire);
		}
	}
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/* The generation of the next job after `seen`, or false to stop. */
static bool wait_job(struct pool *p, uint32_t seen, uint32_t *g)
{
	for (int spins = 0; spins < SPIN_ITERS; spins++) {
		if ((*g = gen_of(atomic_load_explicit(&p->claim, memory_order_acquire))) != seen)
			return true;
		cpu_relax();
	}
	/* seq_cst pairs with the caller's store of claim and load of sleeping:
	 * either it sees us sleeping and signals, or we see its job. */
	atomic_fetch_add_explicit(&p->sleeping, 1, memory_order_seq_cst);
	pthread_mutex_lock(&p->mu);
	while ((*g = gen_of(atomic_load_explicit(&p->claim, memory_order_seq_cst))) == seen &&
	       !p->stop)
		pthread_cond_wait(&p->cv, &p->mu);
	bool stop = p->stop;
	pthread_mutex_unlock(&p->mu);
	atomic_fetch_sub_explicit(&p->sleeping, 1, memory_order_relaxed);
	return !stop;
}

static void *worker_main(void *arg)
{
	struct worker_arg wa = *(struct worker_arg *)arg;
	free(arg);
	struct pool *p = wa.p;
	uint32_t g = 0;
	while (wait_job(p, g, &g))
		run_job(p, g, wa.id);
	return NULL;
}

int pool_cpu_count(void)
{
	cpu_set_t set;
	if (!sched_getaffinity(0, sizeof(set), &set) && CPU_COUNT(&set) > 0)
		return CPU_COUNT(&set);
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

int pool_new(int n, struct pool **out)
{
	if (n < 1 || n > 1024)
		return -EINVAL;
	struct pool *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->n = n;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	p->tids = calloc((size_t)n, sizeof(*p->tids));
	if (!p->tids) {
		pool_free(p);
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
			pool_free(p);
			return -rc;
		}
		char name[16];
		snprintf(name, sizeof(name), "pfx-work-%u", (unsigned)i % 10000u);
		pthread_setname_np(p->tids[i - 1], name);
	}
	*out = p;
	return 0;
}

void pool_free(struct pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	/* Workers still spinning see stop once their spin ends. */
	for (int i = 1; i < p->n; i++)
		pthread_join(p->tids[i - 1], NULL);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p->tids);
	free(p);
}

int pool_threads(const struct pool *p)
{
	return p->n;
}

void pool_run(struct pool *p, pool_fn fn, void *ctx, int ntasks)
{
	if (ntasks <= 0)
		return;
	if (p->n == 1 || ntasks == 1) {
		for (int t = 0; t < ntasks; t++)
			fn(ctx, t, 0);
		return;
	}
	/* Only this thread changes the generation: no worker can claim a task
	 * until the store below, and every task of the previous job is done. */
	uint32_t g = gen_of(atomic_load_explicit(&p->claim, memory_order_relaxed)) + 1;
	struct job *j = &p->jobs[g & 1];
	atomic_store_explicit(&j->fn, fn, memory_order_relaxed);
	atomic_store_explicit(&j->ctx, ctx, memory_order_relaxed);
	atomic_store_explicit(&j->ntasks, ntasks, memory_order_relaxed);
	atomic_store_explicit(&p->done, 0, memory_order_relaxed);
	atomic_store_explicit(&p->claim, (uint64_t)g << 32, memory_order_seq_cst);
	if (atomic_load_explicit(&p->sleeping, memory_order_seq_cst) > 0) {
		pthread_mutex_lock(&p->mu);
		pthread_cond_broadcast(&p->cv);
		pthread_mutex_unlock(&p->mu);
	}
	run_job(p, g, 0);
	int spins = 0;
	/* Acquire: pairs with each task's release of done. */
	while (atomic_load_explicit(&p->done, memory_order_acquire) < ntasks) {
		if (++spins < SPIN_ITERS)
			cpu_relax();
		else
			sched_yield();
	}
}
