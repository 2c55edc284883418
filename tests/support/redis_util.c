/* SPDX-License-Identifier: MIT */
#include "redis_util.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#define REDIS_SERVER "redis-server"

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

bool tr_available(void)
{
	const char *path = getenv("PATH");
	if (!path)
		return false;
	char dir[PATH_MAX], f[PATH_MAX + 32];
	for (const char *p = path; *p;) {
		size_t n = strcspn(p, ":");
		if (n && n < sizeof(dir)) {
			memcpy(dir, p, n);
			dir[n] = 0;
			snprintf(f, sizeof(f), "%s/" REDIS_SERVER, dir);
			if (!access(f, X_OK))
				return true;
		}
		p += n + (p[n] == ':');
	}
	return false;
}

/* A command on the server's unix socket, with a short timeout: the reply
 * (the caller frees it) or NULL. */
static redisReply *command(const struct test_redis *r, const char *password, int argc,
			   const char **argv)
{
	struct timeval tv = { .tv_sec = 5 };
	redisContext *c = redisConnectUnixWithTimeout(r->sock, tv);
	if (!c || c->err) {
		redisFree(c);
		return NULL;
	}
	redisSetTimeout(c, tv);
	redisReply *rep = NULL;
	if (password) {
		rep = redisCommand(c, "AUTH %s", password);
		freeReplyObject(rep);
	}
	rep = redisCommandArgv(c, argc, argv, NULL);
	redisFree(c);
	return rep;
}

static void format_reply(const redisReply *rep, char *out, size_t cap, size_t *at)
{
	int n = 0;
	switch (rep->type) {
	case REDIS_REPLY_INTEGER:
		n = snprintf(out + *at, cap - *at, "%lld", rep->integer);
		break;
	case REDIS_REPLY_NIL:
		n = snprintf(out + *at, cap - *at, "(nil)");
		break;
	case REDIS_REPLY_ERROR:
		n = snprintf(out + *at, cap - *at, "-%.*s", (int)rep->len, rep->str);
		break;
	case REDIS_REPLY_ARRAY:
		for (size_t i = 0; i < rep->elements && *at < cap; i++) {
			format_reply(rep->element[i], out, cap, at);
			if (*at + 1 < cap)
				out[(*at)++] = '\n', out[*at] = 0;
		}
		return;
	default:
		n = snprintf(out + *at, cap - *at, "%.*s", (int)rep->len, rep->str);
	}
	if (n > 0)
		*at += (size_t)n < cap - *at ? (size_t)n : cap - *at - 1;
}

int tr_cmd(const struct test_redis *r, const char *password, char *out, size_t cap, ...)
{
	const char *argv[64];
	int argc = 0;
	va_list ap;
	va_start(ap, cap);
	for (const char *a; argc < 64 && (a = va_arg(ap, const char *));)
		argv[argc++] = a;
	va_end(ap);
	redisReply *rep = command(r, password, argc, argv);
	if (cap)
		out[0] = 0;
	if (!rep)
		return -1;
	size_t at = 0;
	if (cap)
		format_reply(rep, out, cap, &at);
	freeReplyObject(rep);
	return 0;
}

/* A port p on loopback such that p and p + 10000 (a cluster node's bus)
 * are free now: another process may take them before the server does, and
 * tr_start tries again then. */
static int free_port(void)
{
	static unsigned seed;
	if (!seed)
		seed = (unsigned)getpid() * 2654435761u ^ (unsigned)time(NULL);
	for (int tries = 0; tries < 200; tries++) {
		int p = 20000 + (int)(rand_r(&seed) % 30000u), ok = 1;
		for (int k = 0; k < 2 && ok; k++) {
			int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
			struct sockaddr_in a = { .sin_family = AF_INET,
						 .sin_port = htons((uint16_t)(p + k * 10000)),
						 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
			ok = fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof(a));
			if (fd >= 0)
				close(fd);
		}
		if (ok)
			return p;
	}
	return 0;
}

static void print_log(const struct test_redis *r)
{
	FILE *f = fopen(r->log, "r");
	if (!f)
		return;
	char line[512];
	fprintf(stderr, "--- redis-server log (%s)\n", r->log);
	while (fgets(line, sizeof(line), f))
		fputs(line, stderr);
	fclose(f);
}

static int write_conf(const struct test_redis *r)
{
	char path[PATH_MAX + 16];
	snprintf(path, sizeof(path), "%s/redis.conf", r->dir);
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	fprintf(f, "port %d\nbind 127.0.0.1\nunixsocket %s\nunixsocketperm 700\n"
		   "save \"\"\nappendonly no\ndir %s\ndaemonize no\nlogfile \"\"\n",
		r->port, r->sock, r->dir);
	if (r->cluster)
		fprintf(f, "cluster-enabled yes\ncluster-config-file %s/nodes.conf\n"
			   "cluster-node-timeout 5000\ncluster-require-full-coverage no\n",
			r->dir);
	fputs(r->extra, f);
	return fclose(f) ? -1 : 0;
}

/* Whether it answers (PONG, or NOAUTH when it wants a password). */
static bool answers(const struct test_redis *r)
{
	redisReply *rep = command(r, NULL, 1, (const char *[]){ "PING" });
	bool ok = rep && (rep->type == REDIS_REPLY_STATUS || rep->type == REDIS_REPLY_ERROR);
	freeReplyObject(rep);
	return ok;
}

/* Starts the server of r (its directory and conf written) and waits until
 * it answers: 0, 1 when it exited at start (the port taken, say), -1. */
static int launch(struct test_redis *r)
{
	char conf[PATH_MAX + 16];
	snprintf(conf, sizeof(conf), "%s/redis.conf", r->dir);
	fflush(NULL);
	r->pid = fork();
	if (r->pid < 0) {
		r->pid = 0;
		return -1;
	}
	if (r->pid == 0) {
		/* A test that fails half-way leaves no server behind. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int log = open(r->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		if (log >= 0) {
			dup2(log, 1);
			dup2(log, 2);
		}
		execlp(REDIS_SERVER, REDIS_SERVER, conf, (char *)NULL);
		_exit(127);
	}
	for (double t0 = now_s(); now_s() - t0 < 10;) {
		if (answers(r))
			return 0;
		int st;
		if (waitpid(r->pid, &st, WNOHANG) == r->pid) {
			r->pid = 0;
			return 1;
		}
		usleep(5000);
	}
	fprintf(stderr, "redis-server did not answer on %s within 10 s\n", r->sock);
	return -1;
}

static int start(struct test_redis *r, const char *conf, bool tcp, bool cluster)
{
	memset(r, 0, sizeof(*r));
	snprintf(r->dir, sizeof(r->dir), "/tmp/prefixd-redis-XXXXXX");
	if (!mkdtemp(r->dir)) {
		perror("mkdtemp");
		return -1;
	}
	snprintf(r->sock, sizeof(r->sock), "%s/redis.sock", r->dir);
	snprintf(r->log, sizeof(r->log), "%s/log", r->dir);
	snprintf(r->extra, sizeof(r->extra), "%s", conf ? conf : "");
	r->cluster = cluster;
	for (int tries = 0; tries < 5; tries++) {
		if (tcp && !(r->port = free_port())) {
			fprintf(stderr, "no free loopback port\n");
			break;
		}
		if (write_conf(r)) {
			perror("redis.conf");
			break;
		}
		int rc = launch(r);
		if (!rc)
			return 0;
		if (rc < 0 || !tcp)
			break;
	}
	fprintf(stderr, "redis-server did not start\n");
	tr_stop(r);
	return -1;
}

int tr_start(struct test_redis *r, const char *conf)
{
	return start(r, conf, false, false);
}

int tr_start_tcp(struct test_redis *r, const char *conf)
{
	return start(r, conf, true, false);
}

static int reap(struct test_redis *r)
{
	int st = 0;
	while (waitpid(r->pid, &st, 0) < 0 && errno == EINTR)
		;
	r->pid = 0;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int tr_stop(struct test_redis *r)
{
	int rc = 0;
	if (r->pid > 0) {
		kill(r->pid, SIGCONT);
		kill(r->pid, SIGTERM);
		rc = reap(r);
		if (rc)
			print_log(r);
	}
	if (r->dir[0]) {
		char cmd[PATH_MAX + 16];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", r->dir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", r->dir);
		r->dir[0] = 0;
	}
	return rc;
}

void tr_kill(struct test_redis *r)
{
	if (r->pid > 0) {
		kill(r->pid, SIGKILL);
		reap(r);
	}
}

int tr_restart(struct test_redis *r)
{
	if (r->pid > 0 || !r->dir[0])
		return -1;
	int rc = launch(r);
	if (rc) {
		fprintf(stderr, "redis-server did not start again\n");
		print_log(r);
	}
	return rc ? -1 : 0;
}

void tr_pause(struct test_redis *r)
{
	if (r->pid > 0)
		kill(r->pid, SIGSTOP);
}

void tr_resume(struct test_redis *r)
{
	if (r->pid > 0)
		kill(r->pid, SIGCONT);
}

void tr_seed(const struct test_redis *r, bool tcp, int db, char *out, size_t cap)
{
	if (!tcp)
		snprintf(out, cap, "unix:%s", r->sock);
	else if (db > 0)
		snprintf(out, cap, "redis://127.0.0.1:%d/%d", r->port, db);
	else
		snprintf(out, cap, "redis://127.0.0.1:%d", r->port);
}

/* ---- A Redis Cluster on loopback ports ---- */

static redisReply *node_cmd(const struct test_cluster *c, int i, int argc, const char **argv)
{
	return command(&c->node[i], NULL, argc, argv);
}

/* Whether node i's CLUSTER INFO holds each of the lines. */
static bool info_has(const struct test_cluster *c, int i, const char *const *lines)
{
	redisReply *r = node_cmd(c, i, 2, (const char *[]){ "CLUSTER", "INFO" });
	bool ok = r && r->type == REDIS_REPLY_STRING;
	for (int k = 0; ok && lines[k]; k++)
		ok = strstr(r->str, lines[k]) != NULL;
	freeReplyObject(r);
	return ok;
}

/* CLUSTER SLOTS of node `asked`: the node index serving slot, -1. */
static int owner_seen_by(const struct test_cluster *c, int asked, unsigned slot)
{
	redisReply *r = node_cmd(c, asked, 2, (const char *[]){ "CLUSTER", "SLOTS" });
	int owner = -1;
	for (size_t k = 0; r && r->type == REDIS_REPLY_ARRAY && k < r->elements; k++) {
		redisReply *e = r->element[k];
		if (e->elements < 3 || (unsigned long long)e->element[0]->integer > slot ||
		    (unsigned long long)e->element[1]->integer < slot)
			continue;
		long long port = e->element[2]->element[1]->integer;
		for (int i = 0; i < c->n; i++)
			if (c->node[i].port == port)
				owner = i;
	}
	freeReplyObject(r);
	return owner;
}

int tc_owner(const struct test_cluster *c, unsigned slot)
{
	return owner_seen_by(c, 0, slot);
}

int tc_wait_ok(const struct test_cluster *c)
{
	char known[64];
	snprintf(known, sizeof(known), "cluster_known_nodes:%d\r", c->n);
	const char *lines[] = { "cluster_state:ok", "cluster_slots_assigned:16384", known, NULL };
	for (double t0 = now_s(); now_s() - t0 < 10; usleep(20000)) {
		bool all = true;
		for (int i = 0; i < c->n && all; i++)
			all = c->node[i].pid <= 0 || info_has(c, i, lines);
		if (all)
			return 0;
	}
	fprintf(stderr, "the test cluster did not become ok within 10 s:\n");
	for (int i = 0; i < c->n; i++) {
		if (c->node[i].pid <= 0)
			continue;
		redisReply *r = node_cmd(c, i, 2, (const char *[]){ "CLUSTER", "INFO" });
		fprintf(stderr, "node %d (port %d): %.200s\n", i, c->node[i].port,
			r && r->type == REDIS_REPLY_STRING ? r->str : "no reply");
		freeReplyObject(r);
	}
	return -1;
}

/* A command that must answer OK (or a status) on node i. */
static int must(const struct test_cluster *c, int i, int argc, const char **argv)
{
	redisReply *r = node_cmd(c, i, argc, argv);
	int rc = r && r->type == REDIS_REPLY_STATUS ? 0 : -1;
	if (rc)
		fprintf(stderr, "node %d: %s %s: %s\n", i, argv[0], argc > 1 ? argv[1] : "",
			r && r->type == REDIS_REPLY_ERROR ? r->str : "no reply");
	freeReplyObject(r);
	return rc;
}

static int cluster_start(struct test_cluster *c, int n)
{
	memset(c, 0, sizeof(*c));
	if (n < 1 || n > TC_MAX)
		return -1;
	c->n = n;
	for (int i = 0; i < n; i++) {
		if (start(&c->node[i], NULL, true, true))
			goto fail;
		redisReply *r = node_cmd(c, i, 2, (const char *[]){ "CLUSTER", "MYID" });
		if (!r || r->type != REDIS_REPLY_STRING || r->len >= sizeof(c->id[i])) {
			freeReplyObject(r);
			goto fail;
		}
		memcpy(c->id[i], r->str, r->len + 1);
		freeReplyObject(r);
		/* Distinct epochs, as redis-cli --cluster create sets them. */
		char epoch[16], first[16], last[16];
		snprintf(epoch, sizeof(epoch), "%d", i + 1);
		snprintf(first, sizeof(first), "%u", 16384u * (unsigned)i / (unsigned)n);
		snprintf(last, sizeof(last), "%u", 16384u * (unsigned)(i + 1) / (unsigned)n - 1);
		if (must(c, i, 3, (const char *[]){ "CLUSTER", "SET-CONFIG-EPOCH", epoch }) ||
		    must(c, i, 4, (const char *[]){ "CLUSTER", "ADDSLOTSRANGE", first, last }))
			goto fail;
	}
	/* Every pair meets: no node waits for gossip to learn of another. */
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++) {
			char port[16];
			snprintf(port, sizeof(port), "%d", c->node[j].port);
			if (must(c, i, 4, (const char *[]){ "CLUSTER", "MEET", "127.0.0.1", port }))
				goto fail;
		}
	if (!tc_wait_ok(c))
		return 0;
fail:
	fprintf(stderr, "the test cluster did not start\n");
	tc_stop(c);
	return -1;
}

/* Once more on fresh ports when a cluster does not form: Redis's own
 * start on a loaded machine, not what the tests check (the failure and
 * each node's CLUSTER INFO are printed above). */
int tc_start(struct test_cluster *c, int n)
{
	return cluster_start(c, n) && cluster_start(c, n) ? -1 : 0;
}

int tc_stop(struct test_cluster *c)
{
	int rc = 0;
	for (int i = 0; i < c->n; i++)
		rc |= tr_stop(&c->node[i]);
	c->n = 0;
	return rc;
}

void tc_seeds(const struct test_cluster *c, char *bufs, size_t cap, const char **seeds)
{
	for (int i = 0; i < c->n; i++) {
		tr_seed(&c->node[i], true, 0, bufs + (size_t)i * cap, cap);
		seeds[i] = bufs + (size_t)i * cap;
	}
}

static int setslot(struct test_cluster *c, int i, const char *slot, const char *how,
		   const char *id)
{
	return must(c, i, 5, (const char *[]){ "CLUSTER", "SETSLOT", slot, how, id });
}

/* Migrates the keys of slot still on from to to (all, or only `only`). */
static int migrate_keys(struct test_cluster *c, int from, int to, const char *slot,
			const char *only)
{
	char port[16];
	snprintf(port, sizeof(port), "%d", c->node[to].port);
	for (;;) {
		redisReply *r = node_cmd(c, from, 4,
					 (const char *[]){ "CLUSTER", "GETKEYSINSLOT", slot, "100" });
		if (!r || r->type != REDIS_REPLY_ARRAY) {
			freeReplyObject(r);
			return -1;
		}
		const char *argv[110] = { "MIGRATE", "127.0.0.1", port, "", "0", "5000", "KEYS" };
		int argc = 7;
		for (size_t k = 0; k < r->elements && argc < 107; k++)
			if (!only || !strcmp(only, r->element[k]->str))
				argv[argc++] = r->element[k]->str;
		int rc = argc == 7 ? 1 : must(c, from, argc, argv);
		freeReplyObject(r);
		if (rc)
			return rc > 0 ? 0 : -1;
		if (only)
			return 0;
	}
}

int tc_begin_slot_move(struct test_cluster *c, int from, int to, unsigned slot,
		       const char *moved)
{
	char s[16];
	snprintf(s, sizeof(s), "%u", slot);
	if (setslot(c, to, s, "IMPORTING", c->id[from]) ||
	    setslot(c, from, s, "MIGRATING", c->id[to]))
		return -1;
	return moved ? migrate_keys(c, from, to, s, moved) : 0;
}

/* Waits until every node says slot is served by `to`. */
static int wait_owner(const struct test_cluster *c, unsigned slot, int to)
{
	for (double t0 = now_s(); now_s() - t0 < 10; usleep(10000)) {
		bool all = true;
		for (int i = 0; i < c->n && all; i++)
			all = owner_seen_by(c, i, slot) == to;
		if (all)
			return 0;
	}
	fprintf(stderr, "the nodes do not agree that slot %u moved to node %d\n", slot, to);
	return -1;
}

int tc_finish_slot_move(struct test_cluster *c, int from, int to, unsigned slot)
{
	char s[16];
	snprintf(s, sizeof(s), "%u", slot);
	if (migrate_keys(c, from, to, s, NULL))
		return -1;
	/* The importing node first, then the one that gave it, then the
	 * others (as redis-cli does), so no node points back. */
	if (setslot(c, to, s, "NODE", c->id[to]) || setslot(c, from, s, "NODE", c->id[to]))
		return -1;
	for (int i = 0; i < c->n; i++)
		if (i != from && i != to && setslot(c, i, s, "NODE", c->id[to]))
			return -1;
	return 0;
}

int tc_move_slots(struct test_cluster *c, int from, int to, unsigned first, unsigned last)
{
	for (unsigned s = first; s <= last; s++)
		if (tc_begin_slot_move(c, from, to, s, NULL) || tc_finish_slot_move(c, from, to, s))
			return -1;
	return wait_owner(c, first, to) || wait_owner(c, last, to) ? -1 : 0;
}

int tc_restart(struct test_cluster *c, int i)
{
	tr_kill(&c->node[i]);
	if (tr_restart(&c->node[i]))
		return -1;
	return tc_wait_ok(c);
}
