/* SPDX-License-Identifier: MIT */
/*
 * Frames over a Unix stream socket, with descriptors as SCM_RIGHTS. Blocking
 * calls, for the client library and tests; the daemon's event loops parse
 * the same frames from their own buffers.
 */
#ifndef PD_SOCK_H
#define PD_SOCK_H

#include <stdint.h>

#include "wire.h"

/* Sends header + body, and nfds (<= PD_MAX_FDS) descriptors with the first
 * byte. Retries on EINTR and short writes. 0 or -errno. */
int pd_send(int sock, const struct pd_hdr *h, const uint8_t *body, const int *fds, int nfds);

/*
 * Receives one frame. The header is validated before the body is read (and
 * before anything is allocated for it); *body is malloc'd (free it), NULL
 * for an empty body. Descriptors that came with the frame go to fds (at
 * most PD_MAX_FDS; any beyond are closed). Returns 0, -ECONNRESET at end of
 * stream, -EPROTO for a malformed header, -EMSGSIZE for a body over the
 * limit, or -errno.
 */
int pd_recv(int sock, struct pd_hdr *h, uint8_t **body, int *fds, int *nfds);

#endif
