/* SPDX-License-Identifier: MIT */
/*
 * A prefix-serve process for one test or benchmark, and a small HTTP/1.1
 * client to talk to it (one request a connection, Connection: close).
 * Plain C, no Criterion, so benchmarks use it too.
 */
#ifndef PFX_SERVE_UTIL_H
#define PFX_SERVE_UTIL_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

struct serve_proc {
	pid_t pid;
	int port;
	char log[PATH_MAX + 16]; /* its stderr */
};

/* Starts PREFIX_SERVE with args (NULL-terminated, 40 at most; --port is the
 * caller's: "0" picks one) and its stderr in log, and waits for its
 * "listening on HOST:PORT" line: p->port. 0, or -1 with the reason (and
 * the log) on stderr. */
int sp_start(struct serve_proc *p, const char *log, const char *const *args);
/* Waits until GET /health answers 200 (the model loaded), up to
 * timeout_ms. 0 or -1. */
int sp_wait_healthy(const struct serve_proc *p, int timeout_ms);
/* SIGTERM, then the exit status (128 + signal when killed); the log is
 * printed when it is not 0. */
int sp_stop(struct serve_proc *p);

/* Connects to 127.0.0.1:port with recv_timeout_ms as the socket's receive
 * timeout (0: none, a recv may wait forever); the descriptor or -1. */
int sp_connect(int port, int recv_timeout_ms);
/* Sends all of buf; 0 or -1. */
int sp_send(int fd, const char *buf, size_t len);
/* Everything received until the peer closes, an error or the receive
 * timeout: malloc'd, NUL-terminated (NULL: out of memory). */
char *sp_recv_all(int fd);
/* The status of a response's "HTTP/1.x NNN" line, -1 without one. */
int sp_status(const char *response);
/* sp_http's receive timeout: a server silent that long failed. */
#define SP_HTTP_TIMEOUT_MS 60000
/* One request: method, path, extra header lines (each ending in "\r\n",
 * may be NULL) and a body (NULL: none; with Content-Type: application/json).
 * The status (-1 when the exchange failed), and in *response (malloc'd,
 * NUL-terminated, may be NULL) all the server sent, headers included;
 * sp_body finds the body in it (a chunked one is left as sent). A server
 * that answers before the body is all sent (413) and closes is still
 * heard. */
int sp_http(int port, const char *method, const char *path, const char *headers,
	    const char *body, char **response);
const char *sp_body(const char *response);

#endif
