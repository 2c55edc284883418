/* SPDX-License-Identifier: MIT */
/*
 * Single flight: clients that start one prompt at once, on one prefixd.
 * Each client is a thread with its own connection (a process of its own
 * where the claimant must die). Plain C for the TSan driver.
 */
#include "flight_cases.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon_util.h"

#define BLOCKS 16       /* of the prompt */
#define HALF (BLOCKS / 2)
#define MAX_CLIENTS 16

struct client {
	const char *sock;
	pthread_barrier_t *start;
	bool stall;          /* after claiming, hold the claim until told */
	atomic_bool *release_stall;
	uint32_t flight, hit, waited_ms;
	double answered_s;   /* when its match came back */
	char why[200];
};

static void prompt(uint32_t *t)
{
	td_prompt(t, BLOCKS, 500);
}

/* Publishes the prompt in two parts, as a runtime prefilling in chunks
 * does: the waiters wake after each. */
static int compute_and_publish(struct prefixd *c, const uint32_t *t, char *why, size_t len)
{
	uint32_t stored, dedup, hit;
	uint64_t lease;
	const void *kv[BLOCKS];
	usleep(100000); /* computing the first half */
	if (td_publish(c, 0, t, 0, HALF, &stored, &dedup) || stored + dedup != HALF) {
		snprintf(why, len, "publish of the first half: %s", prefixd_errmsg());
		return -1;
	}
	/* A lease on the first half, which the second continues. */
	if (prefixd_match(c, t, HALF, &lease, &hit, kv) || hit != HALF) {
		snprintf(why, len, "the first half is not cached (hit %u)", hit);
		return -1;
	}
	usleep(100000);
	int rc = td_publish(c, lease, t, HALF, BLOCKS - HALF, &stored, &dedup);
	prefixd_release(c, lease);
	if (rc || stored + dedup != BLOCKS - HALF) {
		snprintf(why, len, "publish of the second half: %s", prefixd_errmsg());
		return -1;
	}
	return 0;
}

static void *client_main(void *arg)
{
	struct client *cl = arg;
	struct prefixd *c = td_connect(cl->sock, 1, cl->why, sizeof(cl->why));
	if (cl->start)
		pthread_barrier_wait(cl->start);
	if (!c)
		return NULL;
	uint32_t t[BLOCKS * TD_BLOCK_TOKENS];
	prompt(t);
	uint64_t lease;
	const void *kv[BLOCKS];
	struct prefixd_match_info info;
	if (prefixd_match_wait(c, t, BLOCKS, 10000, &lease, &cl->hit, kv, &info)) {
		snprintf(cl->why, sizeof(cl->why), "match: %s", prefixd_errmsg());
		prefixd_close(c);
		return NULL;
	}
	cl->answered_s = td_now_s();
	cl->flight = info.flight;
	cl->waited_ms = info.waited_ms;
	for (uint32_t b = 0; b < cl->hit; b++)
		if (!td_block_ok(t, b, kv[b]))
			snprintf(cl->why, sizeof(cl->why), "block %u attached is not the prompt's", b);
	if (lease)
		prefixd_release(c, lease);
	bool owns = info.flight == PREFIXD_FLIGHT_CLAIMED || info.flight == PREFIXD_FLIGHT_INHERITED;
	if (owns && cl->stall) {
		while (!atomic_load(cl->release_stall))
			usleep(1000);
	} else if (owns && !cl->why[0]) {
		compute_and_publish(c, t, cl->why, sizeof(cl->why));
	}
	prefixd_close(c);
	return NULL;
}

/* Counts the clients' outcomes; the first client's error into why. */
static int tally(struct client *cl, int n, int count[4], char *why, size_t len)
{
	memset(count, 0, 4 * sizeof(int));
	for (int i = 0; i < n; i++) {
		if (cl[i].why[0]) {
			snprintf(why, len, "client %d: %s", i, cl[i].why);
			return -1;
		}
		if (cl[i].flight > 3) {
			snprintf(why, len, "client %d: flight %u", i, cl[i].flight);
			return -1;
		}
		count[cl[i].flight]++;
	}
	return 0;
}

/* The waiters attached the whole prompt. */
static int waiters_attached(struct client *cl, int n, char *why, size_t len)
{
	for (int i = 0; i < n; i++)
		if (cl[i].flight == PREFIXD_FLIGHT_WAITED && cl[i].hit != BLOCKS) {
			snprintf(why, len, "a waiter attached %u of %d blocks", cl[i].hit, BLOCKS);
			return -1;
		}
	return 0;
}

static int stop(struct test_daemon *d, int rc, char *why, size_t len)
{
	int st = td_stop(d);
	if (!rc && st) {
		snprintf(why, len, "prefixd did not stop cleanly (status %d)", st);
		return -1;
	}
	return rc;
}

int case_flight_one_computes(int n, char *why, size_t len)
{
	struct test_daemon d;
	const char *args[] = { "--block-tokens", "4", "--memory", "64M", NULL };
	if (n < 2 || n > MAX_CLIENTS || td_start(&d, args)) {
		snprintf(why, len, "cannot start prefixd");
		return -1;
	}
	pthread_barrier_t start;
	pthread_barrier_init(&start, NULL, (unsigned)n);
	struct client cl[MAX_CLIENTS] = { 0 };
	pthread_t th[MAX_CLIENTS];
	for (int i = 0; i < n; i++) {
		cl[i].sock = d.sock;
		cl[i].start = &start;
		pthread_create(&th[i], NULL, client_main, &cl[i]);
	}
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&start);
	int count[4], rc = tally(cl, n, count, why, len);
	if (!rc && (count[PREFIXD_FLIGHT_CLAIMED] != 1 || count[PREFIXD_FLIGHT_WAITED] != n - 1)) {
		snprintf(why, len, "%d claimed and %d waited of %d clients (%d none, %d inherited)",
			 count[1], count[2], n, count[0], count[3]);
		rc = -1;
	}
	if (!rc)
		rc = waiters_attached(cl, n, why, len);
	struct prefixd_stats s;
	if (!rc && td_stats(&d, &s)) {
		snprintf(why, len, "stats: %s", prefixd_errmsg());
		rc = -1;
	}
	/* Each block computed and published once: nothing deduplicated. */
	if (!rc && (s.published != BLOCKS || s.dedup || s.claims != 1 || s.waits != (uint64_t)n - 1 ||
		    s.claims_inherited || s.claims_expired || !s.wait_ms)) {
		snprintf(why, len, "published %llu dedup %llu claims %llu waits %llu inherited %llu expired %llu wait_ms %llu",
			 (unsigned long long)s.published, (unsigned long long)s.dedup,
			 (unsigned long long)s.claims, (unsigned long long)s.waits,
			 (unsigned long long)s.claims_inherited, (unsigned long long)s.claims_expired,
			 (unsigned long long)s.wait_ms);
		rc = -1;
	}
	return stop(&d, rc, why, len);
}

/* Waits until the daemon has n MATCHes waiting in all (up to 5 s). */
static int wait_for_waiters(struct test_daemon *d, uint64_t n)
{
	struct prefixd_stats s = { 0 };
	for (int i = 0; i < 500; i++) {
		if (!td_stats(d, &s) && s.waits >= n)
			return 0;
		usleep(10000);
	}
	return -1;
}

/* Starts 3 waiters once the claim is held, and joins them. */
static void run_waiters(struct test_daemon *d, struct client *cl, int n, pthread_t *th)
{
	for (int i = 0; i < n; i++) {
		cl[i].sock = d->sock;
		pthread_create(&th[i], NULL, client_main, &cl[i]);
	}
}

int case_flight_claimant_killed(char *why, size_t len)
{
	struct test_daemon d;
	const char *args[] = { "--block-tokens", "4", "--memory", "64M", "--claim-timeout", "3",
			       NULL };
	if (td_start(&d, args)) {
		snprintf(why, len, "cannot start prefixd");
		return -1;
	}
	int p[2];
	if (pipe(p)) {
		snprintf(why, len, "pipe: %s", strerror(errno));
		return stop(&d, -1, why, len);
	}
	pid_t child = fork();
	if (child == 0) {
		/* The claimant: claims, says so, and waits to be killed. */
		close(p[0]);
		char ignored[200];
		struct prefixd *c = td_connect(d.sock, 1, ignored, sizeof(ignored));
		uint32_t t[BLOCKS * TD_BLOCK_TOKENS], hit;
		prompt(t);
		uint64_t lease;
		const void *kv[BLOCKS];
		struct prefixd_match_info info;
		char ok = c && !prefixd_match_wait(c, t, BLOCKS, 10000, &lease, &hit, kv, &info) &&
				  info.flight == PREFIXD_FLIGHT_CLAIMED
			  ? 'c'
			  : 'x';
		if (write(p[1], &ok, 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(p[1]);
	char said = 0;
	int rc = child > 0 && read(p[0], &said, 1) == 1 && said == 'c' ? 0 : -1;
	close(p[0]);
	if (rc) {
		snprintf(why, len, "the claimant (a child) did not claim");
		if (child > 0) {
			kill(child, SIGKILL);
			waitpid(child, NULL, 0);
		}
		return stop(&d, -1, why, len);
	}
	struct client cl[3] = { 0 };
	pthread_t th[3];
	run_waiters(&d, cl, 3, th);
	if (wait_for_waiters(&d, 3)) {
		snprintf(why, len, "the 3 clients did not wait");
		rc = -1;
	}
	double killed = td_now_s();
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	int count[4];
	if (!rc)
		rc = tally(cl, 3, count, why, len);
	if (!rc && (count[PREFIXD_FLIGHT_INHERITED] != 1 || count[PREFIXD_FLIGHT_WAITED] != 2)) {
		snprintf(why, len, "%d inherited and %d waited of 3 (%d none, %d claimed)", count[3],
			 count[2], count[0], count[1]);
		rc = -1;
	}
	/* The claimant's close wakes them: no need to wait for its deadline. */
	for (int i = 0; !rc && i < 3; i++)
		if (cl[i].flight == PREFIXD_FLIGHT_INHERITED && cl[i].answered_s - killed > 3 + 1.0) {
			snprintf(why, len, "inherited %.2f s after the kill (claim timeout 3 s)",
				 cl[i].answered_s - killed);
			rc = -1;
		}
	if (!rc)
		rc = waiters_attached(cl, 3, why, len);
	struct prefixd_stats s;
	if (!rc && (td_stats(&d, &s) || s.claims_inherited != 1 || s.claims_expired != 1 ||
		    s.published != BLOCKS || s.dedup)) {
		snprintf(why, len, "inherited %llu expired %llu published %llu dedup %llu",
			 (unsigned long long)s.claims_inherited, (unsigned long long)s.claims_expired,
			 (unsigned long long)s.published, (unsigned long long)s.dedup);
		rc = -1;
	}
	return stop(&d, rc, why, len);
}

int case_flight_claimant_stalls(char *why, size_t len)
{
	struct test_daemon d;
	const char *args[] = { "--block-tokens", "4", "--memory", "64M", "--claim-timeout", "0.5",
			       NULL };
	if (td_start(&d, args)) {
		snprintf(why, len, "cannot start prefixd");
		return -1;
	}
	atomic_bool release = false;
	struct client staller = { .sock = d.sock, .stall = true, .release_stall = &release };
	pthread_t st;
	pthread_create(&st, NULL, client_main, &staller);
	struct prefixd_stats s = { 0 };
	for (int i = 0; i < 500 && (td_stats(&d, &s) || !s.claims); i++)
		usleep(10000);
	struct client cl[3] = { 0 };
	pthread_t th[3];
	int rc = 0;
	double t0 = td_now_s();
	run_waiters(&d, cl, 3, th);
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	double took = td_now_s() - t0;
	atomic_store(&release, true);
	pthread_join(st, NULL);
	int count[4];
	if (staller.why[0] || staller.flight != PREFIXD_FLIGHT_CLAIMED) {
		snprintf(why, len, "the staller did not claim: %s", staller.why);
		rc = -1;
	}
	if (!rc)
		rc = tally(cl, 3, count, why, len);
	if (!rc && (count[PREFIXD_FLIGHT_INHERITED] != 1 || count[PREFIXD_FLIGHT_WAITED] != 2)) {
		snprintf(why, len, "%d inherited and %d waited of 3 (%d none, %d claimed)", count[3],
			 count[2], count[0], count[1]);
		rc = -1;
	}
	for (int i = 0; !rc && i < 3; i++)
		if (cl[i].flight == PREFIXD_FLIGHT_INHERITED && cl[i].waited_ms < 300) {
			snprintf(why, len, "inherited after %u ms, before the claim timeout (500 ms)",
				 cl[i].waited_ms);
			rc = -1;
		}
	/* Delayed by the claim timeout once: not once per waiter. */
	if (!rc && took > 0.5 + 1.5) {
		snprintf(why, len, "the waiters took %.2f s with a claim timeout of 0.5 s", took);
		rc = -1;
	}
	if (!rc)
		rc = waiters_attached(cl, 3, why, len);
	if (!rc && (td_stats(&d, &s) || s.claims_inherited != 1 || s.claims_expired != 1 ||
		    s.published != BLOCKS)) {
		snprintf(why, len, "inherited %llu expired %llu published %llu",
			 (unsigned long long)s.claims_inherited, (unsigned long long)s.claims_expired,
			 (unsigned long long)s.published);
		rc = -1;
	}
	return stop(&d, rc, why, len);
}
