/* SPDX-License-Identifier: MIT */
/* Where a Redis node is: a seed's text parsed, or a cluster node's address. */
#ifndef PD_REMOTE_KV_SEED_H
#define PD_REMOTE_KV_SEED_H

#include <stdbool.h>
#include <stddef.h>

#define KV_HOST_MAX 256
#define KV_PATH_MAX 108 /* sun_path */

struct kv_endpoint {
	bool is_unix;
	char host[KV_HOST_MAX]; /* TCP: a name, IPv4 or IPv6 address (no brackets) */
	int port;
	char path[KV_PATH_MAX]; /* unix */
	int db;
};

/* "redis://HOST:PORT[/DB]" or "unix:PATH" into e: 0, or -EINVAL and why. */
int kv_seed_parse(const char *seed, struct kv_endpoint *e, char *why, size_t why_len);
/* Whether a and b are the same node (the DB aside). */
bool kv_endpoint_same(const struct kv_endpoint *a, const struct kv_endpoint *b);
/* "HOST:PORT" or "unix:PATH", for messages. */
const char *kv_endpoint_name(const struct kv_endpoint *e, char *buf, size_t cap);

#endif
