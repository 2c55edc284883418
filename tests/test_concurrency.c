/* SPDX-License-Identifier: MIT */
/*
 * The concurrent parts of the runtime, meant to run under ThreadSanitizer:
 * the worker pool, forward passes of one model from several threads, and
 * blocks shared by forks and released on other threads.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "pool.h"

struct count_ctx {
	atomic_int hits[257];
	int threads;
	atomic_int bad_thread;
};

static void count_task(void *ctx, int task, int thread)
{
	struct count_ctx *c = ctx;
	atomic_fetch_add(&c->hits[task], 1);
	if (thread < 0 || thread >= c->threads)
		atomic_store(&c->bad_thread, 1);
}

Test(concurrency, pool_runs_every_task_once)
{
	for (int n = 1; n <= 4; n++) {
		struct pfx_pool *p;
		cr_assert_eq(pfx_pool_new(n, &p), 0);
		cr_expect_eq(pfx_pool_threads(p), n);
		for (int round = 0; round < 300; round++) {
			struct count_ctx c = { .threads = n };
			int tasks = 1 + (round * 37) % 257;
			pfx_pool_run(p, count_task, &c, tasks);
			for (int t = 0; t < 257; t++)
				cr_assert_eq(atomic_load(&c.hits[t]), t < tasks, "n=%d round %d task %d ran %d times",
					     n, round, t, atomic_load(&c.hits[t]));
			cr_assert_eq(atomic_load(&c.bad_thread), 0);
		}
		pfx_pool_free(p);
	}
}

struct fwd_thread {
	struct pfx_model *m;
	const int32_t *tok;
	size_t n;
	const float *ref;
	float worst;
};

static void *forward_thread(void *arg)
{
	struct fwd_thread *t = arg;
	int V = pfx_model_config(t->m)->vocab;
	float *l = malloc(t->n * V * sizeof(float));
	for (int round = 0; round < 4; round++) {
		struct pfx_session *s, *f;
		struct pfx_error err;
		if (pfx_session_new(t->m, &s, &err))
			abort();
		size_t half = t->n / 2;
		pfx_session_append(s, t->tok, half, PFX_LOGITS_ALL, l, &err);
		pfx_session_freeze(s, &err);
		/* The fork shares the frozen blocks; free the original first so
		 * the last reference to them is dropped by the fork. */
		pfx_session_fork(s, &f, &err);
		pfx_session_free(s);
		pfx_session_append(f, t->tok + half, t->n - half, PFX_LOGITS_ALL, l + half * V, &err);
		pfx_session_free(f);
		float d = max_abs_diff(l, t->ref, t->n * V);
		t->worst = d > t->worst ? d : t->worst;
	}
	free(l);
	return NULL;
}

Test(concurrency, one_model_many_threads)
{
	struct pfx_model *m = load_fixture_model_bt("llama-tiny-gqa", 8);
	size_t n;
	int32_t *tok = expected_i32("llama-tiny-gqa", "tokens", &n);
	float *ref = logits_uncached(m, tok, n);
	pthread_t th[4];
	struct fwd_thread args[4];
	for (int i = 0; i < 4; i++) {
		args[i] = (struct fwd_thread){ m, tok, n, ref, 0 };
		cr_assert_eq(pthread_create(&th[i], NULL, forward_thread, &args[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		cr_expect(args[i].worst <= TOL_SELF, "thread %d differs by %g", i, args[i].worst);
	}
	free(ref);
	free(tok);
	pfx_model_free(m);
}
