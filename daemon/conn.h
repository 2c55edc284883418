/* SPDX-License-Identifier: MIT */
/*
 * One client connection: reads frames from a non-blocking socket, answers
 * each request, and holds the connection's leases and the set of arenas
 * already sent to it. Owned by one worker thread.
 */
#ifndef PD_CONN_H
#define PD_CONN_H

#include <stdbool.h>
#include <sys/socket.h>

#include "daemon.h"

struct conn;

/* Takes ownership of fd. refused: admission_enter's refusal (0: admitted),
 * told to the peer at its first request. NULL when out of memory (fd is
 * then closed, and the admission given back). */
struct conn *conn_new(struct daemon *d, int fd, const struct ucred *cred, int refused);
/* Releases every lease the connection holds and closes its socket. */
void conn_free(struct conn *c);
int conn_fd(const struct conn *c);

/* Reads what the socket has and answers a complete request. Returns 0 to
 * keep the connection, -1 to close it (end of stream, malformed frame). */
int conn_on_input(struct conn *c);
/* A MATCH that waits (single flight) parks its connection: no reply yet,
 * nothing read; watch it for hang-up only, and conn_resume it once its
 * conn_wake_at (monotonic ms; 0: woken now) has come. */
bool conn_parked(const struct conn *c);
uint64_t conn_wake_at(const struct conn *c);
/* Runs the parked MATCH again: 0 (answered, or parked anew) or -1. */
int conn_resume(struct conn *c);
/* The eventfd of the connection's worker, which single flight writes to
 * wake it. */
void conn_set_wake_fd(struct conn *c, int fd);
/* Sends what is left of a reply. 0 or -1 as above. */
int conn_on_output(struct conn *c);
/* A reply is waiting to be sent: read nothing until it is. */
bool conn_output_pending(const struct conn *c);
/* Why the connection must close at now_ms (monotonic): a frame or a reply
 * not done within the request timeout, or no first request; else NULL. */
const char *conn_expired(const struct conn *c, uint64_t now_ms);
uint64_t conn_now_ms(void);

#endif
