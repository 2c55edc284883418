/* SPDX-License-Identifier: MIT */
#include "bench_daemon.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static int answers(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	strcpy(a.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int ok = fd >= 0 && !connect(fd, (struct sockaddr *)&a, sizeof(a));
	if (fd >= 0)
		close(fd);
	return ok;
}

int bench_daemon_start_argv(struct bench_daemon *d, const char *const *args)
{
	memset(d, 0, sizeof(*d));
	snprintf(d->dir, sizeof(d->dir), "/tmp/prefixd-bench-XXXXXX");
	if (!mkdtemp(d->dir)) {
		perror("bench: mkdtemp");
		return -1;
	}
	snprintf(d->sock, sizeof(d->sock), "%s/sock", d->dir);
	const char *argv[32] = { PREFIXD_EXE, "--socket", d->sock };
	int n = 3;
	for (int i = 0; args[i] && n < 31; i++)
		argv[n++] = args[i];
	fflush(NULL);
	d->pid = fork();
	if (d->pid < 0)
		return -1;
	if (d->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGTERM); /* never outlive the benchmark */
		execv(PREFIXD_EXE, (char *const *)argv);
		_exit(127);
	}
	for (int i = 0; i < 500; i++) {
		if (answers(d->sock))
			return 0;
		if (waitpid(d->pid, NULL, WNOHANG) == d->pid) {
			fprintf(stderr, "bench: prefixd exited at start\n");
			d->pid = 0;
			rmdir(d->dir);
			return -1;
		}
		usleep(10000);
	}
	fprintf(stderr, "bench: prefixd did not start\n");
	bench_daemon_stop(d);
	return -1;
}

int bench_daemon_stop(struct bench_daemon *d)
{
	int st = 0;
	if (d->pid > 0) {
		kill(d->pid, SIGTERM);
		while (waitpid(d->pid, &st, 0) < 0 && errno == EINTR)
			;
	}
	d->pid = 0;
	rmdir(d->dir);
	return WIFEXITED(st) && !WEXITSTATUS(st) ? 0 : -1;
}
