/* SPDX-License-Identifier: MIT */
/* Frames over a socketpair: bodies, descriptors, and broken streams. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sock.h"

static int open_fds(void)
{
	int n = 0;
	for (int fd = 0; fd < 1024; fd++)
		n += fcntl(fd, F_GETFD) != -1;
	return n;
}

/* Sends bytes with descriptors in one sendmsg, bypassing pd_send's limits,
 * to play a peer that breaks the rules. */
static void send_raw(int sock, const void *bytes, size_t len, const int *fds, int nfds)
{
	char cbuf[CMSG_SPACE(sizeof(int) * (PD_MAX_FDS + 8))];
	struct iovec iov = { (void *)bytes, len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			      .msg_controllen = CMSG_SPACE(sizeof(int) * nfds) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
	memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	cr_assert_eq(sendmsg(sock, &msg, 0), (ssize_t)len);
}

static void pair(int sv[2])
{
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
}

static int memfd_with(const char *text)
{
	int fd = memfd_create("t", MFD_CLOEXEC);
	cr_assert_eq(write(fd, text, strlen(text) + 1), (ssize_t)strlen(text) + 1);
	return fd;
}

Test(sock, frame_with_body_and_descriptors)
{
	int sv[2];
	pair(sv);
	int fds[2] = { memfd_with("first"), memfd_with("second") };
	uint8_t body[100];
	size_t n = pd_error_encode("hello there", body, sizeof(body));
	struct pd_hdr h = { PD_MAGIC, PD_VERSION, PD_OP_STATS, PD_FLAG_REPLY, PD_E_LIMIT, 9, (uint32_t)n };
	cr_assert_eq(pd_send(sv[0], &h, body, fds, 2), 0);
	struct pd_hdr g;
	uint8_t *got;
	int rfds[PD_MAX_FDS], nr;
	cr_assert_eq(pd_recv(sv[1], &g, &got, rfds, &nr), 0);
	cr_expect_eq(g.opaque, 9);
	cr_expect_eq(g.status, PD_E_LIMIT);
	cr_assert_eq(g.body_len, n);
	struct pd_error e;
	cr_assert_eq(pd_error_decode(got, g.body_len, &e), 0);
	cr_expect_eq(memcmp(e.msg, "hello there", e.len), 0);
	cr_assert_eq(nr, 2);
	char buf[16];
	cr_expect_eq(pread(rfds[1], buf, sizeof(buf), 0), 7);
	cr_expect_str_eq(buf, "second");
	free(got);
	for (int i = 0; i < 2; i++) {
		close(rfds[i]);
		close(fds[i]);
	}
	/* An empty body. */
	h.body_len = 0;
	cr_assert_eq(pd_send(sv[0], &h, NULL, NULL, 0), 0);
	cr_assert_eq(pd_recv(sv[1], &g, &got, rfds, &nr), 0);
	cr_expect_null(got);
	cr_expect_eq(nr, 0);
	close(sv[0]);
	close(sv[1]);
}

Test(sock, broken_streams)
{
	int sv[2];
	pair(sv);
	struct pd_hdr g;
	uint8_t *got, raw[PD_HDR_SIZE];
	int rfds[PD_MAX_FDS], nr;
	/* Garbage header. */
	memset(raw, 0xab, sizeof(raw));
	cr_assert_eq(write(sv[0], raw, sizeof(raw)), PD_HDR_SIZE);
	cr_expect_eq(pd_recv(sv[1], &g, &got, rfds, &nr), -EPROTO);
	/* A body length over the limit is refused before it is read. */
	struct pd_hdr h = { PD_MAGIC, PD_VERSION, PD_OP_MATCH, 0, 0, 1, 0 };
	pd_hdr_encode(&h, raw);
	uint32_t huge = 0x7fffffff;
	memcpy(raw + 16, &huge, 4);
	cr_assert_eq(write(sv[0], raw, sizeof(raw)), PD_HDR_SIZE);
	cr_expect_eq(pd_recv(sv[1], &g, &got, rfds, &nr), -EMSGSIZE);
	/* A frame cut short that brought a descriptor: it is closed, not leaked. */
	int fd = memfd_with("x");
	h.body_len = 64;
	uint8_t frame[PD_HDR_SIZE + 10] = { 0 };
	pd_hdr_encode(&h, frame);
	send_raw(sv[0], frame, sizeof(frame), &fd, 1);
	close(sv[0]);
	int before = open_fds();
	cr_expect_eq(pd_recv(sv[1], &g, &got, rfds, &nr), -ECONNRESET);
	cr_expect_null(got);
	cr_expect_eq(nr, 0);
	cr_expect_eq(open_fds(), before, "the received descriptor was closed");
	close(fd);
	close(sv[1]);
}

Test(sock, descriptors_past_the_limit_are_closed)
{
	int sv[2];
	pair(sv);
	enum { N = PD_MAX_FDS + 4 };
	int fds[N];
	for (int i = 0; i < N; i++)
		fds[i] = memfd_with("y");
	uint8_t raw[PD_HDR_SIZE];
	pd_hdr_encode(&(struct pd_hdr){ PD_MAGIC, 1, PD_OP_STATS, 0, 0, 1, 0 }, raw);
	send_raw(sv[0], raw, sizeof(raw), fds, N);
	struct pd_hdr g;
	uint8_t *got;
	int rfds[PD_MAX_FDS], nr;
	cr_assert_eq(pd_recv(sv[1], &g, &got, rfds, &nr), 0);
	cr_expect_eq(nr, PD_MAX_FDS);
	for (int i = 0; i < nr; i++)
		close(rfds[i]);
	for (int i = 0; i < N; i++)
		close(fds[i]);
	close(sv[0]);
	close(sv[1]);
}
