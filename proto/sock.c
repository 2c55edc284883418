/* SPDX-License-Identifier: MIT */
/* Blocking frame I/O over Unix sockets, descriptors included. */
#include "sock.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int send_all(int sock, const uint8_t *p, size_t n, const int *fds, int nfds)
{
	char cbuf[CMSG_SPACE(sizeof(int) * PD_MAX_FDS)];
	while (n) {
		struct iovec iov = { (void *)p, n };
		struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
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
		ssize_t w = sendmsg(sock, &msg, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		nfds = 0; /* descriptors travel once, with the first bytes */
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

int pd_send(int sock, const struct pd_hdr *h, const uint8_t *body, const int *fds, int nfds)
{
	if (nfds < 0 || nfds > PD_MAX_FDS || h->body_len > PD_MAX_BODY)
		return -EINVAL;
	uint8_t hdr[PD_HDR_SIZE];
	pd_hdr_encode(h, hdr);
	int rc = send_all(sock, hdr, PD_HDR_SIZE, fds, nfds);
	return rc ? rc : send_all(sock, body, h->body_len, NULL, 0);
}

/* Reads exactly n bytes, collecting descriptors that arrive on the way. */
static int recv_all(int sock, uint8_t *p, size_t n, int *fds, int *nfds)
{
	char cbuf[CMSG_SPACE(sizeof(int) * PD_MAX_FDS * 2)];
	while (n) {
		struct iovec iov = { p, n };
		struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
				      .msg_controllen = sizeof(cbuf) };
		ssize_t r = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			int n_in = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			for (int i = 0; i < n_in; i++) {
				int fd;
				memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				if (fds && *nfds < PD_MAX_FDS)
					fds[(*nfds)++] = fd;
				else
					close(fd); /* more than the protocol allows */
			}
		}
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
