/* SPDX-License-Identifier: MIT */
/*
 * What the README promises of prefixd's listening socket: a stale socket
 * left by a dead daemon is replaced; the socket is mode 0600, or 0660 and
 * the group's with --group, and other users are refused without it; and
 * what it admits: --max-connections 1024 and a quarter of it per user by
 * default, fewer when the descriptor limit is lower.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon_util.h"
#include "sock.h"
#include "wire.h"

#define STRANGER 60001u
#define NOGROUP 65534u

/* A connection on path: the descriptor, or -errno. */
static int connect_to(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	cr_assert_lt(strlen(path), sizeof(a.sun_path));
	strcpy(a.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_geq(fd, 0, "socket: %s", strerror(errno));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		int e = errno;
		close(fd);
		return -e;
	}
	struct timeval tv = { 10, 0 }; /* a hung daemon fails the test, not the run */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

/* ==== A stale socket ==== */

/* prefixd on sock, its stderr in log; waits (10 s at most) until it
 * accepts. The pid, or 0 when it exited or never listened. */
static pid_t spawn_on(const char *sock, const char *log)
{
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd >= 0)
			dup2(fd, 2);
		execl(PREFIXD_EXE, PREFIXD_EXE, "--socket", sock, "--threads", "1", "--block-tokens", "4",
		      "--memory", "16M", (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 1000; i++) {
		int fd = connect_to(sock);
		if (fd >= 0) {
			close(fd);
			return pid;
		}
		if (waitpid(pid, NULL, WNOHANG) == pid)
			return 0;
		usleep(10000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return 0;
}

Test(listen, a_stale_socket_left_by_a_dead_daemon_is_replaced)
{
	struct test_daemon td;
	const char *args[] = { "--block-tokens", "4", "--memory", "16M", NULL };
	cr_assert_eq(td_start(&td, args), 0);
	/* Killed: nothing removes its socket. */
	cr_assert_eq(kill(td.pid, SIGKILL), 0);
	cr_assert_eq(waitpid(td.pid, NULL, 0), td.pid);
	td.pid = 0;
	struct stat st;
	cr_assert_eq(lstat(td.sock, &st), 0, "the dead daemon's socket is left behind");
	cr_assert(S_ISSOCK(st.st_mode));
	cr_assert_eq(connect_to(td.sock), -ECONNREFUSED, "and nothing listens on it");
	/* A new daemon on the same path takes it over and serves. */
	char log[PATH_MAX + 16];
	snprintf(log, sizeof(log), "%s/log2", td.dir);
	pid_t pid = spawn_on(td.sock, log);
	cr_assert_gt(pid, 0, "a daemon on the stale socket's path did not start:\n%s", td_read_file(log));
	struct prefixd_stats s;
	cr_expect_eq(td_stats(&td, &s), 0, "%s", prefixd_errmsg());
	cr_expect_eq(s.budget, 16u << 20, "the new daemon answers");
	int status;
	cr_assert_eq(kill(pid, SIGTERM), 0);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x:\n%s", status, td_read_file(log));
	unlink(log);
	unlink(td.sock);
	unlink(td.log);
	rmdir(td.dir);
}

/* ==== Who may connect ==== */

/* In a child of uid STRANGER, with group as its only group: 0 when it can
 * connect to sock, else the errno. */
static int stranger_connects(const char *sock, gid_t group)
{
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (setgroups(1, &group) || setresgid(group, group, group) ||
		    setresuid(STRANGER, STRANGER, STRANGER))
			_exit(100);
		struct sockaddr_un a = { .sun_family = AF_UNIX };
		strcpy(a.sun_path, sock);
		int fd = socket(AF_UNIX, SOCK_STREAM, 0);
		if (fd < 0)
			_exit(101);
		_exit(connect(fd, (struct sockaddr *)&a, sizeof(a)) ? (errno & 0x7f) : 0);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) < 100, "the stranger's child failed (%#x)", st);
	return WEXITSTATUS(st);
}

Test(listen, the_socket_is_0600_and_other_users_are_refused)
{
	cr_assert_eq(geteuid(), 0, "this test changes uid: run it as root");
	struct test_daemon td;
	const char *args[] = { "--block-tokens", "4", "--memory", "16M", NULL };
	cr_assert_eq(td_start(&td, args), 0);
	cr_assert_eq(td_share_dir(&td), 0);
	struct stat st;
	cr_assert_eq(stat(td.sock, &st), 0);
	cr_expect_eq(st.st_mode & 07777, 0600, "mode %o", st.st_mode & 07777);
	cr_expect_eq(st.st_uid, geteuid());
	cr_expect_eq(stranger_connects(td.sock, NOGROUP), EACCES, "uid %u connected", STRANGER);
	cr_expect_eq(td_stop(&td), 0);
}

Test(listen, with_group_the_socket_is_0660_and_the_group_may_connect)
{
	cr_assert_eq(geteuid(), 0, "this test changes uid: run it as root");
	struct test_daemon td;
	const char *args[] = { "--block-tokens", "4", "--memory", "16M", "--group", "65534", NULL };
	cr_assert_eq(td_start(&td, args), 0);
	cr_assert_eq(td_share_dir(&td), 0);
	struct stat st;
	cr_assert_eq(stat(td.sock, &st), 0);
	cr_expect_eq(st.st_mode & 07777, 0660, "mode %o", st.st_mode & 07777);
	cr_expect_eq(st.st_gid, NOGROUP, "group %u", (unsigned)st.st_gid);
	cr_expect_eq(stranger_connects(td.sock, NOGROUP), 0, "a member of the group connects");
	cr_expect_eq(stranger_connects(td.sock, STRANGER), EACCES, "a user outside it does not");
	cr_expect_eq(td_stop(&td), 0);
}

/* ==== Connections admitted ==== */

/* Waits until the daemon counts only the connection asking: td_start's
 * probe is counted until the daemon has read its hangup. */
static void wait_alone(const struct test_daemon *td)
{
	struct prefixd_stats s = { 0 };
	for (int i = 0; i < 500 && !td_stats(td, &s) && s.connections != 1; i++)
		usleep(10000);
	cr_assert_eq(s.connections, 1, "%llu connections before the test's",
		     (unsigned long long)s.connections);
}

/* Holds n connections, then asks for STATS on one more: it must be refused
 * with LIMIT and a message that holds `what`. */
static void expect_nth_refused(const struct test_daemon *td, int n, const char *what)
{
	int *held = malloc(sizeof(int) * (size_t)n);
	cr_assert(held);
	for (int i = 0; i < n; i++) {
		held[i] = connect_to(td->sock);
		cr_assert_geq(held[i], 0, "connection %d: %s", i, strerror(-held[i]));
	}
	int fd = connect_to(td->sock);
	cr_assert_geq(fd, 0, "connection %d: %s", n, strerror(-fd));
	struct pd_hdr h = { PD_MAGIC, PD_VERSION, PD_OP_STATS, 0, 0, 1, 0 }, r;
	cr_assert_eq(pd_send(fd, &h, NULL, NULL, 0), 0);
	uint8_t *body = NULL;
	int fds[PD_MAX_FDS], nfds = 0;
	cr_assert_eq(pd_recv(fd, &r, &body, fds, &nfds), 0, "connection %d gets an answer", n);
	cr_expect_eq(r.status, PD_E_LIMIT, "connection %d: status %u", n, r.status);
	struct pd_error e = { 0, "" };
	if (r.status)
		cr_assert_eq(pd_error_decode(body, r.body_len, &e), 0);
	cr_expect(memmem(e.msg, e.len, what, strlen(what)), "'%.*s' does not say '%s'", (int)e.len,
		  e.msg, what);
	free(body);
	close(fd);
	for (int i = 0; i < n; i++)
		close(held[i]);
	free(held);
}

/* Room for n descriptors in this process (raised to the hard limit). */
static void need_descriptors(rlim_t n)
{
	struct rlimit rl;
	cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur < n && rl.rlim_max >= n) {
		rl.rlim_cur = rl.rlim_max;
		cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
	}
	if (rl.rlim_cur < n)
		cr_skip_test("%llu descriptors at most here; this test holds %llu connections",
			     (unsigned long long)rl.rlim_max, (unsigned long long)n);
}

Test(listen, by_default_a_user_has_256_connections_and_all_users_1024)
{
	need_descriptors(1100);
	struct test_daemon td;
	/* A long request timeout: held connections never send a request. */
	const char *args[] = { "--block-tokens", "4", "--memory", "16M", "--request-timeout", "300", NULL };
	cr_assert_eq(td_start(&td, args), 0);
	wait_alone(&td);
	expect_nth_refused(&td, 256, "this user has 256 connections to prefixd already");
	cr_expect_eq(td_stop(&td), 0);
	/* All users: 1024, seen by one user allowed more than that. */
	const char *all[] = { "--block-tokens", "4", "--memory", "16M", "--request-timeout", "300",
			      "--max-user-connections", "1048576", NULL };
	cr_assert_eq(td_start(&td, all), 0);
	wait_alone(&td);
	expect_nth_refused(&td, 1024, "prefixd serves 1024 connections already");
	cr_expect_eq(td_stop(&td), 0);
}

Test(listen, connections_are_fewer_when_descriptors_are)
{
	/* This process and the daemon it starts may open 300 descriptors:
	 * 256 stay for arenas and files, 44 for connections. */
	struct rlimit rl = { 300, 300 };
	cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
	struct test_daemon td;
	const char *args[] = { "--block-tokens", "4", "--memory", "16M", "--request-timeout", "300", NULL };
	cr_assert_eq(td_start(&td, args), 0);
	wait_alone(&td);
	/* A quarter of them a user. */
	expect_nth_refused(&td, 11, "this user has 11 connections to prefixd already");
	const char *log = td_read_file(td.log);
	cr_expect(strstr(log, "44 connections at most: the descriptor limit is 300"), "%s", log);
	cr_expect_eq(td_stop(&td), 0);
	/* Asked for more, it still takes 44. */
	const char *more[] = { "--block-tokens", "4", "--memory", "16M", "--request-timeout", "300",
			       "--max-connections", "1000", "--max-user-connections", "1000", NULL };
	cr_assert_eq(td_start(&td, more), 0);
	wait_alone(&td);
	expect_nth_refused(&td, 44, "prefixd serves 44 connections already");
	cr_expect_eq(td_stop(&td), 0);
}
