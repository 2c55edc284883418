/* SPDX-License-Identifier: MIT */
/*
 * The prefixd server: one listener thread accepts connections and hands
 * them out round-robin to N workers, each with its own epoll loop over its
 * connections. SIGTERM or SIGINT stops it cleanly.
 */
#ifndef PD_SERVER_H
#define PD_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "shared.h"

struct remote;

struct server_cfg {
	const char *socket_path;
	uint64_t memory;        /* budget for KV blocks, in bytes */
	uint64_t quota;         /* most one user's blocks may hold */
	uint64_t pin_max;       /* most pinned blocks may hold */
	int threads;            /* workers */
	uint32_t block_tokens;
	int key_bytes;          /* 32; fewer only for tests (weak keys) */
	gid_t group;            /* socket group when has_group (mode 0660) */
	int has_group;
	uint32_t max_conns, max_user_conns;
	uint64_t request_memory; /* bodies being read, in all */
	uint32_t request_timeout_s;
	uint32_t idle_timeout_s;  /* 0: none */
	const char *disk_dir;     /* the disk tier's directory; NULL: none */
	uint64_t disk_budget;
	struct shared_cfg shared; /* --shared-group, --shared-publishers */
	bool disk_sync;           /* PUBLISH answered once its records are durable */
	uint64_t claim_timeout_ms; /* a claim's life without progress */
	struct remote *remote;    /* the remote tier (remote_open'd); NULL: none. server_run closes it */
};

/* Runs until SIGTERM or SIGINT, which the caller must have blocked in
 * every thread. Returns 0 after a clean stop, 1 when it could not start
 * (the reason is logged). */
int server_run(const struct server_cfg *cfg);

#endif
