/* SPDX-License-Identifier: MIT */
#include "admission.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int admission_init(struct admission *a, uint32_t max_conns, uint32_t max_user_conns,
		   uint64_t body_limit)
{
	memset(a, 0, sizeof(*a));
	a->max_conns = max_conns;
	a->max_user_conns = max_user_conns;
	a->body_limit = body_limit;
	atomic_init(&a->body_bytes, 0);
	return -pthread_mutex_init(&a->lock, NULL);
}

void admission_destroy(struct admission *a)
{
	free(a->users);
	pthread_mutex_destroy(&a->lock);
}

/* The user's entry, made on first use; NULL when out of memory. Users are
 * few next to connections: a linear search. */
static struct adm_user *user_of(struct admission *a, uid_t uid)
{
	for (size_t i = 0; i < a->nusers; i++)
		if (a->users[i].uid == uid)
			return &a->users[i];
	if (a->nusers == a->cap_users) {
		size_t cap = a->cap_users ? 2 * a->cap_users : 16;
		struct adm_user *u = realloc(a->users, cap * sizeof(*u));
		if (!u)
			return NULL;
		a->users = u;
		a->cap_users = cap;
	}
	a->users[a->nusers] = (struct adm_user){ uid, 0 };
	return &a->users[a->nusers++];
}

int admission_enter(struct admission *a, uid_t uid, int *tell)
{
	int rc = 0;
	*tell = 0;
	pthread_mutex_lock(&a->lock);
	struct adm_user *u = a->conns < a->max_conns ? user_of(a, uid) : NULL;
	if (a->conns >= a->max_conns || !u)
		rc = -EMFILE;
	else if (u->conns >= a->max_user_conns)
		rc = -EUSERS;
	if (!rc) {
		a->conns++;
		u->conns++;
	} else if (a->refusing < ADMISSION_REFUSING_MAX) {
		a->refusing++;
		*tell = 1;
	}
	pthread_mutex_unlock(&a->lock);
	return rc;
}

void admission_leave(struct admission *a, uid_t uid)
{
	pthread_mutex_lock(&a->lock);
	a->conns--;
	for (size_t i = 0; i < a->nusers; i++) {
		if (a->users[i].uid != uid)
			continue;
		/* A user with no connection left leaves the table. */
		if (!--a->users[i].conns)
			a->users[i] = a->users[--a->nusers];
		break;
	}
	pthread_mutex_unlock(&a->lock);
}

void admission_told(struct admission *a)
{
	pthread_mutex_lock(&a->lock);
	a->refusing--;
	pthread_mutex_unlock(&a->lock);
}

int admission_body_take(struct admission *a, uint64_t n)
{
	uint64_t cur = atomic_load(&a->body_bytes);
	do {
		if (n > a->body_limit - cur || cur > a->body_limit)
			return -ENOMEM;
	} while (!atomic_compare_exchange_weak(&a->body_bytes, &cur, cur + n));
	return 0;
}

void admission_body_give(struct admission *a, uint64_t n)
{
	atomic_fetch_sub(&a->body_bytes, n);
}
