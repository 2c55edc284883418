/* SPDX-License-Identifier: MIT */
/*
 * Inside the Redis client: the nodes it knows with their connections
 * (kv_node.c), the cluster's slot map (kv_cluster.c), and the pipelined
 * rounds of kv.c.
 */
#ifndef PD_REMOTE_KV_IMPL_H
#define PD_REMOTE_KV_IMPL_H

#include <hiredis/hiredis.h>
#include <stdint.h>

#include "crc16.h"
#include "kv.h"
#include "kv_resp.h"
#include "kv_seed.h"

/* A cluster bigger than this is refused (the map would not fit). */
#define KV_NODES_MAX 1024

struct kv_node {
	struct kv_endpoint ep;
	redisContext *c; /* NULL: not connected (made on first use, again after an error) */
	struct kv_rbuf rb; /* this call's replies from the node (values point into it) */
	bool pinned;       /* rb holds a value of this call's: it is not compacted */
	struct kv_clock clk; /* this round's progress */
	/* This round's keys for the node: a list through kv_op.next. */
	int32_t head, tail;
	int32_t unsent; /* GET with a window: the list's first key not sent yet, -1: none */
	bool sent; /* its pipeline went out this round */
};

struct kv {
	struct kv_node *nodes; /* [0, n_seeds) are the seeds, always kept */
	uint32_t n_nodes, cap_nodes, n_seeds;
	bool cluster;
	char *password;
	uint32_t timeout_ms;
	int db;

	/* Cluster: the node index of each slot, -1 when unknown. */
	int32_t *slots;
	bool map_loaded;
	bool map_stale;          /* a node failed: the map may have changed */
	uint64_t next_refresh_ns; /* a stale map is fetched again no sooner */

	struct kv_stats st;
	char err[256]; /* the last error's words */
};

/* The index of the node at ep, added when new: >= 0, or -ENOSPC. */
int kv_node_get(struct kv *k, const struct kv_endpoint *ep);
/* Connects node i (AUTH and SELECT as configured) within the deadline
 * unless connected: 0, or -errno with k->err said. */
int kv_node_connect(struct kv *k, uint32_t i, uint64_t deadline_ns);
/* Sets the node's socket timeouts to what is left until deadline (1 ms at
 * least, so replies that already arrived are still read). */
void kv_node_deadline(struct kv *k, uint32_t i, uint64_t deadline_ns);
/* The errno for the context's error (saved_errno: errno just after the
 * failed call), with k->err said; the connection is closed (made again on
 * the next call). */
int kv_node_fail(struct kv *k, uint32_t i, int saved_errno);
/* The same for an error met reading replies (kv_resp_next's rc). */
int kv_node_lost(struct kv *k, uint32_t i, int rc);
/* The errno for an error reply msg (NOAUTH, WRONGPASS: -EACCES; else
 * -EPROTO), with k->err said; msg NULL: a reply of the wrong type. */
int kv_reply_errno(struct kv *k, uint32_t i, const char *msg, size_t len);
/* Closes the connection; kv_node_free also lets go of the buffer. */
void kv_node_close(struct kv_node *n);
void kv_node_free(struct kv_node *n);

/* Fetches the slot map with CLUSTER SLOTS from the first node that
 * answers within the timeout (connected nodes first, then the others,
 * seeds last), and drops nodes it no longer names when prune. 0 or -errno. */
int kv_cluster_refresh(struct kv *k, bool prune);
/* An error reply msg that is a MOVED or ASK ("MOVED 3999 127.0.0.1:6381"):
 * its slot and the node index (added when new). 1 for MOVED, 2 for ASK, 0
 * for another error, -errno when it cannot be read or the node added. */
int kv_cluster_redirect(struct kv *k, const char *msg, size_t len, unsigned *slot,
			int32_t *node);

#endif
