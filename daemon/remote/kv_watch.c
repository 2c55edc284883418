/* SPDX-License-Identifier: MIT */
/*
 * The watcher (kv_watch.h). One thread, one poll(2) loop over a pipe (to
 * stop) and a subscriber connection per master; SCAN steps, CONFIG GET
 * heartbeats and the cluster's slot map go over the connections of a
 * private struct kv (its nodes), each command bounded by the timeout.
 *
 * Why it can be trusted, live: each master is subscribed (the SUBSCRIBE
 * confirmed) before its SCAN starts, so a key written after the confirm
 * comes as a notification, and one there before is returned by the SCAN
 * (SCAN returns every key present from its start to its end). Events of
 * one master arrive in order, so a key deleted and written again ends
 * present. A key a reshard moves is restored on its new master and
 * deleted on the old one, two connections whose events may cross: each
 * key remembers the master that last said it holds it, and a deletion by
 * another master is ignored. Errors the other way (a key said present
 * that is gone) cost the owner a round trip, never a hit.
 */
#include "kv_watch.h"
#include "kv_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Commands of the watcher wait this long at least: it delays no MATCH. */
#define WATCH_TIMEOUT_MS 1000
#define BEAT_MS 1000
#define RETRY_MIN_MS 100
#define RETRY_MAX_MS 10000
/* CONFIG refused: an admin has to act; asked again this often. */
#define REFUSED_RETRY_MS 60000
#define SCAN_COUNT "1000"
#define PREFIX_MAX 64

static const struct event {
	const char *name;
	bool present;
} events[] = {
	{ "set", true },	   { "restore", true },	    { "rename_to", true },
	{ "copy_to", true },	   { "move_to", true },	    { "del", false },
	{ "expired", false },	   { "evicted", false },    { "rename_from", false },
	{ "move_from", false },
};
#define N_EVENTS (sizeof(events) / sizeof(events[0]))

struct master {
	struct kv_endpoint ep;
	redisContext *sub; /* subscribed; NULL: not (yet) */
	char cursor[24];   /* SCAN's */
	bool scanned;
};

enum state { DOWN, SCANNING, LIVE };

struct kv_watch {
	struct kv *k;
	struct kv_watch_cb cb;
	char prefix[PREFIX_MAX], pattern[PREFIX_MAX + 2];
	size_t prefix_len;
	struct master m[KV_WATCH_MASTERS_MAX];
	uint32_t n;
	enum state st;
	int stop_fd[2];
	pthread_t thread;
	char msg[512];
};

static uint64_t ms_now(void)
{
	return kv_now_ns() / 1000000u;
}

__attribute__((format(printf, 2, 3))) static void say(struct kv_watch *w, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(w->msg, sizeof(w->msg), fmt, ap);
	va_end(ap);
	w->cb.log(w->cb.ctx, w->msg);
}

/* ==== Commands on the private kv's connections ==== */

/* One command on master i's command connection: the reply, or NULL and
 * *rc (-errno, the kv's err said). */
static redisReply *command(struct kv_watch *w, uint32_t i, int argc, const char **argv, int *rc)
{
	struct kv *k = w->k;
	int node = kv_node_get(k, &w->m[i].ep);
	if (node < 0) {
		*rc = node;
		snprintf(k->err, sizeof(k->err), "out of memory");
		return NULL;
	}
	uint64_t deadline = kv_now_ns() + (uint64_t)k->timeout_ms * 1000000u;
	if ((*rc = kv_node_connect(k, (uint32_t)node, deadline)))
		return NULL;
	kv_node_deadline(k, (uint32_t)node, deadline);
	redisReply *r = redisCommandArgv(k->nodes[node].c, argc, argv, NULL);
	if (!r)
		*rc = kv_node_fail(k, (uint32_t)node, errno);
	return r;
}

/* An error reply that means CONFIG is not ours to use (renamed away, an
 * ACL), against one that passes (LOADING, BUSY): -EPERM or -EPROTO. */
static int refusal(const redisReply *r)
{
	return r->type == REDIS_REPLY_ERROR &&
			       (strstr(r->str, "unknown command") || strstr(r->str, "NOPERM") ||
				strstr(r->str, "unknown subcommand") || strstr(r->str, "disabled"))
		       ? -EPERM
		       : -EPROTO;
}

static bool flags_cover(const char *v)
{
	if (!strchr(v, 'E'))
		return false;
	for (const char *f = KV_WATCH_FLAGS; *f; f++)
		if (*f != 'E' && !strchr(v, *f) && !strchr(v, 'A'))
			return false;
	return true;
}

/* Master i's notify-keyspace-events: 1 when it has the flags, 0 when not
 * (val holds what it is), -EPERM when CONFIG GET is refused, -errno (val
 * holds the error reply, if one). */
static int flags_of(struct kv_watch *w, uint32_t i, char *val, size_t cap)
{
	int rc;
	redisReply *r = command(w, i, 3, (const char *[]){ "CONFIG", "GET", "notify-keyspace-events" },
				&rc);
	if (!r)
		return rc;
	if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
	    r->element[1]->type == REDIS_REPLY_STRING && r->element[1]->len < cap) {
		memcpy(val, r->element[1]->str, r->element[1]->len);
		val[r->element[1]->len] = 0;
		rc = flags_cover(val);
	} else {
		snprintf(val, cap, "%s", r->type == REDIS_REPLY_ERROR ? r->str : "a reply of the wrong type");
		snprintf(w->k->err, sizeof(w->k->err), "CONFIG GET: %s", val);
		rc = refusal(r);
	}
	freeReplyObject(r);
	return rc;
}

/* Notifications on master i, the flags set when missing. 0 or -errno
 * (-EPERM: refused, logged). */
static int notifications_on(struct kv_watch *w, uint32_t i)
{
	char val[64], name[KV_HOST_MAX + 16];
	kv_endpoint_name(&w->m[i].ep, name, sizeof(name));
	int rc = flags_of(w, i, val, sizeof(val) - sizeof(KV_WATCH_FLAGS));
	if (rc == 1)
		return 0;
	if (!rc) {
		/* Keep what is set: another user of this Redis may need it. */
		strcat(val, KV_WATCH_FLAGS);
		redisReply *r = command(w, i, 4,
					(const char *[]){ "CONFIG", "SET", "notify-keyspace-events", val },
					&rc);
		if (!r)
			return rc;
		if (r->type == REDIS_REPLY_STATUS)
			rc = 0;
		else
			snprintf(val, sizeof(val), "%.60s",
				 r->type == REDIS_REPLY_ERROR ? r->str : "a reply of the wrong type"),
				rc = refusal(r);
		freeReplyObject(r);
	}
	if (rc == -EPERM)
		say(w, "remote tier: the index of Redis's keys is off: %s refused CONFIG (%s): have notify-keyspace-events include " KV_WATCH_FLAGS " on every master (redis.conf: notify-keyspace-events " KV_WATCH_FLAGS "), or run with --remote-index off; until then every miss asks Redis (tried again each minute)",
		    name, val);
	return rc;
}

/* ==== Subscriptions ==== */

static void sub_close(struct master *m)
{
	if (m->sub)
		redisFree(m->sub);
	m->sub = NULL;
}

/* The reply r of master i's subscriber: a notification handled. */
static void notified(struct kv_watch *w, uint32_t i, const redisReply *r)
{
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
	    r->element[0]->type != REDIS_REPLY_STRING || strcmp(r->element[0]->str, "message") ||
	    r->element[1]->type != REDIS_REPLY_STRING || r->element[2]->type != REDIS_REPLY_STRING)
		return;
	const char *ch = r->element[1]->str, *ev = strstr(ch, "__:");
	const redisReply *key = r->element[2];
	if (!ev || key->len < w->prefix_len || memcmp(key->str, w->prefix, w->prefix_len))
		return;
	for (size_t e = 0; e < N_EVENTS; e++)
		if (!strcmp(ev + 3, events[e].name)) {
			w->cb.key(w->cb.ctx, key->str, key->len, (uint8_t)i, events[e].present);
			return;
		}
}

/* The replies already read from master i's subscriber, handled. 0 or
 * -EPROTO. */
static int pump(struct kv_watch *w, uint32_t i)
{
	for (;;) {
		void *r = NULL;
		if (redisGetReplyFromReader(w->m[i].sub, &r) != REDIS_OK)
			return -EPROTO;
		if (!r)
			return 0;
		notified(w, i, r);
		freeReplyObject(r);
	}
}

/* Connects master i's subscriber (AUTH as configured) and subscribes to
 * the events; returns once Redis confirmed each. 0 or -errno. */
static int subscribe(struct kv_watch *w, uint32_t i)
{
	struct master *m = &w->m[i];
	struct timeval tv = { w->k->timeout_ms / 1000, w->k->timeout_ms % 1000 * 1000 };
	m->sub = m->ep.is_unix ? redisConnectUnixWithTimeout(m->ep.path, tv)
			       : redisConnectWithTimeout(m->ep.host, m->ep.port, tv);
	if (!m->sub || m->sub->err || redisSetTimeout(m->sub, tv) != REDIS_OK)
		return -ECONNREFUSED;
	int argc = 0;
	const char *argv[N_EVENTS + 2];
	char ch[N_EVENTS][48];
	if (w->k->password && redisAppendCommand(m->sub, "AUTH %s", w->k->password) != REDIS_OK)
		return -ENOMEM;
	argv[argc++] = "SUBSCRIBE";
	for (size_t e = 0; e < N_EVENTS; e++) {
		snprintf(ch[e], sizeof(ch[e]), "__keyevent@%d__:%s", w->k->db, events[e].name);
		argv[argc++] = ch[e];
	}
	if (redisAppendCommandArgv(m->sub, argc, argv, NULL) != REDIS_OK)
		return -ENOMEM;
	for (size_t n = 0, want = N_EVENTS + (w->k->password != NULL); n < want; n++) {
		redisReply *r = NULL;
		if (redisGetReply(m->sub, (void **)&r) != REDIS_OK || !r)
			return -ECONNREFUSED;
		bool ok = r->type == REDIS_REPLY_STATUS ||
			  (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
			   r->element[0]->type == REDIS_REPLY_STRING &&
			   !strcmp(r->element[0]->str, "subscribe"));
		freeReplyObject(r);
		if (!ok)
			return -EPROTO;
	}
	/* What came with the confirms is handled now: poll sees the socket. */
	return pump(w, i);
}

/* ==== Masters, setup, scan, heartbeat ==== */

/* The masters now: the seed, or each node that serves a slot. Into m (n),
 * or -errno. */
static int masters_of(struct kv_watch *w, struct kv_endpoint *m, uint32_t *n)
{
	struct kv *k = w->k;
	*n = 0;
	if (!k->cluster) {
		m[(*n)++] = k->nodes[0].ep;
		return 0;
	}
	int rc = kv_cluster_refresh(k, true);
	if (rc)
		return rc;
	for (unsigned s = 0; s < KV_SLOTS; s++) {
		if (k->slots[s] < 0)
			continue;
		const struct kv_endpoint *ep = &k->nodes[k->slots[s]].ep;
		uint32_t j = 0;
		while (j < *n && !kv_endpoint_same(&m[j], ep))
			j++;
		if (j < *n)
			continue;
		if (*n == KV_WATCH_MASTERS_MAX)
			return -E2BIG;
		m[(*n)++] = *ep;
	}
	return 0;
}

static void down(struct kv_watch *w)
{
	for (uint32_t i = 0; i < w->n; i++)
		sub_close(&w->m[i]);
	if (w->st == LIVE)
		say(w, "remote tier: the index of Redis's keys is not live%s%s: every miss asks Redis until it has subscribed and scanned again",
		    w->k->err[0] ? ": " : "", w->k->err);
	w->st = DOWN;
	w->cb.state(w->cb.ctx, false);
}

/* Subscribed on every master, notifications on, scans reset: 0 or -errno
 * (the subscriptions made closed). */
static int setup(struct kv_watch *w)
{
	w->k->err[0] = 0;
	w->cb.state(w->cb.ctx, false);
	struct kv_endpoint eps[KV_WATCH_MASTERS_MAX];
	uint32_t n;
	int rc = masters_of(w, eps, &n);
	if (rc == -E2BIG)
		say(w, "remote tier: the index of Redis's keys is off: the cluster has more than %d masters",
		    KV_WATCH_MASTERS_MAX);
	for (uint32_t i = 0; !rc && i < n; i++) {
		w->m[i] = (struct master){ .ep = eps[i], .cursor = "0" };
		w->n = i + 1;
		if (!(rc = notifications_on(w, i)) && (rc = subscribe(w, i)) && !w->k->err[0])
			snprintf(w->k->err, sizeof(w->k->err), "cannot subscribe: %s",
				 w->m[i].sub && w->m[i].sub->errstr[0] ? w->m[i].sub->errstr
								       : strerror(-rc));
	}
	if (rc)
		down(w);
	return rc;
}

/* One SCAN step of the first master not scanned: 1 when all are, 0, or
 * -errno. */
static int scan_step(struct kv_watch *w)
{
	uint32_t i = 0;
	while (i < w->n && w->m[i].scanned)
		i++;
	if (i == w->n)
		return 1;
	struct master *m = &w->m[i];
	int rc;
	redisReply *r = command(w, i, 6,
				(const char *[]){ "SCAN", m->cursor, "MATCH", w->pattern, "COUNT",
						  SCAN_COUNT },
				&rc);
	if (!r)
		return rc;
	rc = -EPROTO;
	if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
	    r->element[0]->type == REDIS_REPLY_STRING && r->element[0]->len < sizeof(m->cursor) &&
	    r->element[1]->type == REDIS_REPLY_ARRAY) {
		const redisReply *keys = r->element[1];
		for (size_t j = 0; j < keys->elements; j++)
			if (keys->element[j]->type == REDIS_REPLY_STRING)
				w->cb.key(w->cb.ctx, keys->element[j]->str, keys->element[j]->len,
					  (uint8_t)i, true);
		memcpy(m->cursor, r->element[0]->str, r->element[0]->len + 1);
		m->scanned = !strcmp(m->cursor, "0");
		rc = 0;
	} else {
		snprintf(w->k->err, sizeof(w->k->err), "SCAN: %.200s",
			 r->type == REDIS_REPLY_ERROR ? r->str : "a reply of the wrong type");
	}
	freeReplyObject(r);
	return rc;
}

/* Every master answers, still has the flags, and they are still the
 * masters: 0 or -errno (the reason in the kv's err). */
static int beat(struct kv_watch *w)
{
	char val[64];
	for (uint32_t i = 0; i < w->n; i++) {
		int rc = flags_of(w, i, val, sizeof(val));
		if (rc < 0)
			return rc;
		if (!rc) {
			snprintf(w->k->err, sizeof(w->k->err), "notify-keyspace-events was changed to \"%s\"",
				 val);
			return -EAGAIN;
		}
	}
	if (!w->k->cluster)
		return 0;
	struct kv_endpoint eps[KV_WATCH_MASTERS_MAX];
	uint32_t n;
	int rc = masters_of(w, eps, &n);
	if (rc)
		return rc;
	bool same = n == w->n;
	for (uint32_t i = 0; same && i < n; i++) {
		uint32_t j = 0;
		while (j < w->n && !kv_endpoint_same(&w->m[j].ep, &eps[i]))
			j++;
		same = j < w->n;
	}
	if (!same) {
		snprintf(w->k->err, sizeof(w->k->err), "the cluster's masters changed");
		return -EAGAIN;
	}
	return 0;
}

/* Reads what master i's subscriber has: 0 or -errno. */
static int drain(struct kv_watch *w, uint32_t i)
{
	if (redisBufferRead(w->m[i].sub) != REDIS_OK) {
		char name[KV_HOST_MAX + 16];
		snprintf(w->k->err, sizeof(w->k->err), "redis %s: the subscription was lost",
			 kv_endpoint_name(&w->m[i].ep, name, sizeof(name)));
		return -ECONNREFUSED;
	}
	return pump(w, i);
}

static void *run(void *arg)
{
	struct kv_watch *w = arg;
	/* A master gone mid-write is an error of the call, not a signal. */
	sigset_t pipe_set;
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_set, NULL);
	uint64_t retry_at = 0, next_beat = 0;
	uint32_t backoff = RETRY_MIN_MS;
	struct pollfd p[KV_WATCH_MASTERS_MAX + 1];
	for (;;) {
		uint64_t now = ms_now();
		if (w->st == DOWN && now >= retry_at) {
			int rc = setup(w);
			if (rc) {
				retry_at = now + (rc == -EPERM || rc == -E2BIG ? REFUSED_RETRY_MS : backoff);
				backoff = backoff * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : backoff * 2;
			} else {
				w->st = SCANNING;
				next_beat = ms_now() + BEAT_MS;
			}
			now = ms_now();
		}
		uint64_t until = w->st == DOWN ? retry_at : next_beat;
		int timeout = w->st == SCANNING ? 0 : until > now ? (int)(until - now) : 0;
		p[0] = (struct pollfd){ .fd = w->stop_fd[0], .events = POLLIN };
		uint32_t np = 1;
		for (uint32_t i = 0; w->st != DOWN && i < w->n; i++)
			p[np++] = (struct pollfd){ .fd = w->m[i].sub->fd, .events = POLLIN };
		if (poll(p, np, timeout) < 0 && errno != EINTR)
			break;
		if (p[0].revents)
			break;
		int rc = 0;
		for (uint32_t i = 0; !rc && i + 1 < np; i++)
			if (p[i + 1].revents)
				rc = drain(w, i);
		if (!rc && w->st == SCANNING && (rc = scan_step(w)) == 1) {
			rc = 0;
			w->st = LIVE;
			w->cb.state(w->cb.ctx, true);
			backoff = RETRY_MIN_MS;
		}
		if (!rc && w->st != DOWN && ms_now() >= next_beat) {
			rc = beat(w);
			next_beat = ms_now() + BEAT_MS;
		}
		if (rc) {
			down(w);
			retry_at = ms_now() + backoff;
			backoff = backoff * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : backoff * 2;
		}
	}
	for (uint32_t i = 0; i < w->n; i++)
		sub_close(&w->m[i]);
	return NULL;
}

int kv_watch_start(const struct kv_opts *o, const char *prefix, const struct kv_watch_cb *cb,
		   struct kv_watch **out, char *why, size_t why_len)
{
	*out = NULL;
	size_t pl = strlen(prefix);
	if (!pl || pl >= PREFIX_MAX || strpbrk(prefix, "*?[]\\")) {
		snprintf(why, why_len, "remote index: a bad key prefix");
		return -EINVAL;
	}
	struct kv_watch *w = calloc(1, sizeof(*w));
	if (!w) {
		snprintf(why, why_len, "out of memory");
		return -ENOMEM;
	}
	struct kv_opts wo = *o;
	if (wo.timeout_ms < WATCH_TIMEOUT_MS)
		wo.timeout_ms = WATCH_TIMEOUT_MS;
	int rc = kv_open(&wo, &w->k, why, why_len);
	if (rc) {
		free(w);
		return rc;
	}
	w->cb = *cb;
	memcpy(w->prefix, prefix, pl + 1);
	w->prefix_len = pl;
	snprintf(w->pattern, sizeof(w->pattern), "%s*", prefix);
	if (pipe2(w->stop_fd, O_CLOEXEC)) {
		rc = -errno;
		snprintf(why, why_len, "remote index: pipe: %s", strerror(-rc));
		kv_close(w->k);
		free(w);
		return rc;
	}
	if ((rc = -pthread_create(&w->thread, NULL, run, w))) {
		snprintf(why, why_len, "remote index: cannot start its thread: %s", strerror(-rc));
		close(w->stop_fd[0]);
		close(w->stop_fd[1]);
		kv_close(w->k);
		free(w);
		return rc;
	}
	*out = w;
	return 0;
}

void kv_watch_stop(struct kv_watch *w)
{
	if (!w)
		return;
	char c = 1;
	while (write(w->stop_fd[1], &c, 1) < 0 && errno == EINTR)
		;
	pthread_join(w->thread, NULL);
	close(w->stop_fd[0]);
	close(w->stop_fd[1]);
	kv_close(w->k);
	free(w);
}
