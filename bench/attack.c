/* SPDX-License-Identifier: MIT */
/*
 * bench/attack: what hostile clients of another user cost a good one. A
 * private prefixd (default limits) serves one good client thread that
 * MATCHes + RELEASEs a cached 16-block chain in a loop, while a child
 * process of another uid (60001: run as root) attacks it, one attack per
 * phase:
 *
 *   quiet      no attack (before each attack: the reference it is held to)
 *   bodies     500 connections: HELLO, then the header of a 4 MiB MATCH
 *              body, then one byte every 100 ms
 *   idle       2000 connections that send nothing
 *   slowloris  500 connections that send half a header, then nothing
 *   flood      connect, HELLO and close, as fast as one process can
 *
 * For each phase: the good client's MATCH p50/p99 (and the ratio of the p99
 * to the quiet phase before it), the daemon's largest RSS seen (sampled
 * every 50 ms from /proc), and how many of its ops failed. Target: every
 * attack's p99 at most 2x the quiet one, RSS bounded, no failed op.
 *
 *   attack [--seconds S]    S seconds per phase (default 12: past the
 *                           daemon's 10 s request timeout)
 *
 * Prints one JSON object; exits 1 when something fails or a target is
 * missed (the figures are printed either way).
 */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "daemon_util.h"
#include "opts.h"
#include "prefixd.h"
#include "report.h"
#include "sock.h"
#include "wire.h"

#define CHAIN_BLOCKS 16
#define ATTACK_UID 60001
#define ATTACK_GID 65534
#define MAX_SAMPLES (1u << 22)
#define TARGET_P99_RATIO 2.0
#define NAME "attack"

static struct test_daemon td;

/* ==== The good client ==== */

struct good {
	pthread_t thread;
	atomic_int stop;
	atomic_uint n;          /* samples so far */
	atomic_uint failed;
	uint32_t *us;           /* MATCH + RELEASE latencies */
};

static void *good_main(void *arg)
{
	struct good *g = arg;
	struct prefixd_layout l = td_layout(1);
	struct prefixd *c;
	if (prefixd_connect(td.sock, &l, &c)) {
		atomic_fetch_add(&g->failed, 1);
		return NULL;
	}
	uint32_t t[CHAIN_BLOCKS * TD_BLOCK_TOKENS];
	for (uint32_t i = 0; i < CHAIN_BLOCKS * TD_BLOCK_TOKENS; i++)
		t[i] = 1000 + i;
	uint32_t stored, dedup;
	if (td_publish(c, 0, t, 0, CHAIN_BLOCKS, &stored, &dedup))
		atomic_fetch_add(&g->failed, 1);
	while (!atomic_load(&g->stop)) {
		uint64_t lease;
		uint32_t hit;
		const void *kv[CHAIN_BLOCKS];
		double t0 = bench_now();
		int rc = prefixd_match(c, t, CHAIN_BLOCKS, &lease, &hit, kv);
		if (rc || hit != CHAIN_BLOCKS || prefixd_release(c, lease))
			atomic_fetch_add(&g->failed, 1);
		unsigned i = atomic_load(&g->n);
		if (i < MAX_SAMPLES) {
			g->us[i] = (uint32_t)((bench_now() - t0) * 1e6);
			atomic_store(&g->n, i + 1);
		}
	}
	prefixd_close(c);
	return NULL;
}

/* ==== Attackers (a child of another uid) ==== */

enum attack { QUIET, BODIES, IDLE, SLOWLORIS, FLOOD, NATTACKS };
static const char *const attack_name[] = { "quiet", "bodies", "idle", "slowloris", "flood" };

static int raw_connect(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	if (strlen(td.sock) >= sizeof(a.sun_path))
		return -1;
	memcpy(a.sun_path, td.sock, strlen(td.sock) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		close(fd);
		return -1;
	}
	return fd;
}

/* HELLO on a raw connection; 0 when answered OK. */
static int raw_hello(int fd)
{
	uint8_t fp[PD_FP_SIZE], body[128];
	memset(fp, 2, sizeof(fp));
	struct pd_hello m = { PD_VERSION, PD_VERSION, TD_BLOCK_TOKENS, TD_BLOCK_BYTES, 1, fp, 0, NULL };
	size_t n = pd_hello_encode(&m, body, sizeof(body));
	struct pd_hdr h = { PD_MAGIC, PD_VERSION, PD_OP_HELLO, 0, 0, 1, (uint32_t)n };
	if (pd_send(fd, &h, body, NULL, 0))
		return -1;
	struct pd_hdr r;
	uint8_t *rb = NULL;
	int fds[PD_MAX_FDS], nfds = 0;
	int rc = pd_recv(fd, &r, &rb, fds, &nfds);
	free(rb);
	return rc || r.status ? -1 : 0;
}

static void attack_run(enum attack a)
{
	enum { MAXC = 2000 };
	static int fds[MAXC];
	int n = 0;
	if (a == BODIES || a == SLOWLORIS || a == IDLE) {
		int want = a == IDLE ? 2000 : 500;
		for (; n < want; n++)
			if ((fds[n] = raw_connect()) < 0)
				break;
	}
	if (a == BODIES) {
		struct pd_hdr h = { PD_MAGIC, PD_VERSION, PD_OP_MATCH, 0, 0, 5, PD_MAX_BODY };
		uint8_t hb[PD_HDR_SIZE];
		pd_hdr_encode(&h, hb);
		for (int i = 0; i < n; i++)
			if (raw_hello(fds[i]) || write(fds[i], hb, sizeof(hb)) != sizeof(hb))
				continue;
	} else if (a == SLOWLORIS) {
		for (int i = 0; i < n; i++)
			if (write(fds[i], "PFXD\x02\x00", 6) != 6)
				continue;
	}
	for (;;) {
		if (a == FLOOD) {
			int fd = raw_connect();
			if (fd >= 0) {
				raw_hello(fd);
				close(fd);
			}
			continue;
		}
		if (a == BODIES)
			for (int i = 0; i < n; i++)
				if (send(fds[i], "\0", 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
					continue;
		usleep(100000);
	}
}

static pid_t attack_start(enum attack a)
{
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	struct rlimit rl = { 8192, 8192 };
	setrlimit(RLIMIT_NOFILE, &rl);
	gid_t g = ATTACK_GID;
	if (setgroups(1, &g) || setresgid(g, g, g) ||
	    setresuid(ATTACK_UID, ATTACK_UID, ATTACK_UID))
		_exit(64);
	signal(SIGPIPE, SIG_IGN);
	attack_run(a);
	_exit(0);
}

/* ==== Measuring ==== */

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

static double pct(uint32_t *v, unsigned n, double q)
{
	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), cmp_u32);
	return v[(unsigned)(q * (n - 1))];
}

struct phase {
	double p50, p99, ratio;
	uint64_t rss_max;
	unsigned ops, failed;
};

/* One phase of `seconds`: its attack runs in a child while the good client
 * keeps measuring; the first second is not measured (the attack sets up). */
static struct phase run_phase(struct good *g, enum attack a, double seconds)
{
	struct phase p = { 0 };
	pid_t child = a == QUIET ? 0 : attack_start(a);
	double t0 = bench_now();
	while (bench_now() - t0 < 1.0)
		usleep(50000);
	unsigned from = atomic_load(&g->n), failed0 = atomic_load(&g->failed);
	t0 = bench_now();
	while (bench_now() - t0 < seconds) {
		uint64_t r = td_rss(td.pid);
		p.rss_max = r > p.rss_max ? r : p.rss_max;
		usleep(50000);
	}
	unsigned to = atomic_load(&g->n);
	p.failed = atomic_load(&g->failed) - failed0;
	if (child > 0) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
	}
	p.ops = to - from;
	p.p50 = pct(g->us + from, p.ops, 0.50);
	p.p99 = pct(g->us + from, p.ops, 0.99);
	return p;
}

int main(int argc, char **argv)
{
	double seconds = 12;
	static const struct option lopts[] = { { "seconds", required_argument, NULL, 's' },
					       { "help", no_argument, NULL, 'h' },
					       { 0 } };
	int c;
	while ((c = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
		if (c == 's') {
			seconds = opt_double(NAME, "seconds", optarg, 1, 600);
			continue;
		}
		fprintf(c == 'h' ? stdout : stderr, "usage: attack [--seconds S]  (S from 1 to 600)\n");
		return c == 'h' ? 0 : 2;
	}
	if (optind < argc) {
		fprintf(stderr, "usage: attack [--seconds S]  (S from 1 to 600)\n");
		return 2;
	}
	if (geteuid() != 0) {
		fprintf(stderr, "bench/attack: run as root (the attackers are uid %d)\n", ATTACK_UID);
		return 1;
	}
	const char *args[] = { "--block-tokens", "4", "--memory", "256M", "--threads", "2",
			       "--group", "65534", NULL };
	if (td_start(&td, args) || td_share_dir(&td))
		return 1;
	struct good g = { .us = malloc(MAX_SAMPLES * sizeof(uint32_t)) };
	if (!g.us || pthread_create(&g.thread, NULL, good_main, &g))
		return 1;
	struct bench_cpu cpu0;
	bench_cpu_now(&cpu0);
	uint64_t rss_start = td_rss(td.pid);
	struct phase ph[2 * NATTACKS];
	int np = 0;
	unsigned failed = 0;
	uint64_t rss_max = 0;
	double worst_ratio = 0;
	for (enum attack a = BODIES; a < NATTACKS; a++) {
		ph[np] = run_phase(&g, QUIET, seconds);
		ph[np + 1] = run_phase(&g, a, seconds);
		ph[np + 1].ratio = ph[np].p99 > 0 ? ph[np + 1].p99 / ph[np].p99 : 0;
		worst_ratio = ph[np + 1].ratio > worst_ratio ? ph[np + 1].ratio : worst_ratio;
		for (int i = np; i < np + 2; i++) {
			failed += ph[i].failed;
			rss_max = ph[i].rss_max > rss_max ? ph[i].rss_max : rss_max;
		}
		np += 2;
	}
	atomic_store(&g.stop, 1);
	pthread_join(g.thread, NULL);
	double others, steal;
	bench_cpu_since(&cpu0, &others, &steal);
	int stopped = td_stop(&td);
	char phases[4096];
	size_t at = (size_t)snprintf(phases, sizeof(phases), "[");
	for (int i = 0; i < np && at < sizeof(phases); i++) {
		int atk = i % 2;
		at += (size_t)snprintf(phases + at, sizeof(phases) - at,
				       "%s\n    {\"phase\": \"%s\", \"ops\": %u, \"p50_us\": %.1f, \"p99_us\": %.1f, ",
				       i ? "," : "", atk ? attack_name[1 + i / 2] : "quiet", ph[i].ops,
				       ph[i].p50, ph[i].p99);
		if (atk && at < sizeof(phases))
			at += (size_t)snprintf(phases + at, sizeof(phases) - at,
					       "\"p99_vs_quiet\": %.2f, ", ph[i].ratio);
		if (at < sizeof(phases))
			at += (size_t)snprintf(phases + at, sizeof(phases) - at,
					       "\"rss_max_mb\": %.1f, \"failed_ops\": %u}",
					       ph[i].rss_max / 1048576.0, ph[i].failed);
	}
	if (at < sizeof(phases))
		snprintf(phases + at, sizeof(phases) - at, "\n  ]");
	report_begin(NAME);
	report_str("bench", "attack");
	report_fmt("seconds_per_phase", "%.1f", seconds);
	report_str("op", "prefixd_match of a cached %d-block chain + prefixd_release, one client thread of uid %u",
		   CHAIN_BLOCKS, (unsigned)geteuid());
	report_fmt("phases", "%s", phases);
	report_fmt("rss_start_mb", "%.1f", rss_start / 1048576.0);
	report_fmt("rss_max_mb", "%.1f", rss_max / 1048576.0);
	report_fmt("failed_ops", "%u", failed);
	report_fmt("daemon_clean_stop", "%s", stopped ? "false" : "true");
	report_machine();
	report_noise(others, steal);
	/* The worst attack phase's p99 against its quiet phase's. */
	report_target("p99_vs_quiet_at_most", worst_ratio, REPORT_AT_MOST, TARGET_P99_RATIO);
	report_target("failed_ops", failed, REPORT_AT_MOST, 0);
	report_require(!stopped, "prefixd did not stop cleanly");
	bool met = report_end("each attack phase follows a quiet phase of the same length; p99_vs_quiet compares the two. The attackers run in a child of uid %d; the first second of a phase is not measured. rss_max_mb: the daemon's VmRSS, sampled every 50 ms",
			      ATTACK_UID);
	free(g.us);
	return met ? 0 : 1;
}
