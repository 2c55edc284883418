/* SPDX-License-Identifier: MIT */
/*
 * A private redis-server for one test or benchmark, and a private Redis
 * Cluster of masters on loopback ports: each server in a temporary
 * directory of its own, with no persistence, killed with the test process
 * (PDEATHSIG), never the system's Redis or port 6379. Plain C, no
 * Criterion; failures print the reason (and the server's log) on stderr.
 */
#ifndef PFX_REDIS_UTIL_H
#define PFX_REDIS_UTIL_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct test_redis {
	pid_t pid;            /* 0 when not running */
	int port;             /* loopback TCP port; 0: unix socket only */
	bool cluster;         /* a node of a test_cluster */
	char dir[PATH_MAX];
	char sock[PATH_MAX + 16]; /* DIR/redis.sock */
	char log[PATH_MAX + 16];  /* DIR/log */
	char extra[512];      /* more redis.conf lines (tr_start's), kept for restarts */
};

/* Whether redis-server can be run (tests skip with a message when not). */
bool tr_available(void);

/* Starts redis-server on DIR/redis.sock only (--port 0), with conf (more
 * redis.conf lines, "requirepass secret\n" say; NULL for none), and waits
 * until it answers PING. 0, or -1 with the reason on stderr. */
int tr_start(struct test_redis *r, const char *conf);
/* The same, listening on a free loopback TCP port as well (r->port). */
int tr_start_tcp(struct test_redis *r, const char *conf);
/* SIGTERM (after SIGCONT, in case it was stopped), waits for it, removes
 * the directory. Its exit status (128 + signal when killed); the log is
 * printed when it is not 0. Fine on a server already killed. */
int tr_stop(struct test_redis *r);
/* SIGKILL and wait: a crash. The directory stays, for tr_restart. */
void tr_kill(struct test_redis *r);
/* Starts it again after tr_kill: same directory, socket, port and
 * configuration (a cluster node keeps its identity: nodes.conf). */
int tr_restart(struct test_redis *r);
/* SIGSTOP and SIGCONT: a server that hangs, then wakes. */
void tr_pause(struct test_redis *r);
void tr_resume(struct test_redis *r);

/* The seed that names it for kv_open: "unix:DIR/redis.sock" (tcp false),
 * or "redis://127.0.0.1:PORT" plus "/DB" when db > 0. */
void tr_seed(const struct test_redis *r, bool tcp, int db, char *out, size_t cap);
/* Runs one command (arguments as strings, NULL-terminated) on the server's
 * socket, with password when not NULL; its reply as text in out (an
 * integer in decimal, an error as "-ERR ...", nil as "(nil)", an array's
 * elements one a line). 0, or -1 when there was no reply. */
int tr_cmd(const struct test_redis *r, const char *password, char *out, size_t cap, ...)
	__attribute__((sentinel));

/* A Redis Cluster of n masters (no replicas) on free loopback ports, the
 * 16384 slots in n even ranges, cluster-require-full-coverage no (a dead
 * master costs its own slots only). */
#define TC_MAX 6
struct test_cluster {
	int n;
	struct test_redis node[TC_MAX];
	char id[TC_MAX][48]; /* node ids */
};

/* Starts the nodes, assigns the slots, meets them and waits until CLUSTER
 * INFO says cluster_state:ok on all and each knows every other. 0 or -1. */
int tc_start(struct test_cluster *c, int n);
/* Stops every node (tr_stop). 0 when all stopped cleanly. */
int tc_stop(struct test_cluster *c);
/* Seeds of nodes [0, n) as "redis://127.0.0.1:PORT", in bufs (n x cap). */
void tc_seeds(const struct test_cluster *c, char *bufs, size_t cap, const char **seeds);
/* The node (index) that serves slot, from node 0's CLUSTER SLOTS; -1. */
int tc_owner(const struct test_cluster *c, unsigned slot);
/* Moves slots [first, last] and their keys from master `from` to master
 * `to` as redis-cli --cluster reshard does (SETSLOT IMPORTING/MIGRATING,
 * MIGRATE the keys, SETSLOT NODE on every master), and waits until every
 * node agrees. 0 or -1. */
int tc_move_slots(struct test_cluster *c, int from, int to, unsigned first, unsigned last);
/* Half a move, for ASK: slot marked MIGRATING on from and IMPORTING on to,
 * with only the key `moved` migrated (NULL: none). tc_finish_slot then
 * assigns the slot to `to` on every master (its other keys moved first). */
int tc_begin_slot_move(struct test_cluster *c, int from, int to, unsigned slot,
		       const char *moved);
int tc_finish_slot_move(struct test_cluster *c, int from, int to, unsigned slot);
/* tr_kill then tr_restart of master i, and waits until the cluster is ok
 * again on all nodes. 0 or -1. */
int tc_restart(struct test_cluster *c, int i);
/* Waits (up to 10 s) until every running node says cluster_state:ok. */
int tc_wait_ok(const struct test_cluster *c);

#endif
