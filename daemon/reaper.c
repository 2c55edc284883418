/* SPDX-License-Identifier: MIT */
#include "reaper.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

struct item {
	int fd;
	struct item *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static struct item *queue;
static bool running, stopping;
static pthread_t thread;

static void *reap(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&lock);
	for (;;) {
		while (!queue && !stopping)
			pthread_cond_wait(&wake, &lock);
		if (!queue)
			break;
		struct item *it = queue;
		queue = it->next;
		pthread_mutex_unlock(&lock);
		close(it->fd);
		free(it);
		pthread_mutex_lock(&lock);
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

void reaper_close(int fd)
{
	struct item *it = running ? malloc(sizeof(*it)) : NULL;
	if (!it) {
		close(fd);
		return;
	}
	it->fd = fd;
	pthread_mutex_lock(&lock);
	it->next = queue;
	queue = it;
	pthread_cond_signal(&wake);
	pthread_mutex_unlock(&lock);
}
