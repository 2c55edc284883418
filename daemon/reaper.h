/* SPDX-License-Identifier: MIT */
/*
 * Closes descriptors that clients sent. close() can block on what a peer
 * controls (a TCP socket lingering on unsent data, a FUSE file's flush, a
 * Unix socket whose queue holds such descriptors), so a worker never closes
 * a client's descriptor itself: one reaper thread does.
 *
 * One user cannot make the daemon hold without bound what the reaper has
 * yet to close: past REAPER_USER_MAX descriptors of one uid waiting, that
 * user's connections are closed and new ones refused (reaper_over) until
 * the reaper catches up.
 */
#ifndef PD_REAPER_H
#define PD_REAPER_H

#include <stdbool.h>
#include <sys/types.h>

/* Descriptors of one user the reaper may hold before that user is cut off. */
#define REAPER_USER_MAX 64

int reaper_start(void);
/* Closes whatever is queued, then stops. */
void reaper_stop(void);
/* Queues fd, which uid sent, for closing (closes it at once when the
 * reaper is not running). */
void reaper_close(int fd, uid_t uid);
/* The same, for a pd_recv_some that got more descriptors than it keeps:
 * ctx points to the sender's uid_t. */
void reaper_take(void *ctx, int fd);
/* Whether uid has more than REAPER_USER_MAX descriptors waiting. */
bool reaper_over(uid_t uid);
/*
 * Closes the socket of a connection from uid without blocking the caller:
 * no more may arrive on it (shutdown), the descriptors still queued on it
 * go to the reaper, and the socket is closed at once; or, when more is
 * queued than a few reads take, the socket goes to the reaper whole.
 */
void reaper_close_conn(int fd, uid_t uid);

#endif
