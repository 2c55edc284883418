/* SPDX-License-Identifier: MIT */
/*
 * Single flight (docs/PROTOCOL.md, "Single flight"): claims on the first
 * missing block of a prompt that one connection computes, and the MATCHes
 * that wait for it. A waiting MATCH is a parked connection, never a
 * blocked thread: flight wakes it by writing its worker's eventfd, and its
 * worker runs the MATCH again.
 */
#ifndef PD_FLIGHT_H
#define PD_FLIGHT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "wire.h"

/* Bounds on what one client can make flight hold. */
#define FLIGHT_CONN_CLAIMS 8
#define FLIGHT_USER_CLAIMS 64
#define FLIGHT_USER_WAITS 256

struct flight;
struct flight_claim;

/* One connection's part, inside struct conn; zeroed, then flight_conn_init. */
struct flight_conn {
	uid_t uid;
	int wake_fd;                  /* its worker's eventfd; -1 until set */
	struct flight_claim *claims;  /* the claims it owns */
	unsigned nclaims;
	/* Its waiting MATCH: on a claim's list while parked. */
	struct flight_claim *on;
	struct flight_conn *wprev, *wnext;
	bool counted;                 /* counts in its user's waits */
	bool dropped;                 /* the claim it waited on was dropped: compute */
	_Atomic bool woken;           /* set under flight's lock, read by the worker */
};

enum flight_verdict {
	FLIGHT_NONE,       /* neither claimed nor waits */
	FLIGHT_CLAIMED,    /* this connection owns the claim now */
	FLIGHT_INHERITED,  /* ... taken over from a claimant gone or late */
	FLIGHT_WAIT,       /* parked on another's claim */
	FLIGHT_RETRY,      /* claims moved since seq was read: match again */
};

struct flight_ask {
	uint32_t ns;             /* the namespace its PUBLISH would go to */
	const uint8_t *hashes;   /* the chain from the first missing block on */
	uint32_t n;              /* at least 1 */
	bool may_claim;          /* CLAIM, and it may publish into ns */
	bool may_wait;           /* its wait has time left */
	uint64_t seq;            /* flight_seq() before the index lookup */
};

struct flight_stats {
	uint64_t claims, waits, wait_ms, inherited, expired;
};

/* 0 or -ENOMEM. timeout_ms: a claim's life without progress. */
int flight_new(uint64_t timeout_ms, struct flight **out);
/* Every connection must have left (flight_conn_close). NULL is fine. */
void flight_free(struct flight *f);

void flight_conn_init(struct flight_conn *fc, uid_t uid);
/* The connection closes: its claims end (its waiters are woken to inherit
 * them), and so does its wait. */
void flight_conn_close(struct flight *f, struct flight_conn *fc);

/* Changes each time a PUBLISH moves or ends a claim. */
uint64_t flight_seq(struct flight *f);

/*
 * What a MATCH that missed a->hashes[0] does. FLIGHT_WAIT links fc to the
 * claim and sets *wake_at_ms to the claim's deadline; the caller parks the
 * connection, and calls flight_unpark before it runs the MATCH again.
 */
enum flight_verdict flight_decide(struct flight *f, struct flight_conn *fc,
				  const struct flight_ask *a, uint64_t now_ms,
				  uint64_t *wake_at_ms);
/* Off the claim's list, before a parked MATCH runs again. true when its
 * claim was dropped (a PUBLISH stopped there): it must not wait again. */
bool flight_unpark(struct flight *f, struct flight_conn *fc);
/* The MATCH that waited is answered: it stops counting as its user's wait;
 * waited_ms goes to the counters. */
void flight_wait_done(struct flight *f, struct flight_conn *fc, uint64_t waited_ms);
/* A MATCH parks for the first time (counts a wait). */
void flight_count_wait(struct flight *f);

/* count blocks of ns were stored or found by a PUBLISH (hashes, in chain
 * order): the claims on them move past them, or end; their waiters wake. */
void flight_published(struct flight *f, uint32_t ns, const uint8_t *hashes, uint32_t count,
		      uint64_t now_ms);
/* A PUBLISH stopped at block key of ns: a claim there is dropped and its
 * waiters told to compute. */
void flight_dropped(struct flight *f, uint32_t ns, const uint8_t *key);
/* Claims past their deadline that nobody waits for go (once a second). */
void flight_expire(struct flight *f, uint64_t now_ms);

void flight_get_stats(struct flight *f, struct flight_stats *out);

#endif
