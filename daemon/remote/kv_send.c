/* SPDX-License-Identifier: MIT */
#include "kv_send.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

/* Values smaller than this are copied: an iovec each would cost more. */
#define REF_MIN 4096u

void kv_send_init(struct kv_send *s, int fd, struct kv_clock *clk)
{
	memset(s, 0, sizeof(*s));
	s->fd = fd;
	s->clk = clk;
}

static int write_all(struct kv_send *s)
{
	struct iovec iov[KV_SEND_SEGS];
	int n = s->n_seg, at = 0;
	for (int i = 0; i < n; i++) {
		iov[i].iov_base = (void *)(s->seg[i].p ? s->seg[i].p : s->copy + s->seg[i].off);
		iov[i].iov_len = s->seg[i].len;
	}
	while (at < n) {
		struct msghdr m = { .msg_iov = iov + at, .msg_iovlen = (size_t)(n - at) };
		/* MSG_NOSIGNAL: a node gone is an error, not a SIGPIPE. */
		ssize_t w = sendmsg(s->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (w < 0) {
			int rc = 0;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				rc = kv_wait_fd(s->fd, POLLOUT, s->clk);
			else if (errno != EINTR)
				rc = -ECONNREFUSED;
			if (rc)
				return rc;
			continue;
		}
		s->clk->moved_ns = kv_now_ns();
		size_t left = (size_t)w;
		while (at < n && left >= iov[at].iov_len)
			left -= iov[at++].iov_len;
		if (at < n) {
			iov[at].iov_base = (char *)iov[at].iov_base + left;
			iov[at].iov_len -= left;
		}
	}
	s->n_seg = 0;
	s->copy_len = 0;
	return 0;
}

static void flush_if_full(struct kv_send *s)
{
	if (!s->rc && s->n_seg == KV_SEND_SEGS)
		s->rc = write_all(s);
}

static void copy(struct kv_send *s, const void *p, size_t len)
{
	if (s->rc || !len)
		return;
	if (s->copy_cap - s->copy_len < len) {
		size_t cap = s->copy_cap ? s->copy_cap : 4096;
		while (cap - s->copy_len < len)
			cap *= 2;
		char *c = realloc(s->copy, cap);
		if (!c) {
			s->rc = -ENOMEM;
			return;
		}
		s->copy = c;
		s->copy_cap = cap;
	}
	memcpy(s->copy + s->copy_len, p, len);
	/* Offsets, not pointers, into copy: it moves as it grows. */
	struct kv_seg *last = s->n_seg ? &s->seg[s->n_seg - 1] : NULL;
	if (last && !last->p && last->off + last->len == s->copy_len) {
		last->len += len;
	} else {
		s->seg[s->n_seg++] = (struct kv_seg){ .off = s->copy_len, .len = len };
	}
	s->copy_len += len;
	flush_if_full(s);
}

static void ref(struct kv_send *s, const void *p, size_t len)
{
	if (s->rc)
		return;
	s->seg[s->n_seg++] = (struct kv_seg){ .p = p, .len = len };
	flush_if_full(s);
}

void kv_send_array(struct kv_send *s, unsigned n)
{
	char h[16];
	int l = snprintf(h, sizeof(h), "*%u\r\n", n);
	copy(s, h, (size_t)l);
}

void kv_send_arg(struct kv_send *s, const void *p, size_t len)
{
	char h[32];
	int l = snprintf(h, sizeof(h), "$%zu\r\n", len);
	copy(s, h, (size_t)l);
	if (len >= REF_MIN)
		ref(s, p, len);
	else
		copy(s, p, len);
	copy(s, "\r\n", 2);
}

int kv_send_finish(struct kv_send *s)
{
	int rc = s->rc;
	if (!rc && s->n_seg)
		rc = write_all(s);
	free(s->copy);
	s->copy = NULL;
	return rc;
}
