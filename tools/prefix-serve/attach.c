/* SPDX-License-Identifier: MIT */
/*
 * The attach thread (attach.h). The wait goes in slices, so that a cancel
 * or a stop is seen within one: a slice that ends with the blocks still
 * being computed by another process (WAITED, short of the prompt) simply
 * waits on, on a fresh session (attached blocks are frozen). Each slice
 * counts as a wait in prefixd's stats, and a waiter that waits on queues
 * behind those already waiting for the same claim.
 */
#include "attach.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SLICE_MS 200u

struct serve_attach {
	pthread_t thread;
	struct pfx_model *m;
	struct pfx_cache *parent;
	struct serve_job *j;
	uint32_t wait_ms;
	struct attach_signal sig;
	atomic_bool abandon, landed;
	bool joined;
	/* The thread's until landed, then the taker's: */
	struct pfx_session *s;
	struct pfx_cache *cache;
	size_t attached;
	bool claimed;
	int rc;
	struct pfx_error err;
};

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static bool give_up(struct serve_attach *a)
{
	return atomic_load(&a->abandon) || atomic_load(&a->j->cancel);
}

static void attach_run(struct serve_attach *a)
{
	const struct serve_request *r = &a->j->r;
	size_t B = (size_t)pfx_model_block_tokens(a->m);
	/* What a wait that got everything attaches (see pfx_session_attach_wait). */
	size_t all = r->nprompt % B == 0 ? r->nprompt - 1 : (r->nprompt - 1) / B * B;
	struct pfx_error cerr;
	/* No connection of its own: the prompt is computed here, as with no
	 * cache (a cache failure is never the request's). */
	if (pfx_cache_clone(a->parent, &a->cache, &cerr))
		a->cache = NULL;
	uint64_t until = now_ms() + a->wait_ms;
	for (;;) {
		if ((a->rc = pfx_session_new(a->m, &a->s, &a->err)))
			return;
		if (!a->cache)
			return;
		uint64_t now = now_ms();
		uint32_t left = until > now ? (uint32_t)(until - now) : 0;
		uint32_t slice = left < SLICE_MS ? left : SLICE_MS;
		struct pfx_prefill_info info;
		enum pfx_flight f;
		/* A slice of 0 is a plain attach: the last one, after the wait
		 * ran out, neither claims nor waits. */
		a->rc = pfx_session_attach_wait(a->s, a->cache, r->prompt, r->nprompt, slice, &f,
						&info, &cerr, &a->err);
		if (a->rc)
			return;
		a->attached = info.attached;
		a->claimed = f == PFX_FLIGHT_CLAIMED || f == PFX_FLIGHT_INHERITED;
		if (f != PFX_FLIGHT_WAITED || info.attached >= all || !slice || give_up(a))
			return;
		pfx_session_free(a->s);
		a->s = NULL;
		a->attached = 0;
	}
}

static void *attach_main(void *arg)
{
	struct serve_attach *a = arg;
	attach_run(a);
	pthread_mutex_lock(a->sig.mu);
	atomic_store(&a->landed, true);
	++*a->sig.landed;
	pthread_cond_broadcast(a->sig.wake);
	pthread_mutex_unlock(a->sig.mu);
	return NULL;
}

int attach_start(struct pfx_model *m, struct pfx_cache *cache, struct serve_job *j,
		 uint32_t wait_ms, struct attach_signal sig, struct serve_attach **out,
		 struct pfx_error *err)
{
	struct serve_attach *a = calloc(1, sizeof(*a));
	if (!a)
		return pfx_errorf(err, -ENOMEM, "out of memory");
	a->m = m;
	a->parent = cache;
	a->j = j;
	a->wait_ms = wait_ms;
	a->sig = sig;
	atomic_init(&a->abandon, false);
	atomic_init(&a->landed, false);
	atomic_fetch_add(&j->refs, 1);
	int rc = -pthread_create(&a->thread, NULL, attach_main, a);
	if (rc) {
		job_put(j);
		free(a);
		return pfx_errorf(err, rc, "cannot start an attach thread: %s", strerror(-rc));
	}
	*out = a;
	return 0;
}

bool attach_landed(struct serve_attach *a) { return atomic_load(&a->landed); }

void attach_abandon(struct serve_attach *a) { atomic_store(&a->abandon, true); }

static void join(struct serve_attach *a)
{
	if (!a->joined)
		pthread_join(a->thread, NULL);
	a->joined = true;
}

int attach_take(struct serve_attach *a, struct pfx_session **s, struct pfx_cache **cache,
		size_t *attached, bool *claimed, struct pfx_error *err)
{
	join(a);
	if (a->rc)
		return pfx_errorf(err, a->rc, "%s", a->err.msg);
	*s = a->s;
	*cache = a->cache;
	*attached = a->attached;
	*claimed = a->claimed;
	a->s = NULL;
	a->cache = NULL;
	return 0;
}

void attach_free(struct serve_attach *a)
{
	if (!a)
		return;
	attach_abandon(a);
	join(a);
	pfx_session_free(a->s);
	pfx_cache_close(a->cache);
	job_put(a->j);
	free(a);
}
