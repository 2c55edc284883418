/* SPDX-License-Identifier: MIT */
/*
 * One connection. Input is read in two steps, header then body, so nothing
 * is allocated for a body before its header validated; a reply is queued
 * whole and nothing more is read until it is sent (one request at a time
 * per connection keeps a slow reader from making the daemon buffer).
 *
 * Errors the peer can act on are replies with a status and a message; only
 * a frame that cannot be parsed closes the connection, since nothing after
 * it can be trusted to be in sync. The requests themselves are in
 * request.c and admin.c.
 */
#include "peer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "reaper.h"
#include "sock.h"

uint64_t conn_now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static void give_back(struct daemon *d, uid_t uid, int refused)
{
	if (refused)
		admission_told(&d->adm);
	else
		admission_leave(&d->adm, uid);
}

struct conn *conn_new(struct daemon *d, int fd, const struct ucred *cred, int refused)
{
	struct conn *c = calloc(1, sizeof(*c));
	if (!c) {
		reaper_close_conn(fd, cred->uid);
		give_back(d, cred->uid, refused);
		return NULL;
	}
	c->d = d;
	c->fd = fd;
	c->cred = *cred;
	c->refused = refused;
	c->since_ms = conn_now_ms();
	flight_conn_init(&c->fl, cred->uid);
	atomic_fetch_add(&d->connections, 1);
	return c;
}

void conn_close_fds(int *fds, int *n)
{
	for (int i = 0; i < *n; i++)
		close(fds[i]);
	*n = 0;
}

/* Descriptors a client sent: their close may block (reaper.h). */
static void drop_client_fds(struct conn *c)
{
	for (int i = 0; i < c->nfds; i++)
		reaper_close(c->fds[i], c->cred.uid);
	c->nfds = 0;
}

void conn_free(struct conn *c)
{
	if (!c)
		return;
	/* Before its groups go: its claims pass to its waiters. */
	flight_conn_close(c->d->flight, &c->fl);
	req_end(c);
	drop_client_fds(c);
	conn_close_fds(c->out_fds, &c->out_nfds);
	free(c->leases);
	free(c->sent);
	pd_buf_free(&c->body_buf);
	pd_buf_free(&c->out_buf);
	admission_body_give(&c->d->adm, c->body_charged);
	reaper_close_conn(c->fd, c->cred.uid);
	give_back(c->d, c->cred.uid, c->refused);
	atomic_fetch_sub(&c->d->connections, 1);
	free(c);
}

int conn_fd(const struct conn *c) { return c->fd; }

bool conn_output_pending(const struct conn *c) { return c->out != NULL; }

void conn_set_wake_fd(struct conn *c, int fd) { c->fl.wake_fd = fd; }

bool conn_parked(const struct conn *c) { return c->parked; }

uint64_t conn_wake_at(const struct conn *c)
{
	/* Acquire: pairs with the waker's release (flight.c). */
	return atomic_load_explicit(&c->fl.woken, memory_order_acquire) ? 0 : c->wake_at_ms;
}

const char *conn_expired(const struct conn *c, uint64_t now_ms)
{
	uint64_t idle = c->d->idle_timeout_ms;
	if (c->parked)
		return NULL; /* its wait_ms bounds it */
	if (c->served && !c->out && !c->hdr_got)
		/* Between requests: only an idle timeout, and never while the
		 * client holds leases (it reads their blocks). */
		return idle && !c->nleases && now_ms - c->since_ms > idle ? "held no lease and was idle"
									  : NULL;
	if (now_ms - c->since_ms <= c->d->request_timeout_ms)
		return NULL;
	if (c->out)
		return "did not take its reply";
	return c->hdr_got ? "did not send the rest of its request" : "sent no request";
}

/* ==== Replies ==== */

uint8_t *conn_reply(struct conn *c, int status, size_t body_len)
{
	if ((c->out = pd_buf_reserve(&c->out_buf, PD_HDR_SIZE + body_len)) == NULL)
		return NULL;
	struct pd_hdr h = { PD_MAGIC, PD_VERSION, c->h.op, PD_FLAG_REPLY, (uint32_t)status,
			    c->h.opaque, (uint32_t)body_len };
	pd_hdr_encode(&h, c->out);
	c->out_len = PD_HDR_SIZE + body_len;
	c->out_pos = 0;
	return c->out + PD_HDR_SIZE;
}

static const char *const op_names[] = { "?", "HELLO", "MATCH", "RELEASE", "PUBLISH", "STATS",
					 "LIST", "EVICT", "PIN", "UNPIN", "EXPORT", "IMPORT" };
_Static_assert(sizeof(op_names) / sizeof(op_names[0]) == PD_OP_MAX + 1, "a name per op");

static int vfail(struct conn *c, int status, bool log, const char *fmt, va_list ap)
{
	char msg[PD_MAX_MESSAGE + 1];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	atomic_fetch_add(&c->d->errors, 1);
	/* A client can repeat a bad request at will: at most a line a second. */
	static struct pd_log_limit refused;
	if (log)
		pd_log_limited(&refused, "pid %d uid %u: %s: %s: %s", (int)c->cred.pid,
			       (unsigned)c->cred.uid, op_names[c->h.op], pd_status_str(status), msg);
	size_t n = 4 + strlen(msg);
	uint8_t *b = conn_reply(c, status, n);
	if (!b)
		return -1;
	pd_error_encode(msg, b, n);
	return 0;
}

/* Logged with the peer, so an operator can see who was refused and why. */
int conn_fail(struct conn *c, int status, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = vfail(c, status, true, fmt, ap);
	va_end(ap);
	return rc;
}

int conn_fail_quiet(struct conn *c, int status, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = vfail(c, status, false, fmt, ap);
	va_end(ap);
	return rc;
}

const char *conn_decode_error(int rc)
{
	return rc == PD_E_LIMIT ? "a count is over the protocol's limit"
				: "the body does not decode (short, trailing bytes or bad values)";
}

static int handle(struct conn *c)
{
	if (c->h.version != PD_VERSION)
		return conn_fail(c, PD_E_VERSION, "frame of protocol version %u; this daemon speaks %d",
			    c->h.version, PD_VERSION);
	switch (c->h.op) {
	case PD_OP_HELLO: return req_hello(c);
	case PD_OP_MATCH: return req_match(c);
	case PD_OP_RELEASE: return req_release(c);
	case PD_OP_PUBLISH: return req_publish(c);
	case PD_OP_STATS: return admin_stats(c);
	case PD_OP_LIST: return admin_list(c);
	case PD_OP_EVICT: return admin_evict(c);
	case PD_OP_PIN: return admin_pin(c);
	case PD_OP_UNPIN: return admin_unpin(c);
	case PD_OP_EXPORT: return admin_export(c);
	case PD_OP_IMPORT: return admin_import(c);
	}
	return -1; /* pd_hdr_decode admits no other op */
}

/* ==== Socket I/O ==== */

int conn_on_output(struct conn *c)
{
	while (c->out_pos < c->out_len) {
		struct iovec iov = { c->out + c->out_pos, c->out_len - c->out_pos };
		ssize_t w = pd_send_some(c->fd, &iov, 1, c->out_fds, c->out_nfds);
		if (w == -EAGAIN)
			return 0;
		if (w < 0)
			return -1;
		conn_close_fds(c->out_fds, &c->out_nfds);
		c->out_pos += (size_t)w;
	}
	c->out = NULL;
	pd_buf_trim(&c->out_buf);
	return c->close_after_reply ? -1 : 0;
}

/* Reads into buf[*got .. want). 1 when complete, 0 for later, -1 to close. */
static int read_part(struct conn *c, uint8_t *buf, size_t want, size_t *got)
{
	/* Descriptors past what a request may carry go to the reaper, not
	 * closed here: a peer can make a close block (reaper.h). */
	ssize_t r = pd_recv_some_to(c->fd, buf + *got, want - *got, 0, c->fds, &c->nfds,
				    reaper_take, &c->cred.uid);
	if (r == -EAGAIN)
		return 0;
	if (r <= 0)
		return -1;
	*got += (size_t)r;
	return *got == want;
}

/* Before HELLO only small requests (HELLO and the admin ones) make sense:
 * a stranger reserves no more than this. */
#define PRE_HELLO_BODY 4096

static bool too_large(const struct conn *c)
{
	return !c->group && c->h.body_len > PRE_HELLO_BODY;
}

/* Answers a request it will not read: the body cannot be skipped, so the
 * connection closes after the reply. */
static int refuse(struct conn *c)
{
	static struct pd_log_limit refusals;
	c->close_after_reply = true;
	int rc;
	if (c->refused) {
		pd_log_limited(&refusals, "pid %d uid %u: refused: %s", (int)c->cred.pid,
			       (unsigned)c->cred.uid,
			       c->refused == -EUSERS ? "too many connections of this user"
						     : "too many connections");
		rc = c->refused == -EUSERS
			     ? conn_fail_quiet(c, PD_E_LIMIT, "this user has %u connections to prefixd already, the most one user may have (prefixd --max-user-connections): close some",
					       c->d->adm.max_user_conns)
			     : conn_fail_quiet(c, PD_E_LIMIT, "prefixd serves %u connections already, the most it takes (prefixd --max-connections): try again later",
					       c->d->adm.max_conns);
	} else {
		rc = conn_fail(c, PD_E_LIMIT, "a body of %u bytes before HELLO (at most %u)",
			       c->h.body_len, PRE_HELLO_BODY);
	}
	return rc ? -1 : conn_on_output(c);
}

static int finish(struct conn *c, int rc);

int conn_on_input(struct conn *c)
{
	int rc;
	if (reaper_over(c->cred.uid)) {
		/* Read nothing more from a user whose descriptors the reaper
		 * cannot keep up with: every read may bring more. */
		static struct pd_log_limit cut;
		pd_log_limited(&cut, "pid %d uid %u: more than %d descriptors it sent wait to be closed (a close that blocks: a lingering socket, say); closing its connection",
			       (int)c->cred.pid, (unsigned)c->cred.uid, REAPER_USER_MAX);
		atomic_fetch_add(&c->d->errors, 1);
		return -1;
	}
	if (c->hdr_got < PD_HDR_SIZE) {
		size_t had = c->hdr_got;
		rc = read_part(c, c->hdr, PD_HDR_SIZE, &c->hdr_got);
		if (!had && c->hdr_got)
			c->since_ms = conn_now_ms(); /* a frame started */
		if (rc <= 0)
			return rc;
		rc = pd_hdr_decode(c->hdr, &c->h);
		if (!rc && (c->refused || too_large(c)))
			return refuse(c);
		if (rc == PD_E_LIMIT) {
			/* The body cannot be skipped: answer, then close. */
			c->close_after_reply = true;
			if (conn_fail(c, PD_E_LIMIT, "a body of %u bytes is over the limit of %u",
				 c->h.body_len, PD_MAX_BODY))
				return -1;
			return conn_on_output(c);
		}
		bool oneway = c->h.flags & PD_FLAG_NOREPLY;
		if (rc || (c->h.flags & PD_FLAG_REPLY) || c->h.status ||
		    (oneway && c->h.op != PD_OP_RELEASE) ||
		    ((c->h.flags & PD_FLAG_LEASE) && c->h.op != PD_OP_PUBLISH) ||
		    ((c->h.flags & PD_FLAG_SHARED) && c->h.op != PD_OP_HELLO) ||
		    ((c->h.flags & PD_FLAG_FLIGHT) && c->h.op != PD_OP_MATCH)) {
			static struct pd_log_limit malformed;
			atomic_fetch_add(&c->d->errors, 1);
			pd_log_limited(&malformed, "pid %d uid %u: malformed frame header; closing the connection",
				       (int)c->cred.pid, (unsigned)c->cred.uid);
			return -1;
		}
		c->body_got = 0;
		/* A body the connection's kept buffer holds is bounded by the
		 * connection limits already; larger ones draw on the daemon's
		 * request memory. */
		uint64_t charge = c->h.body_len > PD_BUF_KEEP ? c->h.body_len : 0;
		if (charge && admission_body_take(&c->d->adm, charge)) {
			static struct pd_log_limit busy;
			pd_log_limited(&busy, "request memory full (--request-memory %llu bytes): refusing a body of %u bytes",
				       (unsigned long long)c->d->adm.body_limit, c->h.body_len);
			c->close_after_reply = true;
			if (conn_fail_quiet(c, PD_E_LIMIT, "the daemon's memory for requests (--request-memory) is taken by others: try again"))
				return -1;
			return conn_on_output(c);
		}
		c->body_charged = charge;
		if (c->h.body_len &&
		    !(c->body = pd_buf_reserve(&c->body_buf, c->h.body_len)))
			return -1;
	}
	/* PUBLISH, EXPORT and IMPORT take a descriptor, no other request
	 * does: hold no more than that while a body is coming, or a few slow
	 * clients could exhaust the daemon's. */
	int takes = c->h.op == PD_OP_PUBLISH || c->h.op == PD_OP_EXPORT || c->h.op == PD_OP_IMPORT;
	if (c->nfds > takes) {
		for (int i = takes; i < c->nfds; i++)
			reaper_close(c->fds[i], c->cred.uid);
		c->nfds = takes;
		c->extra_fds = true;
	}
	if (c->body_got < c->h.body_len &&
	    (rc = read_part(c, c->body, c->h.body_len, &c->body_got)) <= 0)
		return rc;
	return finish(c, handle(c));
}

int conn_resume(struct conn *c)
{
	c->parked = false;
	int rc = req_match(c);
	return c->parked ? 0 : finish(c, rc);
}

/* The request is answered (rc: handle's): ready for the next. */
static int finish(struct conn *c, int rc)
{
	if (c->parked)
		return 0; /* answered later: the request stays */
	c->served = true;
	c->since_ms = conn_now_ms(); /* its reply's deadline, or idle from here */
	c->extra_fds = false;
	c->body = NULL;
	pd_buf_trim(&c->body_buf);
	if (c->body_charged)
		admission_body_give(&c->d->adm, c->body_charged);
	c->body_charged = 0;
	c->hdr_got = 0;
	drop_client_fds(c);
	if (c->h.flags & PD_FLAG_NOREPLY) {
		/* One-way: an error was logged and counted by conn_fail(). */
		c->out = NULL;
		c->out_len = c->out_pos = 0;
		conn_close_fds(c->out_fds, &c->out_nfds);
	}
	return rc ? rc : conn_on_output(c);
}
