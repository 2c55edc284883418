/* SPDX-License-Identifier: MIT */
/* Blocking frame I/O over Unix sockets, descriptors included. */
#include "sock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

ssize_t pd_send_some(int sock, const struct iovec *iov, int iovcnt, const int *fds, int nfds)
{
	char cbuf[CMSG_SPACE(sizeof(int) * PD_MAX_FDS)];
	struct msghdr msg = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt };
	if (nfds) {
		memset(cbuf, 0, sizeof(cbuf));
		msg.msg_control = cbuf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	ssize_t w;
	while ((w = sendmsg(sock, &msg, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	return w < 0 ? -errno : w;
}

/* Drops the first n bytes of an iovec array in place. */
static int iov_advance(struct iovec *iov, int iovcnt, size_t n)
{
	int i = 0;
	while (i < iovcnt && n >= iov[i].iov_len)
		n -= iov[i++].iov_len;
	for (int j = i; j < iovcnt; j++)
		iov[j - i] = iov[j];
	if (i < iovcnt) {
		iov[0].iov_base = (char *)iov[0].iov_base + n;
		iov[0].iov_len -= n;
	}
	return iovcnt - i;
}

int pd_send(int sock, const struct pd_hdr *h, const uint8_t *body, const int *fds, int nfds)
{
	if (nfds < 0 || nfds > PD_MAX_FDS || h->body_len > PD_MAX_BODY)
		return -EINVAL;
	uint8_t hdr[PD_HDR_SIZE];
	pd_hdr_encode(h, hdr);
	struct iovec iov[2] = { { hdr, PD_HDR_SIZE }, { (void *)body, h->body_len } };
	int n = h->body_len ? 2 : 1;
	while (n) {
		ssize_t w = pd_send_some(sock, iov, n, fds, nfds);
		if (w < 0)
			return (int)w;
		nfds = 0; /* descriptors travel once, with the first bytes */
		n = iov_advance(iov, n, (size_t)w);
	}
	return 0;
}

ssize_t pd_recv_some_to(int sock, void *buf, size_t n, int flags, int *fds, int *nfds,
			void (*extra)(void *ctx, int fd), void *ctx)
{
	/* Room for all a message can carry: with less, the kernel would drop
	 * the rest itself, in this thread, where a close may block. */
	union {
		char buf[CMSG_SPACE(sizeof(int) * PD_RECV_FDS_MAX)];
		struct cmsghdr align;
	} cbuf;
	struct iovec iov = { buf, n };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.buf,
			      .msg_controllen = sizeof(cbuf.buf) };
	ssize_t r;
	while ((r = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | flags)) < 0 && errno == EINTR)
		;
	if (r < 0)
		return -errno;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int n_in = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (int i = 0; i < n_in; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (fds && *nfds < PD_MAX_FDS)
				fds[(*nfds)++] = fd;
			else if (extra)
				extra(ctx, fd); /* more than the protocol allows */
			else
				close(fd);
		}
	}
	return r;
}

ssize_t pd_recv_some(int sock, void *buf, size_t n, int *fds, int *nfds)
{
	return pd_recv_some_to(sock, buf, n, 0, fds, nfds, NULL, NULL);
}

/* Reads exactly n bytes, collecting descriptors that arrive on the way. */
static int recv_all(int sock, uint8_t *p, size_t n, int *fds, int *nfds)
{
	while (n) {
		ssize_t r = pd_recv_some(sock, p, n, fds, nfds);
		if (r < 0)
			return (int)r;
		if (r == 0)
			return -ECONNRESET;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

int pd_recv(int sock, struct pd_hdr *h, uint8_t **body, int *fds, int *nfds)
{
	uint8_t hdr[PD_HDR_SIZE];
	int got = 0, rc;
	*body = NULL;
	if ((rc = recv_all(sock, hdr, PD_HDR_SIZE, fds, &got)))
		goto fail;
	rc = pd_hdr_decode(hdr, h);
	if (rc) {
		rc = rc == PD_E_LIMIT ? -EMSGSIZE : -EPROTO;
		goto fail;
	}
	if (h->body_len) {
		*body = malloc(h->body_len);
		if (!*body) {
			rc = -ENOMEM;
			goto fail;
		}
		if ((rc = recv_all(sock, *body, h->body_len, fds, &got)))
			goto fail;
	}
	if (nfds)
		*nfds = got;
	return 0;
fail:
	free(*body);
	*body = NULL;
	for (int i = 0; i < got; i++)
		close(fds[i]);
	if (nfds)
		*nfds = 0;
	return rc;
}

int pd_default_socket(char *buf, size_t cap)
{
	const char *env = getenv("PREFIXD_SOCKET"), *dir = getenv("XDG_RUNTIME_DIR");
	int n = env && *env ? snprintf(buf, cap, "%s", env)
			    : snprintf(buf, cap, "%s/prefixd.sock", dir && *dir ? dir : "/run");
	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}
