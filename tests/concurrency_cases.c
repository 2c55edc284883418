/* SPDX-License-Identifier: MIT */
/*
 * The concurrent parts of the runtime: the worker pool, forward passes of
 * one model from several threads, and KV blocks shared by forks and
 * released on other threads.
 */
#include "concurrency_cases.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"
#include "safetensors.h"
#include "session.h"

#define FAIL(...) (snprintf(why, len, __VA_ARGS__), -1)

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

int case_pool_runs_every_task_once(char *why, size_t len)
{
	for (int n = 1; n <= 4; n++) {
		struct pool *p;
		if (pool_new(n, &p))
			return FAIL("cannot start a pool of %d", n);
		for (int round = 0; round < 300; round++) {
			struct count_ctx c = { .threads = n };
			int tasks = 1 + (round * 37) % 257;
			pool_run(p, count_task, &c, tasks);
			for (int t = 0; t < 257; t++)
				if (atomic_load(&c.hits[t]) != (t < tasks)) {
					pool_free(p);
					return FAIL("pool of %d, round %d: task %d ran %d times", n, round,
						    t, atomic_load(&c.hits[t]));
				}
			if (atomic_load(&c.bad_thread)) {
				pool_free(p);
				return FAIL("pool of %d: thread index out of range", n);
			}
		}
		pool_free(p);
	}
	return 0;
}

struct fwd_thread {
	struct pfx_model *m;
	const int32_t *tok;
	size_t n;
	const float *ref;
	float worst;
	int failed;
};

static float max_diff(const float *a, const float *b, size_t n)
{
	float d = 0;
	for (size_t i = 0; i < n; i++)
		d = fmaxf(d, isnan(a[i] - b[i]) ? INFINITY : fabsf(a[i] - b[i]));
	return d;
}

static void *forward_thread(void *arg)
{
	struct fwd_thread *t = arg;
	int V = pfx_model_config(t->m)->vocab;
	float *l = malloc(t->n * V * sizeof(float));
	for (int round = 0; round < 4 && l; round++) {
		struct pfx_session *s = NULL, *f = NULL;
		size_t half = t->n / 2;
		if (pfx_session_new(t->m, &s, NULL) ||
		    pfx_session_append(s, t->tok, half, PFX_LOGITS_ALL, l, NULL) ||
		    pfx_session_freeze(s, NULL) || pfx_session_fork(s, &f, NULL)) {
			t->failed = 1;
			pfx_session_free(s);
			break;
		}
		/* The fork shares the frozen blocks; freeing the original first
		 * leaves the fork to drop the last reference. */
		pfx_session_free(s);
		if (pfx_session_append(f, t->tok + half, t->n - half, PFX_LOGITS_ALL, l + half * V, NULL))
			t->failed = 1;
		pfx_session_free(f);
		t->worst = fmaxf(t->worst, max_diff(l, t->ref, t->n * V));
	}
	free(l);
	return NULL;
}

static int32_t *fixture_tokens(const char *fixtures, const char *model, size_t *n)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s/expected.safetensors", fixtures, model);
	struct st_file *f;
	if (st_open(path, &f, NULL))
		return NULL;
	const struct st_tensor *t = st_find(f, "tokens");
	int32_t *out = t && t->dtype == ST_I32 ? malloc(t->nbytes) : NULL;
	if (out) {
		memcpy(out, t->data, t->nbytes);
		*n = (size_t)st_numel(t);
	}
	st_close(f);
	return out;
}

/* Every architecture's block under threads: the fixture of each. */
static const char *const models[] = { "llama-tiny-gqa", "neox-tiny", "llama3-tiny-ropescaled",
				      "qwen2-tiny", "mistral-tiny-swa", "phi3-tiny", "gemma-tiny" };

static int one_model_many_threads(const char *fixtures, const char *model, char *why, size_t len)
{
	char dir[512];
	snprintf(dir, sizeof(dir), "%s/%s", fixtures, model);
	struct pfx_model_opts o = { .threads = 2, .block_tokens = 8 };
	struct pfx_model *m;
	struct pfx_error err;
	if (pfx_model_load(dir, &o, &m, &err))
		return FAIL("%s: %s", model, err.msg);
	size_t n = 0;
	int32_t *tok = fixture_tokens(fixtures, model, &n);
	int V = pfx_model_config(m)->vocab, rc = 0;
	float *ref = tok ? malloc(n * V * sizeof(float)) : NULL;
	struct pfx_session *s = NULL;
	if (!ref || pfx_session_new(m, &s, &err) ||
	    pfx_session_append(s, tok, n, PFX_LOGITS_ALL, ref, &err)) {
		rc = FAIL("%s: reference run failed", model);
		goto out;
	}
	pthread_t th[4];
	struct fwd_thread args[4];
	for (int i = 0; i < 4; i++) {
		args[i] = (struct fwd_thread){ m, tok, n, ref, 0, 0 };
		pthread_create(&th[i], NULL, forward_thread, &args[i]);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < 4 && !rc; i++)
		if (args[i].failed || !(args[i].worst <= 1e-4f))
			rc = FAIL("%s: thread %d: %s, max |diff| %g", model, i,
				  args[i].failed ? "a call failed" : "ok", args[i].worst);
out:
	pfx_session_free(s);
	free(ref);
	free(tok);
	pfx_model_free(m);
	return rc;
}

int case_one_model_many_threads(const char *fixtures, char *why, size_t len)
{
	for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++)
		if (one_model_many_threads(fixtures, models[i], why, len))
			return -1;
	return 0;
}
