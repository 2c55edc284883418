/* SPDX-License-Identifier: MIT */
/*
 * The remote tier's index of Redis's keys (remote_index.h) fed by the
 * watcher (remote/kv_watch.h) and by the writer's acknowledged SETs, and
 * asked before a MATCH's lookup: a key Redis is known not to hold costs
 * no round trip. Off with --remote-index off.
 */
#include <stdio.h>
#include <string.h>

#include "daemon.h"
#include "remote_impl.h"

/* The index just went over its cap (once until a reset). */
static void say_over(const struct remote *r)
{
	pd_log("remote tier: the index of Redis's keys is off: Redis holds more than --remote-index %u keys; every miss asks Redis (raise it; tried again at the next reconnect)",
	       (unsigned)r->cfg.index_max);
}

static void on_key(void *ctx, const char *key, size_t len, uint8_t node, bool present)
{
	struct remote *r = ctx;
	if (present) {
		/* Live until now: the admin learns why misses ask again. */
		if (remote_index_put(r->index, key, len, node))
			say_over(r);
	} else
		remote_index_drop(r->index, key, len, node);
}

static void on_state(void *ctx, bool live)
{
	struct remote *r = ctx;
	if (!live) {
		remote_index_reset(r->index);
		return;
	}
	remote_index_set_live(r->index);
	struct remote_index_stats s;
	remote_index_stats(r->index, &s);
	/* Over: on_key said so. */
	if (!s.over)
		pd_log("remote tier: the index of Redis's keys is live (%llu keys): a miss it rules out costs no round trip",
		       (unsigned long long)s.keys);
}

static void on_log(void *ctx, const char *msg)
{
	(void)ctx;
	/* Rare: a watcher refused waits a minute, one that fails backs off. */
	pd_log("%s", msg);
}

int remote_watch_start(struct remote *r)
{
	if (!r->cfg.index_max)
		return 0;
	int rc = remote_index_new(r->cfg.index_max, &r->index);
	if (rc)
		return rc;
	struct kv_watch_cb cb = { r, on_key, on_state, on_log };
	char why[200];
	if ((rc = kv_watch_start(&r->kv_opts, REMOTE_KEY_PREFIX, &cb, &r->watch, why, sizeof(why)))) {
		pd_err("remote tier: %s", why);
		remote_index_free(r->index);
		r->index = NULL;
	}
	return rc;
}

void remote_watch_stop(struct remote *r)
{
	kv_watch_stop(r->watch);
	r->watch = NULL;
}

void remote_watch_free(struct remote *r)
{
	remote_index_free(r->index);
	r->index = NULL;
}

void remote_watch_wrote(struct remote *r, const char *key)
{
	if (r->index && remote_index_put(r->index, key, strlen(key), REMOTE_INDEX_ANY_NODE))
		say_over(r);
}

bool remote_watch_rules_out(struct remote *r, const struct remote_ask *a)
{
	if (!r->index)
		return false;
	char key[REMOTE_KEY_MAX];
	remote_key(a->ns, a->fp, a->block_bytes, r->block_tokens,
		   a->hashes + (size_t)a->from * PD_HASH_SIZE, key);
	if (remote_index_may_hold(r->index, key, strlen(key)))
		return false;
	atomic_fetch_add(&r->index_skips, 1);
	return true;
}
