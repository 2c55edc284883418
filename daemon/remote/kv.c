/* SPDX-License-Identifier: MIT */
/*
 * A call is a few rounds. A round sends each node the commands for its
 * keys (one pipeline per node, all sent before any reply is read, so the
 * nodes work in parallel) and then reads each node's replies. Connects
 * wait until the round's start plus the timeout; replies and SETs until a
 * node has moved no byte for the timeout since the round's start or its
 * last byte (kv_io.h): a stopped node costs the timeout once, stopped
 * nodes together too, and a large fetch that keeps flowing is not cut.
 * Keys redirected (cluster: MOVED, ASK) go into the next round; there are
 * at most KV_REDIRECTS more.
 *
 * A GET call with a window sends each node only that many GETs at first,
 * and the next each time a reply is read. Redis copies every reply of a
 * pipeline into its output buffer before it writes the first byte (3 MiB
 * values: ~2 ms each here), so a pipeline of 5 kept the client waiting
 * 3-14 ms before its first byte, and Redis idle while the client checked
 * the last value; with a window of 2 or 3 Redis copies the next value
 * while the client reads this one, holds that many, and the client's
 * round can be as long as it likes.
 */
#include "kv_impl.h"
#include "kv_send.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KV_REDIRECTS 5
#define TIMEOUT_MAX_MS 600000u

enum cmd { CMD_GET, CMD_SET };

struct op {
	int32_t next;  /* the node's next key this round */
	int32_t node;  /* with forced: where a redirect sent it */
	int32_t from;  /* GET found: the node whose buffer holds the value */
	uint16_t slot;
	bool forced, asking, pending;
	bool taken;    /* GET found: the caller's fn was done with the value */
	size_t off, len; /* GET found: the value in from's buffer */
};

struct call {
	enum cmd cmd;
	uint32_t n;
	const char *const *keys;
	const uint8_t *const *vals; /* SET */
	const size_t *lens;         /* SET */
	char ttl[24];               /* SET: PX argument, "" for none */
	const uint8_t **out_vals;   /* GET */
	size_t *out_lens;           /* GET */
	int *res;
	kv_value_fn fn;             /* GET: each value as it arrives, or NULL */
	void *fn_ctx;
	uint32_t window;            /* GET: commands a node has unanswered at most; 0: all */
	struct op *ops;
};

int kv_open(const struct kv_opts *o, struct kv **out, char *why, size_t why_len)
{
	*out = NULL;
	if (!o || !o->seeds || o->n_seeds == 0) {
		snprintf(why, why_len, "remote: no seed given");
		return -EINVAL;
	}
	if (o->n_seeds > 1 && !o->cluster) {
		snprintf(why, why_len, "remote: %u seeds are only for a Redis Cluster", o->n_seeds);
		return -EINVAL;
	}
	if (o->n_seeds > 64) {
		snprintf(why, why_len, "remote: %u seeds, 64 at most", o->n_seeds);
		return -EINVAL;
	}
	if (o->timeout_ms == 0 || o->timeout_ms > TIMEOUT_MAX_MS) {
		snprintf(why, why_len, "remote: timeout %u ms, expected 1..%u", o->timeout_ms,
			 TIMEOUT_MAX_MS);
		return -EINVAL;
	}
	if (o->password && (!*o->password || strpbrk(o->password, "\r\n"))) {
		snprintf(why, why_len, "remote: the password is empty or has a line break");
		return -EINVAL;
	}
	struct kv *k = calloc(1, sizeof(*k));
	if (!k)
		goto oom;
	k->cluster = o->cluster;
	k->timeout_ms = o->timeout_ms;
	if (o->password && !(k->password = strdup(o->password)))
		goto oom;
	if (k->cluster && !(k->slots = malloc(KV_SLOTS * sizeof(*k->slots))))
		goto oom;
	for (unsigned s = 0; k->slots && s < KV_SLOTS; s++)
		k->slots[s] = -1;
	for (uint32_t i = 0; i < o->n_seeds; i++) {
		struct kv_endpoint e;
		int rc = kv_seed_parse(o->seeds[i], &e, why, why_len);
		if (rc) {
			kv_close(k);
			return rc;
		}
		if (e.db && k->cluster) {
			snprintf(why, why_len,
				 "remote seed \"%.200s\": a Redis Cluster has only DB 0",
				 o->seeds[i]);
			kv_close(k);
			return -EINVAL;
		}
		k->db = e.db;
		if (kv_node_get(k, &e) < 0)
			goto oom;
	}
	k->n_seeds = k->n_nodes;
	*out = k;
	return 0;
oom:
	kv_close(k);
	snprintf(why, why_len, "remote: out of memory");
	return -ENOMEM;
}

void kv_close(struct kv *k)
{
	if (!k)
		return;
	for (uint32_t i = 0; i < k->n_nodes; i++)
		kv_node_free(&k->nodes[i]);
	free(k->nodes);
	free(k->slots);
	free(k->password);
	free(k);
}

void kv_stats(const struct kv *k, struct kv_stats *out)
{
	*out = k->st;
}

const char *kv_errmsg(const struct kv *k)
{
	return k->err;
}

static void done(struct call *c, uint32_t i, int rc)
{
	c->res[i] = rc;
	c->ops[i].pending = false;
}

/* The rest of node's list, from op i, answered with rc. */
static void fail_from(struct call *c, int32_t i, int rc)
{
	for (; i >= 0; i = c->ops[i].next)
		done(c, (uint32_t)i, rc);
}

static int append_get(struct kv *k, struct call *c, uint32_t node, uint32_t i)
{
	redisContext *ctx = k->nodes[node].c;
	if (c->ops[i].asking && redisAppendCommand(ctx, "ASKING") != REDIS_OK)
		return -ENOMEM;
	const char *argv[2] = { "GET", c->keys[i] };
	size_t lens[2] = { 3, strlen(c->keys[i]) };
	return redisAppendCommandArgv(ctx, 2, argv, lens) == REDIS_OK ? 0 : -ENOMEM;
}

/* SETs straight from the caller's values (kv_send.h). */
static int send_sets(struct kv *k, struct call *c, uint32_t node)
{
	struct kv_send s;
	kv_send_init(&s, k->nodes[node].c->fd, &k->nodes[node].clk);
	for (int32_t i = k->nodes[node].head; i >= 0; i = c->ops[i].next) {
		if (c->ops[i].asking) {
			kv_send_array(&s, 1);
			kv_send_arg(&s, "ASKING", 6);
		}
		kv_send_array(&s, c->ttl[0] ? 5 : 3);
		kv_send_arg(&s, "SET", 3);
		kv_send_arg(&s, c->keys[i], strlen(c->keys[i]));
		kv_send_arg(&s, c->vals[i], c->lens[i]);
		if (c->ttl[0]) {
			kv_send_arg(&s, "PX", 2);
			kv_send_arg(&s, c->ttl, strlen(c->ttl));
		}
	}
	int rc = kv_send_finish(&s);
	return rc ? kv_node_lost(k, node, rc) : 0;
}

/* Writes out what append_get buffered: 0, or -errno with the connection
 * closed (half a pipeline must not stay buffered). */
static int flush(struct kv *k, uint32_t node)
{
	struct kv_node *n = &k->nodes[node];
	int all = 0;
	while (!all)
		if (redisBufferWrite(n->c, &all) != REDIS_OK)
			return kv_node_fail(k, node, errno);
	return 0;
}

/* The node's next GET of the window, once a reply made room: 0 or -errno
 * (the connection closed). */
static int send_next(struct kv *k, struct call *c, uint32_t node)
{
	struct kv_node *n = &k->nodes[node];
	int32_t i = n->unsent;
	if (i < 0)
		return 0;
	n->unsent = c->ops[i].next;
	if (append_get(k, c, node, (uint32_t)i)) {
		snprintf(k->err, sizeof(k->err), "redis: out of memory for a pipeline");
		kv_node_close(n);
		return -ENOMEM;
	}
	return flush(k, node);
}

/* Sends node its list (with a window, its first GETs): 0, or the list is
 * answered with the error. */
static int send_node(struct kv *k, struct call *c, uint32_t node, uint64_t deadline)
{
	struct kv_node *n = &k->nodes[node];
	int rc = kv_node_connect(k, node, deadline);
	if (!rc)
		kv_node_deadline(k, node, deadline);
	if (!rc && c->cmd == CMD_SET)
		rc = send_sets(k, c, node);
	else if (!rc) {
		uint32_t sent = 0;
		int32_t i = n->head;
		for (; !rc && i >= 0 && (!c->window || sent < c->window); i = c->ops[i].next, sent++)
			rc = append_get(k, c, node, (uint32_t)i);
		n->unsent = i;
		if (rc == -ENOMEM) {
			snprintf(k->err, sizeof(k->err), "redis: out of memory for a pipeline");
			kv_node_close(n); /* half a pipeline must not stay buffered */
		}
		if (!rc)
			rc = flush(k, node);
	}
	if (rc) {
		fail_from(c, n->head, rc);
		return rc;
	}
	n->sent = true;
	k->st.round_trips++;
	return 0;
}

/* One reply for key i from node: the key answered, or redirected. */
static void take(struct kv *k, struct call *c, uint32_t node, uint32_t i,
		 const struct kv_resp *r, bool *moved)
{
	struct op *op = &c->ops[i];
	const char *text = k->nodes[node].rb.buf + r->off;
	if (r->type == KV_RESP_ERROR && k->cluster) {
		unsigned slot;
		int32_t to;
		int kind = kv_cluster_redirect(k, text, r->len, &slot, &to);
		if (kind > 0) {
			k->st.redirects++;
			op->forced = true;
			op->node = to;
			op->asking = kind == 2;
			if (kind == 1) {
				k->slots[slot] = to;
				*moved = true;
			}
			return;
		}
		if (kind < 0) {
			text = k->nodes[node].rb.buf + r->off; /* a node added: nodes moved */
			snprintf(k->err, sizeof(k->err), "redis: a redirect that cannot be followed: %.*s",
				 (int)(r->len < 120 ? r->len : 120), text);
			done(c, i, kind);
			return;
		}
	}
	int rc;
	if (c->cmd == CMD_GET && r->type == KV_RESP_BULK) {
		op->from = (int32_t)node;
		op->off = r->off;
		op->len = r->len;
		op->taken = c->fn &&
			    c->fn(c->fn_ctx, i, (const uint8_t *)k->nodes[node].rb.buf + r->off, r->len);
		/* The caller's time is not the node's silence. */
		if (c->fn)
			k->nodes[node].clk.moved_ns = kv_now_ns();
		if (!op->taken)
			k->nodes[node].pinned = true;
		rc = 0;
	} else if (c->cmd == CMD_GET && r->type == KV_RESP_NIL) {
		rc = -ENOENT;
	} else if (c->cmd == CMD_SET && r->type == KV_RESP_STATUS && r->len == 2 &&
		   !memcmp(text, "OK", 2)) {
		rc = 0;
	} else {
		rc = kv_reply_errno(k, node, r->type == KV_RESP_ERROR ? text : NULL, r->len);
	}
	done(c, i, rc);
}

static void read_node(struct kv *k, struct call *c, uint32_t node, bool *moved)
{
	/* k->nodes moves when a MOVED names a new node: indexed each time. */
	int fd = k->nodes[node].c->fd;
	for (int32_t i = k->nodes[node].head; i >= 0; i = c->ops[i].next) {
		struct kv_resp r;
		int rc = 0;
		if (c->ops[i].asking) {
			/* OK; an error would show in the command's own reply. */
			rc = kv_resp_next(&k->nodes[node].rb, fd, &k->nodes[node].clk, &r);
			c->ops[i].asking = false;
		}
		if (!rc)
			rc = kv_resp_next(&k->nodes[node].rb, fd, &k->nodes[node].clk, &r);
		if (rc) {
			fail_from(c, i, kv_node_lost(k, node, rc));
			return;
		}
		/* The next GET goes out before this value is handed over:
		 * Redis copies it while the caller works on this one. */
		if (c->cmd == CMD_GET && (rc = send_next(k, c, node))) {
			fail_from(c, i, rc);
			return;
		}
		take(k, c, node, (uint32_t)i, &r, moved);
		/* Every reply read is done with: its room is read into again. */
		if (!k->nodes[node].pinned)
			kv_rbuf_compact(&k->nodes[node].rb);
	}
}

/* Where key i goes this round: a redirect's node, the slot's owner, or
 * (slot unknown, map not fetched) the first seed, whose MOVED will tell. */
static int32_t route(const struct kv *k, const struct op *op)
{
	if (op->forced)
		return op->node;
	if (k->cluster && k->slots[op->slot] >= 0)
		return k->slots[op->slot];
	return 0;
}

static void round_trip(struct kv *k, struct call *c, bool *moved)
{
	uint64_t now = kv_now_ns(), timeout = (uint64_t)k->timeout_ms * 1000000u;
	uint64_t deadline = now + timeout;
	for (uint32_t j = 0; j < k->n_nodes; j++) {
		k->nodes[j].head = k->nodes[j].tail = k->nodes[j].unsent = -1;
		k->nodes[j].sent = false;
		k->nodes[j].clk = (struct kv_clock){ .moved_ns = now, .timeout_ns = timeout };
	}
	for (uint32_t i = 0; i < c->n; i++) {
		struct op *op = &c->ops[i];
		if (!op->pending)
			continue;
		struct kv_node *n = &k->nodes[route(k, op)];
		op->next = -1;
		if (n->tail >= 0)
			c->ops[n->tail].next = (int32_t)i;
		else
			n->head = (int32_t)i;
		n->tail = (int32_t)i;
		op->forced = false; /* a redirect counts for one round */
	}
	uint32_t nodes = k->n_nodes; /* a reply may add nodes: not in this round */
	for (uint32_t j = 0; j < nodes; j++)
		if (k->nodes[j].head >= 0)
			send_node(k, c, j, deadline);
	for (uint32_t j = 0; j < nodes; j++)
		if (k->nodes[j].sent)
			read_node(k, c, j, moved);
}

/* SIGPIPE: hiredis writes with write(2), and a node that died makes the
 * next write raise it. It is blocked in this thread during a call and a
 * SIGPIPE the call raised is taken back, so the caller need not ignore it. */
struct pipe_guard {
	sigset_t old, set;
	bool was_pending;
};

static void guard_on(struct pipe_guard *g)
{
	sigset_t pending;
	sigemptyset(&g->set);
	sigaddset(&g->set, SIGPIPE);
	sigpending(&pending);
	g->was_pending = sigismember(&pending, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &g->set, &g->old);
}

static void guard_off(struct pipe_guard *g)
{
	sigset_t pending;
	if (!g->was_pending && !sigpending(&pending) && sigismember(&pending, SIGPIPE)) {
		struct timespec zero = { 0 };
		sigtimedwait(&g->set, NULL, &zero);
	}
	pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

static int run(struct kv *k, struct call *c)
{
	if (!k || (c->n && (!c->keys || !c->res)))
		return -EINVAL;
	for (uint32_t i = 0; i < c->n; i++)
		if (!c->keys[i] || (c->cmd == CMD_SET && !c->vals[i] && c->lens[i]))
			return -EINVAL;
	if (c->n > INT32_MAX || !(c->ops = calloc(c->n ? c->n : 1, sizeof(*c->ops))))
		goto oom;
	for (uint32_t i = 0; i < c->n; i++) {
		c->ops[i].pending = true;
		if (k->cluster)
			c->ops[i].slot = (uint16_t)kv_key_slot(c->keys[i], strlen(c->keys[i]));
		if (c->cmd == CMD_GET)
			c->out_vals[i] = NULL, c->out_lens[i] = 0;
	}
	struct pipe_guard g;
	guard_on(&g);
	if (k->cluster && c->n &&
	    (!k->map_loaded || (k->map_stale && kv_now_ns() >= k->next_refresh_ns)))
		kv_cluster_refresh(k, true); /* on failure: keys go to a seed */
	for (uint32_t j = 0; j < k->n_nodes; j++) {
		kv_rbuf_reset(&k->nodes[j].rb);
		k->nodes[j].pinned = false;
	}
	bool refreshed = false;
	for (int round = 0;; round++) {
		bool moved = false, pending = false;
		round_trip(k, c, &moved);
		for (uint32_t i = 0; i < c->n && !pending; i++)
			pending = c->ops[i].pending;
		if (!pending)
			break;
		if (round == KV_REDIRECTS) {
			snprintf(k->err, sizeof(k->err), "redis: more than %d redirects for a key",
				 KV_REDIRECTS);
			for (uint32_t i = 0; i < c->n; i++)
				if (c->ops[i].pending)
					done(c, i, -EPROTO);
			break;
		}
		if (moved && !refreshed) {
			kv_cluster_refresh(k, false);
			refreshed = true;
		}
	}
	guard_off(&g);
	int first = 0;
	for (uint32_t i = 0; i < c->n; i++) {
		/* Pointers only now: a node's buffer moves as it grows. */
		if (c->cmd == CMD_GET && !c->res[i] && !c->ops[i].taken) {
			c->out_vals[i] = (const uint8_t *)k->nodes[c->ops[i].from].rb.buf + c->ops[i].off;
			c->out_lens[i] = c->ops[i].len;
		} else if (c->cmd == CMD_GET && !c->res[i]) {
			c->out_lens[i] = c->ops[i].len;
		}
		if (c->res[i] && c->res[i] != -ENOENT) {
			k->st.errors++;
			if (!first)
				first = c->res[i];
		}
	}
	free(c->ops);
	return first;
oom:
	snprintf(k->err, sizeof(k->err), "redis: out of memory for %u keys", c->n);
	for (uint32_t i = 0; i < c->n; i++)
		c->res[i] = -ENOMEM;
	k->st.errors += c->n;
	return c->n ? -ENOMEM : 0;
}

int kv_get(struct kv *k, uint32_t n, const char *const *keys, const uint8_t **vals,
	   size_t *lens, int *res)
{
	return kv_get_each(k, n, keys, vals, lens, res, 0, NULL, NULL);
}

int kv_get_each(struct kv *k, uint32_t n, const char *const *keys, const uint8_t **vals,
		size_t *lens, int *res, uint32_t window, kv_value_fn fn, void *ctx)
{
	if (n && (!vals || !lens))
		return -EINVAL;
	struct call c = { .cmd = CMD_GET, .n = n, .keys = keys, .out_vals = vals,
			  .out_lens = lens, .res = res, .fn = fn, .fn_ctx = ctx,
			  .window = window };
	return run(k, &c);
}

int kv_set(struct kv *k, uint32_t n, const char *const *keys, const uint8_t *const *vals,
	   const size_t *lens, uint64_t ttl_ms, int *res)
{
	if (n && (!vals || !lens))
		return -EINVAL;
	struct call c = { .cmd = CMD_SET, .n = n, .keys = keys, .vals = vals, .lens = lens,
			  .res = res };
	if (ttl_ms)
		snprintf(c.ttl, sizeof(c.ttl), "%" PRIu64, ttl_ms);
	return run(k, &c);
}
