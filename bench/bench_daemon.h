/* SPDX-License-Identifier: MIT */
/* A private prefixd for a benchmark: its own socket in a temporary directory. */
#ifndef PFX_BENCH_DAEMON_H
#define PFX_BENCH_DAEMON_H

#include <limits.h>
#include <sys/types.h>

struct bench_daemon {
	pid_t pid;
	char dir[64];
	char sock[128];
};

/* Starts PREFIXD_EXE with --socket and the given extra arguments
 * (NULL-terminated) and waits until it accepts connections. Its log goes
 * to stderr. 0, or -1 with the reason on stderr. */
int bench_daemon_start_argv(struct bench_daemon *d, const char *const *args);
#define bench_daemon_start(d, ...) \
	bench_daemon_start_argv(d, (const char *const[]){ __VA_ARGS__, NULL })
/* SIGTERM and wait: 0 when it stopped cleanly. */
int bench_daemon_stop(struct bench_daemon *d);

#endif
