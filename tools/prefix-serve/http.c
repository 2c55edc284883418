/* SPDX-License-Identifier: MIT */
/*
 * The HTTP side of prefix-serve on libmicrohttpd (MHD): one thread of
 * ours (the loop, below) runs MHD in external epoll mode for every
 * connection; the engine thread writes jobs' output and calls notify, and
 * its `notified` hook, after a step, resumes the streams that got output
 * and runs MHD once itself to send their chunks (see the loop).
 *
 * Responses are pulled: a non-streamed request's connection is suspended
 * until its job is done; a stream's reader copies what is new and, when
 * nothing is, suspends the connection and returns 0, and the engine's
 * notify resumes it. So a slow reader holds back only its own stream, and
 * what waits for it is the job's text, never a queue of chunks.
 *
 * Suspend and resume race (the engine may notify between the reader's
 * "nothing new" and its suspend): each request's slot has a mutex and a
 * `suspended` flag. The reader checks for output and suspends under the
 * slot's mutex; notify takes it, and if the flag is set, clears it and
 * queues the resume after letting it go. So exactly one resume follows each suspend
 * and no output is missed.
 *
 * Lifetimes: notify's argument is a slot, and slots live as long as the
 * server (the engine is stopped first), so a notify that comes late (the
 * job outlives its connection until the engine lets it go) finds at worst
 * the slot's next request, which it wakes for nothing: it re-checks and
 * suspends again. A request (struct req) is freed when MHD says it is
 * complete, after its slot is emptied and its job released.
 *
 * Lock order: mhd_mu -> slot.mu -> job lock. wake_mu, wmu (the deadlines
 * and the counts per address), slots_mu (the free slots) and the
 * metrics' mutex are leaves.
 *
 * Keep-alive: a reply queued before the request is whole makes MHD close
 * the connection, so only POSTs are judged by their headers (a 401, 404,
 * 405 or 413 then spares reading the body); other methods are answered at
 * the request's end and their connections stay open.
 *
 * Slow clients: MHD's idle timeout does not cover a client that trickles
 * a byte a second, so a watchdog thread gives each request --timeout
 * seconds to arrive whole (from the connection's start or the end of the
 * previous response) and shuts the socket down past it; MHD then closes
 * the connection in its own thread (it calls the closed notification,
 * which takes wmu, before it closes the descriptor).
 */
#include "http.h"

#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define STREAM_BLOCK 16384
#define RETRY_QUEUE_S 1
#define RETRY_UNAVAILABLE_S 5

enum route {
	R_NONE,
	R_CHAT,
	R_COMPLETIONS,
	R_MODELS,
	R_MODEL,                   /* /v1/models/{id} */
	R_HEALTH,
	R_METRICS,
};

static const struct {
	const char *path;
	enum route route;
	const char *method;
} routes[] = {
	{ "/v1/chat/completions", R_CHAT, "POST" },
	{ "/v1/completions", R_COMPLETIONS, "POST" },
	{ "/v1/models", R_MODELS, "GET" },
	{ "/v1/models/", R_MODEL, "GET" }, /* a prefix: the rest is the id */
	{ "/health", R_HEALTH, "GET" },
	{ "/metrics", R_METRICS, "GET" },
};

/* A client's address, as the per-address count knows it. */
struct ipkey {
	uint8_t b[17];             /* family, then 4 or 16 bytes */
};

/* A connection's deadline for its request to arrive whole, and its
 * address for --per-ip. */
struct watch {
	struct watch *prev, *next;
	int fd;
	int64_t deadline;          /* CLOCK_MONOTONIC ns; 0: none */
	struct ipkey ip;
	bool counted;              /* in http.ips */
};

/* Connections open from one address (--per-ip). */
struct ipcount {
	struct ipkey ip;
	unsigned n;                /* 0: a free entry */
};

struct req;

/* Where notify finds a request: one per connection that can be open. */
struct slot {
	struct http *h;
	pthread_mutex_t mu;
	struct req *req;           /* NULL: free */
	struct MHD_Connection *conn;
	bool suspended;
	struct slot *next_free;    /* under http.slots_mu */
	/* A resume the engine asked for, done by the loop (under wake_mu). */
	struct MHD_Connection *wake_conn;
	struct slot *next_wake;
};

struct stream_choice {
	bool role_sent, finish_sent;
	size_t text_sent, tokens_sent;
};

struct req {
	struct http *h;
	struct MHD_Connection *conn;
	enum route route;
	char method[8];
	char path[48];
	char id[40];               /* the response's id, and the log's */
	int64_t start;
	int64_t created;
	int status;                /* as sent (0: none) */
	char *body;
	size_t len, cap;
	bool too_big;
	bool deferred;             /* not a POST: judged at the request's end */
	struct api_call call;
	bool have_call;
	struct serve_job *job;     /* set under slot->mu */
	struct slot *slot;
	/* A stream: what is sent of each choice, and bytes built but not
	 * yet handed to MHD. */
	bool stream;
	struct stream_choice sc[SERVE_MAX_CHOICES];
	bool ended;
	bool client_left;          /* the engine saw the client hang up */
	/* With the prep thread (suspended until it is done): */
	bool preparing;
	int fd;                    /* the connection's, polled by the engine */
	int prep_rc;               /* 0: r->job runs; else prep_err says why */
	struct api_error prep_err;
	struct req *next_prep;     /* under http.prep_mu */
	char *pending;
	size_t pending_len, pending_off;
};

struct http {
	struct MHD_Daemon *d;
	struct http_opts o;
	uint8_t key_hash[crypto_generichash_BYTES];
	char *api_key_copy;
	_Atomic(struct serve_engine *) engine; /* non-NULL: ready */
	const struct pfx_tokenizer *tok;
	struct api_limits lim;
	atomic_bool quiescing;
	atomic_int inflight;       /* requests not yet complete */
	int64_t started;           /* Unix time: /v1/models' created */

	pthread_mutex_t slots_mu;
	struct slot *slots, *free_slots;

	pthread_mutex_t wmu;       /* watches, ips */
	pthread_cond_t wcv;
	struct watch watches;      /* list head */
	struct ipcount *ips;       /* max_conns entries, with --per-ip */
	bool wstop;
	pthread_t watchdog;
	bool watchdog_started;

	/* The loop thread runs MHD (its epoll, external mode) and our
	 * eventfd: the engine's resumes of a step come as one wake-up. */
	int wake_fd;
	pthread_mutex_t wake_mu;   /* a leaf */
	struct slot *wakes;        /* resumes for the loop to do */
	struct slot *stream_wakes; /* streams' resumes, for http_notified */
	bool wake_sent;            /* wake_fd written since the loop took wakes */
	/* Held around every call into MHD from outside its callbacks: the
	 * loop's, and the engine thread's in http_notified. */
	pthread_mutex_t mhd_mu;
	pthread_t loop;
	bool loop_started;
	atomic_bool loop_stop;
	atomic_int quiesce;        /* 1: asked, 2: done (the loop's) */
	MHD_socket quiesced_fd;

	pthread_mutex_t prep_mu;   /* a leaf */
	pthread_cond_t prep_cv;
	struct req *prep_head;     /* requests waiting for the prep thread */
	bool prep_stop;
	pthread_t prep;
	bool prep_started;
};

static int64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* ==== Deadlines ==== */

/* Sleeps until the earliest deadline, or a second when none is armed: a
 * deadline armed meanwhile is --timeout (at least a second) away, so it
 * is never missed, and an idle server wakes once a second, not ten times. */
static void *watchdog_main(void *arg)
{
	struct http *h = arg;
	pthread_mutex_lock(&h->wmu);
	while (!h->wstop) {
		int64_t now = now_ns(), next = now + 1000000000;
		for (struct watch *w = h->watches.next; w != &h->watches; w = w->next) {
			if (w->deadline && now >= w->deadline) {
				/* The descriptor is still MHD's: the closed
				 * notification takes wmu before it closes. */
				shutdown(w->fd, SHUT_RDWR);
				w->deadline = 0;
			}
			if (w->deadline && w->deadline < next)
				next = w->deadline;
		}
		/* The condition variable's clock is CLOCK_REALTIME. */
		struct timespec t;
		clock_gettime(CLOCK_REALTIME, &t);
		int64_t at = (int64_t)t.tv_sec * 1000000000 + t.tv_nsec + (next - now);
		t.tv_sec = (time_t)(at / 1000000000);
		t.tv_nsec = (long)(at % 1000000000);
		pthread_cond_timedwait(&h->wcv, &h->wmu, &t);
	}
	pthread_mutex_unlock(&h->wmu);
	return NULL;
}

/* ==== Connections per address ====
 *
 * libmicrohttpd's own MHD_OPTION_PER_IP_CONNECTION_LIMIT does nothing in
 * Debian 12's build (checked: a limit of 1 lets four in), so the count is
 * kept here: the accept policy refuses an address at its limit, the
 * started notification counts, the closed one uncounts. MHD's one thread
 * runs all three for a connection in that order, so the check and the
 * count cannot be split by another connection. */

static bool ip_key(const struct sockaddr *a, struct ipkey *k)
{
	memset(k, 0, sizeof(*k));
	if (!a)
		return false;
	k->b[0] = (uint8_t)a->sa_family;
	if (a->sa_family == AF_INET)
		memcpy(k->b + 1, &((const struct sockaddr_in *)a)->sin_addr, 4);
	else if (a->sa_family == AF_INET6)
		memcpy(k->b + 1, &((const struct sockaddr_in6 *)a)->sin6_addr, 16);
	else
		return false;
	return true;
}

/* The entry of k (under wmu); with make, a free one if none (NULL: full). */
static struct ipcount *ip_find(struct http *h, const struct ipkey *k, bool make)
{
	struct ipcount *free_one = NULL;
	for (unsigned i = 0; i < h->o.max_conns; i++) {
		struct ipcount *e = &h->ips[i];
		if (e->n && !memcmp(&e->ip, k, sizeof(*k)))
			return e;
		if (!e->n && !free_one)
			free_one = e;
	}
	if (make && free_one)
		free_one->ip = *k;
	return make ? free_one : NULL;
}

static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t len)
{
	struct http *h = cls;
	struct ipkey k;
	(void)len;
	if (!h->ips || !ip_key(addr, &k))
		return MHD_YES;
	pthread_mutex_lock(&h->wmu);
	struct ipcount *e = ip_find(h, &k, false);
	bool ok = !e || e->n < h->o.per_ip;
	pthread_mutex_unlock(&h->wmu);
	return ok ? MHD_YES : MHD_NO;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
			  enum MHD_ConnectionNotificationCode code)
{
	struct http *h = cls;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		struct watch *w = calloc(1, sizeof(*w));
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
		if (!w || !ci) {
			free(w); /* no deadline but MHD's idle timeout */
			return;
		}
		w->fd = ci->connect_fd;
		w->deadline = now_ns() + (int64_t)h->o.timeout_s * 1000000000;
		const union MHD_ConnectionInfo *ai =
			MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
		bool keyed = h->ips && ai && ip_key(ai->client_addr, &w->ip);
		pthread_mutex_lock(&h->wmu);
		struct ipcount *e = keyed ? ip_find(h, &w->ip, true) : NULL;
		if (e) {
			e->n++;
			w->counted = true;
		}
		w->next = h->watches.next;
		w->prev = &h->watches;
		w->next->prev = w;
		h->watches.next = w;
		pthread_mutex_unlock(&h->wmu);
		*socket_context = w;
	} else if (*socket_context) {
		struct watch *w = *socket_context;
		pthread_mutex_lock(&h->wmu);
		struct ipcount *e = w->counted ? ip_find(h, &w->ip, false) : NULL;
		if (e)
			e->n--;
		w->prev->next = w->next;
		w->next->prev = w->prev;
		pthread_mutex_unlock(&h->wmu);
		free(w);
		*socket_context = NULL;
	}
}

/* The connection's deadline: none (0), or after timeout from now (1). */
static void set_deadline(struct http *h, struct MHD_Connection *c, int arm)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	struct watch *w = ci ? ci->socket_context : NULL;
	if (!w)
		return;
	pthread_mutex_lock(&h->wmu);
	w->deadline = arm ? now_ns() + (int64_t)h->o.timeout_s * 1000000000 : 0;
	pthread_mutex_unlock(&h->wmu);
}

/* ==== Replies ==== */

/* Queues body (malloc'd, taken; NULL: out of memory, a 500) as status. */
static enum MHD_Result reply(struct req *r, int status, char *body, const char *type,
			     int retry_after, const char *allow)
{
	if (!body) {
		static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
					  "\"server_error\",\"param\":null,\"code\":null}}";
		body = strdup(oom);
		status = 500;
		type = "application/json";
		if (!body)
			return MHD_NO;
	}
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	if (retry_after > 0) {
		char s[16];
		snprintf(s, sizeof(s), "%d", retry_after);
		MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, s);
	}
	if (allow)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
	r->status = status;
	enum MHD_Result ret = MHD_queue_response(r->conn, (unsigned)status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static enum MHD_Result reply_api_error(struct req *r, const struct api_error *e,
				       const char *allow)
{
	return reply(r, e->status, api_error_json(e), "application/json", e->retry_after, allow);
}

__attribute__((format(printf, 6, 7))) static enum MHD_Result
reply_error(struct req *r, int status, const char *type, const char *code, int retry_after,
	    const char *fmt, ...)
{
	struct api_error e;
	char msg[sizeof(e.message)];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	api_fail(&e, status, type, code, NULL, "%s", msg);
	e.retry_after = retry_after;
	return reply_api_error(r, &e, NULL);
}

/* ==== Slots ==== */

static struct slot *slot_get(struct http *h)
{
	pthread_mutex_lock(&h->slots_mu);
	struct slot *s = h->free_slots;
	if (s)
		h->free_slots = s->next_free;
	pthread_mutex_unlock(&h->slots_mu);
	return s;
}

static void slot_put(struct http *h, struct slot *s)
{
	pthread_mutex_lock(&h->slots_mu);
	s->next_free = h->free_slots;
	h->free_slots = s;
	pthread_mutex_unlock(&h->slots_mu);
}

/* The engine's call (its thread, no job lock held): new output, or the end. */
static void on_notify(void *arg)
{
	struct slot *s = arg;
	bool resume = false;
	pthread_mutex_lock(&s->mu);
	struct req *r = s->req;
	if (r && s->suspended && r->job) {
		if (r->stream) {
			resume = true;
		} else {
			serve_job_lock(r->job);
			resume = serve_job_done(r->job);
			serve_job_unlock(r->job);
		}
		if (resume)
			s->suspended = false;
	}
	bool stream = r && r->stream;
	struct MHD_Connection *c = s->conn;
	pthread_mutex_unlock(&s->mu);
	/* Suspended, the connection stays: MHD neither times it out nor
	 * closes it, and only this resume can end the suspension. It comes
	 * after the engine's round of notifies (http_notified): a stream's
	 * from the engine thread itself, a whole response's from the loop.
	 * Cleared under s->mu, `suspended` lets one resume through per
	 * suspend, so the slot is queued at most once. */
	if (resume) {
		struct http *h = s->h;
		pthread_mutex_lock(&h->wake_mu);
		s->wake_conn = c;
		if (stream) {
			s->next_wake = h->stream_wakes;
			h->stream_wakes = s;
		} else {
			s->next_wake = h->wakes;
			h->wakes = s;
		}
		pthread_mutex_unlock(&h->wake_mu);
	}
}

static void wake_loop(struct http *h)
{
	uint64_t one = 1;
	if (write(h->wake_fd, &one, sizeof(one)) < 0) {
		/* EAGAIN only (the counter is full): a wake-up is pending. */
	}
}

/* Runs MHD (mhd_mu held) until nothing is left for it to do at once
 * (a resumed connection may take more than one run to send), or a few
 * runs; whether something still is. */
static bool run_mhd(struct http *h)
{
	MHD_UNSIGNED_LONG_LONG to = 1;
	for (int k = 0; k < 4; k++) {
		MHD_run(h->d);
		if (MHD_get_timeout(h->d, &to) != MHD_YES || to)
			return false;
	}
	return true;
}

/* After a step, on the engine thread: the streams that got output are
 * resumed and their chunks sent here, with MHD run once for all of them,
 * rather than by waking the loop: a step's output then costs the server
 * no wake-up and no context switch beside the sends themselves. The
 * engine waits for no one: while the loop runs MHD, it takes the
 * resumes after its run, as it takes every other (prep_done, whole
 * responses). */
void http_notified(void *arg)
{
	struct http *h = arg;
	pthread_mutex_lock(&h->wake_mu);
	struct slot *sw = h->stream_wakes;
	h->stream_wakes = NULL;
	pthread_mutex_unlock(&h->wake_mu);
	bool more = false;
	if (sw && !pthread_mutex_trylock(&h->mhd_mu)) {
		for (; sw; sw = sw->next_wake)
			MHD_resume_connection(sw->wake_conn);
		more = run_mhd(h);
		pthread_mutex_unlock(&h->mhd_mu);
	}
	pthread_mutex_lock(&h->wake_mu);
	while (sw) { /* the loop's, then */
		struct slot *next = sw->next_wake;
		sw->next_wake = h->wakes;
		h->wakes = sw;
		sw = next;
	}
	bool wake = (h->wakes || more) && !h->wake_sent;
	if (wake)
		h->wake_sent = true;
	pthread_mutex_unlock(&h->wake_mu);
	if (wake)
		wake_loop(h);
}

/* ==== Streams ==== */

/* Appends s (malloc'd, taken) to the pending bytes; -1 when out of memory. */
static int pend(struct req *r, char *s)
{
	if (!s)
		return -1;
	size_t n = strlen(s);
	char *p = realloc(r->pending, r->pending_len + n);
	if (!p) {
		free(s);
		return -1;
	}
	memcpy(p + r->pending_len, s, n);
	r->pending = p;
	r->pending_len += n;
	free(s);
	return 0;
}

/* An error as an event: what OpenAI sends when a stream fails. */
static char *error_event(int status, const char *type, const char *msg)
{
	struct api_error e;
	api_fail(&e, status, type, NULL, NULL, "%s", msg);
	char *j = api_error_json(&e);
	if (!j)
		return NULL;
	size_t n = strlen(j) + 16;
	char *ev = malloc(n);
	if (ev)
		snprintf(ev, n, "data: %s\n\n", j);
	free(j);
	return ev;
}

/* Builds the events of what is new in the job (under slot->mu). 1: some,
 * 0: nothing new, -1: out of memory. */
static int stream_next(struct req *r)
{
	const struct http *h = r->h;
	const struct api_call *c = &r->call;
	const char *model = h->o.model_name;
	int rc = 0;
	bool all_done = true;
	serve_job_lock(r->job);
	uint32_t n = serve_job_choices(r->job);
	for (uint32_t i = 0; i < n && rc >= 0; i++) {
		const struct serve_choice *ch = serve_job_choice(r->job, i);
		struct stream_choice *sc = &r->sc[i];
		if (!sc->role_sent) {
			sc->role_sent = true;
			if (c->kind == API_CHAT) {
				rc = pend(r, api_chunk_role(c, r->id, r->created, model, i));
				if (rc < 0)
					break;
			}
		}
		bool finished = ch->finish != SERVE_RUNNING;
		if (ch->finish == SERVE_CANCELLED && !atomic_load(&h->quiescing)) {
			/* The engine saw the client hang up: nothing more to
			 * send, and the connection goes. */
			r->client_left = true;
			rc = -1;
			break;
		}
		size_t ntok = ch->tokens && c->req.logprobs ? ch->ntokens : 0;
		if (ch->text_len > sc->text_sent ||
		    (finished && !sc->finish_sent && ntok > sc->tokens_sent)) {
			size_t tfrom = sc->tokens_sent < ntok ? sc->tokens_sent : ntok;
			rc = pend(r, api_chunk_text_at(c, h->tok, r->id, r->created, model, i,
						       ch->text + sc->text_sent,
						       ch->text_len - sc->text_sent,
						       ntok ? ch->tokens + tfrom : NULL, ntok - tfrom,
						       sc->text_sent));
			if (rc < 0)
				break;
			sc->text_sent = ch->text_len;
			sc->tokens_sent = ntok;
		}
		if (finished && !sc->finish_sent) {
			sc->finish_sent = true;
			/* A failure is said as OpenAI streams errors, then the
			 * choice ends ("error"); a cancelled one ends "abort". */
			if (ch->finish == SERVE_FAILED)
				rc = pend(r, error_event(500, "server_error", serve_job_error(r->job)));
			if (rc >= 0)
				rc = pend(r, api_chunk_finish(c, r->id, r->created, model, i,
							      ch->finish));
			if (rc < 0)
				break;
		}
		all_done &= sc->finish_sent;
	}
	if (rc >= 0 && all_done && n) {
		if (c->include_usage) {
			struct serve_job_usage u;
			serve_job_usage(r->job, &u);
			rc = pend(r, api_chunk_usage(c, r->id, r->created, model, &u));
		}
		if (rc >= 0)
			rc = pend(r, strdup(api_sse_done));
		r->ended = true;
	}
	serve_job_unlock(r->job);
	if (rc < 0)
		return -1;
	return r->pending_len > r->pending_off;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct req *r = cls;
	(void)pos;
	if (r->pending_off == r->pending_len) {
		free(r->pending);
		r->pending = NULL;
		r->pending_len = r->pending_off = 0;
		if (r->ended)
			return MHD_CONTENT_READER_END_OF_STREAM;
		struct slot *s = r->slot;
		pthread_mutex_lock(&s->mu);
		int got = stream_next(r);
		if (!got) {
			s->suspended = true;
			MHD_suspend_connection(r->conn);
		}
		pthread_mutex_unlock(&s->mu);
		if (got < 0)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (!got)
			return 0;
	}
	size_t n = r->pending_len - r->pending_off;
	if (n > max)
		n = max;
	memcpy(buf, r->pending + r->pending_off, n);
	r->pending_off += n;
	return (ssize_t)n;
}

/* ==== Requests ==== */

/* The whole response of a finished job, or suspends until it is. */
static enum MHD_Result continue_job(struct req *r)
{
	struct slot *s = r->slot;
	pthread_mutex_lock(&s->mu);
	serve_job_lock(r->job);
	bool done = serve_job_done(r->job);
	serve_job_unlock(r->job);
	if (!done) {
		s->suspended = true;
		MHD_suspend_connection(r->conn);
		pthread_mutex_unlock(&s->mu);
		return MHD_YES;
	}
	pthread_mutex_unlock(&s->mu);

	serve_job_lock(r->job);
	uint32_t n = serve_job_choices(r->job);
	const struct serve_choice *choices[SERVE_MAX_CHOICES];
	enum serve_finish bad = SERVE_RUNNING;
	for (uint32_t i = 0; i < n; i++) {
		choices[i] = serve_job_choice(r->job, i);
		if (choices[i]->finish == SERVE_FAILED || choices[i]->finish == SERVE_CANCELLED)
			bad = choices[i]->finish;
	}
	char why[512];
	snprintf(why, sizeof(why), "%s", bad == SERVE_FAILED ? serve_job_error(r->job) : "");
	struct serve_job_usage u;
	serve_job_usage(r->job, &u);
	char *json = bad ? NULL : api_response_json(&r->call, r->h->tok, r->id, r->created,
						    r->h->o.model_name, choices, n, &u);
	serve_job_unlock(r->job);
	if (bad == SERVE_FAILED)
		return reply_error(r, 500, "server_error", NULL, 0, "%s", why);
	if (bad == SERVE_CANCELLED && atomic_load(&r->h->quiescing))
		return reply_error(r, 503, "server_error", NULL, RETRY_UNAVAILABLE_S,
				   "the request was cancelled: the server is stopping");
	if (bad == SERVE_CANCELLED) {
		/* The engine saw the client hang up: no one to answer. The
		 * log and the metrics say 499, as nginx does. */
		r->status = 499;
		r->client_left = true;
		return MHD_NO;
	}
	return reply(r, 200, json, "application/json", 0, NULL);
}

/* ==== Preparing a request ====
 *
 * Parsing a body, rendering a chat and encoding its prompt take time in
 * proportion to the prompt (a 100 KB one takes milliseconds, more under
 * load): on the HTTP thread that would stall every other stream's sends.
 * So the HTTP thread only takes the body; the prep thread parses it
 * (api_parse: the same checks, the same errors) and submits the job, with
 * the connection suspended meanwhile, then queues its resume as the
 * engine's notifies do. Nothing is sent before: a refusal is the same 400
 * (429, 503) JSON error as before, never a stream's header. */

/* Queues the resume of r's connection, suspended by start_job, and wakes
 * the loop (the prep thread's call). */
static void prep_done(struct req *r)
{
	struct http *h = r->h;
	struct slot *s = r->slot;
	pthread_mutex_lock(&h->wake_mu);
	s->wake_conn = r->conn;
	s->next_wake = h->wakes;
	h->wakes = s;
	bool wake = !h->wake_sent;
	h->wake_sent = true;
	pthread_mutex_unlock(&h->wake_mu);
	if (wake)
		wake_loop(h);
}

static void prepare(struct req *r)
{
	struct http *h = r->h;
	struct serve_engine *e = atomic_load(&h->engine);
	struct api_error *ae = &r->prep_err;
	memset(ae, 0, sizeof(*ae));
	r->prep_rc = -1;
	enum api_kind kind = r->route == R_CHAT ? API_CHAT : API_COMPLETION;
	if (api_parse(kind, r->body ? r->body : "", r->len, h->tok, &h->lim, &r->call, ae))
		return;
	r->have_call = true;
	r->stream = r->call.stream;
	char hex[sizeof(r->id)];
	memcpy(hex, r->id, sizeof(hex));
	snprintf(r->id, sizeof(r->id), "%s%.24s", kind == API_CHAT ? "chatcmpl-" : "cmpl-", hex);

	struct slot *s = r->slot;
	r->call.req.client_fd = r->fd;
	r->call.req.notify = on_notify;
	r->call.req.notify_arg = s;
	struct serve_job *job = NULL;
	struct pfx_error err = { "" };
	int rc = serve_engine_submit(e, &r->call.req, &job, &err);
	/* The prompt and stop strings are the job's now, even on failure. */
	r->call.req.prompt = NULL;
	r->call.req.nprompt = 0;
	for (size_t i = 0; i < SERVE_MAX_STOPS; i++)
		r->call.req.stop[i] = NULL;
	r->call.req.nstop = 0;
	if (rc == -EAGAIN) {
		api_fail(ae, 429, "rate_limit_error", "queue_full", NULL,
			 "the server is busy: every sequence runs and the queue is full; retry "
			 "shortly");
		ae->retry_after = RETRY_QUEUE_S;
	} else if (rc == -ESHUTDOWN) {
		api_fail(ae, 503, "server_error", NULL, NULL, "the server is stopping");
		ae->retry_after = RETRY_UNAVAILABLE_S;
	} else if (rc == -EINVAL) {
		api_fail(ae, 400, "invalid_request_error", NULL, NULL, "%s", err.msg);
	} else if (rc) {
		api_fail(ae, 500, "server_error", NULL, NULL, "%s",
			 err.msg[0] ? err.msg : strerror(-rc));
	} else {
		pthread_mutex_lock(&s->mu);
		r->job = job;
		pthread_mutex_unlock(&s->mu);
		r->prep_rc = 0;
	}
}

static void *prep_main(void *arg)
{
	struct http *h = arg;
	pthread_mutex_lock(&h->prep_mu);
	for (;;) {
		while (!h->prep_stop && !h->prep_head)
			pthread_cond_wait(&h->prep_cv, &h->prep_mu);
		if (h->prep_stop)
			break;
		struct req *r = h->prep_head;
		h->prep_head = r->next_prep;
		pthread_mutex_unlock(&h->prep_mu);
		prepare(r);
		prep_done(r);
		pthread_mutex_lock(&h->prep_mu);
	}
	pthread_mutex_unlock(&h->prep_mu);
	return NULL;
}

/* The HTTP thread's part: a slot, then the connection waits for the prep
 * thread. */
static enum MHD_Result start_job(struct req *r)
{
	struct http *h = r->h;
	if (!atomic_load(&h->engine))
		return reply_error(r, 503, "server_error", NULL, RETRY_UNAVAILABLE_S,
				   "the model is loading; retry shortly");
	struct slot *s = slot_get(h);
	if (!s)
		return reply_error(r, 503, "server_error", NULL, RETRY_QUEUE_S,
				   "too many requests in flight");
	r->slot = s;
	pthread_mutex_lock(&s->mu);
	s->req = r;
	s->conn = r->conn;
	s->suspended = false;
	pthread_mutex_unlock(&s->mu);
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	r->fd = ci ? ci->connect_fd : -1;
	r->preparing = true;
	/* Resumed by the loop, on this thread, after the prep thread queued
	 * it: never before this suspend. */
	MHD_suspend_connection(r->conn);
	pthread_mutex_lock(&h->prep_mu);
	r->next_prep = NULL;
	if (h->prep_head) {
		struct req *t = h->prep_head;
		while (t->next_prep)
			t = t->next_prep;
		t->next_prep = r;
	} else {
		h->prep_head = r;
	}
	pthread_cond_signal(&h->prep_cv);
	pthread_mutex_unlock(&h->prep_mu);
	return MHD_YES;
}

/* Resumed after the prep thread: the refusal, or the response. */
static enum MHD_Result started_job(struct req *r)
{
	r->preparing = false;
	if (r->prep_rc)
		return reply_api_error(r, &r->prep_err, NULL);
	if (!r->stream)
		return continue_job(r);
	struct MHD_Response *resp =
		MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_read, r,
						  NULL);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	r->status = 200;
	enum MHD_Result ret = MHD_queue_response(r->conn, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* Whether the request carries "Authorization: Bearer KEY" with the key:
 * compared as hashes in constant time (neither the key's bytes nor its
 * length leak through timing). */
static bool authorized(struct http *h, struct MHD_Connection *c)
{
	const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
						    MHD_HTTP_HEADER_AUTHORIZATION);
	if (!a || strncasecmp(a, "Bearer ", 7))
		return false;
	a += 7;
	while (*a == ' ')
		a++;
	size_t n = strlen(a);
	while (n && (a[n - 1] == ' ' || a[n - 1] == '\t'))
		n--;
	uint8_t got[crypto_generichash_BYTES];
	crypto_generichash(got, sizeof(got), (const unsigned char *)a, n, NULL, 0);
	return !sodium_memcmp(got, h->key_hash, sizeof(got));
}

static enum MHD_Result serve_get(struct req *r, const char *url)
{
	struct http *h = r->h;
	struct serve_engine *e = atomic_load(&h->engine);
	bool ready = e && !atomic_load(&h->quiescing);
	switch (r->route) {
	case R_HEALTH:
		if (ready)
			return reply(r, 200, strdup("{\"status\":\"ok\"}\n"), "application/json", 0,
				     NULL);
		return reply(r, 503,
			     strdup(e ? "{\"status\":\"stopping\"}\n" : "{\"status\":\"loading\"}\n"),
			     "application/json", RETRY_UNAVAILABLE_S, NULL);
	case R_MODELS:
		return reply(r, 200, api_models_json(h->o.model_name, h->started),
			     "application/json", 0, NULL);
	case R_MODEL: {
		/* MHD decoded the path: an id with "/" (org/name) is whole. */
		const char *id = url + strlen("/v1/models/");
		if (!strcmp(id, h->o.model_name))
			return reply(r, 200, api_model_json(h->o.model_name, h->started),
				     "application/json", 0, NULL);
		struct api_error nf;
		api_fail(&nf, 404, "invalid_request_error", "model_not_found", "model",
			 "The model '%.200s' does not exist", id);
		nf.retry_after = 0;
		return reply_api_error(r, &nf, NULL);
	}
	case R_METRICS: {
		struct serve_engine_stats st;
		if (e)
			serve_engine_stats(e, &st);
		return reply(r, 200, metrics_render(h->o.metrics, e ? &st : NULL, e != NULL),
			     "text/plain; version=0.0.4; charset=utf-8", 0, NULL);
	}
	default:
		return MHD_NO;
	}
}

/* The first call, with the headers: route, method, key, declared length. */
static enum MHD_Result first_call(struct req *r, const char *url, const char *method)
{
	struct http *h = r->h;
	size_t k = 0;
	while (k < sizeof(routes) / sizeof(routes[0]) &&
	       (routes[k].route == R_MODEL ? strncmp(url, routes[k].path, strlen(routes[k].path)) ||
						    !url[strlen(routes[k].path)]
					    : strcmp(url, routes[k].path) != 0))
		k++;
	if (k == sizeof(routes) / sizeof(routes[0]))
		return reply_error(r, 404, "not_found_error", NULL, 0,
				   "no such endpoint: %.100s %.200s (prefix-serve serves POST "
				   "/v1/chat/completions, POST /v1/completions, GET /v1/models, "
				   "GET /v1/models/{model}, GET /health and GET /metrics)", method, url);
	r->route = routes[k].route;
	if (strcmp(method, routes[k].method)) {
		struct api_error e;
		api_fail(&e, 405, "invalid_request_error", "method_not_allowed", NULL,
			 "%.200s takes %s, not %.20s", url, routes[k].method, method);
		e.retry_after = 0;
		return reply_api_error(r, &e, routes[k].method);
	}
	bool open = r->route == R_HEALTH || r->route == R_METRICS;
	if (h->o.api_key && !open && !authorized(h, r->conn))
		return reply_error(r, 401, "authentication_error", "invalid_api_key", 0,
				   "a valid API key is needed: send the header "
				   "\"Authorization: Bearer KEY\"");
	if (r->route != R_CHAT && r->route != R_COMPLETIONS)
		return serve_get(r, url);
	const char *cl = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
						     MHD_HTTP_HEADER_CONTENT_LENGTH);
	if (cl && strtoull(cl, NULL, 10) > h->o.max_body)
		return reply_error(r, 413, "invalid_request_error", "request_too_large", 0,
				   "the body is %.30s bytes; this server takes at most %zu "
				   "(--max-body)", cl, h->o.max_body);
	return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version,
				  const char *upload_data, size_t *upload_size, void **con_cls)
{
	struct http *h = cls;
	struct req *r = *con_cls;
	if (!r) {
		r = calloc(1, sizeof(*r));
		if (!r)
			return MHD_NO;
		r->h = h;
		r->conn = c;
		r->start = now_ns();
		r->created = (int64_t)time(NULL);
		/* For the log: MHD has decoded the path, so "%0A" would be a
		 * line of its own there. */
		snprintf(r->method, sizeof(r->method), "%s", method);
		snprintf(r->path, sizeof(r->path), "%s", url);
		for (char *p = r->method; *p; p++)
			*p = (unsigned char)*p <= ' ' || *p == 0x7f ? '?' : *p;
		for (char *p = r->path; *p; p++)
			*p = (unsigned char)*p <= ' ' || *p == 0x7f ? '?' : *p;
		uint8_t rnd[12];
		randombytes_buf(rnd, sizeof(rnd));
		sodium_bin2hex(r->id, sizeof(r->id), rnd, sizeof(rnd));
		atomic_fetch_add(&h->inflight, 1);
		*con_cls = r;
		/* A POST is judged by its headers, before its body is read (a
		 * reply now discards the body and closes the connection).
		 * Anything else waits for the request's end: a reply then
		 * keeps the connection alive. */
		if (!strcmp(method, "POST"))
			return first_call(r, url, method);
		r->deferred = true;
		return MHD_YES;
	}
	if (r->deferred && !*upload_size) {
		r->deferred = false;
		set_deadline(h, c, 0);
		return first_call(r, url, method);
	}
	if (r->preparing)
		return started_job(r); /* resumed by the prep thread */
	if (r->job)
		return continue_job(r); /* resumed: done, or still running */
	if (*upload_size) {
		size_t n = *upload_size;
		*upload_size = 0;
		if (r->too_big || r->len + n > h->o.max_body) {
			/* Chunked past the limit: the reply must wait for the end
			 * of the body (MHD queues none during an upload), so the
			 * rest is thrown away, up to the limit again; a client
			 * that sends still more is cut off. */
			bool cut = r->too_big && r->len + n > 2 * h->o.max_body;
			r->too_big = true;
			r->len += n;
			return cut ? MHD_NO : MHD_YES;
		}
		if (r->len + n > r->cap) {
			size_t cap = r->cap ? r->cap : 4096;
			while (cap < r->len + n)
				cap *= 2;
			char *b = realloc(r->body, cap);
			if (!b)
				return MHD_NO;
			r->body = b;
			r->cap = cap;
		}
		memcpy(r->body + r->len, upload_data, n);
		r->len += n;
		return MHD_YES;
	}
	set_deadline(h, c, 0);
	if (r->too_big)
		return reply_error(r, 413, "invalid_request_error", "request_too_large", 0,
				   "the body is over %zu bytes (--max-body)", h->o.max_body);
	return start_job(r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct http *h = cls;
	struct req *r = *con_cls;
	if (!r)
		return;
	*con_cls = NULL;
	if (r->slot) {
		struct slot *s = r->slot;
		pthread_mutex_lock(&s->mu);
		s->req = NULL;
		s->conn = NULL;
		s->suspended = false;
		pthread_mutex_unlock(&s->mu);
		slot_put(h, s);
	}
	struct serve_job_usage u;
	bool gone = toe != MHD_REQUEST_TERMINATED_COMPLETED_OK || r->client_left;
	if (!r->status && gone)
		r->status = 499; /* left before any answer */
	if (r->job) {
		/* Without a slot notify cannot reach r any more; the job may
		 * still run (the client left): cancel, then let it go. */
		if (gone)
			serve_job_cancel(r->job);
		serve_job_usage(r->job, &u);
		serve_job_release(r->job);
	}
	int64_t total = now_ns() - r->start;
	metrics_request(h->o.metrics, r->status, r->job ? &u : NULL);
	if (r->job)
		serve_log("%s %s %s %d%s prompt=%zu cached=%zu generated=%zu ttft_ms=%.1f "
			  "total_ms=%.1f", r->id, r->method, r->path, r->status,
			  gone ? " (client gone)" : "", u.prompt_tokens, u.cached_tokens,
			  u.completion_tokens, u.ttft_ns > 0 ? (double)u.ttft_ns / 1e6 : 0.0,
			  (double)total / 1e6);
	else
		serve_log("%s %s %s %d%s prompt=0 cached=0 generated=0 ttft_ms=- total_ms=%.1f",
			  r->id, r->method, r->path, r->status, gone ? " (client gone)" : "",
			  (double)total / 1e6);
	if (r->have_call)
		api_call_free(&r->call);
	free(r->body);
	free(r->pending);
	free(r);
	set_deadline(h, c, 1); /* the next request on this connection */
	atomic_fetch_sub(&h->inflight, 1);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	char msg[512];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	msg[strcspn(msg, "\n")] = 0;
	serve_log("http: %s", msg);
}

/* ==== The loop ====
 *
 * MHD runs in external mode: this thread waits on MHD's epoll descriptor
 * (nested in its own) and on wake_fd, and runs MHD for what comes from
 * the network (connections, requests, sockets that drained), for the
 * resumes queued for it (the prep thread's, whole responses', and those
 * the engine could not do itself), quiesce and stop. The engine thread
 * runs MHD too, after a step, for the streams it gave output
 * (http_notified): MHD's own internal thread would be woken by every
 * MHD_resume_connection, and even one wake-up of this loop a step cost a
 * context switch and a cross-CPU wake-up per step beside the sends. Both
 * call MHD under mhd_mu; its callbacks (on_request, stream_read,
 * on_completed, on_connection) run on whichever thread holds it. */

static void *loop_main(void *arg)
{
	struct http *h = arg;
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_EPOLL_FD);
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event mhd_ev = { .events = EPOLLIN, .data.u32 = 0 };
	struct epoll_event wake_ev = { .events = EPOLLIN, .data.u32 = 1 };
	if (ep < 0 || !di || epoll_ctl(ep, EPOLL_CTL_ADD, di->epoll_fd, &mhd_ev) ||
	    epoll_ctl(ep, EPOLL_CTL_ADD, h->wake_fd, &wake_ev)) {
		/* Never seen; MHD's own polling then, every 10 ms at worst. */
		serve_log("http: cannot watch libmicrohttpd's epoll: %s", strerror(errno));
		if (ep >= 0)
			close(ep);
		ep = -1;
	}
	while (!atomic_load(&h->loop_stop)) {
		MHD_UNSIGNED_LONG_LONG to = 0;
		pthread_mutex_lock(&h->mhd_mu);
		/* At most a second: a timeout that the engine's runs start
		 * (a stream's connection idle again) is kept within one. */
		int ms = MHD_get_timeout(h->d, &to) == MHD_YES ? (to > 1000 ? 1000 : (int)to) : 1000;
		if (ep < 0)
			MHD_run_wait(h->d, ms > 10 ? 10 : ms);
		pthread_mutex_unlock(&h->mhd_mu);
		struct epoll_event got[2];
		bool woken = ep < 0;
		if (ep >= 0) {
			int n = epoll_wait(ep, got, 2, ms);
			for (int i = 0; i < n; i++)
				woken |= got[i].data.u32 == 1;
		}
		uint64_t cnt;
		/* Read only when written: a read of an empty eventfd is a
		 * system call for nothing, on every turn of the loop. */
		if (woken && read(h->wake_fd, &cnt, sizeof(cnt)) < 0) {
			/* EAGAIN: nothing written */
		}
		pthread_mutex_lock(&h->mhd_mu);
		pthread_mutex_lock(&h->wake_mu);
		struct slot *w = h->wakes;
		h->wakes = NULL;
		h->wake_sent = false;
		pthread_mutex_unlock(&h->wake_mu);
		for (; w; w = w->next_wake)
			MHD_resume_connection(w->wake_conn);
		if (atomic_load(&h->quiesce) == 1) {
			h->quiesced_fd = MHD_quiesce_daemon(h->d);
			atomic_store(&h->quiesce, 2);
		}
		MHD_run(h->d);
		pthread_mutex_unlock(&h->mhd_mu);
	}
	if (ep >= 0)
		close(ep);
	return NULL;
}

/* ==== The server ==== */

int http_start(const struct http_opts *o, struct http **out, struct pfx_error *err)
{
	struct http *h = calloc(1, sizeof(*h));
	if (!h) {
		close(o->listen_fd);
		return pfx_errorf(err, -ENOMEM, "out of memory");
	}
	h->o = *o;
	h->started = (int64_t)time(NULL);
	h->watches.next = h->watches.prev = &h->watches;
	h->quiesced_fd = MHD_INVALID_SOCKET;
	pthread_mutex_init(&h->wake_mu, NULL);
	pthread_mutex_init(&h->mhd_mu, NULL);
	pthread_mutex_init(&h->prep_mu, NULL);
	pthread_cond_init(&h->prep_cv, NULL);
	h->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (h->wake_fd < 0) {
		int e = errno;
		close(o->listen_fd);
		http_free(h);
		return pfx_errorf(err, -e, "eventfd: %s", strerror(e));
	}
	pthread_mutex_init(&h->wmu, NULL);
	pthread_cond_init(&h->wcv, NULL);
	pthread_mutex_init(&h->slots_mu, NULL);
	if (o->api_key)
		crypto_generichash(h->key_hash, sizeof(h->key_hash),
				   (const unsigned char *)o->api_key, o->api_key_len, NULL, 0);
	h->o.api_key = o->api_key ? "" : NULL; /* only its hash is kept */
	h->slots = calloc(o->max_conns, sizeof(*h->slots));
	if (!h->slots) {
		close(o->listen_fd);
		http_free(h);
		return pfx_errorf(err, -ENOMEM, "out of memory");
	}
	for (unsigned i = 0; i < o->max_conns; i++) {
		h->slots[i].h = h;
		pthread_mutex_init(&h->slots[i].mu, NULL);
		slot_put(h, &h->slots[i]);
	}
	if (o->per_ip && !(h->ips = calloc(o->max_conns, sizeof(*h->ips)))) {
		close(o->listen_fd);
		http_free(h);
		return pfx_errorf(err, -ENOMEM, "out of memory");
	}
	if (pthread_create(&h->watchdog, NULL, watchdog_main, h)) {
		close(o->listen_fd);
		http_free(h);
		return pfx_errorf(err, -EAGAIN, "cannot start a thread");
	}
	h->watchdog_started = true;
	pthread_setname_np(h->watchdog, "serve-watchdog");
	if (pthread_create(&h->prep, NULL, prep_main, h)) {
		close(o->listen_fd);
		http_free(h);
		return pfx_errorf(err, -EAGAIN, "cannot start a thread");
	}
	h->prep_started = true;
	pthread_setname_np(h->prep, "serve-prep");
	h->d = MHD_start_daemon(
		MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG,
		0, on_accept, h, on_request, h,
		MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h, /* first, or MHD says so */
		MHD_OPTION_LISTEN_SOCKET, (MHD_socket)o->listen_fd,
		MHD_OPTION_CONNECTION_LIMIT, o->max_conns,
		MHD_OPTION_CONNECTION_TIMEOUT, o->timeout_s,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, o->conn_memory,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
		MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
		MHD_OPTION_END);
	if (!h->d) {
		close(o->listen_fd);
		http_free(h);
		return pfx_errorf(err, -EIO, "libmicrohttpd cannot serve on the socket");
	}
	if (pthread_create(&h->loop, NULL, loop_main, h)) {
		http_free(h);
		return pfx_errorf(err, -EAGAIN, "cannot start a thread");
	}
	/* "MHD-" as libmicrohttpd names its own (bench/serve counts them). */
	pthread_setname_np(h->loop, "MHD-loop");
	h->loop_started = true;
	*out = h;
	return 0;
}

void http_ready(struct http *h, struct serve_engine *e, const struct pfx_tokenizer *t,
		const struct api_limits *lim)
{
	h->tok = t;
	h->lim = *lim;
	/* Publishes tok and lim with it: readers load the engine first. */
	atomic_store(&h->engine, e);
}

void http_quiesce(struct http *h)
{
	atomic_store(&h->quiescing, true);
	/* MHD is the loop's: it quiesces there, between two runs. */
	atomic_store(&h->quiesce, 1);
	wake_loop(h);
	while (atomic_load(&h->quiesce) != 2)
		usleep(1000);
	if (h->quiesced_fd != MHD_INVALID_SOCKET)
		close(h->quiesced_fd);
	h->quiesced_fd = MHD_INVALID_SOCKET;
}

bool http_wait_idle(struct http *h, int timeout_ms)
{
	for (int t = 0; atomic_load(&h->inflight) > 0; t += 10) {
		if (t >= timeout_ms)
			return false;
		usleep(10000);
	}
	return true;
}

void http_free(struct http *h)
{
	if (!h)
		return;
	/* The prep thread first: MHD_stop_daemon frees the requests it may
	 * hold (those still queued are only freed there, not run). */
	if (h->prep_started) {
		pthread_mutex_lock(&h->prep_mu);
		h->prep_stop = true;
		pthread_cond_signal(&h->prep_cv);
		pthread_mutex_unlock(&h->prep_mu);
		pthread_join(h->prep, NULL);
	}
	if (h->loop_started) {
		atomic_store(&h->loop_stop, true);
		wake_loop(h);
		pthread_join(h->loop, NULL);
	}
	if (h->d)
		MHD_stop_daemon(h->d);
	if (h->wake_fd >= 0)
		close(h->wake_fd);
	pthread_mutex_destroy(&h->wake_mu);
	pthread_mutex_destroy(&h->mhd_mu);
	pthread_mutex_destroy(&h->prep_mu);
	pthread_cond_destroy(&h->prep_cv);
	if (h->watchdog_started) {
		pthread_mutex_lock(&h->wmu);
		h->wstop = true;
		pthread_cond_signal(&h->wcv);
		pthread_mutex_unlock(&h->wmu);
		pthread_join(h->watchdog, NULL);
	}
	if (h->slots)
		for (unsigned i = 0; i < h->o.max_conns; i++)
			pthread_mutex_destroy(&h->slots[i].mu);
	free(h->slots);
	free(h->ips);
	pthread_mutex_destroy(&h->slots_mu);
	pthread_mutex_destroy(&h->wmu);
	pthread_cond_destroy(&h->wcv);
	free(h);
}
