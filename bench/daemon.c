/* SPDX-License-Identifier: MIT */
/*
 * bench/daemon: how fast prefixd answers the hot path of a shared prefix
 * cache. A private daemon holds a few cached 2048-token prefixes of
 * SmolLM-135M-shaped blocks; concurrent clients (threads of this process,
 * each with its own connection) MATCH one of them and RELEASE the lease, in
 * a loop, for a few rounds of a few seconds. One op is one MATCH plus its
 * RELEASE, timed as a client sees them (chain hashing included).
 *
 * The index is not the clients' alone: before the rounds, short prefixes
 * of M models (other fingerprints, the same block shape) are published by
 * this process and by U other users (child processes that switch to uids
 * 60001.., so the daemon files them under their own namespaces), as a
 * shared daemon's index holds many groups. The clients match only their
 * own prefixes, as before.
 *
 * Each round also measures a reference right after prefixd: the same
 * clients doing the same two exchanges (same frame sizes, same reads and
 * writes) with an echo process that has as many epoll threads as the daemon
 * has workers and does nothing else. It is what the transport alone allows
 * on this machine at that moment, so the ratio stays meaningful while the
 * machine's load drifts. Prints one JSON object: medians over the rounds,
 * and their spread.
 *
 *   daemon [--clients N] [--seconds S] [--rounds R] [--prefixes P] [--threads T]
 *          [--models M] [--users U]
 *
 * Targets: >= 50,000 ops/s and p99 <= 500 us. Exits 1 when something fails
 * or a target is missed (the figures are printed either way).
 */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "daemon_util.h"
#include "opts.h"
#include "prefixd.h"
#include "report.h"
#include "shapes.h"

#define NAME "daemon"
#define BLOCK_TOKENS SMOLLM_BLOCK_TOKENS
#define BLOCK_BYTES SMOLLM_BLOCK_BYTES
#define PREFIX_BLOCKS SMOLLM_PREFIX_BLOCKS
#define MAX_CLIENTS 64
#define MAX_ROUNDS 15
#define TARGET_OPS_PER_S 50000.0
#define TARGET_P99_US 500.0
/* The other prefixes: FILL_BLOCKS blocks for each (user, model) but the
 * clients' own (this user, model 0). */
#define FILL_BLOCKS 2
#define MAX_MODELS 256         /* fingerprints differ in their byte */
#define MAX_USERS 32           /* the daemon serves 64 (user, block size) pairs */
#define FIRST_UID 60001
#define BENCH_GID 60000        /* the daemon's --group: the other users' */

/* ==== CPU time ==== */

static double self_cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
	       1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* ==== Prefixes ==== */

/* Model 0 is the clients'. */
static struct prefixd_layout model_layout(int model)
{
	return bench_layout(BLOCK_TOKENS, BLOCK_BYTES, (uint8_t)(0x5a + model));
}

static struct prefixd_layout layout(void) { return model_layout(0); }

static void prefix_tokens(uint32_t *t, int p)
{
	uint64_t s = 0x9e3779b97f4a7c15ull * (unsigned)(p + 1);
	for (int i = 0; i < PREFIX_BLOCKS * BLOCK_TOKENS; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		t[i] = (uint32_t)(s >> 33) % SMOLLM_VOCAB;
	}
}

/* First word of each block: which prefix and block it is, so a client can
 * check that it was handed the right bytes. */
static uint32_t block_tag(int p, int b) { return 0xb10c0000u | (uint32_t)p << 8 | (uint32_t)b; }

static int publish_prefixes(const char *sock, uint32_t (*tokens)[PREFIX_BLOCKS * BLOCK_TOKENS],
			    int nprefixes)
{
	struct prefixd_layout l = layout();
	struct prefixd *c;
	int rc = prefixd_connect(sock, &l, &c);
	if (rc) {
		fprintf(stderr, "bench/daemon: connect: %s\n", prefixd_errmsg());
		return -1;
	}
	uint8_t *kv = malloc(PREFIX_BLOCKS * BLOCK_BYTES);
	const void *ptrs[PREFIX_BLOCKS];
	for (int p = 0; kv && p < nprefixes && !rc; p++) {
		for (int b = 0; b < PREFIX_BLOCKS; b++) {
			uint32_t *w = (uint32_t *)(kv + (size_t)b * BLOCK_BYTES);
			for (size_t i = 0; i < BLOCK_BYTES / 4; i++)
				w[i] = block_tag(p, b) + (uint32_t)i;
			ptrs[b] = w;
		}
		uint32_t stored, dedup;
		rc = prefixd_publish(c, 0, tokens[p], 0, PREFIX_BLOCKS, ptrs, &stored, &dedup);
		if (rc)
			fprintf(stderr, "bench/daemon: publish: %s\n", prefixd_errmsg());
		else if (stored != PREFIX_BLOCKS) {
			fprintf(stderr, "bench/daemon: prefix %d: %u of %d blocks stored\n", p, stored,
				PREFIX_BLOCKS);
			rc = -1;
		}
	}
	if (!kv)
		fprintf(stderr, "bench/daemon: out of memory\n");
	free(kv);
	prefixd_close(c);
	return kv && !rc ? 0 : -1;
}

/* ==== The rest of the index: other models, other users ==== */

/* Tokens of the prefix of (user, model): any will do, as long as they
 * differ. user 0 is this process. */
static void fill_tokens(uint32_t *t, int user, int model)
{
	uint64_t s = 0xf111ull << 32 | (uint64_t)user << 16 | (uint64_t)model;
	for (int i = 0; i < FILL_BLOCKS * BLOCK_TOKENS; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		t[i] = (uint32_t)(s >> 33) % SMOLLM_VOCAB;
	}
}

/* Publishes the prefix of (user, model) for models [m0, m1), one
 * connection each (a connection has one layout). 0 or -1. */
static int publish_fill(const char *sock, int user, int m0, int m1)
{
	static uint32_t tokens[FILL_BLOCKS * BLOCK_TOKENS];
	uint8_t *kv = malloc(FILL_BLOCKS * BLOCK_BYTES);
	const void *ptrs[FILL_BLOCKS];
	int rc = kv ? 0 : -1;
	for (int b = 0; kv && b < FILL_BLOCKS; b++) {
		memset(kv + (size_t)b * BLOCK_BYTES, b + 1, BLOCK_BYTES);
		ptrs[b] = kv + (size_t)b * BLOCK_BYTES;
	}
	for (int m = m0; !rc && m < m1; m++) {
		struct prefixd_layout l = model_layout(m);
		struct prefixd *c = NULL;
		uint32_t stored = 0, dedup = 0;
		fill_tokens(tokens, user, m);
		rc = prefixd_connect(sock, &l, &c);
		if (!rc)
			rc = prefixd_publish(c, 0, tokens, 0, FILL_BLOCKS, ptrs, &stored, &dedup);
		if (rc || stored != FILL_BLOCKS)
			fprintf(stderr, "bench/daemon: user %d model %d: %u of %d blocks stored: %s\n",
				user, m, stored, FILL_BLOCKS, rc ? prefixd_errmsg() : "stopped early");
		rc = rc || stored != FILL_BLOCKS ? -1 : 0;
		prefixd_close(c);
	}
	free(kv);
	return rc;
}

/* Exit statuses of a user's process. */
enum { USER_OK = 0, USER_FAILED = 1, USER_NO_SETUID = 3 };

/* A child: becomes user k (uid FIRST_UID + k, in the daemon's group) and
 * publishes its prefixes. Never returns. */
static void user_main(const char *sock, int k, int models)
{
	gid_t gid = BENCH_GID;
	uid_t uid = (uid_t)(FIRST_UID + k);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* Group first: once the uid is dropped, it could not be changed. */
	if (setgroups(1, &gid) || setresgid(gid, gid, gid) || setresuid(uid, uid, uid) ||
	    geteuid() != uid)
		_exit(USER_NO_SETUID);
	_exit(publish_fill(sock, k + 1, 0, models) ? USER_FAILED : USER_OK);
}

/* Forks the users (at once: their publishes overlap, as real users'
 * would) and waits for them. Users that cannot be made are skipped with
 * a note. The number that published, or -1 when one failed. */
static int populate_users(const char *sock, int users, int models, char *note, size_t len)
{
	if (geteuid() != 0) {
		snprintf(note, len, "not root: no other uids, other users skipped");
		return 0;
	}
	pid_t pid[MAX_USERS];
	int started = 0, ok = 0, failed = 0, no_setuid = 0;
	fflush(NULL);
	for (; started < users; started++) {
		if ((pid[started] = fork()) < 0) {
			perror("bench/daemon: fork");
			break;
		}
		if (pid[started] == 0)
			user_main(sock, started, models);
	}
	for (int k = 0; k < started; k++) {
		int st = 0;
		while (waitpid(pid[k], &st, 0) < 0 && errno == EINTR)
			;
		int code = WIFEXITED(st) ? WEXITSTATUS(st) : USER_FAILED;
		ok += code == USER_OK;
		no_setuid += code == USER_NO_SETUID;
		failed += code != USER_OK && code != USER_NO_SETUID;
	}
	if (no_setuid)
		snprintf(note, len, "setresuid to uid %d.. failed in %d of %d users: those skipped",
			 FIRST_UID, no_setuid, users);
	return failed || started < users ? -1 : ok;
}

/* What the index holds, as the daemon counts it. */
struct census {
	int models;             /* fingerprints with blocks */
	int users;              /* uids with blocks, other than this one */
	uint64_t blocks, bytes, budget;
};

static int seen_before(const struct prefixd_usage *u, size_t i, int by_model)
{
	for (size_t j = 0; j < i; j++)
		if (u[j].blocks && (by_model ? !memcmp(u[j].model, u[i].model, sizeof(u[i].model))
					     : u[j].user == u[i].user))
			return 1;
	return 0;
}

static int take_census(const char *sock, struct census *out)
{
	struct prefixd *c = NULL;
	struct prefixd_stats st;
	struct prefixd_usage *u = NULL;
	size_t n = 0;
	int rc = prefixd_connect(sock, NULL, &c);
	if (!rc)
		rc = prefixd_stats_usage(c, &st, &u, &n);
	if (rc) {
		fprintf(stderr, "bench/daemon: stats: %s\n", prefixd_errmsg());
		prefixd_close(c);
		return -1;
	}
	*out = (struct census){ .blocks = st.blocks, .bytes = st.bytes_used, .budget = st.budget };
	for (size_t i = 0; i < n; i++) {
		if (!u[i].blocks)
			continue;
		out->models += !seen_before(u, i, 1);
		out->users += !seen_before(u, i, 0) && u[i].user != (uint32_t)geteuid();
	}
	free(u);
	prefixd_close(c);
	return 0;
}

/* Fills the index: this process's other models, then the other users'.
 * The census must show every model and every user that could be made. */
static int populate(const char *sock, int models, int users, struct census *cen, char *note,
		    size_t len)
{
	int made = 0;
	if (publish_fill(sock, 0, 1, models))
		return -1;
	if (users && (made = populate_users(sock, users, models, note, len)) < 0) {
		fprintf(stderr, "bench/daemon: a user's process failed\n");
		return -1;
	}
	if (take_census(sock, cen))
		return -1;
	if (cen->models != models || cen->users != made) {
		fprintf(stderr, "bench/daemon: the index holds %d models and %d other users, not %d and %d\n",
			cen->models, cen->users, models, made);
		return -1;
	}
	return 0;
}

/* ==== The transport reference ==== */

/* Frames of docs/PROTOCOL.md: a 32-byte header, then a MATCH of 32 blocks
 * (count, hashes, token ids) answered by lease, hit, new_arenas and 32
 * places; a RELEASE (a lease) answered by an empty body. */
#define HDR 32
#define MATCH_BODY (4 + PREFIX_BLOCKS * (32 + 4 * BLOCK_TOKENS))
#define MATCH_REPLY (16 + 16 * PREFIX_BLOCKS)
#define RELEASE_BODY 8

struct echo {
	pid_t pid;
	int fd[MAX_CLIENTS]; /* the clients' ends */
	int n;
};

static uint32_t le32(const uint8_t *p)
{
	return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Reads one frame as the daemon does (header, then body), then answers a
 * header and as many bytes as the request's bytes 12..15 ask. 0 at the
 * peer's end of file, -1 on error, 1 otherwise. */
static int echo_one(int fd, uint8_t *buf)
{
	uint8_t hdr[HDR];
	ssize_t r = recv(fd, hdr, HDR, MSG_WAITALL);
	if (r <= 0)
		return r ? -1 : 0;
	uint32_t body = le32(hdr + 16), reply = le32(hdr + 12);
	if (r != HDR || body > MATCH_BODY || reply > MATCH_BODY ||
	    (body && recv(fd, buf, body, MSG_WAITALL) != (ssize_t)body))
		return -1;
	struct iovec iov[2] = { { hdr, HDR }, { buf, reply } };
	return writev(fd, iov, 2) == (ssize_t)(HDR + reply) ? 1 : -1;
}

struct echo_thread {
	pthread_t thread;
	int epfd, nfds;
};

/* A daemon worker's loop, without the daemon's work. */
static void *echo_thread_main(void *arg)
{
	struct echo_thread *t = arg;
	static _Thread_local uint8_t buf[MATCH_BODY];
	struct epoll_event ev[64];
	while (t->nfds > 0) {
		int n = epoll_wait(t->epfd, ev, 64, -1);
		for (int i = 0; i < n; i++)
			if (echo_one(ev[i].data.fd, buf) <= 0) {
				epoll_ctl(t->epfd, EPOLL_CTL_DEL, ev[i].data.fd, NULL);
				close(ev[i].data.fd);
				t->nfds--;
			}
	}
	return NULL;
}

/* The echo process: `threads` threads share the connections round-robin,
 * as the daemon's listener hands them to its workers. */
static void echo_serve(const int *fds, int n, int threads)
{
	struct echo_thread t[64] = { { 0 } };
	threads = threads < 64 ? threads : 64;
	for (int i = 0; i < threads; i++)
		t[i].epfd = epoll_create1(EPOLL_CLOEXEC);
	for (int i = 0; i < n; i++) {
		struct echo_thread *w = &t[i % threads];
		struct epoll_event ev = { .events = EPOLLIN, .data.fd = fds[i] };
		if (w->epfd < 0 || epoll_ctl(w->epfd, EPOLL_CTL_ADD, fds[i], &ev))
			_exit(1);
		w->nfds++;
	}
	for (int i = 0; i < threads; i++)
		if (pthread_create(&t[i].thread, NULL, echo_thread_main, &t[i]))
			_exit(1);
	for (int i = 0; i < threads; i++)
		pthread_join(t[i].thread, NULL);
	_exit(0);
}

/* Forks the echo process, connected to each client by a socket pair. It
 * leaves when its sockets close, or when this process dies. */
static int echo_start(struct echo *e, int n, int threads)
{
	int srv[MAX_CLIENTS];
	e->n = 0;
	e->pid = 0;
	for (; e->n < n; e->n++) {
		int sv[2];
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
			perror("bench/daemon: socketpair");
			return -1;
		}
		e->fd[e->n] = sv[0];
		srv[e->n] = sv[1];
	}
	fflush(NULL);
	pid_t parent = getpid();
	if ((e->pid = fork()) < 0) {
		perror("bench/daemon: fork");
		return -1;
	}
	if (e->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		for (int i = 0; i < n; i++)
			close(e->fd[i]);
		echo_serve(srv, n, threads);
	}
	for (int i = 0; i < n; i++)
		close(srv[i]);
	return 0;
}

static int echo_stop(struct echo *e)
{
	int st = 0;
	for (int i = 0; i < e->n; i++)
		close(e->fd[i]);
	e->n = 0;
	if (e->pid <= 0)
		return 0;
	while (waitpid(e->pid, &st, 0) < 0 && errno == EINTR)
		;
	e->pid = 0;
	return WIFEXITED(st) && !WEXITSTATUS(st) ? 0 : -1;
}

/* One request as libprefixd sends it (one sendmsg) and its reply as it
 * reads it (header, then body). */
static int echo_call(int fd, const uint8_t *req, uint32_t body, uint32_t reply, uint8_t *buf)
{
	uint8_t hdr[HDR] = { 0 };
	for (int i = 0; i < 4; i++) {
		hdr[12 + i] = (uint8_t)(reply >> 8 * i);
		hdr[16 + i] = (uint8_t)(body >> 8 * i);
	}
	struct iovec iov[2] = { { hdr, HDR }, { (void *)req, body } };
	if (writev(fd, iov, 2) != (ssize_t)(HDR + body) ||
	    recv(fd, hdr, HDR, MSG_WAITALL) != HDR ||
	    (reply && recv(fd, buf, reply, MSG_WAITALL) != (ssize_t)reply))
		return -1;
	return 0;
}

/* ==== Clients ==== */

enum mode { M_PREFIXD, M_ECHO };

struct bench;

struct client {
	pthread_t thread;
	struct bench *b;
	int id;
	struct prefixd *c;
	int echo_fd;
	struct bench_lat op, match, release; /* of the current phase */
	double end;                    /* when its last op of the phase ended */
	char err[300];
};

/* The run goes in phases: per round, prefixd then the reference; round 0
 * warms both up (arenas mapped, caches hot). */
struct bench {
	int nclients, nprefixes, rounds;
	uint32_t (*tokens)[PREFIX_BLOCKS * BLOCK_TOKENS];
	pthread_barrier_t start, end;
	atomic_int mode, check;  /* of the next phase */
	atomic_int quit;         /* no next phase */
	atomic_int stop;         /* end of the phase */
	atomic_int failed;
	struct client cl[MAX_CLIENTS];
};

static int record(struct client *k, double t0, double t1, double t2)
{
	if (bench_lat_add(&k->op, t2 - t0) || bench_lat_add(&k->match, t1 - t0) ||
	    bench_lat_add(&k->release, t2 - t1)) {
		snprintf(k->err, sizeof(k->err), "client %d: out of memory", k->id);
		return -1;
	}
	return 0;
}

/* One MATCH + RELEASE of prefix p; checks the hit and the bytes' tags. */
static int prefixd_op(struct client *k, int p, int check)
{
	const void *kv[PREFIX_BLOCKS];
	uint64_t lease;
	uint32_t hit;
	double t0 = bench_now();
	int rc = prefixd_match(k->c, k->b->tokens[p], PREFIX_BLOCKS, &lease, &hit, kv);
	double t1 = bench_now();
	if (rc) {
		snprintf(k->err, sizeof(k->err), "client %d: match: %s", k->id, prefixd_errmsg());
		return -1;
	}
	if (hit != PREFIX_BLOCKS) {
		snprintf(k->err, sizeof(k->err), "client %d: prefix %d: %u of %d blocks hit", k->id, p,
			 hit, PREFIX_BLOCKS);
		prefixd_release(k->c, lease);
		return -1;
	}
	for (int b = 0; check && b < PREFIX_BLOCKS; b++)
		if (*(const uint32_t *)kv[b] != block_tag(p, b)) {
			snprintf(k->err, sizeof(k->err), "client %d: prefix %d block %d: wrong bytes",
				 k->id, p, b);
			prefixd_release(k->c, lease);
			return -1;
		}
	if ((rc = prefixd_release(k->c, lease))) {
		snprintf(k->err, sizeof(k->err), "client %d: release: %s", k->id, prefixd_errmsg());
		return -1;
	}
	return record(k, t0, t1, bench_now());
}

/* The same two exchanges with the echo process. */
static int echo_op(struct client *k)
{
	static _Thread_local uint8_t req[MATCH_BODY], buf[MATCH_REPLY];
	double t0 = bench_now();
	int rc = echo_call(k->echo_fd, req, MATCH_BODY, MATCH_REPLY, buf);
	double t1 = bench_now();
	if (rc || echo_call(k->echo_fd, req, RELEASE_BODY, 0, buf)) {
		snprintf(k->err, sizeof(k->err), "client %d: the echo process does not answer", k->id);
		return -1;
	}
	return record(k, t0, t1, bench_now());
}

/* Phases until told to quit; main sets the phase's mode before releasing
 * the start barrier. A failing client stops the phase. */
static void *client_main(void *arg)
{
	struct client *k = arg;
	struct bench *b = k->b;
	for (;;) {
		pthread_barrier_wait(&b->start);
		if (atomic_load(&b->quit))
			break;
		int mode = atomic_load(&b->mode), check = atomic_load(&b->check);
		k->op.n = k->match.n = k->release.n = 0;
		for (uint64_t i = (uint64_t)k->id; !atomic_load(&b->stop); i++) {
			int p = (int)(i % (uint64_t)b->nprefixes);
			if (mode == M_ECHO ? echo_op(k) : prefixd_op(k, p, check)) {
				atomic_store(&b->failed, 1);
				atomic_store(&b->stop, 1);
			}
		}
		k->end = bench_now();
		pthread_barrier_wait(&b->end);
	}
	return NULL;
}

/* ==== Figures ==== */

/* Every client's samples of one kind (offset of the struct bench_lat in
 * struct client), sorted into all; their number. */
static size_t collect(const struct bench *b, size_t offset, uint32_t *all)
{
	size_t n = 0;
	for (int i = 0; i < b->nclients; i++) {
		const struct bench_lat *l =
			(const struct bench_lat *)((const char *)&b->cl[i] + offset);
		memcpy(all + n, l->ns, l->n * sizeof(*all));
		n += l->n;
	}
	bench_sort_u32(all, n);
	return n;
}

static double spread(const double *v, int n, double med)
{
	double lo = v[0], hi = v[0];
	for (int i = 1; i < n; i++) {
		lo = v[i] < lo ? v[i] : lo;
		hi = v[i] > hi ? v[i] : hi;
	}
	return med > 0 ? (hi - lo) / med : 0;
}

/* Figures of one phase, fig[figure][round]. */
enum {
	F_OPS_S, F_P50, F_P99, F_P999, F_M50, F_M99, F_R50, F_R99, F_SCPU, F_CCPU, F_OPS, F_N
};

static const char *const fig_names[F_N] = {
	"ops_per_s", "p50_us", "p99_us", "p999_us", "match_p50_us", "match_p99_us",
	"release_p50_us", "release_p99_us", "daemon_cpu_us_per_op", "client_cpu_us_per_op", "ops",
};

typedef double figures[F_N][MAX_ROUNDS];

/* One phase of `seconds` in `mode`; the server's (daemon's or echo
 * process's) CPU is read from /proc. Fills fig[.][k] unless k < 0. 0, or
 * -1 when it failed. */
static int run_phase(struct bench *b, int mode, pid_t server, double seconds, figures fig,
		     int k, uint32_t **all)
{
	double s0 = bench_proc_cpu_s(server), c0 = self_cpu_s();
	atomic_store(&b->mode, mode);
	atomic_store(&b->check, k < 0);
	atomic_store(&b->stop, 0);
	pthread_barrier_wait(&b->start);
	double t0 = bench_now();
	usleep((useconds_t)(seconds * 1e6));
	atomic_store(&b->stop, 1);
	pthread_barrier_wait(&b->end);
	if (atomic_load(&b->failed))
		return -1;
	double t1 = t0, scpu = bench_proc_cpu_s(server) - s0, ccpu = self_cpu_s() - c0;
	size_t ops = 0;
	for (int i = 0; i < b->nclients; i++) {
		t1 = b->cl[i].end > t1 ? b->cl[i].end : t1;
		ops += b->cl[i].op.n;
	}
	uint32_t *a = ops ? realloc(*all, ops * sizeof(**all)) : NULL;
	if (!a) {
		fprintf(stderr, "bench/daemon: %s\n", ops ? "out of memory" : "no op completed in a round");
		return -1;
	}
	*all = a;
	if (k < 0)
		return 0;
	fig[F_OPS][k] = (double)ops;
	fig[F_OPS_S][k] = (double)ops / (t1 - t0);
	size_t n = collect(b, offsetof(struct client, op), a);
	fig[F_P50][k] = bench_pct_us(a, n, 0.50);
	fig[F_P99][k] = bench_pct_us(a, n, 0.99);
	fig[F_P999][k] = bench_pct_us(a, n, 0.999);
	n = collect(b, offsetof(struct client, match), a);
	fig[F_M50][k] = bench_pct_us(a, n, 0.50);
	fig[F_M99][k] = bench_pct_us(a, n, 0.99);
	n = collect(b, offsetof(struct client, release), a);
	fig[F_R50][k] = bench_pct_us(a, n, 0.50);
	fig[F_R99][k] = bench_pct_us(a, n, 0.99);
	fig[F_SCPU][k] = scpu * 1e6 / (double)ops;
	fig[F_CCPU][k] = ccpu * 1e6 / (double)ops;
	return 0;
}

/* Warm-up and measured rounds, each prefixd then the reference; then the
 * clients are let go, failed or not. */
static int run_rounds(struct bench *b, pid_t daemon, pid_t echo, double seconds, figures pd,
		      figures ref)
{
	uint32_t *all = NULL;
	int rc = 0;
	for (int r = 0; !rc && r <= b->rounds; r++) {
		double s = r ? seconds : 0.5;
		rc = run_phase(b, M_PREFIXD, daemon, s, pd, r - 1, &all);
		if (!rc)
			rc = run_phase(b, M_ECHO, echo, s, ref, r - 1, &all);
	}
	atomic_store(&b->quit, 1);
	pthread_barrier_wait(&b->start);
	free(all);
	return rc;
}

/* What was put in the index besides the clients' prefixes. */
struct fill {
	int models, users;      /* asked for */
	struct census cen;      /* what the daemon holds */
	char note[160];         /* why users were skipped */
};

static void print_fill(const struct fill *fl)
{
	report_fmt("models", "%d", fl->cen.models);
	report_fmt("users", "%d", fl->cen.users);
	if (fl->note[0] || fl->cen.users != fl->users)
		report_str("users_note", "%s", fl->note[0] ? fl->note : "fewer users than asked");
	report_fmt("index_blocks", "%llu", (unsigned long long)fl->cen.blocks);
	report_fmt("index_bytes", "%llu", (unsigned long long)fl->cen.bytes);
	report_fmt("memory_budget", "%llu", (unsigned long long)fl->cen.budget);
	report_str("index_fill", "besides the clients' prefixes (this uid, model 0): a %d-token prefix of every other (uid, model) pair: models fingerprints (this process and each other user), users other uids (%d..)",
		   FILL_BLOCKS * BLOCK_TOKENS, FIRST_UID);
}

/* Prints every figure; whether the targets were met. */
static bool print_json(const struct bench *b, double seconds, const char *threads, figures pd,
		       figures ref, double load, const struct fill *fl)
{
	int n = b->rounds;
	double med[F_N], rmed[F_N], ratio[MAX_ROUNDS], total = 0;
	for (int f = 0; f < F_N; f++) {
		med[f] = bench_median_of(pd[f], n);
		rmed[f] = bench_median_of(ref[f], n);
	}
	for (int r = 0; r < n; r++) {
		total += pd[F_OPS][r];
		ratio[r] = pd[F_OPS_S][r] / ref[F_OPS_S][r];
	}
	report_begin(NAME);
	report_fmt("clients", "%d", b->nclients);
	report_str("client_kind", "threads of one process, one connection each");
	report_fmt("daemon_threads", "%s", threads);
	report_str("op", "prefixd_match of a cached 2048-token prefix (32 hit blocks) + prefixd_release, as the client sees it");
	report_fmt("prefixes", "%d", b->nprefixes);
	report_fmt("prefix_tokens", "%d", PREFIX_BLOCKS * BLOCK_TOKENS);
	report_fmt("block_tokens", "%d", BLOCK_TOKENS);
	report_fmt("block_bytes", "%llu", (unsigned long long)BLOCK_BYTES);
	print_fill(fl);
	report_fmt("rounds", "%d", n);
	report_fmt("round_s", "%.1f", seconds);
	report_fmt("duration_s", "%.1f", n * seconds);
	report_fmt("ops", "%.0f", total);
	for (int f = 0; f < F_OPS; f++)
		report_fmt(fig_names[f], "%.*f", f == F_OPS_S ? 0 : 1, med[f]);
	report_fmt("ops_per_s_spread", "%.3f", spread(pd[F_OPS_S], n, med[F_OPS_S]));
	report_fmt("p99_us_spread", "%.3f", spread(pd[F_P99], n, med[F_P99]));
	report_array("rounds_ops_per_s", pd[F_OPS_S], n, 0);
	report_array("rounds_p50_us", pd[F_P50], n, 1);
	report_array("rounds_p99_us", pd[F_P99], n, 1);
	report_fmt("transport_reference", "{\"ops_per_s\": %.0f, \"ops_per_s_spread\": %.3f, \"p50_us\": %.1f, \"p99_us\": %.1f, \"server_cpu_us_per_op\": %.1f, \"client_cpu_us_per_op\": %.1f}",
		   rmed[F_OPS_S], spread(ref[F_OPS_S], n, rmed[F_OPS_S]), rmed[F_P50], rmed[F_P99], rmed[F_SCPU], rmed[F_CCPU]);
	report_fmt("ops_per_s_vs_reference", "%.3f", bench_median_of(ratio, n));
	report_fmt("loadavg_1m_at_start", "%.2f", load);
	report_machine();
	report_target("ops_per_s", med[F_OPS_S], REPORT_AT_LEAST, TARGET_OPS_PER_S);
	report_target("p99_us", med[F_P99], REPORT_AT_MOST, TARGET_P99_US);
	return report_end("medians over rounds of per-round figures; spread = (max - min) / median; percentiles over every op of every client in a round. transport_reference: the same clients and exchanges (frame sizes, reads and writes) against an echo process with as many epoll threads, measured right after prefixd in each round; ops_per_s_vs_reference is the median of the per-round ratios");
}

/* Connects the clients and the echo process, runs the rounds, disconnects.
 * 0 or -1. */
static int measure(struct bench *b, struct test_daemon *d, int threads, double seconds,
		   figures pd, figures ref)
{
	struct prefixd_layout l = layout();
	struct echo e;
	int started = 0, rc = echo_start(&e, b->nclients, threads);
	pthread_barrier_init(&b->start, NULL, (unsigned)b->nclients + 1);
	pthread_barrier_init(&b->end, NULL, (unsigned)b->nclients + 1);
	for (int i = 0; !rc && i < b->nclients; i++) {
		struct client *k = &b->cl[i];
		k->b = b;
		k->id = i;
		k->echo_fd = e.fd[i];
		if (prefixd_connect(d->sock, &l, &k->c)) {
			fprintf(stderr, "bench/daemon: client %d: connect: %s\n", i, prefixd_errmsg());
			rc = -1;
		}
	}
	for (; !rc && started < b->nclients; started++)
		if (pthread_create(&b->cl[started].thread, NULL, client_main, &b->cl[started])) {
			/* The threads that did start wait at a barrier that can
			 * never fill: stop the daemon and leave without them. */
			fprintf(stderr, "bench/daemon: cannot start client threads\n");
			td_stop(d);
			_exit(1);
		}
	if (!rc) {
		rc = run_rounds(b, d->pid, e.pid, seconds, pd, ref);
		for (int i = 0; i < started; i++)
			pthread_join(b->cl[i].thread, NULL);
		for (int i = 0; i < b->nclients; i++)
			if (b->cl[i].err[0])
				fprintf(stderr, "bench/daemon: %s\n", b->cl[i].err);
	}
	if (echo_stop(&e) && !rc) {
		fprintf(stderr, "bench/daemon: the echo process failed\n");
		rc = -1;
	}
	for (int i = 0; i < b->nclients; i++) {
		prefixd_close(b->cl[i].c);
		free(b->cl[i].op.ns);
		free(b->cl[i].match.ns);
		free(b->cl[i].release.ns);
	}
	pthread_barrier_destroy(&b->start);
	pthread_barrier_destroy(&b->end);
	return rc;
}

static int usage(int rc)
{
	fprintf(rc ? stderr : stdout,
		"usage: daemon [--clients N] [--seconds S] [--rounds R] [--prefixes P] [--threads T]\n"
		"              [--models M] [--users U]\n"
		"  N concurrent clients (default 8) MATCH + RELEASE cached 2048-token prefixes\n"
		"  (P of them, default 4) for R rounds (default 5) of S seconds (default 2) on a\n"
		"  private prefixd with T worker threads (default 2), whose index also holds\n"
		"  prefixes of M models (default 20, up to 256) of this user and of U other users\n"
		"  (default 4, up to 32; uids 60001.., needs root).\n");
	return rc;
}

/* Bytes of every block the index is to hold: the clients' prefixes and
 * the other (user, model) pairs'. */
static uint64_t index_bytes(const struct bench *b, const struct fill *fl)
{
	uint64_t blocks = (uint64_t)b->nprefixes * PREFIX_BLOCKS +
			  (uint64_t)(fl->models - 1) * FILL_BLOCKS +
			  (uint64_t)fl->users * (uint64_t)fl->models * FILL_BLOCKS;
	return blocks * BLOCK_BYTES;
}

/* The daemon, with a budget that holds everything (so that nothing is
 * evicted to make room) and, for the other users, their group on the
 * socket and a directory they can pass through. 0 or -1. */
static int start_daemon(struct test_daemon *d, const struct bench *b, const struct fill *fl,
			const char *threads)
{
	/* A quarter more than the blocks, and never less than the 1G that
	 * always held the clients' prefixes. */
	uint64_t mib = index_bytes(b, fl) * 5 / 4 / (1u << 20) + 64;
	char memory[32], group[16];
	snprintf(memory, sizeof(memory), "%lluM", (unsigned long long)(mib > 1024 ? mib : 1024));
	snprintf(group, sizeof(group), "%d", BENCH_GID);
	int others = fl->users > 0 && geteuid() == 0;
	const char *args[] = { "--memory", memory, "--threads", threads,
			       others ? "--group" : NULL, group, NULL };
	if (td_start(d, args))
		return -1;
	if (others && chmod(d->dir, 0711)) {
		perror("bench/daemon: chmod");
		td_stop(d);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static struct bench b = { .nclients = 8, .nprefixes = 4, .rounds = 5 };
	static struct fill fl = { .models = 20, .users = 4 };
	double seconds = 2;
	const char *threads = "2";
	static const struct option opts[] = {
		{ "clients", required_argument, NULL, 'c' },
		{ "seconds", required_argument, NULL, 's' },
		{ "rounds", required_argument, NULL, 'r' },
		{ "prefixes", required_argument, NULL, 'p' },
		{ "threads", required_argument, NULL, 't' },
		{ "models", required_argument, NULL, 'm' },
		{ "users", required_argument, NULL, 'u' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int o, nthreads = 2;
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (o == 'c')
			b.nclients = opt_int(NAME, "clients", optarg, 1, MAX_CLIENTS);
		else if (o == 's')
			seconds = opt_double(NAME, "seconds", optarg, 0.1, 60);
		else if (o == 'r')
			b.rounds = opt_int(NAME, "rounds", optarg, 1, MAX_ROUNDS);
		else if (o == 'p')
			b.nprefixes = opt_int(NAME, "prefixes", optarg, 1, 8);
		else if (o == 't') {
			nthreads = opt_int(NAME, "threads", optarg, 1, 1024);
			threads = optarg;
		} else if (o == 'm')
			fl.models = opt_int(NAME, "models", optarg, 1, MAX_MODELS);
		else if (o == 'u')
			fl.users = opt_int(NAME, "users", optarg, 0, MAX_USERS);
		else
			return usage(o == 'h' ? 0 : 2);
	}
	if (optind < argc)
		return usage(2);
	/* Half of the machine at most: the daemon's memory is real memory. */
	if (index_bytes(&b, &fl) > (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE) / 2) {
		fprintf(stderr, "bench/daemon: %d models and %d users need %llu MB: more than half of this machine's memory\n",
			fl.models, fl.users, (unsigned long long)(index_bytes(&b, &fl) >> 20));
		return 2;
	}

	double load = bench_loadavg();

	struct test_daemon d;
	static uint32_t tokens[8][PREFIX_BLOCKS * BLOCK_TOKENS];
	static figures pd, ref;
	for (int p = 0; p < b.nprefixes; p++)
		prefix_tokens(tokens[p], p);
	b.tokens = tokens;
	if (start_daemon(&d, &b, &fl, threads))
		return 1;
	int rc = publish_prefixes(d.sock, tokens, b.nprefixes);
	if (!rc)
		rc = populate(d.sock, fl.models, fl.users, &fl.cen, fl.note, sizeof(fl.note));
	if (!rc)
		rc = measure(&b, &d, nthreads, seconds, pd, ref);
	if (td_stop(&d) && !rc) {
		fprintf(stderr, "bench/daemon: prefixd did not stop cleanly\n");
		rc = -1;
	}
	if (rc) {
		fprintf(stderr, "bench/daemon: failed\n");
		return 1;
	}
	return print_json(&b, seconds, threads, pd, ref, load, &fl) ? 0 : 1;
}
