/* SPDX-License-Identifier: MIT */
/*
 * Listener and workers. The listener owns nothing but the listening socket:
 * an accepted connection goes to a worker's queue, and from then on only
 * that worker touches it (no lock on a connection). Workers share the
 * index and the partitions, which lock themselves.
 */
#include "server.h"
#include "restart.h"
#include "remote.h"
#include "tier.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "conn.h"
#include "daemon.h"
#include "flight.h"
#include "reaper.h"

/* A connection in its worker's list and epoll set. */
struct node {
	struct conn *c;
	struct node *prev, *next;
	uint32_t events;
	bool parked;              /* its MATCH waits (conn_parked) */
};

struct worker {
	pthread_t thread;
	struct daemon *d;
	int epfd, evfd;
	pthread_mutex_t lock;     /* guards queue and stop; a leaf, held for a swap */
	struct node *queue;       /* handed over by the listener */
	bool stop;
	struct node *conns;       /* owned by the worker thread */
	int nparked;              /* of conns, parked ones */
};

/* Arenas as large as the budget, up to 64 GiB: a partition's blocks then
 * sit in one arena, one descriptor and one mapping per client (bench/share:
 * ~30 us each). Their size is address space only (store.c). */
static uint64_t arena_bytes(uint64_t budget)
{
	return budget < (64ull << 30) ? budget : 64ull << 30;
}

/* ==== Workers ==== */

static void drop(struct worker *w, struct node *n)
{
	epoll_ctl(w->epfd, EPOLL_CTL_DEL, conn_fd(n->c), NULL);
	w->nparked -= n->parked;
	if (n->prev)
		n->prev->next = n->next;
	else
		w->conns = n->next;
	if (n->next)
		n->next->prev = n->prev;
	conn_free(n->c);
	free(n);
}

/* Takes the listener's hand-overs; false when the worker must stop. */
static bool adopt(struct worker *w)
{
	uint64_t v;
	if (read(w->evfd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		pd_err("worker: eventfd: %s", strerror(errno));
	pthread_mutex_lock(&w->lock);
	struct node *q = w->queue;
	bool stop = w->stop;
	w->queue = NULL;
	pthread_mutex_unlock(&w->lock);
	while (q) {
		struct node *n = q;
		q = q->next;
		n->prev = NULL;
		n->next = w->conns;
		if (w->conns)
			w->conns->prev = n;
		w->conns = n;
		n->events = EPOLLIN;
		conn_set_wake_fd(n->c, w->evfd);
		struct epoll_event ev = { .events = n->events, .data.ptr = n };
		if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, conn_fd(n->c), &ev)) {
			pd_err("worker: epoll_ctl: %s", strerror(errno));
			drop(w, n);
		}
	}
	return !stop;
}

/* What to watch the connection for after it was served (rc: 0, or -1 to
 * close it). A parked one is watched for hang-up only: its peer closing
 * ends the wait, and what else it sends waits in the socket. */
static bool settle(struct worker *w, struct node *n, int rc)
{
	if (rc) {
		drop(w, n);
		return false;
	}
	bool parked = conn_parked(n->c);
	w->nparked += (int)parked - (int)n->parked;
	n->parked = parked;
	uint32_t want = parked ? EPOLLRDHUP : conn_output_pending(n->c) ? EPOLLOUT : EPOLLIN;
	if (want != n->events) {
		struct epoll_event ev = { .events = want, .data.ptr = n };
		n->events = want;
		if (epoll_ctl(w->epfd, EPOLL_CTL_MOD, conn_fd(n->c), &ev)) {
			drop(w, n);
			return false;
		}
	}
	return true;
}

static void serve(struct worker *w, struct node *n)
{
	if (n->parked) { /* hang-up (or an error) while it waits */
		drop(w, n);
		return;
	}
	/* While a reply is pending only output matters; input waits. */
	settle(w, n, conn_output_pending(n->c) ? conn_on_output(n->c) : conn_on_input(n->c));
}

/* Runs the parked MATCHes that were woken or whose time came; returns
 * the milliseconds until the next one's (at most max_ms). */
static int resume_parked(struct worker *w, int max_ms)
{
	int next_ms = max_ms;
	if (!w->nparked)
		return next_ms;
	uint64_t now = conn_now_ms();
	for (struct node *n = w->conns, *next; n; n = next) {
		next = n->next;
		if (!n->parked)
			continue;
		uint64_t at = conn_wake_at(n->c);
		if (at <= now) {
			if (!settle(w, n, conn_resume(n->c)) || !n->parked)
				continue;
			at = conn_wake_at(n->c); /* parked anew */
		}
		if (at <= now)
			next_ms = 0;
		else if (at - now < (uint64_t)next_ms) {
			next_ms = (int)(at - now);
		}
	}
	return next_ms;
}

/* Closes the connections past a deadline (conn_expired). */
static void expire(struct worker *w)
{
	static struct pd_log_limit timeouts;
	uint64_t now = conn_now_ms();
	for (struct node *n = w->conns, *next; n; n = next) {
		next = n->next;
		const char *why = conn_expired(n->c, now);
		if (why) {
			pd_log_limited(&timeouts, "closing a connection that %s", why);
			drop(w, n);
		}
	}
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct epoll_event evs[64];
	uint64_t swept = conn_now_ms();
	for (bool run = true; run;) {
		int n = epoll_wait(w->epfd, evs, 64, resume_parked(w, 1000));
		if (n < 0 && errno != EINTR) {
			pd_err("worker: epoll_wait: %s", strerror(errno));
			break;
		}
		for (int i = 0; i < n && run; i++) {
			if (!evs[i].data.ptr)
				run = adopt(w);
			else
				serve(w, evs[i].data.ptr);
		}
		/* A sweep a second for deadlines, however busy; after the
		 * events, which may name connections a sweep frees. */
		if (conn_now_ms() - swept >= 1000) {
			expire(w);
			swept = conn_now_ms();
		}
	}
	/* Stopping: close every connection, which releases its leases. */
	adopt(w);
	while (w->conns)
		drop(w, w->conns);
	return NULL;
}

static int worker_start(struct worker *w, struct daemon *d)
{
	memset(w, 0, sizeof(*w));
	w->d = d;
	pthread_mutex_init(&w->lock, NULL);
	w->epfd = epoll_create1(EPOLL_CLOEXEC);
	w->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
	if (w->epfd < 0 || w->evfd < 0 || epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->evfd, &ev) ||
	    pthread_create(&w->thread, NULL, worker_main, w)) {
		pd_err("cannot start a worker: %s", strerror(errno));
		return -1;
	}
	return 0;
}

static void worker_wake(struct worker *w)
{
	uint64_t one = 1;
	if (write(w->evfd, &one, sizeof(one)) < 0)
		pd_err("worker: eventfd: %s", strerror(errno));
}

static void worker_stop(struct worker *w)
{
	pthread_mutex_lock(&w->lock);
	w->stop = true;
	pthread_mutex_unlock(&w->lock);
	worker_wake(w);
	pthread_join(w->thread, NULL);
	close(w->epfd);
	close(w->evfd);
	pthread_mutex_destroy(&w->lock);
}

static void hand_over(struct worker *w, struct conn *c)
{
	struct node *n = calloc(1, sizeof(*n));
	if (!n) {
		conn_free(c);
		return;
	}
	n->c = c;
	pthread_mutex_lock(&w->lock);
	n->next = w->queue;
	w->queue = n;
	pthread_mutex_unlock(&w->lock);
	worker_wake(w);
}

/* ==== Listener ==== */

/*
 * Socket activation, as sd_listen_fds(3) without libsystemd: when
 * LISTEN_PID is this process and LISTEN_FDS at least 1, descriptor 3 is
 * the listening socket, bound by the service manager. -1: none passed (or
 * passed to another process), -2: not a listening Unix stream socket.
 * The variables are removed either way, so that no child takes them.
 */
static int inherited_socket(void)
{
	const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
	if (!pid)
		return -1;
	char *end;
	errno = 0;
	long p = strtol(pid, &end, 10), n = fds ? strtol(fds, NULL, 10) : 0;
	int ours = !errno && end != pid && !*end && p == (long)getpid() && n >= 1;
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	if (!ours)
		return -1;
	const int fd = 3;
	int listening = 0, domain = 0, type = 0;
	socklen_t l1 = sizeof(listening), l2 = sizeof(domain), l3 = sizeof(type);
	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &l1) ||
	    getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &l2) ||
	    getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l3) || !listening || domain != AF_UNIX ||
	    type != SOCK_STREAM) {
		pd_err("socket activation: descriptor 3 is not a listening Unix stream socket");
		return -2;
	}
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) || fcntl(fd, F_SETFD, FD_CLOEXEC)) {
		pd_err("socket activation: descriptor 3: %s", strerror(errno));
		return -2;
	}
	if (n > 1)
		pd_log("socket activation: %ld sockets passed; serving the first only", n);
	for (long i = 1; i < n && i < 1024; i++)
		close(fd + (int)i);
	return fd;
}

/* Binds path, refusing to take it from a daemon that still answers and
 * never removing anything that is not a socket. */
static int listen_on(const struct server_cfg *cfg)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	if (strlen(cfg->socket_path) >= sizeof(a.sun_path)) {
		pd_err("socket path too long (at most %zu bytes): %s", sizeof(a.sun_path) - 1,
		       cfg->socket_path);
		return -1;
	}
	strcpy(a.sun_path, cfg->socket_path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		pd_err("socket: %s", strerror(errno));
		return -1;
	}
	struct stat st;
	if (!lstat(a.sun_path, &st)) {
		if (!S_ISSOCK(st.st_mode)) {
			pd_err("%s exists and is not a socket; not touching it", a.sun_path);
			goto fail;
		}
		int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		int live = probe >= 0 && !connect(probe, (struct sockaddr *)&a, sizeof(a));
		if (probe >= 0)
			close(probe);
		if (live) {
			pd_err("another prefixd is serving %s", a.sun_path);
			goto fail;
		}
		unlink(a.sun_path); /* left by a daemon that died */
	}
	/* Created with its final mode: no moment where others could connect. */
	mode_t old = umask(cfg->has_group ? 0117 : 0177);
	int rc = bind(fd, (struct sockaddr *)&a, sizeof(a));
	umask(old);
	if (rc) {
		pd_err("cannot bind %s: %s", a.sun_path, strerror(errno));
		goto fail;
	}
	if (cfg->has_group && chown(a.sun_path, (uid_t)-1, cfg->group)) {
		pd_err("cannot give %s to group %u: %s", a.sun_path, (unsigned)cfg->group,
		       strerror(errno));
		unlink(a.sun_path);
		goto fail;
	}
	if (listen(fd, 128)) {
		pd_err("listen: %s", strerror(errno));
		unlink(a.sun_path);
		goto fail;
	}
	return fd;
fail:
	close(fd);
	return -1;
}

/* Accepts what is waiting. 0, or the milliseconds to stop listening for
 * after an accept error (out of descriptors: a backoff, not a spin). */
static int accept_all(int lfd, struct daemon *d, struct worker *ws, int nw, unsigned *next,
		      int *backoff_ms)
{
	static struct pd_log_limit errors, closed;
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
				return 0;
			pd_log_limited(&errors, "accept: %s; not accepting for %d ms", strerror(errno),
				       *backoff_ms);
			int ms = *backoff_ms;
			*backoff_ms = ms < 1000 ? 2 * ms : 1000;
			return ms;
		}
		*backoff_ms = 10;
		struct ucred cred;
		socklen_t len = sizeof(cred);
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len)) {
			pd_err("SO_PEERCRED: %s", strerror(errno));
			reaper_close_conn(fd, (uid_t)-1);
			continue;
		}
		if (reaper_over(cred.uid)) {
			pd_log_limited(&closed, "pid %d uid %u: more than %d descriptors it sent wait to be closed; connection closed at once",
				       (int)cred.pid, (unsigned)cred.uid, REAPER_USER_MAX);
			reaper_close_conn(fd, cred.uid);
			continue;
		}
		int tell;
		int refused = admission_enter(&d->adm, cred.uid, &tell);
		if (refused && !tell) {
			pd_log_limited(&closed, "pid %d uid %u: too many connections; closed at once",
				       (int)cred.pid, (unsigned)cred.uid);
			reaper_close_conn(fd, cred.uid);
			continue;
		}
		struct conn *c = conn_new(d, fd, &cred, refused);
		if (c)
			hand_over(&ws[(*next)++ % (unsigned)nw], c);
	}
}

/* Opens the disk tier, loads what it holds, starts its writer. */
static int disk_start(const struct server_cfg *cfg, struct daemon *d)
{
	const char *why;
	long holder;
	int rc = tier_open(cfg->disk_dir, cfg->block_tokens, &d->tier, &why, &holder);
	if (rc == -EBUSY) {
		char pid[24] = "unknown";
		if (holder)
			snprintf(pid, sizeof(pid), "%ld", holder);
		pd_err("the disk directory %s %s (pid %s): give each daemon its own --disk-dir",
		       cfg->disk_dir, why, pid);
		return -1;
	}
	if (rc) {
		pd_err("%s %s: %s", why, cfg->disk_dir, strerror(-rc));
		return -1;
	}
	struct restart_report r;
	rc = restart_load(d, d->tier, &r);
	if (rc) {
		pd_err("cannot read the disk directory %s: %s", cfg->disk_dir, strerror(-rc));
		return -1;
	}
	pd_log("disk tier %s: %llu blocks (%.1f MiB of a %.1f MiB budget) loaded in %.1f ms from %s; %llu damaged and %llu torn records deleted, %llu others dropped",
	       cfg->disk_dir, (unsigned long long)r.loaded, (double)r.bytes / (1 << 20),
	       (double)cfg->disk_budget / (1 << 20), r.ms,
	       r.manifest ? "the manifest" : "a scan", (unsigned long long)r.corrupt,
	       (unsigned long long)r.torn, (unsigned long long)r.dropped);
	tier_set_sync(d->tier, cfg->disk_sync);
	if (r.pins || r.pins_expired || r.pins_lost)
		pd_log("disk tier: %llu pins kept from the last run, %llu ended while prefixd was down, %llu not kept",
		       (unsigned long long)r.pins, (unsigned long long)r.pins_expired,
		       (unsigned long long)r.pins_lost);
	if (r.over_budget)
		pd_log("disk tier: %llu intact records (%.1f MiB) deleted because the directory held %.1f MiB of records, more than --disk-budget %.1f MiB allows (the deepest blocks of their chains went); without --disk-budget, or with a larger one, a restart keeps them",
		       (unsigned long long)r.over_budget, (double)r.over_budget_bytes / (1 << 20),
		       (double)(r.bytes + r.over_budget_bytes) / (1 << 20),
		       (double)cfg->disk_budget / (1 << 20));
	if ((rc = tier_start(d->tier, d->idx))) {
		pd_err("cannot start the disk tier: %s", strerror(-rc));
		return -1;
	}
	return 0;
}

int server_run(const struct server_cfg *cfg)
{
	struct daemon d = { .block_tokens = cfg->block_tokens, .admin_uid = geteuid(),
			    .lim = { cfg->quota, cfg->pin_max, cfg->memory, cfg->disk_budget },
			    .request_timeout_ms = (uint64_t)cfg->request_timeout_s * 1000,
			    .idle_timeout_ms = (uint64_t)cfg->idle_timeout_s * 1000,
			    .shared = cfg->shared, .remote = cfg->remote };
	if (admission_init(&d.adm, cfg->max_conns, cfg->max_user_conns, cfg->request_memory)) {
		pd_err("cannot set up admission");
		remote_close(d.remote);
		return 1;
	}
	partitions_init(&d.parts, cfg->memory, arena_bytes(cfg->memory));
	if (idx_new(cfg->block_tokens, cfg->key_bytes, &d.lim, &d.idx) ||
	    flight_new(cfg->claim_timeout_ms, &d.flight)) {
		pd_err("out of memory");
		idx_free(d.idx);
		partitions_destroy(&d.parts);
		admission_destroy(&d.adm);
		remote_close(d.remote);
		return 1;
	}
	int rc = 1, nw = 0, lfd = -1, sfd = -1, epfd = -1;
	struct worker *ws = calloc((size_t)cfg->threads, sizeof(*ws));
	/* Before the socket: a second daemon on one directory stops here. */
	if (cfg->disk_dir && disk_start(cfg, &d))
		goto out;
	if (d.remote && (rc = remote_start(d.remote, d.idx))) {
		pd_err("cannot start the remote tier: %s", strerror(-rc));
		rc = 1;
		goto out;
	}
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	/* A socket the service manager made is its to remove, not ours. */
	bool own_socket = false;
	char where[256];
	snprintf(where, sizeof(where), "%s", cfg->socket_path);
	if (!ws)
		goto out;
	if ((lfd = inherited_socket()) == -2) {
		lfd = -1;
		goto out;
	}
	if (lfd >= 0) {
		struct sockaddr_un a = { 0 };
		socklen_t len = sizeof(a);
		if (getsockname(lfd, (struct sockaddr *)&a, &len) || len <= sizeof(sa_family_t) ||
		    !a.sun_path[0])
			snprintf(where, sizeof(where), "a socket from the service manager");
		else
			snprintf(where, sizeof(where), "%.*s (from the service manager)",
				 (int)strnlen(a.sun_path, sizeof(a.sun_path)), a.sun_path);
		if (cfg->has_group)
			pd_log("socket activation: --group ignored; the service manager set the socket's mode");
	} else if ((lfd = listen_on(cfg)) < 0) {
		goto out;
	} else {
		own_socket = true;
	}
	sfd = signalfd(-1, &sigs, SFD_CLOEXEC);
	epfd = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = lfd };
	struct epoll_event sev = { .events = EPOLLIN, .data.fd = sfd };
	if (sfd < 0 || epfd < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &ev) ||
	    epoll_ctl(epfd, EPOLL_CTL_ADD, sfd, &sev)) {
		pd_err("cannot set up the listener: %s", strerror(errno));
		goto out;
	}
	if (reaper_start()) {
		pd_err("cannot start the descriptor reaper");
		goto out;
	}
	for (; nw < cfg->threads; nw++)
		if (worker_start(&ws[nw], &d))
			goto out;
	pd_log("listening on %s: %.1f MiB for KV blocks of %u tokens (quota %.1f MiB a user, pins up to %.1f MiB), %d workers",
	       where, (double)cfg->memory / (1 << 20), cfg->block_tokens,
	       (double)cfg->quota / (1 << 20), (double)cfg->pin_max / (1 << 20), cfg->threads);
	if (cfg->shared.on)
		pd_log("shared namespace: members of group %u attach it; %u user%s besides root publish%s into it%s",
		       (unsigned)cfg->shared.gid, cfg->shared.npub, cfg->shared.npub == 1 ? "" : "s",
		       cfg->shared.npub == 1 ? "es" : "",
		       own_socket && !cfg->has_group
			       ? "; but without --group the socket is this user's alone: no member can connect"
			       : "");
	unsigned next = 0;
	int backoff_ms = 10, paused_ms = 0;
	uint64_t ticked = conn_now_ms();
	for (;;) {
		struct epoll_event e;
		int n = epoll_wait(epfd, &e, 1, paused_ms ? paused_ms : 1000);
		/* A tick a second ends the pins whose TTL ran out (not every
		 * accept: it takes the index lock and walks the pins). */
		if (conn_now_ms() - ticked >= 1000) {
			idx_expire(d.idx);
			ticked = conn_now_ms();
			flight_expire(d.flight, ticked);
		}
		if (paused_ms) {
			/* Listening again after an accept error's backoff. */
			ev.events = EPOLLIN;
			epoll_ctl(epfd, EPOLL_CTL_MOD, lfd, &ev);
			paused_ms = 0;
		}
		if (n < 0 && errno != EINTR) {
			pd_err("epoll_wait: %s", strerror(errno));
			goto out;
		}
		if (n <= 0)
			continue;
		if (e.data.fd == sfd) {
			struct signalfd_siginfo si;
			ssize_t r = read(sfd, &si, sizeof(si));
			if (r == sizeof(si) && si.ssi_signo == SIGHUP) {
				/* Nothing to reload or reopen: the log is stderr. */
				pd_log("SIGHUP ignored: no configuration to reload, logs go to stderr");
				continue;
			}
			if (r == sizeof(si))
				pd_log("stopping on %s", strsignal((int)si.ssi_signo));
			break;
		}
		if ((paused_ms = accept_all(lfd, &d, ws, nw, &next, &backoff_ms))) {
			ev.events = 0;
			epoll_ctl(epfd, EPOLL_CTL_MOD, lfd, &ev);
		}
	}
	rc = 0;
out:
	if (lfd >= 0) {
		close(lfd); /* no new connections while the workers stop */
		if (own_socket)
			unlink(cfg->socket_path);
	}
	for (int i = 0; i < nw; i++)
		worker_stop(&ws[i]);
	reaper_stop();
	/* After the workers, before the index: its writer reads blocks. */
	remote_close(d.remote);
	if (d.tier && rc == 0) {
		uint64_t left = tier_drain(d.tier);
		if (left)
			pd_log("disk tier: %llu blocks held only in memory could not be written (the disk or its budget is full)",
			       (unsigned long long)left);
		uint64_t listed;
		int mrc = restart_save(&d, d.tier, &listed);
		if (mrc == -ENOSPC || mrc == -EDQUOT)
			pd_log("disk tier: no manifest: %s %s (%s): the next start scans the directory instead, which keeps every record but takes longer; free some space there",
			       mrc == -ENOSPC ? "the file system is full at" : "prefixd's user is over its disk quota at",
			       cfg->disk_dir, strerror(-mrc));
		else if (mrc)
			pd_log("disk tier: no manifest (%s): the next start scans the directory",
			       strerror(-mrc));
		else
			pd_log("disk tier: %llu records listed in the manifest", (unsigned long long)listed);
	}
	tier_close(d.tier);
	if (rc == 0) {
		struct idx_stats s;
		idx_get_stats(d.idx, &s);
		pd_log("stopped: %llu blocks cached, %llu hits, %llu misses, %llu published, %llu evicted",
		       (unsigned long long)s.blocks, (unsigned long long)s.hits,
		       (unsigned long long)s.misses, (unsigned long long)s.published,
		       (unsigned long long)s.evictions);
	}
	flight_free(d.flight); /* after the workers: no connection is left */
	idx_free(d.idx);
	partitions_destroy(&d.parts);
	admission_destroy(&d.adm);
	if (sfd >= 0)
		close(sfd);
	if (epfd >= 0)
		close(epfd);
	free(ws);
	return rc;
}
