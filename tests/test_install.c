/* SPDX-License-Identifier: MIT */
/*
 * What running prefixd as a service needs: --version of every program,
 * socket activation (a listening socket on descriptor 3, as systemd passes
 * it), SIGHUP survived and SIGINT a clean stop, log lines with a time and a
 * level (or syslog priorities for the journal) and those a client causes
 * at most once a second, the systemd units as the README describes them,
 * and `meson install` of the whole tree into a staged prefix, used from
 * there (tests/test_install.sh).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <regex.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon_util.h"
#include "prefixd_version.h"

/* ==== --version ==== */

Test(version, every_program_prints_its_name_and_the_version_and_exits_0)
{
	static const struct {
		const char *name, *exe;
	} progs[] = { { "prefixd", PREFIXD_EXE }, { "prefixctl", PREFIXCTL }, { "prefix-run", PREFIX_RUN } };
	char out[8192], want[128]; /* prefixd --help is over 4 KiB */
	for (size_t i = 0; i < sizeof(progs) / sizeof(progs[0]); i++) {
		cr_expect_eq(td_sh(out, sizeof(out), "%s --version", progs[i].exe), 0, "%s", progs[i].name);
		snprintf(want, sizeof(want), "%s %s\n", progs[i].name, PREFIXD_VERSION);
		cr_expect_str_eq(out, want);
	}
	cr_expect_eq(td_sh(out, sizeof(out), "%s --help", PREFIXD_EXE), 0);
	cr_expect(strstr(out, "--version"), "prefixd --help lists --version: %s", out);
	cr_expect_eq(td_sh(out, sizeof(out), "%s --help", PREFIXCTL), 0);
	cr_expect(strstr(out, "--version"), "prefixctl --help lists --version: %s", out);
}

/* ==== A daemon started by hand: activation and the journal ==== */

struct spawned {
	pid_t pid;
	char dir[64], sock[128], log[128];
};

static void make_dir(struct spawned *s)
{
	memset(s, 0, sizeof(*s));
	snprintf(s->dir, sizeof(s->dir), "/tmp/prefixd-test-XXXXXX");
	cr_assert(mkdtemp(s->dir));
	snprintf(s->sock, sizeof(s->sock), "%s/sock", s->dir);
	snprintf(s->log, sizeof(s->log), "%s/log", s->dir);
}

/* A listening Unix stream socket bound to path. */
static int listening_socket(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert(fd >= 0);
	cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0, "bind %s: %s", path, strerror(errno));
	cr_assert_eq(listen(fd, 16), 0);
	return fd;
}

/*
 * Starts prefixd as a service manager would: fd3 (when >= 0) becomes its
 * descriptor 3, LISTEN_PID names the daemon itself (listen_pid 0) or
 * listen_pid, LISTEN_FDS is listen_fds (NULL: unset). stderr goes to
 * s->log, made here so that journal can name it in JOURNAL_STREAM.
 */
static void spawn(struct spawned *s, int fd3, pid_t listen_pid, const char *listen_fds,
		  int journal)
{
	int log = open(s->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	cr_assert(log >= 0);
	char journal_stream[64] = "";
	if (journal) {
		struct stat st;
		cr_assert_eq(fstat(log, &st), 0);
		snprintf(journal_stream, sizeof(journal_stream), "%llu:%llu",
			 (unsigned long long)st.st_dev, (unsigned long long)st.st_ino);
	}
	fflush(NULL);
	s->pid = fork();
	cr_assert(s->pid >= 0);
	if (s->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		dup2(log, 2);
		int null = open("/dev/null", O_WRONLY);
		if (null >= 0)
			dup2(null, 1);
		if (fd3 >= 0) {
			if (fd3 == 3)
				fcntl(3, F_SETFD, 0);
			else
				dup2(fd3, 3); /* without close-on-exec */
		}
		char pid[32];
		snprintf(pid, sizeof(pid), "%d", listen_pid ? (int)listen_pid : (int)getpid());
		unsetenv("LISTEN_PID");
		unsetenv("LISTEN_FDS");
		if (listen_fds) {
			setenv("LISTEN_PID", pid, 1);
			setenv("LISTEN_FDS", listen_fds, 1);
		}
		if (journal)
			setenv("JOURNAL_STREAM", journal_stream, 1);
		else
			unsetenv("JOURNAL_STREAM");
		execl(PREFIXD_EXE, PREFIXD_EXE, "--socket", s->sock, "--threads", "2", "--block-tokens",
		      "4", "--memory", "64M", (char *)NULL);
		_exit(127);
	}
	close(log);
}

/* The daemon's exit status; 128 + signal when killed. */
static int wait_exit(struct spawned *s)
{
	int st;
	while (waitpid(s->pid, &st, 0) < 0 && errno == EINTR)
		;
	s->pid = 0;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int stop_spawned(struct spawned *s)
{
	kill(s->pid, SIGTERM);
	return wait_exit(s);
}

/* Waits until the log holds what; whether it did within 5 s. */
static int log_shows(const char *path, const char *what)
{
	for (int i = 0; i < 500; i++) {
		if (strstr(td_read_file(path), what))
			return 1;
		usleep(10000);
	}
	return 0;
}

static void remove_dir(struct spawned *s)
{
	char path[160];
	snprintf(path, sizeof(path), "%s/other", s->dir);
	unlink(path);
	unlink(s->sock);
	unlink(s->log);
	rmdir(s->dir);
}

/* Publishes a block through one connection and attaches it from another:
 * the daemon serves the socket. */
static void expect_served(const char *sock)
{
	struct prefixd_layout l = td_layout(3);
	struct prefixd *a, *b;
	cr_assert_eq(prefixd_connect(sock, &l, &a), 0, "%s", prefixd_errmsg());
	cr_assert_eq(prefixd_connect(sock, &l, &b), 0, "%s", prefixd_errmsg());
	uint32_t t[TD_BLOCK_TOKENS] = { 11, 12, 13, 14 }, stored, dedup, hit;
	cr_assert_eq(td_publish(a, 0, t, 0, 1, &stored, &dedup), 0, "%s", prefixd_errmsg());
	cr_expect_eq(stored + dedup, 1);
	uint64_t lease;
	const void *kv[1];
	cr_assert_eq(prefixd_match(b, t, 1, &lease, &hit, kv), 0, "%s", prefixd_errmsg());
	cr_expect_eq(hit, 1);
	if (hit)
		cr_expect(td_block_ok(t, 0, kv[0]));
	prefixd_release(b, lease);
	prefixd_close(a);
	prefixd_close(b);
}

Test(activation, a_socket_passed_on_descriptor_3_is_served_and_left_in_place)
{
	struct spawned s;
	make_dir(&s);
	char path[160];
	snprintf(path, sizeof(path), "%s/other", s.dir);
	/* The manager's socket is "other"; --socket names s.sock, which the
	 * daemon must then neither bind nor remove. */
	int lfd = listening_socket(path);
	spawn(&s, lfd, 0, "1", 0);
	close(lfd);
	/* Connections queue on the socket until the daemon accepts. */
	expect_served(path);
	struct stat st;
	cr_expect_neq(lstat(s.sock, &st), 0, "--socket was not bound");
	cr_expect(log_shows(s.log, " (from the service manager)"), "%s", td_read_file(s.log));
	cr_expect_eq(stop_spawned(&s), 0, "%s", td_read_file(s.log));
	cr_expect_eq(lstat(path, &st), 0, "the manager's socket is still there");
	cr_expect(S_ISSOCK(st.st_mode));
	remove_dir(&s);
}

Test(activation, descriptor_3_must_be_a_listening_unix_stream_socket)
{
	struct spawned s;
	make_dir(&s);
	char path[160];
	snprintf(path, sizeof(path), "%s/other", s.dir);
	/* A file, then a socket that is not listening. */
	int file = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	cr_assert(file >= 0);
	spawn(&s, file, 0, "1", 0);
	close(file);
	cr_expect_eq(wait_exit(&s), 1);
	cr_expect(strstr(td_read_file(s.log), "not a listening Unix stream socket"), "%s", td_read_file(s.log));
	unlink(path);
	int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert(sock >= 0);
	spawn(&s, sock, 0, "1", 0);
	close(sock);
	cr_expect_eq(wait_exit(&s), 1);
	cr_expect(strstr(td_read_file(s.log), "not a listening Unix stream socket"), "%s", td_read_file(s.log));
	struct stat st;
	cr_expect_neq(lstat(s.sock, &st), 0, "nothing bound instead");
	remove_dir(&s);
}

Test(activation, variables_meant_for_another_process_are_ignored)
{
	struct spawned s;
	make_dir(&s);
	char path[160];
	snprintf(path, sizeof(path), "%s/other", s.dir);
	int lfd = listening_socket(path);
	/* LISTEN_PID is this test's pid, as when a variable is inherited. */
	spawn(&s, lfd, getpid(), "1", 0);
	close(lfd);
	cr_assert(log_shows(s.log, "listening on"), "%s", td_read_file(s.log));
	expect_served(s.sock);
	cr_expect_eq(stop_spawned(&s), 0, "%s", td_read_file(s.log));
	struct stat st;
	cr_expect_neq(lstat(s.sock, &st), 0, "its own socket is removed at exit");
	remove_dir(&s);
}

/* ==== SIGHUP ==== */

Test(signals, sighup_is_ignored_and_the_daemon_keeps_serving)
{
	struct test_daemon td;
	const char *args[] = { "--block-tokens", "4", "--memory", "64M", NULL };
	cr_assert_eq(td_start(&td, args), 0);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(kill(td.pid, SIGHUP), 0);
		usleep(20000);
	}
	cr_expect(log_shows(td.log, "SIGHUP ignored"), "%s", td_read_file(td.log));
	/* kill(pid, 0) would succeed on a child that exited but is not yet
	 * reaped: ask whether it exited. */
	int status = 0;
	cr_expect_eq(waitpid(td.pid, &status, WNOHANG), 0, "still running (exited with status %#x)",
		     status);
	struct stat st;
	cr_expect_eq(lstat(td.sock, &st), 0, "the socket is still there");
	expect_served(td.sock);
	cr_expect_eq(td_stop(&td), 0, "SIGTERM still stops it cleanly");
}

Test(signals, sigint_stops_the_daemon_cleanly)
{
	struct test_daemon td;
	const char *args[] = { "--block-tokens", "4", "--memory", "64M", NULL };
	cr_assert_eq(td_start(&td, args), 0);
	/* A client holding a lease when the signal comes. */
	struct prefixd_layout l = td_layout(3);
	struct prefixd *c;
	cr_assert_eq(prefixd_connect(td.sock, &l, &c), 0, "%s", prefixd_errmsg());
	uint32_t t[TD_BLOCK_TOKENS] = { 21, 22, 23, 24 }, stored, dedup, hit;
	cr_assert_eq(td_publish(c, 0, t, 0, 1, &stored, &dedup), 0, "%s", prefixd_errmsg());
	uint64_t lease;
	const void *kv[1];
	cr_assert_eq(prefixd_match(c, t, 1, &lease, &hit, kv), 0, "%s", prefixd_errmsg());
	cr_assert_eq(hit, 1);
	cr_assert_eq(kill(td.pid, SIGINT), 0);
	int status;
	cr_assert_eq(waitpid(td.pid, &status, 0), td.pid);
	td.pid = 0;
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "exit status 0 on SIGINT, not %#x:\n%s", status, td_read_file(td.log));
	cr_expect(log_shows(td.log, "stopping on Interrupt"), "%s", td_read_file(td.log));
	struct stat st;
	cr_expect_neq(lstat(td.sock, &st), 0, "its socket is removed");
	prefixd_close(c);
	unlink(td.log);
	rmdir(td.dir);
}

/* ==== Log lines ==== */

static int matches(const char *text, const char *pattern)
{
	regex_t re;
	cr_assert_eq(regcomp(&re, pattern, REG_EXTENDED | REG_NEWLINE | REG_NOSUB), 0, "%s", pattern);
	int ok = !regexec(&re, text, 0, NULL, 0);
	regfree(&re);
	return ok;
}

#define STAMP "^[0-9]{4}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9]\\.[0-9]{3}Z "

Test(log, lines_carry_a_utc_time_to_the_millisecond_and_a_level)
{
	struct test_daemon td;
	const char *args[] = { "--block-tokens", "4", "--memory", "64M", "--request-timeout", "1", NULL };
	cr_assert_eq(td_start(&td, args), 0);
	/* A connection that never sends anything is closed after 1 s: a line
	 * a client can cause, so a warning. */
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	cr_assert_lt(strlen(td.sock), sizeof(a.sun_path));
	memcpy(a.sun_path, td.sock, strlen(td.sock) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_expect(log_shows(td.log, "closing a connection"), "%s", td_read_file(td.log));
	close(fd);
	const char *log = td_read_file(td.log);
	cr_expect(matches(log, STAMP "info prefixd: listening on "), "%s", log);
	cr_expect(matches(log, STAMP "warn prefixd: closing a connection that "), "%s", log);
	cr_expect_eq(td_stop(&td), 0);
}

/* One client sends n malformed headers, each on its own connection, and
 * waits for each close. */
static void send_malformed(const char *sock, int n)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	cr_assert_lt(strlen(sock), sizeof(a.sun_path));
	memcpy(a.sun_path, sock, strlen(sock) + 1);
	uint8_t hdr[32] = { 'P', 'F', 'X', 'D', 2, 0, 5 /* STATS */ };
	hdr[25] = 1; /* a reserved byte */
	for (int i = 0; i < n; i++) {
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
		struct timeval tv = { 10, 0 };
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		cr_assert_eq(write(fd, hdr, sizeof(hdr)), (ssize_t)sizeof(hdr));
		char b;
		ssize_t r = read(fd, &b, 1);
		cr_assert(r == 0 || (r < 0 && errno == ECONNRESET), "connection %d was closed (%zd)", i, r);
		close(fd);
	}
}

/* Lines of log holding what, and the sum of their "(and N more like it)". */
static void count_lines(const char *log, const char *what, int *lines, unsigned long long *left_out)
{
	*lines = 0;
	*left_out = 0;
	for (const char *p = log; (p = strstr(p, what)); p++) {
		++*lines;
		const char *eol = strchr(p, '\n'), *more = strstr(p, "(and ");
		unsigned long long n;
		if (more && (!eol || more < eol) && sscanf(more, "(and %llu more like it)", &n) == 1)
			*left_out += n;
	}
}

static double mono_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A client can make the daemon log a line per malformed frame: at most one
 * such line a second is written, and the next one written says how many
 * were left out, so none is lost from the count. */
Test(log, lines_a_client_can_cause_are_logged_at_most_once_a_second)
{
	struct test_daemon td;
	const char *args[] = { "--block-tokens", "4", "--memory", "64M", NULL };
	cr_assert_eq(td_start(&td, args), 0);
	enum { BURST = 200 };
	double t0 = mono_s();
	send_malformed(td.sock, BURST);
	double t1 = mono_s();
	/* A second later, one more: its line carries the burst's rest. */
	usleep(1200 * 1000);
	send_malformed(td.sock, 1);
	/* The last frame's line is written before its connection closes;
	 * wait for every frame to be accounted for all the same. */
	const char *log = "";
	int lines = 0;
	unsigned long long left_out = 0;
	for (int i = 0; i < 500 && lines + left_out < BURST + 1; i++) {
		if (i)
			usleep(10000);
		log = td_read_file(td.log);
		count_lines(log, "malformed frame header", &lines, &left_out);
	}
	/* One line in each second the burst touched, and the last one's. */
	int most = (int)(t1 - t0) + 2 + 1;
	cr_expect_leq(lines, most, "%d lines for %d malformed frames in %.2f s (at most %d):\n%s",
		      lines, BURST + 1, t1 - t0, most, log);
	cr_expect_eq(lines + left_out, BURST + 1, "%d lines + %llu left out, for %d frames:\n%s", lines,
		     left_out, BURST + 1, log);
	cr_expect_eq(td_stop(&td), 0);
}

Test(log, in_the_journal_lines_carry_syslog_priorities_instead)
{
	struct spawned s;
	make_dir(&s);
	spawn(&s, -1, 0, NULL, 1);
	cr_assert(log_shows(s.log, "listening on"), "%s", td_read_file(s.log));
	const char *log = td_read_file(s.log);
	cr_expect(matches(log, "^<6>listening on "), "%s", log);
	cr_expect(!matches(log, "^[0-9]{4}-"), "no time of its own: %s", log);
	cr_expect_eq(stop_spawned(&s), 0);
	cr_expect(matches(td_read_file(s.log), "^<6>stopping on "), "%s", td_read_file(s.log));
	remove_dir(&s);
}

Test(log, a_journal_stream_inherited_by_a_redirected_daemon_is_not_the_journal)
{
	struct spawned s;
	make_dir(&s);
	setenv("JOURNAL_STREAM", "1:1", 1); /* not the log file */
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		int log = open(s.log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		dup2(log, 2);
		execl(PREFIXD_EXE, PREFIXD_EXE, "--socket", s.sock, "--threads", "1", (char *)NULL);
		_exit(127);
	}
	s.pid = pid;
	cr_assert(log_shows(s.log, "listening on"), "%s", td_read_file(s.log));
	cr_expect(matches(td_read_file(s.log), STAMP "info prefixd: listening on "), "%s", td_read_file(s.log));
	cr_expect_eq(stop_spawned(&s), 0);
	remove_dir(&s);
}

/* ==== The systemd units ==== */

/* The value of the last `key=` line of [section] in the unit at path (a
 * static buffer), or NULL when it has none. */
static const char *unit_value(const char *path, const char *section, const char *key)
{
	static char value[512];
	char line[512], in[512] = "";
	const char *found = NULL;
	FILE *f = fopen(path, "r");
	cr_assert(f, "%s: %s", path, strerror(errno));
	size_t klen = strlen(key);
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		if (line[0] == '[')
			snprintf(in, sizeof(in), "%s", line);
		else if (!strcmp(in, section) && !strncmp(line, key, klen) && line[klen] == '=')
			found = strcpy(value, line + klen + 1);
	}
	fclose(f);
	return found;
}

static void expect_unit(const char *path, const char *section, const char *key, const char *want)
{
	const char *v = unit_value(path, section, key);
	cr_expect(v && !strcmp(v, want), "%s: %s %s= is %s%s%s, the README says %s", path, section, key,
		  v ? "'" : "", v ? v : "missing", v ? "'" : "", want);
}

/* What the README's "Installing" says of the units, as meson configures
 * them (the build tree's services, the source tree's sockets). */
Test(units, the_system_units_do_what_the_readme_says)
{
	char service[PATH_MAX + 64], sock[PATH_MAX + 64], sysusers[PATH_MAX + 64];
	const char *build = getenv("PFX_BUILD"), *bindir = getenv("PFX_BINDIR");
	cr_assert(build && bindir, "run by meson test (PFX_BUILD, PFX_BINDIR)");
	snprintf(service, sizeof(service), "%s/contrib/systemd/prefixd.service", build);
	snprintf(sock, sizeof(sock), "%s/contrib/systemd/prefixd.socket", SOURCE_ROOT);
	snprintf(sysusers, sizeof(sysusers), "%s/contrib/systemd/prefixd.sysusers", SOURCE_ROOT);
	/* "systemctl enable --now prefixd.socket: /run/prefixd.sock, mode
	 * 0660, group prefixd", and it outlives the daemon. */
	expect_unit(sock, "[Socket]", "ListenStream", "/run/prefixd.sock");
	expect_unit(sock, "[Socket]", "SocketMode", "0660");
	expect_unit(sock, "[Socket]", "SocketGroup", "prefixd");
	expect_unit(sock, "[Install]", "WantedBy", "sockets.target");
	/* "The daemon starts at the first connection, as the user prefixd",
	 * with PREFIXD_OPTS from /etc/default/prefixd, on the socket it is
	 * given (no --socket of its own). */
	char exec[PATH_MAX + 32];
	snprintf(exec, sizeof(exec), "%s/prefixd $PREFIXD_OPTS", bindir);
	expect_unit(service, "[Service]", "ExecStart", exec);
	expect_unit(service, "[Service]", "User", "prefixd");
	expect_unit(service, "[Service]", "Group", "prefixd");
	expect_unit(service, "[Service]", "EnvironmentFile", "-/etc/default/prefixd");
	expect_unit(service, "[Unit]", "Requires", "prefixd.socket");
	expect_unit(service, "[Install]", "Also", "prefixd.socket");
	/* "Its log is in the journal with priorities" and "systemctl stop
	 * prefixd stops it cleanly": stderr is not sent elsewhere, and the
	 * stop signal is one it stops cleanly on. */
	const char *v = unit_value(service, "[Service]", "StandardError");
	cr_expect(!v || !strcmp(v, "journal"), "StandardError=%s: the log leaves the journal", v);
	v = unit_value(service, "[Service]", "KillSignal");
	cr_expect(!v || !strcmp(v, "SIGTERM") || !strcmp(v, "SIGINT"), "KillSignal=%s", v);
	/* Connections are AF_UNIX alone, and the daemon needs no others. */
	expect_unit(service, "[Service]", "RestrictAddressFamilies", "AF_UNIX");
	/* "systemd-sysusers: the user and group prefixd" ('u' makes both). */
	FILE *f = fopen(sysusers, "r");
	cr_assert(f, "%s", sysusers);
	char line[256];
	int user = 0;
	while (fgets(line, sizeof(line), f))
		user += !strncmp(line, "u prefixd ", 10);
	fclose(f);
	cr_expect_eq(user, 1, "%s makes the user (and group) prefixd", sysusers);
}

Test(units, the_user_units_do_what_the_readme_says)
{
	char service[PATH_MAX + 64], sock[PATH_MAX + 64];
	const char *build = getenv("PFX_BUILD"), *bindir = getenv("PFX_BINDIR");
	cr_assert(build && bindir, "run by meson test (PFX_BUILD, PFX_BINDIR)");
	snprintf(service, sizeof(service), "%s/contrib/systemd/user/prefixd.service", build);
	snprintf(sock, sizeof(sock), "%s/contrib/systemd/user/prefixd.socket", SOURCE_ROOT);
	/* "systemctl --user enable --now prefixd.socket serves
	 * $XDG_RUNTIME_DIR/prefixd.sock" (%t), only the user's (0600). */
	expect_unit(sock, "[Socket]", "ListenStream", "%t/prefixd.sock");
	expect_unit(sock, "[Socket]", "SocketMode", "0600");
	expect_unit(sock, "[Install]", "WantedBy", "sockets.target");
	/* "options: PREFIXD_OPTS=... in ~/.config/prefixd.env" (%E). */
	char exec[PATH_MAX + 32];
	snprintf(exec, sizeof(exec), "%s/prefixd $PREFIXD_OPTS", bindir);
	expect_unit(service, "[Service]", "ExecStart", exec);
	expect_unit(service, "[Service]", "EnvironmentFile", "-%E/prefixd.env");
	expect_unit(service, "[Unit]", "Requires", "prefixd.socket");
	cr_expect_null(unit_value(service, "[Service]", "User"), "a user unit runs as its user");
}

/* ==== meson install ==== */

Test(install, the_installed_tree_works_from_its_prefix, .timeout = 240)
{
	static char out[1 << 16];
	int rc = td_sh(out, sizeof(out), "sh %s", INSTALL_SCRIPT);
	cr_expect_eq(rc, 0, "tests/test_install.sh exits %d:\n%s", rc, out);
}

/* `meson setup build --prefix=P` on the demo's build directory keeps the
 * old prefix without a word: the README's install section says what to do. */
Test(install, the_readme_says_how_to_change_the_prefix_of_a_build_directory)
{
	FILE *f = fopen(README_MD, "r");
	cr_assert(f, "%s", README_MD);
	static char text[1 << 17];
	size_t n = fread(text, 1, sizeof(text) - 1, f);
	text[n] = 0;
	fclose(f);
	const char *install = strstr(text, "\n## Installing\n");
	cr_assert(install, "no Installing section in README.md");
	const char *end = strstr(install + 1, "\n## ");
	size_t len = end ? (size_t)(end - install) : strlen(install);
	char *section = strndup(install, len);
	cr_expect(strstr(section, "meson configure build --prefix="),
		  "the Installing section does not say to use meson configure");
	cr_expect(strstr(section, "new directory") || strstr(section, "new build directory"),
		  "the Installing section does not offer a new build directory");
	free(section);
}
