/* SPDX-License-Identifier: MIT */
/*
 * What the daemon lets in, so that no client can take it from the others:
 * connections (in all, and per user) and the memory of request bodies
 * being read. Shared by the listener and the workers; thread-safe.
 */
#ifndef PD_ADMISSION_H
#define PD_ADMISSION_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

/* Connections refused while waiting to be told why (their first request
 * gets the reason); past these, a refused connection is closed at once. */
#define ADMISSION_REFUSING_MAX 64

struct admission {
	/* Guards conns, refusing and users (the limits are set once, at
	 * init). A leaf: taken with no lock held, none taken under it. */
	pthread_mutex_t lock;
	uint32_t max_conns, max_user_conns;
	uint32_t conns, refusing;
	struct adm_user {
		uid_t uid;
		uint32_t conns;
	} *users;
	size_t nusers, cap_users;
	uint64_t body_limit;
	_Atomic uint64_t body_bytes;  /* no lock: a compare-and-swap against body_limit */
};

int admission_init(struct admission *a, uint32_t max_conns, uint32_t max_user_conns,
		   uint64_t body_limit);
void admission_destroy(struct admission *a);

/* A new connection of uid: 0 (admitted: admission_leave when it closes),
 * -EMFILE (max_conns reached) or -EUSERS (the user's max reached); then
 * *tell says whether it may stay to be told why (admission_told once
 * told) or must be closed at once. */
int admission_enter(struct admission *a, uid_t uid, int *tell);
void admission_leave(struct admission *a, uid_t uid);
void admission_told(struct admission *a);

/* Memory for a body of n bytes: 0, or -ENOMEM when n more would pass the
 * limit. admission_body_give when done with it. */
int admission_body_take(struct admission *a, uint64_t n);
void admission_body_give(struct admission *a, uint64_t n);

#endif
