/* SPDX-License-Identifier: MIT */
/*
 * A new prompt's attach with single flight, on a thread of its own: it may
 * wait for another process computing the same blocks, which must not stall
 * the engine thread's steps. Each attach has a connection of its own (a
 * clone of the engine's cache): a waiting MATCH holds its connection, and a
 * claim belongs to the connection that made it, so the job keeps it until
 * its prompt is published.
 */
#ifndef SERVE_ATTACH_H
#define SERVE_ATTACH_H

#include <pthread.h>
#include <stdbool.h>

#include <prefixd-runtime/cache.h>

#include "engine_impl.h"

struct serve_attach;

/* Where an attach says it finished: under *mu it counts one in *landed
 * and signals *wake. */
struct attach_signal {
	pthread_mutex_t *mu;
	pthread_cond_t *wake;
	unsigned *landed;
};

/* Starts attaching j's prompt (a reference on j held until
 * attach_free) through a clone of cache, waiting up to wait_ms in all.
 * -errno with err (no thread started). */
int attach_start(struct pfx_model *m, struct pfx_cache *cache, struct serve_job *j,
		 uint32_t wait_ms, struct attach_signal sig, struct serve_attach **out,
		 struct pfx_error *err);
/* Whether it finished (then attach_take does not block). */
bool attach_landed(struct serve_attach *a);
/* Asks it to stop waiting at its next slice (a cancel, a stop). */
void attach_abandon(struct serve_attach *a);
/* Joins the thread and hands over its results: *s (the session, prompt
 * tokens [0, *attached) in it), *cache (the connection to publish through,
 * NULL when none could be opened), whether it claimed the rest. -errno
 * with err when it failed (nothing handed over). */
int attach_take(struct serve_attach *a, struct pfx_session **s, struct pfx_cache **cache,
		size_t *attached, bool *claimed, struct pfx_error *err);
/* Joins the thread and frees what was not taken. */
void attach_free(struct serve_attach *a);

#endif
