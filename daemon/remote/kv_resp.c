/* SPDX-License-Identifier: MIT */
#include "kv_resp.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>

#define READ_MIN (256u << 10) /* room asked of each read(2) */
/* A buffer up to this size is kept for the next call: growing one again
 * (fresh pages, realloc's copies) halves the throughput of large fetches. */
#define KEEP_MAX (64u << 20)
#define LINE_MAX_LEN 65536u   /* a status or an error line */
#define BULK_MAX (1ull << 40) /* no value is this large: a stream out of step */

void kv_rbuf_reset(struct kv_rbuf *b)
{
	if (b->cap > KEEP_MAX)
		kv_rbuf_free(b);
	b->end = b->pos = 0;
}

void kv_rbuf_free(struct kv_rbuf *b)
{
	free(b->buf);
	*b = (struct kv_rbuf){ 0 };
}

void kv_rbuf_compact(struct kv_rbuf *b)
{
	if (!b->pos)
		return;
	memmove(b->buf, b->buf + b->pos, b->end - b->pos);
	b->end -= b->pos;
	b->pos = 0;
}

/* Room for at least want more bytes after end. */
static int reserve(struct kv_rbuf *b, size_t want)
{
	if (b->cap - b->end >= want)
		return 0;
	size_t cap = b->cap ? b->cap : READ_MIN;
	while (cap - b->end < want) {
		if (cap > SIZE_MAX / 2)
			return -ENOMEM;
		cap *= 2;
	}
	char *p = realloc(b->buf, cap);
	if (!p)
		return -ENOMEM;
	b->buf = p;
	b->cap = cap;
	return 0;
}

/* Whatever has come (at least one byte), with at least `want` bytes of
 * room. */
static int fill(struct kv_rbuf *b, int fd, struct kv_clock *clk, size_t want)
{
	int rc = reserve(b, want > READ_MIN ? want : READ_MIN);
	while (!rc) {
		ssize_t n = recv(fd, b->buf + b->end, b->cap - b->end, MSG_DONTWAIT);
		if (n > 0) {
			b->end += (size_t)n;
			clk->moved_ns = kv_now_ns();
			return 0;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			rc = kv_wait_fd(fd, POLLIN, clk);
		else
			rc = -ECONNREFUSED; /* EOF, ECONNRESET: the node is gone */
	}
	return rc;
}

/* The line at pos (without \r\n): its length, or -1 while incomplete. */
static long line_at(const struct kv_rbuf *b)
{
	const char *s = b->buf + b->pos;
	size_t avail = b->end - b->pos;
	const char *nl = avail > 1 ? memchr(s + 1, '\n', avail - 1) : NULL;
	if (!nl || nl[-1] != '\r')
		return nl ? -2 : -1;
	return (long)(nl - s - 1);
}

int kv_resp_next(struct kv_rbuf *b, int fd, struct kv_clock *clk, struct kv_resp *r)
{
	long line;
	while ((line = line_at(b)) == -1) {
		if (b->end - b->pos > LINE_MAX_LEN)
			return -EPROTO;
		int rc = fill(b, fd, clk, 0);
		if (rc)
			return rc;
	}
	if (line < 1)
		return -EPROTO;
	const char *s = b->buf + b->pos;
	switch (s[0]) {
	case '+':
	case '-':
		r->type = s[0] == '+' ? KV_RESP_STATUS : KV_RESP_ERROR;
		r->off = b->pos + 1;
		r->len = (size_t)line - 1;
		b->pos += (size_t)line + 2;
		return 0;
	case '$':
		break;
	default:
		return -EPROTO; /* an integer or an array: no reply to GET or SET */
	}
	if (line == 3 && s[1] == '-' && s[2] == '1') {
		r->type = KV_RESP_NIL;
		r->off = r->len = 0;
		b->pos += 5;
		return 0;
	}
	uint64_t len = 0;
	for (long i = 1; i < line; i++) {
		if (s[i] < '0' || s[i] > '9' || len > BULK_MAX)
			return -EPROTO;
		len = len * 10 + (uint64_t)(s[i] - '0');
	}
	if (line > 21 || len > BULK_MAX)
		return -EPROTO;
	size_t head = (size_t)line + 2, need = head + (size_t)len + 2;
	/* The value is read in place: the buffer grows once to hold it. */
	while (b->end - b->pos < need) {
		int rc = fill(b, fd, clk, need - (b->end - b->pos));
		if (rc)
			return rc;
	}
	if (b->buf[b->pos + need - 2] != '\r' || b->buf[b->pos + need - 1] != '\n')
		return -EPROTO;
	r->type = KV_RESP_BULK;
	r->off = b->pos + head;
	r->len = (size_t)len;
	b->pos += need;
	return 0;
}
