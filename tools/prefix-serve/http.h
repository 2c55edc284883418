/* SPDX-License-Identifier: MIT */
/*
 * prefix-serve's HTTP side (libmicrohttpd on one thread of ours): the
 * routes, authentication, request bodies, and responses pulled as the
 * socket drains. It listens before the model loads (GET /health says 503
 * until http_ready) and hands completions to the engine.
 */
#ifndef SERVE_HTTP_H
#define SERVE_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include "api.h"
#include "engine.h"
#include "metrics.h"

struct http_opts {
	int listen_fd;             /* listening, non-blocking: the server's after start */
	const char *model_name;    /* reported in responses and /v1/models */
	const char *api_key;       /* NULL: no authentication */
	size_t api_key_len;
	unsigned max_conns;        /* connections at once */
	unsigned per_ip;           /* connections at once from one address (0: any);
				    * counted here, MHD's own limit does nothing in
				    * Debian 12's build */
	unsigned timeout_s;        /* idle time, and the time a request has to arrive whole */
	size_t max_body;           /* bytes of a request body */
	size_t conn_memory;        /* per connection: headers beyond it are refused (431) */
	struct metrics *metrics;
};

struct http;

/* Starts serving on o->listen_fd (closed on failure too). 0, or -errno
 * with err. */
int http_start(const struct http_opts *o, struct http **out, struct pfx_error *err);
/* The model is loaded and the engine runs: completions are served, and
 * GET /health says 200. e, t and lim must outlive http_free. */
void http_ready(struct http *h, struct serve_engine *e, const struct pfx_tokenizer *t,
		const struct api_limits *lim);
/* The engine's `notified` hook (arg: the struct http): resumes the
 * streams its notifies woke, with one wake-up of the HTTP thread. */
void http_notified(void *arg);
/* Stops accepting connections (those open are served; /health says 503). */
void http_quiesce(struct http *h);
/* Waits until no request is in flight (their responses sent), up to
 * timeout_ms. Whether none is. */
bool http_wait_idle(struct http *h, int timeout_ms);
/* Closes every connection and frees h. The engine must be stopped first
 * (no notify may come any more). NULL is fine. */
void http_free(struct http *h);

#endif
