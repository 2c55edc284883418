/* SPDX-License-Identifier: MIT */
/*
 * Closes descriptors that clients sent. close() can block on what a peer
 * controls (a socket lingering on a full queue, a FUSE file's flush), so a
 * worker never closes a client's descriptor itself: one reaper thread does.
 */
#ifndef PD_REAPER_H
#define PD_REAPER_H

int reaper_start(void);
/* Closes whatever is queued, then stops. */
void reaper_stop(void);
/* Queues fd for closing (closes it at once when the reaper is not running). */
void reaper_close(int fd);

#endif
