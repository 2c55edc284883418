/* SPDX-License-Identifier: MIT */
/*
 * Many clients at once on one prefixd: every thread shares one prompt
 * prefix and adds its own blocks, matching, publishing and releasing in a
 * loop and checking every attached byte. Plain C for the TSan driver.
 */
#include "daemon_cases.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "daemon_util.h"

#define THREADS 8
#define ROUNDS 150
#define SHARED 3 /* blocks every thread's prompt starts with */
#define OWN 2

#define VARIANTS 7 /* of each thread's own blocks */

/* Thread id's prompt, variant v: the shared blocks, then its own. */
static void prompt_of(int id, int v, uint32_t *t)
{
	for (uint32_t i = 0; i < SHARED * TD_BLOCK_TOKENS; i++)
		t[i] = i;
	for (uint32_t i = SHARED * TD_BLOCK_TOKENS; i < (SHARED + OWN) * TD_BLOCK_TOKENS; i++)
		t[i] = 1000000u * (uint32_t)(id + 1) + 1000u * (uint32_t)v + i;
}

/* After a client's first round the shared blocks are cached (its own
 * publish stored them, or was answered once another's copy of them was
 * in: docs/PROTOCOL.md, PUBLISH) and, in memory alone, cannot
 * be evicted: every MATCH of every thread makes them the most recently
 * used, and block SHARED - 1 stays a parent of the threads' latest own
 * blocks. So every later MATCH attaches at least them (`every_round`);
 * one that does not is a daemon that lost or stopped serving them. With a
 * disk tier a MATCH may be cut where memory has no room yet for a block
 * read back, so there each client must attach them in some later round. */
struct worker {
	const char *sock;
	int id;
	bool every_round;
	int later_hits;     /* rounds after the first that attached the shared blocks */
	char why[200];
};

static void *client_loop(void *arg)
{
	struct worker *w = arg;
	struct prefixd *c = td_connect(w->sock, 1, w->why, sizeof(w->why));
	if (!c)
		return NULL;
	uint32_t t[(SHARED + OWN) * TD_BLOCK_TOKENS];
	for (int r = 0; r < ROUNDS && !w->why[0]; r++) {
		/* Own blocks vary by thread and round: publishes and evictions race. */
		prompt_of(w->id, r % VARIANTS, t);
		uint64_t lease;
		uint32_t hit, stored, dedup;
		const void *kv[SHARED + OWN];
		if (prefixd_match(c, t, SHARED + OWN, &lease, &hit, kv)) {
			snprintf(w->why, sizeof(w->why), "match: %s", prefixd_errmsg());
			break;
		}
		if (r > 0 && hit >= SHARED)
			w->later_hits++;
		else if (r > 0 && w->every_round)
			snprintf(w->why, sizeof(w->why),
				 "round %d: %u blocks attached, not the %d shared ones cached since round 0",
				 r, hit, SHARED);
		for (uint32_t b = 0; b < hit; b++)
			if (!td_block_ok(t, b, kv[b]))
				snprintf(w->why, sizeof(w->why), "round %d: block %u has wrong bytes", r, b);
		if (hit < SHARED + OWN &&
		    td_publish(c, lease, t, hit, SHARED + OWN - hit, &stored, &dedup))
			snprintf(w->why, sizeof(w->why), "publish: %s", prefixd_errmsg());
		if (lease && prefixd_release(c, lease))
			snprintf(w->why, sizeof(w->why), "release: %s", prefixd_errmsg());
	}
	if (!w->why[0] && !w->later_hits)
		snprintf(w->why, sizeof(w->why), "no MATCH after the first round attached the %d shared blocks",
			 SHARED);
	prefixd_close(c);
	return NULL;
}

/* The threads' loops on a running daemon: 0, or -1 with why. */
static int run_clients(const struct test_daemon *td, bool every_round, char *why, size_t len)
{
	struct worker w[THREADS];
	pthread_t th[THREADS];
	for (int i = 0; i < THREADS; i++) {
		w[i] = (struct worker){ td->sock, i, every_round, 0, "" };
		pthread_create(&th[i], NULL, client_loop, &w[i]);
	}
	int rc = 0;
	for (int i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		if (w[i].why[0] && !rc) {
			snprintf(why, len, "client %d: %s", i, w[i].why);
			rc = -1;
		}
	}
	return rc;
}

/* The counters once the leases of closed connections have ended. */
static struct prefixd_stats settled(const struct test_daemon *td)
{
	struct prefixd *c;
	struct prefixd_stats s = { 0 };
	if (!prefixd_connect(td->sock, NULL, &c)) {
		/* Closed connections and one-way releases end their leases as
		 * the daemon reads them: give it a moment. */
		for (int i = 0; i < 200 && !prefixd_stats(c, &s) && (s.leases || s.disk_pending); i++)
			usleep(10000);
		prefixd_close(c);
	}
	return s;
}

static int stopped(struct test_daemon *td, int rc, char *why, size_t len)
{
	int st = td_stop(td);
	if (!rc && st) {
		snprintf(why, len, "prefixd exited with %d (a sanitizer report is in its log above)", st);
		rc = -1;
	}
	return rc;
}

int case_daemon_many_clients(char *why, size_t len)
{
	struct test_daemon td;
	/* Room for 48 blocks: the threads' 8 x 7 x 2 own blocks must evict,
	 * and at most 8 x 5 are leased at once, so a publish always finds a
	 * leaf to evict and is never refused. */
	const char *args[] = { "--block-tokens", "4", "--memory", "384K", NULL };
	if (td_start(&td, args)) {
		snprintf(why, len, "prefixd did not start");
		return -1;
	}
	int rc = run_clients(&td, true, why, len);
	struct prefixd_stats s = settled(&td);
	/* Every MATCH after a client's first round hit (see above). */
	uint64_t min_hits = (uint64_t)THREADS * (ROUNDS - 1);
	if (!rc && (s.leases || s.bytes_used > s.budget || !s.evictions || s.errors ||
		    s.hits < min_hits)) {
		snprintf(why, len, "after the run: %llu leases, %llu of %llu bytes, %llu evictions, %llu errors, %llu hits (at least %llu)",
			 (unsigned long long)s.leases, (unsigned long long)s.bytes_used,
			 (unsigned long long)s.budget, (unsigned long long)s.evictions,
			 (unsigned long long)s.errors, (unsigned long long)s.hits,
			 (unsigned long long)min_hits);
		rc = -1;
	}
	return stopped(&td, rc, why, len);
}

/* Every prompt of the threads published and written to disk, one at a
 * time, so that memory evicts only blocks with a record: the threads then
 * restore some, whatever the speed of the writer. */
static int publish_written(const struct test_daemon *td, char *why, size_t len)
{
	struct prefixd *c = td_connect(td->sock, 1, why, len);
	if (!c)
		return -1;
	int rc = 0;
	uint32_t t[(SHARED + OWN) * TD_BLOCK_TOKENS], stored, dedup;
	for (int id = 0; id < THREADS && !rc; id++)
		for (int v = 0; v < VARIANTS && !rc; v++) {
			prompt_of(id, v, t);
			if (td_publish(c, 0, t, 0, SHARED + OWN, &stored, &dedup)) {
				snprintf(why, len, "publish: %s", prefixd_errmsg());
				rc = -1;
			}
			struct prefixd_stats s = { .disk_pending = 1 };
			for (int i = 0; i < 1000 && !rc && !prefixd_stats(c, &s) && s.disk_pending; i++)
				usleep(1000);
			if (!rc && s.disk_pending) {
				snprintf(why, len, "%llu blocks still unwritten after 1 s",
					 (unsigned long long)s.disk_pending);
				rc = -1;
			}
		}
	prefixd_close(c);
	return rc;
}

int case_daemon_many_clients_disk(char *why, size_t len)
{
	char dir[] = "/tmp/pfx-disk-case-XXXXXX", out[256];
	if (!mkdtemp(dir)) {
		snprintf(why, len, "mkdtemp: %s", strerror(errno));
		return -1;
	}
	struct test_daemon td;
	const char *args[] = { "--block-tokens", "4", "--memory", "384K", "--disk-dir", dir, NULL };
	int rc = td_start(&td, args) ? -1 : 0;
	if (rc)
		snprintf(why, len, "prefixd did not start");
	/* Writes, evictions to disk and restores race the clients. */
	if (!rc)
		rc = publish_written(&td, why, len);
	if (!rc)
		rc = run_clients(&td, false, why, len);
	struct prefixd_stats s = rc ? (struct prefixd_stats){ 0 } : settled(&td);
	if (!rc && (s.leases || !s.spills || !s.restores || s.disk_corrupt || s.errors)) {
		snprintf(why, len, "after the run: %llu leases, %llu spills, %llu restores, %llu corrupt, %llu errors",
			 (unsigned long long)s.leases, (unsigned long long)s.spills,
			 (unsigned long long)s.restores, (unsigned long long)s.disk_corrupt,
			 (unsigned long long)s.errors);
		rc = -1;
	}
	if (td.pid)
		rc = stopped(&td, rc, why, len);
	/* Everything comes back after the restart, byte for byte. */
	if (!rc && td_start(&td, args)) {
		snprintf(why, len, "prefixd did not start again");
		rc = -1;
	}
	if (!rc) {
		rc = run_clients(&td, false, why, len);
		s = settled(&td);
		if (!rc && (!s.restores || s.disk_corrupt)) {
			snprintf(why, len, "after the restart: %llu restores, %llu corrupt",
				 (unsigned long long)s.restores, (unsigned long long)s.disk_corrupt);
			rc = -1;
		}
		rc = stopped(&td, rc, why, len);
	}
	td_sh(out, sizeof(out), "rm -rf '%s'", dir);
	return rc;
}
