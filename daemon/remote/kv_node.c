/* SPDX-License-Identifier: MIT */
#include "kv_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int kv_node_get(struct kv *k, const struct kv_endpoint *ep)
{
	for (uint32_t i = 0; i < k->n_nodes; i++)
		if (kv_endpoint_same(&k->nodes[i].ep, ep))
			return (int)i;
	if (k->n_nodes == KV_NODES_MAX)
		return -ENOSPC;
	if (k->n_nodes == k->cap_nodes) {
		uint32_t cap = k->cap_nodes ? 2 * k->cap_nodes : 8;
		struct kv_node *n = realloc(k->nodes, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		k->nodes = n;
		k->cap_nodes = cap;
	}
	struct kv_node *n = &k->nodes[k->n_nodes];
	memset(n, 0, sizeof(*n));
	n->ep = *ep;
	n->ep.db = k->db;
	n->head = n->tail = -1;
	return (int)k->n_nodes++;
}

void kv_node_close(struct kv_node *n)
{
	if (n->c)
		redisFree(n->c);
	n->c = NULL;
}

void kv_node_free(struct kv_node *n)
{
	kv_node_close(n);
	kv_rbuf_free(&n->rb);
}

static struct timeval left(uint64_t deadline_ns)
{
	uint64_t now = kv_now_ns();
	uint64_t ns = deadline_ns > now + 1000000 ? deadline_ns - now : 1000000;
	return (struct timeval){ .tv_sec = (time_t)(ns / 1000000000u),
				 .tv_usec = (suseconds_t)(ns % 1000000000u / 1000) };
}

void kv_node_deadline(struct kv *k, uint32_t i, uint64_t deadline_ns)
{
	if (k->nodes[i].c)
		redisSetTimeout(k->nodes[i].c, left(deadline_ns));
}

/* hiredis says what failed in errstr and leaves errno as the system call
 * set it: a timeout is EAGAIN (SO_RCVTIMEO, SO_SNDTIMEO) or ETIMEDOUT
 * (connect); a server gone is EOF, ECONNRESET, EPIPE or ECONNREFUSED. */
static int errno_of(const redisContext *c, int e)
{
	switch (c->err) {
	case REDIS_ERR_IO:
		if (e == EAGAIN || e == EWOULDBLOCK || e == ETIMEDOUT || e == EINPROGRESS ||
		    strstr(c->errstr, "timed out") || strstr(c->errstr, "temporarily"))
			return -ETIMEDOUT;
		return -ECONNREFUSED;
	case REDIS_ERR_EOF:
		return -ECONNREFUSED;
	case REDIS_ERR_OOM:
		return -ENOMEM;
	case REDIS_ERR_PROTOCOL:
		return -EPROTO;
	default: /* REDIS_ERR_OTHER: a name that does not resolve, say */
		return -ECONNREFUSED;
	}
}

int kv_node_fail(struct kv *k, uint32_t i, int saved_errno)
{
	struct kv_node *n = &k->nodes[i];
	char name[KV_HOST_MAX + 16];
	int rc = n->c ? errno_of(n->c, saved_errno) : -ECONNREFUSED;
	snprintf(k->err, sizeof(k->err), "redis %s: %s",
		 kv_endpoint_name(&n->ep, name, sizeof(name)),
		 n->c && n->c->errstr[0] ? n->c->errstr : strerror(-rc));
	kv_node_close(n);
	if (k->cluster)
		k->map_stale = true;
	return rc;
}

int kv_node_lost(struct kv *k, uint32_t i, int rc)
{
	char name[KV_HOST_MAX + 16];
	snprintf(k->err, sizeof(k->err), "redis %s: %s",
		 kv_endpoint_name(&k->nodes[i].ep, name, sizeof(name)),
		 rc == -ETIMEDOUT      ? "no reply within the timeout"
		 : rc == -ECONNREFUSED ? "the connection was closed"
		 : rc == -EPROTO       ? "a reply out of step with the commands"
				       : strerror(-rc));
	kv_node_close(&k->nodes[i]);
	if (k->cluster)
		k->map_stale = true;
	return rc;
}

static bool starts(const char *msg, size_t len, const char *word)
{
	size_t n = strlen(word);
	return len >= n && !memcmp(msg, word, n);
}

int kv_reply_errno(struct kv *k, uint32_t i, const char *msg, size_t len)
{
	char name[KV_HOST_MAX + 16];
	snprintf(k->err, sizeof(k->err), "redis %s: %.*s",
		 kv_endpoint_name(&k->nodes[i].ep, name, sizeof(name)),
		 msg ? (int)(len < 200 ? len : 200) : 25, msg ? msg : "a reply of the wrong type");
	if (msg && (starts(msg, len, "NOAUTH") || starts(msg, len, "WRONGPASS") ||
		    starts(msg, len, "ERR invalid password")))
		return -EACCES;
	return -EPROTO;
}

/* One command on a fresh connection, during the connect: 0 when it says
 * OK, else -errno (the connection is closed then). */
static int setup_command(struct kv *k, uint32_t i, int argc, const char **argv)
{
	redisReply *r = redisCommandArgv(k->nodes[i].c, argc, argv, NULL);
	if (!r)
		return kv_node_fail(k, i, errno);
	int rc = 0;
	if (r->type != REDIS_REPLY_STATUS) {
		rc = kv_reply_errno(k, i, r->type == REDIS_REPLY_ERROR ? r->str : NULL, r->len);
		kv_node_close(&k->nodes[i]);
	}
	freeReplyObject(r);
	return rc;
}

int kv_node_connect(struct kv *k, uint32_t i, uint64_t deadline_ns)
{
	struct kv_node *n = &k->nodes[i];
	if (n->c)
		return 0;
	struct timeval tv = left(deadline_ns);
	/* Name resolution (getaddrinfo) is not bounded by tv: seeds and the
	 * cluster's announced addresses are best given as IP addresses. */
	n->c = n->ep.is_unix ? redisConnectUnixWithTimeout(n->ep.path, tv)
			     : redisConnectWithTimeout(n->ep.host, n->ep.port, tv);
	int e = errno;
	if (!n->c) {
		snprintf(k->err, sizeof(k->err), "redis: out of memory for a connection");
		return -ENOMEM;
	}
	if (n->c->err)
		return kv_node_fail(k, i, e);
	k->st.connects++;
	kv_node_deadline(k, i, deadline_ns);
	int rc = 0;
	if (k->password)
		rc = setup_command(k, i, 2, (const char *[]){ "AUTH", k->password });
	if (!rc && n->ep.db) {
		char db[16];
		snprintf(db, sizeof(db), "%d", n->ep.db);
		rc = setup_command(k, i, 2, (const char *[]){ "SELECT", db });
	}
	return rc;
}
