/* SPDX-License-Identifier: MIT */
/*
 * Which keys of a prefix Redis holds, learned and kept up to date by one
 * thread: keyspace notifications (SUBSCRIBE to __keyevent@DB__:set, del,
 * expired, evicted and the events that move a key) on every master, since
 * a Redis Cluster sends each node's own events only, then a SCAN (MATCH
 * PREFIX*, COUNT batches) of every master for what was there before. Only
 * once every master is subscribed and scanned does it say "live"; any
 * failure (a connection dropped, a master that does not answer within the
 * timeout, the masters changed, notifications turned off by someone)
 * says "not live", and it starts again: subscribe, scan, live.
 *
 * Notifications must be on: it reads notify-keyspace-events with CONFIG
 * GET and adds the flags it needs (E$gxe) with CONFIG SET, keeping those
 * set. Where CONFIG is refused (renamed, an ACL user without +config, a
 * managed Redis), it logs what the admin should set and tries again
 * every minute: until then it is never live.
 *
 * It tells its owner through callbacks, from its own thread: the owner
 * keeps the set, and trusts it only while live.
 */
#ifndef PD_REMOTE_KV_WATCH_H
#define PD_REMOTE_KV_WATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kv.h"

/* Masters watched at most (node numbers fit a byte, 255 is "any"). */
#define KV_WATCH_MASTERS_MAX 255
/* The flags of notify-keyspace-events the watcher needs. */
#define KV_WATCH_FLAGS "E$gxe"

struct kv_watch_cb {
	void *ctx;
	/* Key (with the prefix) is now held (present) or gone, by master
	 * number node (stable from one "not live" to the next). */
	void (*key)(void *ctx, const char *key, size_t len, uint8_t node, bool present);
	/* live: every key held was given since the last "not live", and
	 * notifications keep it so. Not live: forget every key. */
	void (*state)(void *ctx, bool live);
	/* A line for the daemon's log. */
	void (*log)(void *ctx, const char *msg);
};

struct kv_watch;

/* Starts the thread on the masters of o (their seeds; the cluster's from
 * its slot map) for the keys that start with prefix (no glob characters).
 * 0, or -errno and why. */
int kv_watch_start(const struct kv_opts *o, const char *prefix, const struct kv_watch_cb *cb,
		   struct kv_watch **out, char *why, size_t why_len);
/* Stops the thread (at most a round trip's timeout) and frees w; NULL is
 * fine. No callback runs after it returns. */
void kv_watch_stop(struct kv_watch *w);

#endif
