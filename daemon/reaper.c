/* SPDX-License-Identifier: MIT */
#include "reaper.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sock.h"

struct item {
	int fd;
	uid_t uid;
	struct item *next;
};

/* Descriptors waiting, by user: a short list, since only users whose
 * descriptors are slow to close stay on it for long. */
struct user {
	uid_t uid;
	unsigned n;
	struct user *next;
};

/* lock guards the queue, users and stopping; a leaf, never held across
 * the close() it exists for. wake: the queue grew or the reaper must
 * stop; the reaper's wait drops lock. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static struct item *head, **tail = &head;
static struct user *users;
static atomic_uint waiting;    /* all users' (reaper_over's fast path) */
static bool running, stopping;
static pthread_t thread;

static struct user **user_slot(uid_t uid)
{
	struct user **u = &users;
	while (*u && (*u)->uid != uid)
		u = &(*u)->next;
	return u;
}

static void *reap(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&lock);
	for (;;) {
		while (!head && !stopping)
			pthread_cond_wait(&wake, &lock);
		if (!head)
			break;
		struct item *it = head;
		if (!(head = it->next))
			tail = &head;
		pthread_mutex_unlock(&lock);
		close(it->fd);
		pthread_mutex_lock(&lock);
		/* Counted until closed: a close that blocks is what the bound is for. */
		struct user **u = user_slot(it->uid), *gone = NULL;
		if (*u && !--(*u)->n) {
			gone = *u;
			*u = gone->next;
		}
		atomic_fetch_sub(&waiting, 1);
		free(gone);
		free(it);
	}
	pthread_mutex_unlock(&lock);
	return NULL;
}

int reaper_start(void)
{
	running = !pthread_create(&thread, NULL, reap, NULL);
	return running ? 0 : -1;
}

void reaper_stop(void)
{
	if (!running)
		return;
	pthread_mutex_lock(&lock);
	stopping = true;
	pthread_cond_signal(&wake);
	pthread_mutex_unlock(&lock);
	pthread_join(thread, NULL);
	running = false;
}

void reaper_close(int fd, uid_t uid)
{
	struct item *it = running ? malloc(sizeof(*it)) : NULL;
	if (!it) {
		close(fd);
		return;
	}
	it->fd = fd;
	it->uid = uid;
	it->next = NULL;
	pthread_mutex_lock(&lock);
	struct user **u = user_slot(uid);
	if (!*u && (*u = calloc(1, sizeof(**u)))) /* out of memory: uncounted */
		(*u)->uid = uid;
	if (*u)
		(*u)->n++;
	atomic_fetch_add(&waiting, 1);
	*tail = it;
	tail = &it->next;
	pthread_cond_signal(&wake);
	pthread_mutex_unlock(&lock);
}

void reaper_take(void *ctx, int fd)
{
	reaper_close(fd, *(const uid_t *)ctx);
}

bool reaper_over(uid_t uid)
{
	if (atomic_load_explicit(&waiting, memory_order_relaxed) <= REAPER_USER_MAX)
		return false;
	pthread_mutex_lock(&lock);
	struct user *u = *user_slot(uid);
	bool over = u && u->n > REAPER_USER_MAX;
	pthread_mutex_unlock(&lock);
	return over;
}

/* Reads a closing connection drains before its socket goes whole to the
 * reaper: enough for what a Unix socket queues by default (a 208 KiB send
 * buffer: a body the daemon refused to read, say), not for a queue
 * stuffed with descriptors (a read stops after each message that carries
 * some). */
#define DRAIN_READS 8
#define DRAIN_BYTES (64u << 10)

void reaper_close_conn(int fd, uid_t uid)
{
	/* Nothing can be queued on it after this, so once its queue is empty
	 * its close drops no descriptor in flight, and cannot block. */
	shutdown(fd, SHUT_RD);
	uint8_t buf[DRAIN_BYTES]; /* read and dropped */
	for (int i = 0; i < DRAIN_READS; i++) {
		int nfds = 0;
		ssize_t r = pd_recv_some_to(fd, buf, sizeof(buf), MSG_DONTWAIT, NULL, &nfds,
					    reaper_take, &uid);
		if (r == 0 || r == -EAGAIN) {
			close(fd);
			return;
		}
		if (r < 0)
			break;
	}
	reaper_close(fd, uid);
}
