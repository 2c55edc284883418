/* SPDX-License-Identifier: MIT */
/*
 * Frames over a Unix stream socket, with descriptors as SCM_RIGHTS. Blocking
 * calls, for the client library and tests; the daemon's event loops parse
 * the same frames from their own buffers.
 */
#ifndef PD_SOCK_H
#define PD_SOCK_H

#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

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

/* One sendmsg (the daemon's non-blocking replies): bytes written or
 * -errno; the descriptors go with the first byte. */
ssize_t pd_send_some(int sock, const struct iovec *iov, int iovcnt, const int *fds, int nfds);
/* The most descriptors one message can carry (Linux's SCM_MAX_FD). */
#define PD_RECV_FDS_MAX 253

/* One recvmsg: bytes read (0 at end of stream) or -errno. Descriptors that
 * came with them are appended to fds while *nfds < PD_MAX_FDS; the rest
 * are closed. */
ssize_t pd_recv_some(int sock, void *buf, size_t n, int *fds, int *nfds);
/* pd_recv_some with recvmsg flags, where the descriptors fds has no room
 * for (all of them when fds is NULL) go to extra(ctx, fd), whose to close:
 * the daemon's reaper, since a peer can make a close block. Every
 * descriptor a message carries is received, none dropped by the kernel. */
ssize_t pd_recv_some_to(int sock, void *buf, size_t n, int flags, int *fds, int *nfds,
			void (*extra)(void *ctx, int fd), void *ctx);

/* The daemon's default socket: $PREFIXD_SOCKET (a system daemon's, say),
 * else $XDG_RUNTIME_DIR/prefixd.sock, else /run/prefixd.sock. Returns 0,
 * or -ENAMETOOLONG. */
int pd_default_socket(char *buf, size_t cap);

#endif
