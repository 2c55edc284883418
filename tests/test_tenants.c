/* SPDX-License-Identifier: MIT */
/*
 * Many users and models on one daemon: the shared budget, eviction across
 * users and models (and the memory it gives back), quotas, pins and their
 * TTLs, and the admin calls (statistics with usage rows, listing,
 * eviction by each selector), which a user makes on their own chains and
 * the daemon's user and root on everyone's, and the shared namespace. The
 * tests run as root; other users are child processes (agents) that drop to
 * uids 60001 to 60003 and act as clients on command.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon_asserts.h"

#define UID_A 60001u
#define UID_B 60002u
#define UID_C 60003u
#define GID_OTHERS 65534u
#define GID_SHARED 60100u /* the shared namespace's group (--shared-group) */
#define KIB 1024ull
#define BB ((uint64_t)TD_BLOCK_BYTES)

static struct test_daemon td;

TestSuite(tenants, .timeout = 60);

/* ==== The daemon ==== */

/* Bytes of the daemon's arenas resident in memory: the pages their memfds
 * (named prefixd-arena) hold, from the descriptors the daemon has open
 * (each arena's read-write and read-only one counted once). Not the Rss
 * of its mappings: it fills new slots without them (copy_file_range), so
 * a page can be resident and never mapped there. */
static uint64_t arena_rss(void)
{
	char dir[64];
	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)td.pid);
	DIR *d = opendir(dir);
	cr_assert(d, "cannot read %s", dir);
	uint64_t sum = 0;
	ino_t seen[256];
	size_t nseen = 0;
	for (struct dirent *e; (e = readdir(d));) {
		char path[320], link[256];
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		ssize_t l = readlink(path, link, sizeof(link) - 1);
		struct stat sb;
		if (l <= 0)
			continue;
		link[l] = 0;
		if (!strstr(link, "memfd:prefixd-arena") || stat(path, &sb))
			continue;
		size_t k = 0;
		while (k < nseen && seen[k] != sb.st_ino)
			k++;
		if (k < nseen)
			continue;
		cr_assert_lt(nseen, sizeof(seen) / sizeof(seen[0]));
		seen[nseen++] = sb.st_ino;
		sum += (uint64_t)sb.st_blocks * 512;
	}
	closedir(d);
	return sum;
}

/* ==== Prompts and chains ==== */

/* The id of the chain of a prompt's first n blocks, in user's namespace. */
static struct prefixd_id id_of(uint8_t model, const uint32_t *t, uint32_t nblocks, uint32_t user)
{
	struct prefixd_layout l = td_layout(model);
	struct prefixd_prompt *p;
	struct prefixd_id id;
	cr_assert_eq(prefixd_prompt_new(&l, &p), 0, "%s", prefixd_errmsg());
	cr_assert_eq(prefixd_prompt_append(p, t, (size_t)nblocks * TD_BLOCK_TOKENS), 0);
	cr_assert_eq(prefixd_prompt_id(p, &id), 0, "%s", prefixd_errmsg());
	prefixd_prompt_free(p);
	cr_assert_eq(id.user, geteuid());
	id.user = user; /* the key does not depend on the user; the namespace does */
	return id;
}

/* Publishes all n blocks of t; asserts every one was stored. */
static void publish_all(struct prefixd *c, const uint32_t *t, uint32_t n, const char *what)
{
	uint32_t stored = 0, dedup = 0;
	int rc = td_publish(c, 0, t, 0, n, &stored, &dedup);
	cr_assert_eq(rc, 0, "%s: rc %d: %s", what, rc, prefixd_errmsg());
	cr_assert_eq(stored + dedup, n, "%s: %u stored, %u there already, of %u", what, stored,
		     dedup, n);
}

/* Blocks of t (n of them) that hit, each checked byte by byte; the lease
 * is released (one-way: admin calls on the same connection see it). */
static uint32_t hits(struct prefixd *c, const uint32_t *t, uint32_t n)
{
	uint64_t lease;
	uint32_t hit;
	const void *kv[64];
	cr_assert_leq(n, 64);
	cr_assert_eq(prefixd_match(c, t, n, &lease, &hit, kv), 0, "%s", prefixd_errmsg());
	for (uint32_t i = 0; i < hit; i++)
		cr_expect(td_block_ok(t, i, kv[i]), "block %u of a hit has its own bytes", i);
	if (lease)
		cr_assert_eq(prefixd_release(c, lease), 0, "%s", prefixd_errmsg());
	return hit;
}

static struct prefixd_evicted evict(struct prefixd *c, struct prefixd_evict_sel sel)
{
	struct prefixd_evicted e;
	cr_assert_eq(prefixd_evict(c, &sel, &e), 0, "selector %d: %s", (int)sel.by, prefixd_errmsg());
	cr_expect_eq(e.bytes, e.blocks * BB, "bytes are blocks of 8 KiB");
	return e;
}

static const struct prefixd_usage *find_usage(const struct prefixd_usage *u, size_t n,
					      uint32_t user, uint8_t model)
{
	uint8_t fp[PREFIXD_FINGERPRINT_BYTES];
	memset(fp, model, sizeof(fp));
	for (size_t i = 0; i < n; i++)
		if (u[i].user == user && !memcmp(u[i].model, fp, sizeof(fp)))
			return &u[i];
	return NULL;
}

static const struct prefixd_chain *find_chain(const struct prefixd_chain *ch, size_t n,
					      struct prefixd_id id)
{
	for (size_t i = 0; i < n; i++)
		if (ch[i].id.user == id.user && !memcmp(ch[i].id.key, id.key, sizeof(id.key)))
			return &ch[i];
	return NULL;
}

static int model_is(const uint8_t *fp, uint8_t model)
{
	for (int i = 0; i < PREFIXD_FINGERPRINT_BYTES; i++)
		if (fp[i] != model)
			return 0;
	return 1;
}

/* ==== Agents: clients of another user, in child processes ==== */

enum ag_op {
	AG_CONNECT = 1, /* model */
	AG_CONNECT_SHARED, /* model, with the shared namespace */
	AG_PUBLISH,     /* prompt (base, n) from the root */
	AG_MATCH,       /* prompt (base, n); the lease is kept */
	AG_RELEASE_ALL,
	AG_LIST,        /* hit: chains; stored: of them in the shared namespace;
			 * bad: of them another user's */
	AG_EVICT,       /* --all; stored: blocks evicted, dedup: kept pinned */
	AG_EVICT_ID,    /* the chain (base, n) of user (0: its own) */
	AG_PIN,         /* the chain (base, n) of user (0: its own); stored:
			 * the pinned bytes it is told / 8 KiB */
	AG_UNPIN,       /* the chain (base, n) of user (0: its own) */
	AG_STATS,       /* stored: blocks, dedup: bytes_used / 8 KiB */
	AG_USAGE,       /* hit: rows; bad: rows of another user */
	AG_HOLD_SHARED, /* one more connection with the shared namespace, of
			 * blocks of 8 KiB x (n + 2), kept open */
	AG_EXPORT,      /* every block, into a file of its own */
	AG_IMPORT,      /* a file of its own (empty) */
	AG_QUIT,
};

struct ag_req {
	int op;
	uint32_t model, base, n;
	uint32_t user;  /* AG_EVICT_ID, AG_PIN, AG_UNPIN: whose chain; 0: its own */
};

struct ag_rep {
	int rc;
	uint32_t stored, dedup, hit, bad;
	char msg[256];
};

struct agent {
	pid_t pid;
	int to, from;
	uint32_t uid;
	uint32_t group; /* a supplementary group besides nogroup; 0: none */
};

static int write_full(int fd, const void *p, size_t n)
{
	const char *b = p;
	while (n) {
		ssize_t w = write(fd, b, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

static int read_full(int fd, void *p, size_t n)
{
	char *b = p;
	while (n) {
		ssize_t r = read(fd, b, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

/* The agent's side: no Criterion here, results go back through the pipe. */
static void agent_serve(uint32_t uid, uint32_t group, int in, int out)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	gid_t g = GID_OTHERS, gs[2] = { GID_OTHERS, group };
	if (setgroups(group ? 2 : 1, gs) || setresgid(g, g, g) || setresuid(uid, uid, uid) ||
	    geteuid() != uid)
		_exit(64);
	struct prefixd *c = NULL, *held[16];
	int nheld = 0;
	uint64_t leases[256];
	int nleases = 0;
	struct ag_req q;
	static uint32_t t[64 * TD_BLOCK_TOKENS];
	while (!read_full(in, &q, sizeof(q))) {
		struct ag_rep r;
		memset(&r, 0, sizeof(r));
		if (q.n > 64)
			q.n = 64;
		td_prompt(t, q.n, q.base);
		switch (q.op) {
		case AG_CONNECT:
		case AG_CONNECT_SHARED: {
			struct prefixd_layout l = td_layout((uint8_t)q.model);
			prefixd_close(c);
			c = NULL;
			nleases = 0;
			r.rc = prefixd_connect_flags(td.sock, &l,
						     q.op == AG_CONNECT_SHARED ? PREFIXD_CONNECT_SHARED : 0,
						     &c);
			break;
		}
		case AG_PUBLISH:
			r.rc = td_publish(c, 0, t, 0, q.n, &r.stored, &r.dedup);
			break;
		case AG_HOLD_SHARED: {
			struct prefixd_layout l = td_layout((uint8_t)q.model);
			l.block_bytes = TD_BLOCK_BYTES * (q.n + 2);
			r.rc = nheld < 16 ? prefixd_connect_flags(td.sock, &l, PREFIXD_CONNECT_SHARED,
								  &held[nheld])
					  : -ENOSPC;
			nheld += !r.rc;
			break;
		}
		case AG_MATCH: {
			uint64_t lease = 0;
			const void *kv[64];
			r.rc = prefixd_match(c, t, q.n, &lease, &r.hit, kv);
			for (uint32_t i = 0; !r.rc && i < r.hit; i++)
				r.bad += !td_block_ok(t, i, kv[i]);
			if (lease && nleases < 256)
				leases[nleases++] = lease;
			break;
		}
		case AG_RELEASE_ALL:
			for (int i = 0; i < nleases; i++)
				r.rc = r.rc ? r.rc : prefixd_release(c, leases[i]);
			nleases = 0;
			break;
		case AG_LIST: {
			struct prefixd_chain *ch = NULL;
			size_t n = 0;
			r.rc = prefixd_list(c, NULL, &ch, &n);
			r.hit = (uint32_t)n;
			for (size_t i = 0; i < n; i++) {
				r.stored += ch[i].id.user == PREFIXD_SHARED_USER;
				r.bad += ch[i].id.user != uid && ch[i].id.user != PREFIXD_SHARED_USER;
			}
			free(ch);
			break;
		}
		case AG_EVICT: {
			struct prefixd_evict_sel sel = { .by = PREFIXD_EVICT_ALL };
			struct prefixd_evicted e = { 0 };
			r.rc = prefixd_evict(c, &sel, &e);
			r.stored = (uint32_t)e.blocks;
			r.dedup = (uint32_t)e.kept_pinned;
			break;
		}
		case AG_EVICT_ID:
		case AG_PIN:
		case AG_UNPIN: {
			struct prefixd_layout l = td_layout((uint8_t)q.model);
			struct prefixd_prompt *p = NULL;
			struct prefixd_id id;
			r.rc = prefixd_prompt_new(&l, &p);
			if (!r.rc)
				r.rc = prefixd_prompt_append(p, t, (size_t)q.n * TD_BLOCK_TOKENS);
			if (!r.rc)
				r.rc = prefixd_prompt_id(p, &id);
			if (!r.rc && id.user != uid)
				r.rc = -ENOTRECOVERABLE; /* the id is not in this user's namespace */
			prefixd_prompt_free(p);
			if (q.user)
				id.user = q.user;
			struct prefixd_evict_sel sel = { .by = PREFIXD_EVICT_ID, .id = id };
			struct prefixd_evicted e = { 0 };
			if (!r.rc && q.op == AG_EVICT_ID) {
				r.rc = prefixd_evict(c, &sel, &e);
				r.stored = (uint32_t)e.blocks;
			} else if (!r.rc) {
				uint64_t pinned = 0;
				r.rc = q.op == AG_PIN ? prefixd_pin(c, &id, 0, &pinned) : prefixd_unpin(c, &id);
				r.stored = (uint32_t)(pinned / BB);
			}
			break;
		}
		case AG_STATS: {
			struct prefixd_stats s;
			r.rc = prefixd_stats(c, &s);
			r.stored = (uint32_t)s.blocks;
			r.dedup = (uint32_t)(s.bytes_used / BB);
			break;
		}
		case AG_EXPORT:
		case AG_IMPORT: {
			FILE *f = tmpfile();
			r.rc = f ? 0 : -errno;
			if (f && q.op == AG_EXPORT)
				r.rc = prefixd_export(c, NULL, NULL, fileno(f), NULL, NULL);
			else if (f)
				r.rc = prefixd_import(c, fileno(f), NULL, NULL);
			if (f)
				fclose(f);
			break;
		}
		case AG_USAGE: {
			struct prefixd_stats s;
			struct prefixd_usage *u = NULL;
			size_t n = 0;
			r.rc = prefixd_stats_usage(c, &s, &u, &n);
			r.hit = (uint32_t)n;
			for (size_t i = 0; i < n; i++)
				r.bad += u[i].user != uid;
			free(u);
			break;
		}
		case AG_QUIT:
			break;
		default:
			r.rc = -EINVAL;
		}
		if (r.rc)
			snprintf(r.msg, sizeof(r.msg), "%s", prefixd_errmsg());
		if (write_full(out, &r, sizeof(r)) || q.op == AG_QUIT)
			break;
	}
	prefixd_close(c);
	while (nheld)
		prefixd_close(held[--nheld]);
	_exit(0); /* no atexit handlers: LSan and Criterion are the parent's */
}

/* An agent of uid in group nogroup and, when group is not 0, in group;
 * it connects with a layout of model (and the shared namespace when
 * shared), which must succeed. */
static struct agent agent_start_in(uint32_t uid, uint32_t group, uint8_t model, int shared)
{
	int down[2], up[2];
	cr_assert_eq(pipe(down), 0);
	cr_assert_eq(pipe(up), 0);
	struct agent a = { .uid = uid, .group = group };
	a.pid = fork();
	cr_assert_geq(a.pid, 0);
	if (a.pid == 0) {
		close(down[1]);
		close(up[0]);
		agent_serve(uid, group, down[0], up[1]);
	}
	close(down[0]);
	close(up[1]);
	a.to = down[1];
	a.from = up[0];
	struct ag_req q = { shared ? AG_CONNECT_SHARED : AG_CONNECT, model, 0, 0, 0 };
	struct ag_rep r;
	cr_assert_eq(write_full(a.to, &q, sizeof(q)), 0);
	struct pollfd p = { a.from, POLLIN, 0 };
	cr_assert_eq(poll(&p, 1, 10000), 1, "the agent of uid %u answers", uid);
	cr_assert_eq(read_full(a.from, &r, sizeof(r)), 0, "the agent of uid %u started", uid);
	cr_assert_eq(r.rc, 0, "uid %u connects: %s", uid, r.msg);
	return a;
}

static struct agent agent_start(uint32_t uid, uint8_t model)
{
	return agent_start_in(uid, 0, model, 0);
}

static struct ag_rep agent_req(struct agent *a, struct ag_req q)
{
	struct ag_rep r;
	cr_assert_eq(write_full(a->to, &q, sizeof(q)), 0, "the agent of uid %u is alive", a->uid);
	struct pollfd p = { a->from, POLLIN, 0 };
	cr_assert_eq(poll(&p, 1, 10000), 1, "the agent of uid %u answers op %d", a->uid, q.op);
	cr_assert_eq(read_full(a->from, &r, sizeof(r)), 0, "the agent of uid %u answers op %d",
		     a->uid, q.op);
	r.msg[sizeof(r.msg) - 1] = 0;
	return r;
}

static struct ag_rep agent_do(struct agent *a, int op, uint32_t model, uint32_t base, uint32_t n)
{
	return agent_req(a, (struct ag_req){ op, model, base, n, 0 });
}

/* op on the chain (base, n) of model 1 in user's namespace (0: its own). */
static struct ag_rep agent_on(struct agent *a, int op, uint32_t base, uint32_t n, uint32_t user)
{
	return agent_req(a, (struct ag_req){ op, 1, base, n, user });
}

static void agent_stop(struct agent *a)
{
	agent_do(a, AG_QUIT, 0, 0, 0);
	int st;
	cr_assert_eq(waitpid(a->pid, &st, 0), a->pid);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the agent of uid %u exited cleanly (%d)",
		  a->uid, st);
	close(a->to);
	close(a->from);
}

/* ==== The shared budget ==== */

Test(tenants, two_users_and_two_models_alternating_on_one_small_budget_are_never_starved)
{
	/* 64 slots of 8 KiB; each prompt takes 40 of them. */
	const char *args[] = { "--memory", "512K", NULL };
	t_start_shared(&td, args);
	struct agent a = agent_start(UID_A, 1), b = agent_start(UID_B, 2);
	const uint64_t budget = 512 * KIB;
	for (uint32_t round = 0; round < 5; round++) {
		struct agent *who[2] = { &a, &b };
		for (int k = 0; k < 2; k++) {
			uint32_t base = 1000000 * (k + 1) + round * 1000;
			struct ag_rep r = agent_do(who[k], AG_PUBLISH, 0, base, 40);
			cr_expect_eq(r.rc, 0, "round %u, uid %u: rc %d: %s", round, who[k]->uid, r.rc,
				     r.msg);
			cr_expect_eq(r.stored, 40, "round %u, uid %u: %u of 40 blocks stored", round,
				     who[k]->uid, r.stored);
			uint64_t rss = arena_rss();
			cr_expect_leq(rss, budget, "round %u, uid %u: arenas hold %llu bytes of a %llu budget",
				      round, who[k]->uid, (unsigned long long)rss,
				      (unsigned long long)budget);
			cr_expect_geq(rss, 40 * BB, "round %u: the 40 blocks just stored are resident (%llu)",
				      round, (unsigned long long)rss);
			struct prefixd_stats s = t_stats(&td);
			cr_expect_leq(s.bytes_used, s.budget, "round %u", round);
			cr_expect_eq(s.budget, budget);
			/* The prompt just published is whole. */
			r = agent_do(who[k], AG_MATCH, 0, base, 40);
			cr_expect_eq(r.hit, 40, "round %u, uid %u: %u hit", round, who[k]->uid, r.hit);
			cr_expect_eq(r.bad, 0);
			cr_expect_eq(agent_do(who[k], AG_RELEASE_ALL, 0, 0, 0).rc, 0);
			t_wait_leases(&td, 0); /* or the other user's publish would find them leased */
		}
	}
	struct prefixd *adm;
	struct prefixd_stats s;
	struct prefixd_usage *u;
	size_t n;
	cr_assert_eq(prefixd_connect(td.sock, NULL, &adm), 0);
	cr_assert_eq(prefixd_stats_usage(adm, &s, &u, &n), 0, "%s", prefixd_errmsg());
	cr_expect_eq(s.published, 400);
	cr_expect_eq(s.evictions, 400 - 64, "everything past the budget was evicted");
	cr_expect_eq(s.blocks, 64);
	const struct prefixd_usage *ua = find_usage(u, n, UID_A, 1), *ub = find_usage(u, n, UID_B, 2);
	cr_assert(ua && ub, "a usage row for each (user, model)");
	cr_expect_gt(ua->evictions, 0, "B's publishes evicted A's blocks");
	cr_expect_gt(ub->evictions, 0, "A's publishes evicted B's blocks");
	cr_expect_eq(ua->evictions + ub->evictions, s.evictions);
	free(u);
	prefixd_close(adm);
	agent_stop(&a);
	agent_stop(&b);
	t_stop(&td);
}

Test(tenants, a_quota_holds_and_one_user_cannot_deny_the_cache_to_another)
{
	/* 64 slots; 32 of them a user. */
	const char *args[] = { "--memory", "512K", "--quota", "256K", NULL };
	t_start_shared(&td, args);
	const uint64_t quota = 256 * KIB;
	struct agent a = agent_start(UID_A, 1), b = agent_start(UID_B, 1);
	/* B first takes its whole quota. */
	struct ag_rep r = agent_do(&b, AG_PUBLISH, 0, 500000, 32);
	cr_assert_eq(r.rc, 0, "%s", r.msg);
	cr_assert_eq(r.stored, 32);
	/* A publishes three times its quota: at its quota it gives up its own
	 * oldest blocks, never B's (the budget is full from A's second prompt
	 * on, and B's blocks are the oldest). */
	for (uint32_t p = 0; p < 4; p++) {
		r = agent_do(&a, AG_PUBLISH, 0, 100000 * (p + 1), 24);
		cr_expect_eq(r.rc, 0, "A's prompt %u: %s", p, r.msg);
		cr_expect_eq(r.stored, 24, "A's prompt %u: %u of 24 stored", p, r.stored);
	}
	r = agent_do(&b, AG_MATCH, 0, 500000, 32);
	cr_expect_eq(r.hit, 32, "A's prompts did not evict B's blocks (%u left)", r.hit);
	cr_expect_eq(r.bad, 0);
	cr_assert_eq(agent_do(&b, AG_RELEASE_ALL, 0, 0, 0).rc, 0);
	/* A leases everything it has left. */
	uint32_t held = 0;
	for (uint32_t p = 0; p < 4; p++) {
		r = agent_do(&a, AG_MATCH, 0, 100000 * (p + 1), 24);
		cr_expect_eq(r.rc, 0);
		cr_expect_eq(r.bad, 0);
		held += r.hit;
	}
	cr_expect_eq(held, 32, "A holds its quota's worth: %u blocks", held);
	struct prefixd *adm;
	struct prefixd_stats s;
	struct prefixd_usage *u;
	size_t n;
	cr_assert_eq(prefixd_connect(td.sock, NULL, &adm), 0);
	cr_assert_eq(prefixd_stats_usage(adm, &s, &u, &n), 0, "%s", prefixd_errmsg());
	cr_expect_eq(s.quota, quota);
	const struct prefixd_usage *ua = find_usage(u, n, UID_A, 1);
	cr_assert(ua);
	cr_expect_leq(ua->bytes, quota, "A's blocks hold %llu bytes, quota %llu",
		      (unsigned long long)ua->bytes, (unsigned long long)quota);
	cr_expect_eq(ua->evictions, 4 * 24 - 32, "A's own blocks made room for A");
	const struct prefixd_usage *ub = find_usage(u, n, UID_B, 1);
	cr_assert(ub);
	cr_expect_eq(ub->evictions, 0, "none of B's");
	free(u);
	/* B still gets its 200K in. */
	r = agent_do(&b, AG_PUBLISH, 0, 600000, 25);
	cr_expect_eq(r.rc, 0, "B is not denied the cache: %s", r.msg);
	cr_expect_eq(r.stored, 25, "%u of 25 stored", r.stored);
	r = agent_do(&b, AG_MATCH, 0, 600000, 25);
	cr_expect_eq(r.hit, 25);
	cr_expect_eq(r.bad, 0);
	/* A at its quota with every block leased: refused, and told why. */
	r = agent_do(&a, AG_PUBLISH, 0, 900000, 8);
	cr_expect_eq(r.rc, -EDQUOT, "rc %d: %s", r.rc, r.msg);
	cr_expect_eq(r.stored, 0);
	cr_expect(strstr(r.msg, "quota"), "the message names the quota: %s", r.msg);
	cr_assert_eq(prefixd_stats_usage(adm, &s, &u, &n), 0);
	cr_expect_eq(s.refused_blocks, 8);
	ua = find_usage(u, n, UID_A, 1);
	ub = find_usage(u, n, UID_B, 1);
	cr_assert(ua && ub);
	cr_expect_eq(ua->bytes, quota, "A's blocks untouched");
	cr_expect_leq(ub->bytes, quota, "B within its quota too");
	cr_expect_leq(s.bytes_used, s.budget);
	free(u);
	prefixd_close(adm);
	agent_stop(&a);
	agent_stop(&b);
	t_stop(&td);
}

Test(tenants, a_model_with_idle_blocks_filling_the_budget_makes_room_for_another_model)
{
	/* 128 slots, all of them model 1's idle blocks (the old bug: a
	 * partition's eviction only ever saw its own blocks, and model 2
	 * stored nothing). */
	const char *args[] = { "--memory", "1M", NULL };
	t_start_shared(&td, args);
	struct prefixd *m1 = t_client(&td, 1), *m2 = t_client(&td, 2);
	uint32_t t1[64 * TD_BLOCK_TOKENS], t2[64 * TD_BLOCK_TOKENS], t3[64 * TD_BLOCK_TOKENS];
	td_prompt(t1, 64, 1000);
	td_prompt(t2, 64, 2000);
	td_prompt(t3, 64, 3000);
	publish_all(m1, t1, 64, "model 1, first half");
	publish_all(m1, t2, 64, "model 1, second half");
	struct prefixd_stats s = t_stats(&td);
	cr_expect_eq(s.blocks, 128);
	cr_expect_eq(s.bytes_used, s.budget, "the budget is full");
	uint32_t stored = 0, dedup = 0;
	int rc = td_publish(m2, 0, t3, 0, 64, &stored, &dedup);
	cr_expect_eq(rc, 0, "rc %d: %s", rc, prefixd_errmsg());
	cr_expect_eq(stored, 64, "model 2 stored %u of 64 blocks", stored);
	s = t_stats(&td);
	cr_expect_eq(s.evictions, 64);
	cr_expect_eq(s.blocks, 128);
	cr_expect_leq(s.bytes_used, s.budget);
	cr_expect_eq(hits(m2, t3, 64), 64, "model 2's prompt is whole");
	cr_expect_eq(hits(m1, t2, 64), 64, "the least recently used blocks went: model 1's newer prompt is whole");
	cr_expect_eq(hits(m1, t1, 64), 0, "and its older one is gone");
	struct prefixd_usage *u;
	size_t n;
	cr_assert_eq(prefixd_stats_usage(m1, &s, &u, &n), 0, "%s", prefixd_errmsg());
	const struct prefixd_usage *u1 = find_usage(u, n, 0, 1);
	cr_assert(u1);
	cr_expect_eq(u1->evictions, 64);
	free(u);
	prefixd_close(m1);
	prefixd_close(m2);
	t_stop(&td);
}

Test(tenants, a_publish_refused_because_everything_is_leased_says_so)
{
	const char *args[] = { "--memory", "512K", NULL };
	t_start_shared(&td, args);
	struct prefixd *a = t_client(&td, 1), *b = t_client(&td, 1);
	uint32_t big[64 * TD_BLOCK_TOKENS], t[8 * TD_BLOCK_TOKENS], stored = 99, dedup = 99, hit;
	td_prompt(big, 64, 1);
	td_prompt(t, 8, 90000);
	publish_all(a, big, 64, "the whole budget");
	/* B leases all but the last 4 blocks. */
	uint64_t lease;
	const void *kv[64];
	cr_assert_eq(prefixd_match(b, big, 60, &lease, &hit, kv), 0);
	cr_assert_eq(hit, 60);
	int rc = td_publish(a, 0, t, 0, 8, &stored, &dedup);
	cr_expect_eq(rc, -ENOSPC, "rc %d: %s", rc, prefixd_errmsg());
	cr_expect(strstr(prefixd_errmsg(), "budget"), "the message names the budget: %s",
		  prefixd_errmsg());
	cr_expect_eq(stored, 4, "the 4 unleased leaves made room for 4 blocks: %u", stored);
	cr_expect_eq(dedup, 0);
	struct prefixd_stats s = t_stats(&td);
	cr_expect_eq(s.refused_blocks, 4);
	cr_expect_eq(s.evictions, 4);
	cr_expect_eq(s.blocks, 64);
	for (uint32_t i = 0; i < hit; i++)
		cr_expect(td_block_ok(big, i, kv[i]), "leased block %u untouched", i);
	cr_expect_eq(hits(a, t, 8), 4, "what was stored is there");
	/* Once the lease ends, the rest goes in. */
	cr_assert_eq(prefixd_release(b, lease), 0);
	t_wait_leases(&td, 0);
	cr_expect_eq(td_publish(a, 0, t, 0, 8, &stored, &dedup), 0, "%s", prefixd_errmsg());
	cr_expect_eq(stored, 4);
	cr_expect_eq(dedup, 4);
	cr_expect_eq(t_stats(&td).refused_blocks, 4);
	prefixd_close(a);
	prefixd_close(b);
	t_stop(&td);
}

/* ==== Administration ==== */

Test(tenants, each_user_sees_counts_evicts_and_pins_only_their_own_chains)
{
	/* 64 slots; --pin-max 16 of them. */
	const char *args[] = { "--memory", "512K", NULL };
	t_start_shared(&td, args);
	struct prefixd *root = t_client(&td, 1);
	uint32_t t[4 * TD_BLOCK_TOKENS];
	td_prompt(t, 4, 100);
	publish_all(root, t, 4, "root's chain");
	struct agent a = agent_start(UID_A, 1), b = agent_start(UID_B, 1);
	struct ag_rep r = agent_do(&a, AG_PUBLISH, 0, 7000, 3);
	cr_assert_eq(r.stored, 3, "%s", r.msg);
	r = agent_do(&b, AG_PUBLISH, 0, 8000, 2);
	cr_assert_eq(r.stored, 2, "%s", r.msg);
	/* Each lists and counts their own. */
	struct agent *who[2] = { &a, &b };
	uint32_t own[2] = { 3, 2 };
	for (int k = 0; k < 2; k++) {
		r = agent_do(who[k], AG_LIST, 0, 0, 0);
		cr_expect_eq(r.rc, 0, "uid %u lists: %s", who[k]->uid, r.msg);
		cr_expect_eq(r.hit, 1, "uid %u sees its one chain, not %u", who[k]->uid, r.hit);
		cr_expect_eq(r.bad, 0, "uid %u sees no other user's chain", who[k]->uid);
		r = agent_do(who[k], AG_STATS, 0, 0, 0);
		cr_expect_eq(r.rc, 0, "uid %u: %s", who[k]->uid, r.msg);
		cr_expect_eq(r.stored, own[k], "uid %u counts its %u blocks, not %u", who[k]->uid,
			     own[k], r.stored);
		cr_expect_eq(r.dedup, own[k], "uid %u: bytes of its blocks", who[k]->uid);
		r = agent_do(who[k], AG_USAGE, 0, 0, 0);
		cr_expect_eq(r.rc, 0, "%s", r.msg);
		cr_expect_eq(r.hit, 1, "uid %u: its one usage row (%u)", who[k]->uid, r.hit);
		cr_expect_eq(r.bad, 0, "uid %u: no other user's row", who[k]->uid);
	}
	/* Root still sees everyone's. */
	struct prefixd_chain *ch;
	size_t n;
	cr_assert_eq(prefixd_list(root, NULL, &ch, &n), 0, "%s", prefixd_errmsg());
	cr_expect_eq(n, 3);
	free(ch);
	cr_expect_eq(t_stats(&td).blocks, 9);
	/* Another's chain cannot be evicted, pinned or unpinned, nor listed
	 * by name. */
	static const int refused[] = { AG_EVICT_ID, AG_PIN, AG_UNPIN };
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		r = agent_on(&a, refused[i], 8000, 2, UID_B);
		cr_expect_eq(r.rc, -EACCES, "op %d on B's chain by A: rc %d: %s", refused[i], r.rc, r.msg);
		cr_expect(strstr(r.msg, "its own chains only") && strstr(r.msg, "not uid 60002's"),
			  "the message says why: %s", r.msg);
		r = agent_on(&a, refused[i], 100, 4, PREFIXD_SHARED_USER);
		cr_expect_eq(r.rc, -EACCES, "op %d on the shared namespace by A: %s", refused[i], r.msg);
	}
	/* A evicts everything it may: its own blocks only. Its pin is told
	 * what its own pins hold, not root's too. */
	struct prefixd_id root_id = id_of(1, t, 4, 0);
	cr_assert_eq(prefixd_pin(root, &root_id, 0, NULL), 0, "%s", prefixd_errmsg());
	r = agent_do(&a, AG_PIN, 1, 7000, 3);
	cr_expect_eq(r.rc, 0, "A pins its own chain: %s", r.msg);
	cr_expect_eq(r.stored, 3, "A's pins hold its 3 blocks; told %u, root's 4 counted too", r.stored);
	cr_assert_eq(prefixd_unpin(root, &root_id), 0, "%s", prefixd_errmsg());
	cr_expect_eq(t_stats(&td).pins, 1);
	r = agent_do(&a, AG_EVICT, 0, 0, 0);
	cr_expect_eq(r.rc, 0, "%s", r.msg);
	cr_expect_eq(r.stored, 0, "A's pin holds its blocks");
	cr_expect_eq(r.dedup, 3, "and only its own are counted as kept");
	r = agent_do(&a, AG_UNPIN, 1, 7000, 3);
	cr_expect_eq(r.rc, 0, "%s", r.msg);
	r = agent_do(&a, AG_EVICT, 0, 0, 0);
	cr_expect_eq(r.stored, 3, "A's 3 blocks, not %u", r.stored);
	struct prefixd_stats s = t_stats(&td);
	cr_expect_eq(s.blocks, 6, "B's and root's blocks stay");
	cr_expect_eq(s.admin_evictions, 3);
	r = agent_do(&b, AG_MATCH, 0, 8000, 2);
	cr_expect_eq(r.hit, 2, "B's chain is whole");
	cr_expect_eq(agent_do(&b, AG_RELEASE_ALL, 0, 0, 0).rc, 0);
	cr_expect_eq(hits(root, t, 4), 4, "root's too");
	t_wait_leases(&td, 0);
	/* B evicts its own chain by id. */
	r = agent_do(&b, AG_EVICT_ID, 1, 8000, 2);
	cr_expect_eq(r.rc, 0, "%s", r.msg);
	cr_expect_eq(r.stored, 2, "B's 2 blocks");
	cr_expect_eq(t_stats(&td).blocks, 4, "only root's are left");
	/* A user's pins stay within --pin-max (16 blocks here). */
	r = agent_do(&a, AG_PUBLISH, 0, 20000, 20);
	cr_assert_eq(r.stored, 20, "%s", r.msg);
	r = agent_do(&a, AG_PIN, 1, 20000, 20);
	cr_expect_eq(r.rc, -E2BIG, "past --pin-max: rc %d: %s", r.rc, r.msg);
	cr_expect(strstr(r.msg, "--pin-max"), "%s", r.msg);
	r = agent_do(&a, AG_PIN, 1, 20000, 16);
	cr_expect_eq(r.rc, 0, "16 blocks fit: %s", r.msg);
	/* Export and import stay the daemon's user's and root's. */
	static const int admin_only[] = { AG_EXPORT, AG_IMPORT };
	for (size_t i = 0; i < 2; i++) {
		r = agent_do(&a, admin_only[i], 1, 0, 0);
		cr_expect_eq(r.rc, -EACCES, "op %d: rc %d: %s", admin_only[i], r.rc, r.msg);
		cr_expect(strstr(r.msg, "root") && strstr(r.msg, "uid 0"), "who may: %s", r.msg);
	}
	agent_stop(&a);
	agent_stop(&b);
	prefixd_close(root);
	t_stop(&td);
}

/* ==== The shared namespace ==== */

Test(tenants, a_shared_prefix_is_published_by_a_publisher_and_attached_by_members_only)
{
	char pubs[16];
	snprintf(pubs, sizeof(pubs), "%u", UID_A);
	char group[16];
	snprintf(group, sizeof(group), "%u", GID_SHARED);
	const char *args[] = { "--shared-group", group, "--shared-publishers", pubs, NULL };
	t_start_shared(&td, args);
	/* A publishes (not a member: a publisher may attach too); B is a
	 * member; C is neither. */
	struct agent a = agent_start_in(UID_A, 0, 1, 1), b = agent_start_in(UID_B, GID_SHARED, 1, 1);
	struct ag_rep r = agent_do(&a, AG_PUBLISH, 0, 7000, 6);
	cr_assert_eq(r.rc, 0, "the publisher publishes: %s", r.msg);
	cr_assert_eq(r.stored, 6);
	/* Into the shared namespace, not A's own. */
	struct prefixd *root = t_client(&td, 1);
	struct prefixd_chain *ch;
	size_t n;
	cr_assert_eq(prefixd_list(root, NULL, &ch, &n), 0, "%s", prefixd_errmsg());
	cr_assert_eq(n, 1);
	cr_expect_eq(ch[0].id.user, PREFIXD_SHARED_USER, "the chain is the shared namespace's");
	cr_expect_eq(ch[0].blocks, 6);
	free(ch);
	/* The member attaches it, byte for byte. */
	r = agent_do(&b, AG_MATCH, 0, 7000, 6);
	cr_expect_eq(r.rc, 0, "%s", r.msg);
	cr_expect_eq(r.hit, 6, "the member attaches the shared prefix: %u blocks", r.hit);
	cr_expect_eq(r.bad, 0);
	/* A MATCH that misses in both counts one miss; one that hits, one hit. */
	struct prefixd_stats s0 = t_stats(&td);
	cr_expect_eq(s0.hits, 1, "one hit (%llu)", (unsigned long long)s0.hits);
	cr_expect_eq(s0.misses, 0, "the miss in B's own namespace is not counted (%llu)",
		     (unsigned long long)s0.misses);
	r = agent_do(&b, AG_MATCH, 0, 999000, 2);
	cr_expect_eq(r.hit, 0);
	struct prefixd_stats s1 = t_stats(&td);
	cr_expect_eq(s1.misses, 1, "a miss in both counts once (%llu)", (unsigned long long)s1.misses);
	cr_expect_eq(s1.query_tokens - s0.query_tokens, 2 * TD_BLOCK_TOKENS, "asked for once");
	/* ...but cannot publish into it: no member can poison what the others
	 * attach, neither from the start nor continuing a shared match. */
	r = agent_do(&b, AG_PUBLISH, 0, 9000, 2);
	cr_expect_eq(r.rc, -EACCES, "a member that is not a publisher: rc %d: %s", r.rc, r.msg);
	cr_expect(strstr(r.msg, "not publish") && strstr(r.msg, "--shared-publishers"),
		  "the message says who may: %s", r.msg);
	cr_expect_eq(r.stored, 0);
	cr_expect_eq(agent_do(&b, AG_RELEASE_ALL, 0, 0, 0).rc, 0);
	/* Nor pin or evict it; it does see it. */
	r = agent_do(&b, AG_LIST, 0, 0, 0);
	cr_expect_eq(r.rc, 0, "%s", r.msg);
	cr_expect_eq(r.hit, 1, "the member lists the shared chain");
	cr_expect_eq(r.stored, 1, "as the shared namespace's");
	r = agent_on(&b, AG_PIN, 7000, 6, PREFIXD_SHARED_USER);
	cr_expect_eq(r.rc, -EACCES, "a member pins the shared chain: %s", r.msg);
	r = agent_on(&b, AG_EVICT_ID, 7000, 6, PREFIXD_SHARED_USER);
	cr_expect_eq(r.rc, -EACCES, "a member evicts the shared chain: %s", r.msg);
	/* The publisher may. */
	r = agent_on(&a, AG_PIN, 7000, 6, PREFIXD_SHARED_USER);
	cr_expect_eq(r.rc, 0, "the publisher pins the shared chain: %s", r.msg);
	r = agent_on(&a, AG_UNPIN, 7000, 6, PREFIXD_SHARED_USER);
	cr_expect_eq(r.rc, 0, "%s", r.msg);
	/* Without asking for it, a member's connection sees only its own. */
	struct agent b2 = agent_start_in(UID_B, GID_SHARED, 1, 0);
	r = agent_do(&b2, AG_MATCH, 0, 7000, 6);
	cr_expect_eq(r.hit, 0, "the shared namespace is attached by choice only");
	/* Its own namespace comes first: B's own chain of the first 2 blocks
	 * is what a shared connection of B attaches. */
	r = agent_do(&b2, AG_PUBLISH, 0, 7000, 2);
	cr_expect_eq(r.stored, 2, "%s", r.msg);
	r = agent_do(&b, AG_MATCH, 0, 7000, 6);
	cr_expect_eq(r.hit, 2, "B's own 2 blocks, not the shared 6 (%u)", r.hit);
	cr_expect_eq(r.bad, 0);
	/* Blocks of B's own arenas and of the shared ones on one connection:
	 * each read from its own (their arena ids differ on the wire). */
	r = agent_do(&b2, AG_PUBLISH, 0, 30000, 3);
	cr_expect_eq(r.stored, 3, "%s", r.msg);
	r = agent_do(&b, AG_MATCH, 0, 30000, 3);
	cr_expect_eq(r.hit, 3, "%s", r.msg);
	cr_expect_eq(r.bad, 0, "B's own blocks, not the shared arena's bytes at their places");
	cr_expect_eq(agent_do(&b, AG_RELEASE_ALL, 0, 0, 0).rc, 0);
	agent_stop(&b2);
	/* An outsider cannot attach it. */
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		gid_t g = GID_OTHERS;
		if (setgroups(1, &g) || setresgid(g, g, g) || setresuid(UID_C, UID_C, UID_C))
			_exit(64);
		struct prefixd_layout l = td_layout(1);
		struct prefixd *c = NULL;
		int rc = prefixd_connect_flags(td.sock, &l, PREFIXD_CONNECT_SHARED, &c);
		int named = rc && strstr(prefixd_errmsg(), "neither a member") != NULL;
		prefixd_close(c);
		_exit(rc == -EACCES && named ? 0 : 1);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "uid %u, in no group of the shared namespace, is refused with a reason (%d)", UID_C,
		  st);
	agent_stop(&a);
	agent_stop(&b);
	prefixd_close(root);
	t_stop(&td);
}

/* A member's HELLO makes nothing in the shared namespace: were it to make
 * the namespace's arenas of a block size, its 8 sizes would be a member's
 * to take, and a publisher's model refused. */
Test(tenants, a_member_cannot_take_the_shared_namespaces_block_sizes)
{
	char group[16], pubs[16];
	snprintf(group, sizeof(group), "%u", GID_SHARED);
	snprintf(pubs, sizeof(pubs), "%u", UID_A);
	const char *args[] = { "--shared-group", group, "--shared-publishers", pubs, NULL };
	t_start_shared(&td, args);
	/* B, a member, attaches first, nothing being published yet, with 8
	 * block sizes (its own 8 too). */
	struct agent b = agent_start_in(UID_B, GID_SHARED, 1, 1);
	for (uint32_t k = 0; k < 7; k++) {
		struct ag_rep r = agent_do(&b, AG_HOLD_SHARED, 1, 0, k);
		cr_assert_eq(r.rc, 0, "the member connects with blocks of size %u: %s", k, r.msg);
	}
	struct agent a = agent_start_in(UID_A, 0, 1, 1);
	struct ag_rep r = agent_do(&a, AG_HOLD_SHARED, 1, 0, 7);
	cr_expect_eq(r.rc, 0, "the publisher's model of a 9th block size: %s", r.msg);
	r = agent_do(&a, AG_PUBLISH, 0, 7000, 3);
	cr_expect_eq(r.rc, 0, "%s", r.msg);
	cr_expect_eq(r.stored, 3, "the publisher publishes");
	/* B's connection, made before there was anything to attach, attaches
	 * what was published since. */
	r = agent_do(&b, AG_MATCH, 0, 7000, 3);
	cr_expect_eq(r.hit, 3, "the member attaches it: %u blocks (%s)", r.hit, r.msg);
	cr_expect_eq(r.bad, 0);
	cr_expect_eq(agent_do(&b, AG_RELEASE_ALL, 0, 0, 0).rc, 0);
	/* And is still refused publishing, first attached or not. */
	r = agent_do(&b, AG_PUBLISH, 0, 9000, 2);
	cr_expect_eq(r.rc, -EACCES, "rc %d: %s", r.rc, r.msg);
	agent_stop(&a);
	agent_stop(&b);
	t_stop(&td);
}

Test(tenants, without_a_shared_namespace_asking_for_it_is_refused)
{
	t_start_shared(&td, NULL);
	struct prefixd_layout l = td_layout(1);
	struct prefixd *c = NULL;
	int rc = prefixd_connect_flags(td.sock, &l, PREFIXD_CONNECT_SHARED, &c);
	cr_expect_eq(rc, -EACCES, "rc %d: %s", rc, prefixd_errmsg());
	cr_expect(strstr(prefixd_errmsg(), "--shared-group"), "%s", prefixd_errmsg());
	cr_expect_null(c);
	cr_expect_eq(prefixd_connect_flags(td.sock, NULL, PREFIXD_CONNECT_SHARED, &c), -EINVAL,
		     "the shared namespace needs a layout");
	cr_expect_eq(prefixd_connect_flags(td.sock, &l, 1u << 7, &c), -EINVAL, "unknown flags");
	t_stop(&td);
}

Test(tenants, a_pinned_chain_survives_a_flood_until_it_is_unpinned)
{
	/* 64 slots; --pin-max is a quarter of it: 16 blocks. */
	const char *args[] = { "--memory", "512K", NULL };
	t_start_shared(&td, args);
	struct prefixd *a = t_client(&td, 1), *f = t_client(&td, 2);
	uint32_t k[12 * TD_BLOCK_TOKENS], l[12 * TD_BLOCK_TOKENS], t[40 * TD_BLOCK_TOKENS];
	td_prompt(k, 12, 10); /* K is its first 8 blocks, K' all 12 */
	td_prompt(l, 12, 50000);
	publish_all(a, k, 8, "K");
	struct prefixd_id idk = id_of(1, k, 8, 0), idk2 = id_of(1, k, 12, 0), idl = id_of(1, l, 12, 0);
	uint64_t pinned = 0;
	cr_assert_eq(prefixd_pin(a, &idk, 0, &pinned), 0, "%s", prefixd_errmsg());
	cr_expect_eq(pinned, 8 * BB);
	struct prefixd_id idk4 = id_of(1, k, 4, 0);
	cr_expect_eq(prefixd_unpin(a, &idk4), -ENOENT, "a block pinned only as part of K is no pin");
	struct prefixd_stats s = t_stats(&td);
	cr_expect_eq(s.pins, 1);
	cr_expect_eq(s.pinned_bytes, 8 * BB);
	cr_expect_eq(s.pin_max, 128 * KIB, "--pin-max defaults to a quarter of --memory");
	for (uint32_t p = 0; p < 20; p++) {
		td_prompt(t, 40, 1000000 + p * 1000);
		publish_all(f, t, 40, "flood");
	}
	s = t_stats(&td);
	cr_expect_geq(s.evictions, 20 * 40 - 56, "the flood went through the budget");
	cr_expect_eq(hits(a, k, 8), 8, "the pinned chain still hits whole");
	/* Past --pin-max. */
	publish_all(a, l, 12, "L");
	int rc = prefixd_pin(a, &idl, 0, &pinned);
	cr_expect_eq(rc, -E2BIG, "8 + 12 blocks pinned > 16: rc %d: %s", rc, prefixd_errmsg());
	cr_expect(strstr(prefixd_errmsg(), "--pin-max"), "the message names --pin-max: %s",
		  prefixd_errmsg());
	s = t_stats(&td);
	cr_expect_eq(s.pins, 1, "the refused pin is not one");
	cr_expect_eq(s.pinned_bytes, 8 * BB);
	/* K extended by 4: its 8 pinned blocks count once. */
	uint32_t stored, dedup;
	cr_assert_eq(td_publish(a, 0, k, 0, 12, &stored, &dedup), 0, "%s", prefixd_errmsg());
	cr_expect_eq(dedup, 8);
	cr_expect_eq(prefixd_pin(a, &idk2, 0, &pinned), 0, "%s", prefixd_errmsg());
	cr_expect_eq(pinned, 12 * BB, "a block under two pins counts once");
	cr_expect_eq(prefixd_unpin(a, &idk2), 0, "%s", prefixd_errmsg());
	s = t_stats(&td);
	cr_expect_eq(s.pins, 1);
	cr_expect_eq(s.pinned_bytes, 8 * BB);
	/* Unpinned, K goes with the next flood. */
	cr_expect_eq(prefixd_unpin(a, &idk), 0, "%s", prefixd_errmsg());
	cr_expect_eq(prefixd_unpin(a, &idk), -ENOENT, "a pin ends once");
	s = t_stats(&td);
	cr_expect_eq(s.pins, 0);
	cr_expect_eq(s.pinned_bytes, 0);
	for (uint32_t p = 0; p < 4; p++) {
		td_prompt(t, 40, 2000000 + p * 1000);
		publish_all(f, t, 40, "second flood");
	}
	cr_expect_eq(hits(a, k, 8), 0, "the unpinned chain was evicted");
	cr_expect_eq(prefixd_pin(a, &idk, 0, &pinned), -ENOENT, "an evicted chain cannot be pinned");
	prefixd_close(a);
	prefixd_close(f);
	t_stop(&td);
}

Test(tenants, a_pin_with_a_ttl_expires)
{
	t_start_shared(&td, NULL);
	struct prefixd *a = t_client(&td, 1);
	uint32_t x[3 * TD_BLOCK_TOKENS], y[3 * TD_BLOCK_TOKENS], z[2 * TD_BLOCK_TOKENS];
	td_prompt(x, 3, 100);
	td_prompt(y, 3, 200);
	td_prompt(z, 2, 300);
	publish_all(a, x, 3, "X");
	publish_all(a, y, 3, "Y");
	publish_all(a, z, 2, "Z");
	struct prefixd_id idx = id_of(1, x, 3, 0), idy = id_of(1, y, 3, 0), idz = id_of(1, z, 2, 0);
	/* TTLs are whole seconds from the daemon's clock: 2 s lasts more than 1. */
	double t0 = td_now_s();
	cr_assert_eq(prefixd_pin(a, &idx, 2, NULL), 0, "%s", prefixd_errmsg());
	cr_assert_eq(prefixd_pin(a, &idy, 0, NULL), 0, "%s", prefixd_errmsg());
	/* Z is pinned for 1 s, then again with no end: the new TTL holds. */
	uint64_t pinned = 0;
	cr_assert_eq(prefixd_pin(a, &idz, 1, &pinned), 0, "%s", prefixd_errmsg());
	cr_expect_eq(pinned, 8 * BB);
	cr_assert_eq(prefixd_pin(a, &idz, 0, &pinned), 0, "%s", prefixd_errmsg());
	cr_expect_eq(pinned, 8 * BB, "pinning again counts nothing twice");
	struct prefixd_chain *ch;
	size_t n;
	cr_assert_eq(prefixd_list(a, NULL, &ch, &n), 0, "%s", prefixd_errmsg());
	const struct prefixd_chain *cx = find_chain(ch, n, idx), *cy = find_chain(ch, n, idy);
	cr_assert(cx && cy);
	cr_expect(cx->pinned);
	cr_expect(cx->pin_ttl_s >= 1 && cx->pin_ttl_s <= 2, "%u s left", cx->pin_ttl_s);
	cr_expect(cy->pinned);
	cr_expect_eq(cy->pin_ttl_s, 0, "no end");
	free(ch);
	struct prefixd_stats s;
	cr_assert_eq(prefixd_stats(a, &s), 0);
	cr_expect_eq(s.pins, 3);
	while (s.pins == 3 && td_now_s() - t0 < 5) {
		usleep(20000);
		cr_assert_eq(prefixd_stats(a, &s), 0);
	}
	double took = td_now_s() - t0;
	cr_expect_eq(s.pins, 2, "X's pin ended within 5 s, Y's and Z's stay");
	cr_expect_geq(took, 1.0, "not before its TTL: %.2f s", took);
	cr_expect_eq(s.pins_expired, 1);
	cr_expect_eq(s.pinned_bytes, 5 * BB, "Y's and Z's blocks");
	cr_assert_eq(prefixd_list(a, NULL, &ch, &n), 0);
	cx = find_chain(ch, n, idx);
	cy = find_chain(ch, n, idy);
	cr_assert(cx && cy);
	cr_expect(!cx->pinned, "the list shows X unpinned");
	cr_expect_eq(cx->pin_ttl_s, 0);
	cr_expect(cy->pinned, "and Y still pinned");
	free(ch);
	cr_expect_eq(prefixd_unpin(a, &idx), -ENOENT, "an expired pin is gone");
	struct prefixd_evict_sel sel = { .by = PREFIXD_EVICT_ALL };
	t_expect_evicted(evict(a, sel), 3, 3 * BB, 0, 5, 0, "X can go now, Y and Z stay");
	prefixd_close(a);
	t_stop(&td);
}

Test(tenants, evicting_a_chain_by_id_keeps_what_others_hold_or_continue)
{
	t_start_shared(&td, NULL);
	struct prefixd *a = t_client(&td, 1), *b = t_client(&td, 1);
	uint32_t p[8 * TD_BLOCK_TOKENS], q[4 * TD_BLOCK_TOKENS];
	td_prompt(p, 8, 1000);
	memcpy(q, p, 2 * TD_BLOCK_TOKENS * sizeof(uint32_t)); /* Q: P's first 2 blocks, then its own */
	for (uint32_t i = 2 * TD_BLOCK_TOKENS; i < 4 * TD_BLOCK_TOKENS; i++)
		q[i] = 50000 + i;
	publish_all(a, p, 8, "P");
	publish_all(a, q, 4, "Q");
	cr_expect_eq(t_stats(&td).blocks, 10);
	struct prefixd_evicted e;
	struct prefixd_evict_sel sel = { .by = PREFIXD_EVICT_ID };
	memset(sel.id.key, 0xee, sizeof(sel.id.key));
	cr_expect_eq(prefixd_evict(a, &sel, &e), -ENOENT, "an unknown chain");
	sel.id = id_of(1, p, 8, UID_A);
	cr_expect_eq(prefixd_evict(a, &sel, &e), -ENOENT, "P in another user's namespace");
	/* Q's own blocks go; the 2 P continues stay. */
	sel.id = id_of(1, q, 4, 0);
	t_expect_evicted(evict(a, sel), 2, 2 * BB, 0, 0, 2, "Q");
	cr_expect_eq(hits(a, q, 4), 2);
	cr_expect_eq(hits(a, p, 8), 8);
	cr_expect_eq(prefixd_evict(a, &sel, &e), -ENOENT, "Q is gone");
	/* An inner block of P names a chain P continues: nothing goes. */
	sel.id = id_of(1, p, 4, 0);
	t_expect_evicted(evict(a, sel), 0, 0, 0, 0, 4, "an inner block");
	cr_expect_eq(hits(a, p, 8), 8);
	/* Another connection leases P's first 4 blocks. */
	uint64_t lease;
	uint32_t hit;
	const void *kv[4];
	cr_assert_eq(prefixd_match(b, p, 4, &lease, &hit, kv), 0);
	cr_assert_eq(hit, 4);
	sel.id = id_of(1, p, 8, 0);
	t_expect_evicted(evict(a, sel), 4, 4 * BB, 4, 0, 0, "P under a lease on 4");
	for (uint32_t i = 0; i < 4; i++)
		cr_expect(td_block_ok(p, i, kv[i]), "leased block %u reads back", i);
	cr_expect_eq(hits(a, p, 8), 4);
	cr_assert_eq(prefixd_release(b, lease), 0);
	t_wait_leases(&td, 0);
	/* A pin on P's first 2 blocks. */
	struct prefixd_id pin2 = id_of(1, p, 2, 0);
	cr_assert_eq(prefixd_pin(a, &pin2, 0, NULL), 0, "%s", prefixd_errmsg());
	sel.id = id_of(1, p, 4, 0);
	t_expect_evicted(evict(a, sel), 2, 2 * BB, 0, 2, 0, "P under a pin on 2");
	cr_expect_eq(hits(a, p, 8), 2);
	cr_expect_eq(t_stats(&td).admin_evictions, 8);
	cr_expect_eq(t_stats(&td).evictions, 0, "evictions for room are counted apart");
	prefixd_close(a);
	prefixd_close(b);
	t_stop(&td);
}

Test(tenants, evicting_by_model_or_by_user_takes_only_theirs)
{
	t_start_shared(&td, NULL);
	struct prefixd *a = t_client(&td, 1), *b = t_client(&td, 2);
	uint32_t p[6 * TD_BLOCK_TOKENS], r[5 * TD_BLOCK_TOKENS];
	td_prompt(p, 6, 100);
	td_prompt(r, 5, 100); /* the same tokens, another model */
	publish_all(a, p, 6, "root, model 1");
	publish_all(b, r, 5, "root, model 2");
	struct agent a1 = agent_start(UID_A, 1), a2 = agent_start(UID_B, 2);
	struct ag_rep ar = agent_do(&a1, AG_PUBLISH, 0, 100, 4);
	cr_assert_eq(ar.stored, 4, "uid %u, model 1: %s", UID_A, ar.msg);
	ar = agent_do(&a2, AG_PUBLISH, 0, 100, 3);
	cr_assert_eq(ar.stored, 3, "uid %u, model 2: %s", UID_B, ar.msg);
	cr_expect_eq(t_stats(&td).blocks, 18);
	struct prefixd_evict_sel sel = { .by = PREFIXD_EVICT_MODEL };
	memset(sel.model, 2, sizeof(sel.model));
	t_expect_evicted(evict(a, sel), 5 + 3, (5 + 3) * BB, 0, 0, 0, "model 2, of any user");
	cr_expect_eq(hits(b, r, 5), 0);
	cr_expect_eq(agent_do(&a2, AG_MATCH, 0, 100, 3).hit, 0, "uid %u's model 2 blocks went", UID_B);
	cr_expect_eq(hits(a, p, 6), 6, "model 1 stays");
	ar = agent_do(&a1, AG_MATCH, 0, 100, 4);
	cr_expect_eq(ar.hit, 4, "uid %u's model 1 blocks stay", UID_A);
	cr_expect_eq(ar.bad, 0);
	cr_assert_eq(agent_do(&a1, AG_RELEASE_ALL, 0, 0, 0).rc, 0);
	t_wait_leases(&td, 0);
	sel = (struct prefixd_evict_sel){ .by = PREFIXD_EVICT_USER, .user = UID_A };
	t_expect_evicted(evict(a, sel), 4, 4 * BB, 0, 0, 0, "user 60001");
	cr_expect_eq(agent_do(&a1, AG_MATCH, 0, 100, 4).hit, 0);
	cr_expect_eq(hits(a, p, 6), 6, "root's blocks stay");
	sel.user = 0;
	t_expect_evicted(evict(a, sel), 6, 6 * BB, 0, 0, 0, "root");
	struct prefixd_stats s = t_stats(&td);
	cr_expect_eq(s.blocks, 0);
	cr_expect_eq(s.bytes_used, 0);
	cr_expect_eq(s.admin_evictions, 18);
	agent_stop(&a1);
	agent_stop(&a2);
	prefixd_close(a);
	prefixd_close(b);
	t_stop(&td);
}

Test(tenants, evicting_idle_blocks_spares_the_recently_used)
{
	t_start_shared(&td, NULL);
	struct prefixd *a = t_client(&td, 1);
	uint32_t t[2 * TD_BLOCK_TOKENS], u[3 * TD_BLOCK_TOKENS];
	td_prompt(t, 2, 100);
	td_prompt(u, 3, 900);
	publish_all(a, t, 2, "T");
	struct prefixd_id idt = id_of(1, t, 2, 0);
	/* Until T has been idle 2 s by the daemon's clock. */
	uint32_t idle = 0;
	double t0 = td_now_s();
	while (idle < 2 && td_now_s() - t0 < 5) {
		struct prefixd_chain *ch;
		size_t n;
		cr_assert_eq(prefixd_list(a, NULL, &ch, &n), 0, "%s", prefixd_errmsg());
		const struct prefixd_chain *c = find_chain(ch, n, idt);
		cr_assert(c);
		idle = c->idle_s;
		free(ch);
		if (idle < 2)
			usleep(50000);
	}
	cr_assert_geq(idle, 2, "T idle for 2 s");
	publish_all(a, u, 3, "U");
	struct prefixd_evict_sel sel = { .by = PREFIXD_EVICT_IDLE, .idle_s = 3600 };
	t_expect_evicted(evict(a, sel), 0, 0, 0, 0, 0, "nothing is an hour old");
	sel.idle_s = 2;
	t_expect_evicted(evict(a, sel), 2, 2 * BB, 0, 0, 0, "T");
	cr_expect_eq(hits(a, t, 2), 0, "T went");
	/* U is leased now (from another connection). */
	struct prefixd *b = t_client(&td, 1);
	uint64_t lease;
	uint32_t hit;
	const void *kv[3];
	cr_assert_eq(prefixd_match(b, u, 3, &lease, &hit, kv), 0);
	cr_assert_eq(hit, 3);
	sel.idle_s = 0;
	t_expect_evicted(evict(a, sel), 0, 0, 3, 0, 0, "U is leased");
	for (uint32_t i = 0; i < 3; i++)
		cr_expect(td_block_ok(u, i, kv[i]), "block %u", i);
	cr_assert_eq(prefixd_release(b, lease), 0);
	t_wait_leases(&td, 0);
	t_expect_evicted(evict(a, sel), 3, 3 * BB, 0, 0, 0, "U, released");
	cr_expect_eq(t_stats(&td).blocks, 0);
	prefixd_close(b);
	prefixd_close(a);
	t_stop(&td);
}

Test(tenants, no_selector_evicts_leased_or_pinned_blocks_and_evicted_memory_goes_back)
{
	t_start_shared(&td, NULL);
	struct prefixd *a = t_client(&td, 1), *h = t_client(&td, 1);
	uint32_t p[8 * TD_BLOCK_TOKENS], v[3 * TD_BLOCK_TOKENS], w[5 * TD_BLOCK_TOKENS];
	td_prompt(p, 8, 100);
	td_prompt(v, 3, 1000);
	td_prompt(w, 5, 2000);
	publish_all(a, p, 8, "P");
	publish_all(a, v, 3, "V");
	publish_all(a, w, 5, "W");
	cr_expect_geq(arena_rss(), 16 * BB, "16 blocks resident");
	/* H leases P; V is pinned. */
	uint64_t lease;
	uint32_t hit;
	const void *kv[8];
	cr_assert_eq(prefixd_match(h, p, 8, &lease, &hit, kv), 0);
	cr_assert_eq(hit, 8);
	struct prefixd_id idp = id_of(1, p, 8, 0), idv = id_of(1, v, 3, 0);
	cr_assert_eq(prefixd_pin(a, &idv, 0, NULL), 0, "%s", prefixd_errmsg());
	struct prefixd_evict_sel sel = { .by = PREFIXD_EVICT_ALL };
	t_expect_evicted(evict(a, sel), 5, 5 * BB, 8, 3, 0, "--all");
	for (uint32_t i = 0; i < 8; i++)
		cr_expect(td_block_ok(p, i, kv[i]), "leased block %u reads back", i);
	/* Every other selector of P or V keeps them too. */
	struct prefixd_evict_sel sels[] = {
		{ .by = PREFIXD_EVICT_ID, .id = idp },
		{ .by = PREFIXD_EVICT_ID, .id = idv },
		{ .by = PREFIXD_EVICT_MODEL },
		{ .by = PREFIXD_EVICT_USER, .user = 0 },
		{ .by = PREFIXD_EVICT_IDLE, .idle_s = 0 },
	};
	memset(sels[2].model, 1, sizeof(sels[2].model));
	const struct {
		uint64_t leased, pinned;
	} kept[] = { { 8, 0 }, { 0, 3 }, { 8, 3 }, { 8, 3 }, { 8, 3 } };
	for (size_t i = 0; i < sizeof(sels) / sizeof(sels[0]); i++) {
		char what[32];
		snprintf(what, sizeof(what), "selector %zu", i);
		t_expect_evicted(evict(a, sels[i]), 0, 0, kept[i].leased, kept[i].pinned, 0, what);
	}
	for (uint32_t i = 0; i < 8; i++)
		cr_expect(td_block_ok(p, i, kv[i]), "leased block %u still reads back", i);
	cr_expect_eq(hits(a, p, 8), 8);
	cr_expect_eq(hits(a, v, 3), 3);
	cr_expect_eq(hits(a, w, 5), 0);
	struct prefixd_stats s;
	/* On a's connection: its one-way RELEASEs are read before this. */
	cr_assert_eq(prefixd_stats(a, &s), 0, "%s", prefixd_errmsg());
	cr_expect_eq(s.blocks, 11);
	cr_expect_eq(s.admin_evictions, 5);
	cr_expect_eq(s.idle_bytes, 3 * BB, "V's blocks are the ones no lease holds");
	/* Released and unpinned, everything goes, and so does its memory. */
	cr_assert_eq(prefixd_release(h, lease), 0);
	cr_assert_eq(prefixd_unpin(a, &idv), 0, "%s", prefixd_errmsg());
	t_wait_leases(&td, 0);
	t_expect_evicted(evict(a, sel), 11, 11 * BB, 0, 0, 0, "--all, nothing held");
	s = t_stats(&td);
	cr_expect_eq(s.blocks, 0);
	cr_expect_eq(s.bytes_used, 0);
	cr_expect_eq(s.idle_bytes, 0);
	cr_expect_eq(arena_rss(), 0, "evicted blocks are punched out of the arenas");
	prefixd_close(h);
	prefixd_close(a);
	t_stop(&td);
}

Test(tenants, the_list_of_chains_has_their_shapes_and_filters_by_user_and_model)
{
	t_start_shared(&td, NULL);
	struct prefixd *a = t_client(&td, 1), *b = t_client(&td, 2);
	uint32_t ta[5 * TD_BLOCK_TOKENS], tb[5 * TD_BLOCK_TOKENS], tr[3 * TD_BLOCK_TOKENS];
	td_prompt(ta, 5, 100);
	memcpy(tb, ta, sizeof(tb)); /* A': A's first 3 blocks, then 2 of its own */
	for (uint32_t i = 3 * TD_BLOCK_TOKENS; i < 5 * TD_BLOCK_TOKENS; i++)
		tb[i] = 90000 + i;
	td_prompt(tr, 3, 100);
	publish_all(a, ta, 5, "A");
	publish_all(a, tb, 5, "A'");
	publish_all(b, tr, 3, "B, model 2");
	struct agent ag = agent_start(UID_A, 1);
	cr_assert_eq(agent_do(&ag, AG_PUBLISH, 0, 100, 2).stored, 2, "C: uid 60001's, A's tokens");
	/* A's last block: two hits, one lease still held. */
	uint64_t lease;
	uint32_t hit;
	const void *kv[5];
	cr_expect_eq(hits(a, ta, 5), 5);
	cr_assert_eq(prefixd_match(a, ta, 5, &lease, &hit, kv), 0);
	cr_assert_eq(hit, 5);
	struct prefixd_id ida = id_of(1, ta, 5, 0), idb = id_of(1, tb, 5, 0), idr = id_of(2, tr, 3, 0),
			  idc = id_of(1, ta, 2, UID_A);
	cr_assert_eq(prefixd_pin(a, &idr, 0, NULL), 0, "%s", prefixd_errmsg());
	struct prefixd_chain *ch;
	size_t n;
	cr_assert_eq(prefixd_list(a, NULL, &ch, &n), 0, "%s", prefixd_errmsg());
	cr_expect_eq(n, 4, "chains ending at a leaf: A, A', B, C");
	const struct {
		struct prefixd_id id;
		uint32_t user;
		uint8_t model;
		uint32_t blocks;
		uint64_t hits;
		uint32_t leases;
		int pinned;
	} want[] = {
		{ ida, 0, 1, 5, 2, 1, 0 },
		{ idb, 0, 1, 5, 0, 0, 0 },
		{ idr, 0, 2, 3, 0, 0, 1 },
		{ idc, UID_A, 1, 2, 0, 0, 0 },
	};
	for (size_t i = 0; i < 4; i++) {
		const struct prefixd_chain *c = find_chain(ch, n, want[i].id);
		cr_expect(c, "chain %zu is listed", i);
		if (!c)
			continue;
		cr_expect_eq(c->id.user, want[i].user, "chain %zu", i);
		cr_expect(model_is(c->model, want[i].model), "chain %zu: model", i);
		cr_expect_eq(c->blocks, want[i].blocks, "chain %zu: %u blocks", i, c->blocks);
		cr_expect_eq(c->tokens, want[i].blocks * TD_BLOCK_TOKENS, "chain %zu", i);
		cr_expect_eq(c->bytes, want[i].blocks * BB, "chain %zu: shared prefixes count in each", i);
		cr_expect_eq(c->hits, want[i].hits, "chain %zu: %llu hits", i, (unsigned long long)c->hits);
		cr_expect_eq(c->leases, want[i].leases, "chain %zu: %u leases", i, c->leases);
		cr_expect_eq(!!c->pinned, want[i].pinned, "chain %zu", i);
		cr_expect_eq(c->pin_ttl_s, 0, "chain %zu", i);
		cr_expect_leq(c->idle_s, 1, "chain %zu: just used", i);
		cr_expect_eq(c->where, PREFIXD_IN_MEMORY, "chain %zu", i);
	}
	/* An id as prefixctl prints it reads back. */
	char s[PREFIXD_ID_CHARS + 1];
	struct prefixd_id back;
	prefixd_id_format(&idc, s);
	cr_expect_eq(strlen(s), PREFIXD_ID_CHARS);
	cr_expect(!strcmp(s + 2 * PREFIXD_HASH_BYTES, "0000ea61"), "the uid last: %s", s);
	cr_assert_eq(prefixd_id_parse(s, &back), 0);
	cr_expect(!memcmp(&back, &idc, sizeof(back)));
	free(ch);
	/* Filters. */
	struct prefixd_filter f = { .by_user = 1, .user = UID_A };
	cr_assert_eq(prefixd_list(a, &f, &ch, &n), 0, "%s", prefixd_errmsg());
	cr_expect_eq(n, 1, "uid 60001's chains");
	cr_expect(n == 1 && find_chain(ch, n, idc));
	free(ch);
	f = (struct prefixd_filter){ .by_model = 1 };
	memset(f.model, 2, sizeof(f.model));
	cr_assert_eq(prefixd_list(a, &f, &ch, &n), 0);
	cr_expect_eq(n, 1, "model 2's chains");
	cr_expect(n == 1 && find_chain(ch, n, idr));
	free(ch);
	f = (struct prefixd_filter){ .by_user = 1, .user = 0, .by_model = 1 };
	memset(f.model, 1, sizeof(f.model));
	cr_assert_eq(prefixd_list(a, &f, &ch, &n), 0);
	cr_expect_eq(n, 2, "root's model 1 chains");
	cr_expect(find_chain(ch, n, ida) && find_chain(ch, n, idb));
	free(ch);
	f = (struct prefixd_filter){ .by_user = 1, .user = 4242 };
	ch = (void *)1;
	cr_assert_eq(prefixd_list(a, &f, &ch, &n), 0);
	cr_expect_eq(n, 0, "a user without chains");
	cr_expect_null(ch);
	cr_expect_eq(prefixd_release(a, lease), 0);
	agent_stop(&ag);
	prefixd_close(a);
	prefixd_close(b);
	t_stop(&td);
}

static int id_cmp(const void *a, const void *b)
{
	return memcmp(a, b, sizeof(struct prefixd_id));
}

/* More entries than one LIST page looks at (4096), so prefixd_list reads
 * several pages; nothing changes in between, so each chain comes once.
 * (Whether a page ends inside a hash bucket depends on the hashes: with
 * model 3 and these tokens, one of them does.) */
Test(tenants, a_listing_of_many_pages_names_each_chain_once)
{
	const char *args[] = { "--memory", "64M", NULL };
	t_start_shared(&td, args);
	struct prefixd *a = t_client(&td, 3);
	enum { N = 8000 };
	for (uint32_t p = 0; p < N; p++) {
		uint32_t t[TD_BLOCK_TOKENS], stored, dedup;
		td_prompt(t, 1, 100 * p);
		cr_assert_eq(td_publish(a, 0, t, 0, 1, &stored, &dedup), 0, "%s", prefixd_errmsg());
		cr_assert_eq(stored, 1);
	}
	struct prefixd_chain *ch;
	size_t n;
	cr_assert_eq(prefixd_list(a, NULL, &ch, &n), 0, "%s", prefixd_errmsg());
	struct prefixd_id *ids = calloc(n ? n : 1, sizeof(*ids));
	cr_assert(ids);
	for (size_t i = 0; i < n; i++)
		ids[i] = ch[i].id;
	qsort(ids, n, sizeof(*ids), id_cmp);
	size_t twice = 0;
	for (size_t i = 1; i < n; i++)
		twice += !memcmp(&ids[i - 1], &ids[i], sizeof(*ids));
	cr_expect_eq(twice, 0, "each chain listed once: %zu listed twice", twice);
	cr_expect_eq(n - twice, N, "every chain listed: %zu distinct of %d", n - twice, N);
	cr_expect_eq(n, N, "%zu rows for %d chains", n, N);
	free(ids);
	free(ch);
	prefixd_close(a);
	t_stop(&td);
}

Test(tenants, usage_rows_count_per_user_and_model)
{
	/* 64 slots. */
	const char *args[] = { "--memory", "512K", NULL };
	t_start_shared(&td, args);
	struct prefixd *a = t_client(&td, 1), *m2 = t_client(&td, 2), *salted;
	struct prefixd_layout ls = td_layout(1);
	ls.salt = "tenant-x";
	ls.salt_len = 8;
	cr_assert_eq(prefixd_connect(td.sock, &ls, &salted), 0, "%s", prefixd_errmsg());
	uint32_t p1[60 * TD_BLOCK_TOKENS], s1[TD_BLOCK_TOKENS], p2[10 * TD_BLOCK_TOKENS],
		z[2 * TD_BLOCK_TOKENS];
	td_prompt(p1, 60, 1);
	td_prompt(s1, 1, 50000);
	td_prompt(p2, 10, 60000);
	td_prompt(z, 2, 70000);
	publish_all(a, p1, 60, "P1, model 1");
	publish_all(salted, s1, 1, "model 1 with a salt");
	/* 7 of P1's blocks make room for P2. */
	publish_all(m2, p2, 10, "P2, model 2");
	uint64_t la, ls1, l2;
	uint32_t hit;
	const void *kv[60];
	cr_assert_eq(prefixd_match(a, p1, 60, &la, &hit, kv), 0);
	cr_expect_eq(hit, 53);
	cr_assert_eq(prefixd_match(a, z, 2, &l2, &hit, kv), 0);
	cr_expect_eq(hit, 0, "a miss");
	cr_assert_eq(prefixd_match(salted, s1, 1, &ls1, &hit, kv), 0);
	cr_expect_eq(hit, 1);
	cr_expect_eq(hits(m2, p2, 10), 10);
	t_wait_leases(&td, 2);
	/* uid 60001 makes room in its turn: P2 is all that is not leased. */
	struct agent ag = agent_start(UID_A, 1);
	struct ag_rep r = agent_do(&ag, AG_PUBLISH, 0, 100, 3);
	cr_expect_eq(r.rc, 0, "%s", r.msg);
	cr_expect_eq(r.stored, 3);
	r = agent_do(&ag, AG_MATCH, 0, 100, 3);
	cr_expect_eq(r.hit, 3);
	struct prefixd_id id2 = id_of(2, p2, 7, 0);
	cr_assert_eq(prefixd_pin(a, &id2, 0, NULL), 0, "%s", prefixd_errmsg());
	struct prefixd_stats s;
	struct prefixd_usage *u;
	size_t n;
	cr_assert_eq(prefixd_stats_usage(a, &s, &u, &n), 0, "%s", prefixd_errmsg());
	cr_expect_eq(n, 3, "one row per (user, model), salts merged: %zu", n);
	const struct {
		uint32_t user;
		uint8_t model;
		uint64_t blocks, pinned_blocks, hits, hit_tokens, query_tokens, evictions;
	} want[] = {
		{ 0, 1, 53 + 1, 0, 2, (53 + 1) * TD_BLOCK_TOKENS, (60 + 2 + 1) * TD_BLOCK_TOKENS, 7 },
		{ 0, 2, 7, 7, 1, 10 * TD_BLOCK_TOKENS, 10 * TD_BLOCK_TOKENS, 3 },
		{ UID_A, 1, 3, 0, 1, 3 * TD_BLOCK_TOKENS, 3 * TD_BLOCK_TOKENS, 0 },
	};
	uint64_t blocks = 0;
	for (size_t i = 0; i < 3; i++) {
		const struct prefixd_usage *x = find_usage(u, n, want[i].user, want[i].model);
		cr_expect(x, "row %zu", i);
		if (!x)
			continue;
		blocks += x->blocks;
		cr_expect_eq(x->blocks, want[i].blocks, "row %zu: %llu blocks", i,
			     (unsigned long long)x->blocks);
		cr_expect_eq(x->bytes, want[i].blocks * BB, "row %zu", i);
		cr_expect_eq(x->pinned_bytes, want[i].pinned_blocks * BB, "row %zu", i);
		cr_expect_eq(x->hits, want[i].hits, "row %zu: %llu hits", i, (unsigned long long)x->hits);
		cr_expect_eq(x->hit_tokens, want[i].hit_tokens, "row %zu: %llu hit tokens", i,
			     (unsigned long long)x->hit_tokens);
		cr_expect_eq(x->query_tokens, want[i].query_tokens, "row %zu: %llu query tokens", i,
			     (unsigned long long)x->query_tokens);
		cr_expect_eq(x->evictions, want[i].evictions, "row %zu: %llu evictions", i,
			     (unsigned long long)x->evictions);
	}
	free(u);
	cr_expect_eq(blocks, s.blocks, "the rows add up to the daemon's blocks");
	cr_expect_eq(s.blocks, 64);
	cr_expect_eq(s.bytes_used, 64 * BB);
	cr_expect_eq(s.evictions, 10);
	cr_expect_eq(s.hits, 4);
	cr_expect_eq(s.misses, 1);
	cr_expect_eq(s.leases, 3);
	cr_expect_eq(s.pinned_bytes, 7 * BB);
	cr_expect_eq(s.pins, 1);
	cr_expect_eq(s.idle_bytes, 7 * BB, "P2's blocks are the ones no lease holds");
	agent_stop(&ag);
	prefixd_close(salted);
	prefixd_close(m2);
	prefixd_close(a);
	t_stop(&td);
}

/* ==== Partitions: (user, block size) pairs ==== */

/* A connection of this process with blocks of 8 KiB + 16 x k bytes (a
 * partition of its own for each k); NULL and the message when refused. */
static struct prefixd *sized(uint32_t k, char *why, size_t cap)
{
	struct prefixd_layout l = td_layout(1);
	l.block_bytes = TD_BLOCK_BYTES + 16 * k;
	struct prefixd *c;
	if (prefixd_connect(td.sock, &l, &c)) {
		snprintf(why, cap, "%s", prefixd_errmsg());
		return NULL;
	}
	return c;
}

/* sized(), retried for up to 3 s: a closed connection's pair is released
 * once the daemon has read the close. */
static struct prefixd *sized_soon(uint32_t k, char *why, size_t cap)
{
	struct prefixd *c = NULL;
	for (int i = 0; i < 300 && !(c = sized(k, why, cap)); i++)
		usleep(10000);
	return c;
}

Test(tenants, block_sizes_no_one_uses_are_reclaimed_and_one_user_cannot_take_them_all)
{
	t_start_shared(&td, NULL);
	char why[256] = "";
	/* HELLOs alone, then gone: 200 pairs, over three times the table. */
	for (uint32_t k = 0; k < 200; k++) {
		struct prefixd *c = sized_soon(k, why, sizeof(why));
		cr_assert(c, "block size %u: %s", k, why);
		prefixd_close(c);
	}
	/* Eight at once is the most one user has. */
	struct prefixd *held[8];
	for (uint32_t k = 0; k < 8; k++) {
		held[k] = sized_soon(k, why, sizeof(why));
		cr_assert(held[k], "block size %u: %s", k, why);
	}
	cr_expect_null(sized(8, why, sizeof(why)), "a ninth block size at once");
	cr_expect(strstr(why, "block sizes in use"), "the refusal says why: %s", why);
	/* Another user is not affected. */
	struct agent ag = agent_start(UID_A, 1);
	struct ag_rep r = agent_do(&ag, AG_PUBLISH, 0, 7000, 2);
	cr_expect_eq(r.rc, 0, "%s", r.msg);
	agent_stop(&ag);
	/* Blocks keep their pair in use after their connection went, until
	 * they are evicted. */
	uint8_t *kv = calloc(1, TD_BLOCK_BYTES + 16 * 8);
	uint32_t t[TD_BLOCK_TOKENS];
	td_prompt(t, 1, 100);
	for (uint32_t k = 0; k < 8; k++) {
		uint32_t stored = 0, dedup = 0;
		const void *p = kv;
		cr_assert_eq(prefixd_publish(held[k], 0, t, 0, 1, &p, &stored, &dedup), 0, "%s",
			     prefixd_errmsg());
		cr_assert_eq(stored, 1);
		prefixd_close(held[k]);
	}
	free(kv);
	usleep(200000);
	cr_expect_null(sized(8, why, sizeof(why)), "eight pairs still hold blocks");
	struct prefixd *adm;
	struct prefixd_evicted e;
	cr_assert_eq(prefixd_connect(td.sock, NULL, &adm), 0, "%s", prefixd_errmsg());
	struct prefixd_evict_sel all = { .by = PREFIXD_EVICT_ALL };
	cr_assert_eq(prefixd_evict(adm, &all, &e), 0, "%s", prefixd_errmsg());
	cr_expect_eq(e.blocks, 10, "root's 8 and the agent's 2");
	prefixd_close(adm);
	struct prefixd *c = sized_soon(8, why, sizeof(why));
	cr_expect(c, "evicted, the pairs are free again: %s", why);
	prefixd_close(c);
	t_stop(&td);
}
