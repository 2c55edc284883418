/* SPDX-License-Identifier: MIT */
#include "daemon_util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int can_connect(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(a.sun_path))
		return 0;
	strcpy(a.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int ok = fd >= 0 && !connect(fd, (struct sockaddr *)&a, sizeof(a));
	if (fd >= 0)
		close(fd);
	return ok;
}

int td_start(struct test_daemon *d, const char *const *args)
{
	return td_start_named(d, "sock", args);
}

double td_now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Starts the daemon and tries to connect every poll_us for 10 s; with ms,
 * the time from fork to the first connection accepted. */
static int start(struct test_daemon *d, const char *name, const char *const *args,
		 unsigned poll_us, double *ms)
{
	memset(d, 0, sizeof(*d));
	snprintf(d->dir, sizeof(d->dir), "/tmp/prefixd-test-XXXXXX");
	if (!mkdtemp(d->dir)) {
		perror("mkdtemp");
		return -1;
	}
	snprintf(d->sock, sizeof(d->sock), "%s/%s", d->dir, name);
	snprintf(d->log, sizeof(d->log), "%s/log", d->dir);
	const char *argv[32] = { PREFIXD_EXE, "--socket", d->sock, "--threads", "2" };
	int n = 5;
	for (int i = 0; args && args[i] && n < 31; i++)
		argv[n++] = args[i];
	double t0 = td_now_s();
	/* The child's freopen would write what stdio holds for the caller
	 * (a benchmark's report) a second time. */
	fflush(NULL);
	d->pid = fork();
	if (d->pid < 0)
		return -1;
	if (d->pid == 0) {
		/* A test that fails half-way must not leave its daemon behind
		 * (nor a pipe of the test runner open). */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		int log = open(d->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
		if (log >= 0)
			dup2(log, 2);
		if (null >= 0)
			dup2(null, 1);
		execv(PREFIXD_EXE, (char *const *)argv);
		_exit(127);
	}
	for (unsigned i = 0; i < 10000000 / poll_us; i++) {
		if (can_connect(d->sock)) {
			if (ms)
				*ms = (td_now_s() - t0) * 1e3;
			return 0;
		}
		int st;
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			fprintf(stderr, "prefixd exited at start (status %d)\n", st);
			d->pid = 0;
			return -1;
		}
		usleep(poll_us);
	}
	fprintf(stderr, "prefixd did not start listening on %s\n", d->sock);
	td_stop(d);
	return -1;
}

int td_start_named(struct test_daemon *d, const char *name, const char *const *args)
{
	return start(d, name, args, 10000, NULL);
}

int td_start_timed(struct test_daemon *d, const char *const *args, double *ms)
{
	return start(d, "sock", args, 100, ms);
}

int td_stop(struct test_daemon *d)
{
	int st = 0, rc = -1;
	if (d->pid > 0) {
		kill(d->pid, SIGTERM);
		while (waitpid(d->pid, &st, 0) < 0 && errno == EINTR)
			;
		rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	}
	if (rc) {
		fprintf(stderr, "--- prefixd log (exit %d) ---\n", rc);
		FILE *f = fopen(d->log, "r");
		char line[512];
		while (f && fgets(line, sizeof(line), f))
			fputs(line, stderr);
		if (f)
			fclose(f);
	}
	unlink(d->sock);
	unlink(d->log);
	rmdir(d->dir);
	d->pid = 0;
	return rc;
}

void td_kill(struct test_daemon *d)
{
	if (d->pid > 0) {
		kill(d->pid, SIGKILL);
		while (waitpid(d->pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	unlink(d->sock);
	unlink(d->log);
	rmdir(d->dir);
	d->pid = 0;
}

int td_open_fds(const struct test_daemon *d)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)d->pid);
	DIR *dir = opendir(path);
	int n = 0;
	for (struct dirent *e; dir && (e = readdir(dir));)
		n += e->d_name[0] != '.';
	if (dir)
		closedir(dir);
	return n;
}

struct prefixd_layout td_layout(uint8_t model)
{
	struct prefixd_layout l = { .block_tokens = TD_BLOCK_TOKENS, .block_bytes = TD_BLOCK_BYTES };
	memset(l.fingerprint, model, sizeof(l.fingerprint));
	return l;
}

static uint32_t seed_of(const uint32_t *tokens, uint32_t b)
{
	uint32_t h = 2166136261u;
	for (uint32_t i = 0; i < (b + 1) * TD_BLOCK_TOKENS; i++)
		h = (h ^ tokens[i]) * 16777619u;
	return h;
}

void td_fill_block(const uint32_t *tokens, uint32_t b, void *kv)
{
	uint32_t s = seed_of(tokens, b), *w = kv;
	for (size_t i = 0; i < TD_BLOCK_BYTES / 4; i++)
		w[i] = s + (uint32_t)i * 2654435761u;
}

int td_block_ok(const uint32_t *tokens, uint32_t b, const void *kv)
{
	uint32_t s = seed_of(tokens, b);
	const uint32_t *w = kv;
	for (size_t i = 0; i < TD_BLOCK_BYTES / 4; i++)
		if (w[i] != s + (uint32_t)i * 2654435761u)
			return 0;
	return 1;
}

int td_publish(struct prefixd *c, uint64_t lease, const uint32_t *tokens, uint32_t first,
	       uint32_t n, uint32_t *stored, uint32_t *dedup)
{
	uint8_t *kv = malloc((size_t)n * TD_BLOCK_BYTES);
	const void *ptrs[64];
	if (!kv || n > 64) {
		free(kv);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++) {
		td_fill_block(tokens, first + i, kv + (size_t)i * TD_BLOCK_BYTES);
		ptrs[i] = kv + (size_t)i * TD_BLOCK_BYTES;
	}
	int rc = prefixd_publish(c, lease, tokens, first, n, ptrs, stored, dedup);
	free(kv);
	return rc;
}

struct prefixd *td_connect(const char *sock, uint8_t model, char *why, size_t cap)
{
	struct prefixd_layout l = td_layout(model);
	struct prefixd *c;
	if (prefixd_connect(sock, &l, &c)) {
		snprintf(why, cap, "connect: %s", prefixd_errmsg());
		return NULL;
	}
	return c;
}

int td_stats(const struct test_daemon *d, struct prefixd_stats *out)
{
	struct prefixd *c;
	int rc = prefixd_connect(d->sock, NULL, &c);
	if (rc)
		return rc;
	rc = prefixd_stats(c, out);
	prefixd_close(c);
	return rc;
}

uint64_t td_wait_leases(const struct test_daemon *d, uint64_t n)
{
	struct prefixd_stats s = { 0 };
	for (int i = 0; i < 500; i++) {
		if (!td_stats(d, &s) && s.leases == n)
			break;
		usleep(10000);
	}
	return s.leases;
}

uint64_t td_rss(pid_t pid)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	unsigned long kb = 0;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %lu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return (uint64_t)kb << 10;
}

/* Appends a NULL-terminated list to args[*n ..]; -1 past 32 in all. */
static int append_args(const char **args, int *n, const char *const *list)
{
	for (int i = 0; list && list[i]; i++) {
		if (*n == 32)
			return -1;
		args[(*n)++] = list[i];
	}
	return 0;
}

int td_start_args(struct test_daemon *d, const char *const *base, const char *const *extra)
{
	const char *args[33];
	int n = 0;
	if (append_args(args, &n, base) || append_args(args, &n, extra)) {
		fprintf(stderr, "td_start_args: more than 32 arguments\n");
		return -1;
	}
	args[n] = NULL;
	return td_start(d, args);
}

int td_share_dir(const struct test_daemon *d)
{
	return chmod(d->dir, 0711) ? -errno : 0;
}

const char *td_read_file(const char *path)
{
	static char buf[1 << 18];
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
	buf[n] = 0;
	if (f)
		fclose(f);
	return buf;
}

int td_sh(char *out, size_t cap, const char *fmt, ...)
{
	char cmd[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	strncat(cmd, " 2>&1", sizeof(cmd) - strlen(cmd) - 1);
	FILE *p = popen(cmd, "r");
	if (!p)
		return -1;
	size_t n = fread(out, 1, cap - 1, p);
	out[n] = 0;
	int st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void td_prompt(uint32_t *t, uint32_t nblocks, uint32_t base)
{
	for (uint32_t i = 0; i < nblocks * TD_BLOCK_TOKENS; i++)
		t[i] = base + i;
}

int td_log_has(const struct test_daemon *d, const char *what)
{
	/* grep, not td_read_file: a log under load outgrows its 64 KiB. */
	char out[256];
	return td_sh(out, sizeof(out), "grep -qF '%s' '%s'", what, d->log) == 0;
}
