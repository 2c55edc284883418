/* SPDX-License-Identifier: MIT */
/*
 * The inside of a connection, shared by its transport (conn.c), its
 * requests (request.c) and the admin requests (admin.c). Only the worker
 * thread that owns a connection touches it.
 */
#ifndef PD_PEER_H
#define PD_PEER_H

#include <stdbool.h>
#include <sys/socket.h>

#include "buf.h"
#include "conn.h"
#include "daemon.h"
#include "flight.h"
#include "wire.h"

struct held_lease {
	uint64_t id;
	uint8_t last[PD_HASH_SIZE]; /* chain hash of its last block: a publish continues it */
	bool shared;                /* its blocks are in the shared namespace */
};

struct conn {
	struct daemon *d;
	int fd;
	struct ucred cred;
	int refused;              /* admission_enter's refusal, told at the first request */
	/* Deadlines (conn_expired): a frame must be read, and a reply taken,
	 * within the request timeout of its start; so must a first request. */
	uint64_t since_ms;        /* the connection's, frame's or reply's start */
	bool served;              /* a request was answered */
	uint64_t body_charged;    /* of the daemon's request memory */
	/* Set by HELLO. */
	struct partition *part;   /* the arenas of (user, block size) */
	struct idx_group *group;  /* the chain root: user, model, layout, salt */
	uint8_t h0[PD_HASH_SIZE];
	uint8_t fp[PD_FP_SIZE];   /* the model's fingerprint (the remote tier's keys) */
	/* Set by a HELLO with the SHARED flag: the shared namespace's arenas
	 * and chain root. Its arenas go to the client with ids from
	 * STORE_MAX_ARENAS on, so that they never clash with its own. A
	 * member's are set once a publisher has made them (shared_join). */
	bool shared_wanted;
	uint8_t shared_fp[PD_FP_SIZE];
	struct partition *shared_part;
	struct idx_group *shared_group;
	int shared_role;          /* enum shared_role, looked up at first need */
	/* Leases this connection holds; released when it closes. */
	struct held_lease *leases;
	size_t nleases, cap_leases;
	/* Arena ids whose descriptor this connection has received. */
	uint8_t *sent;
	size_t sent_bytes;
	/* The request being read. */
	uint8_t hdr[PD_HDR_SIZE];
	size_t hdr_got;
	struct pd_hdr h;
	uint8_t *body;
	size_t body_got;
	int fds[PD_MAX_FDS];
	int nfds;
	bool extra_fds;            /* descriptors beyond what the request takes came */
	/* The reply being sent; its descriptors go with its first byte. */
	uint8_t *out;             /* the reply being sent, or NULL */
	size_t out_len, out_pos;
	struct pd_buf body_buf, out_buf; /* what body and out point into */
	int out_fds[PD_MAX_FDS];
	int out_nfds;
	bool close_after_reply;
	/* Single flight: a MATCH that waits keeps its request (header, body)
	 * and is run again when woken or at wake_at_ms. */
	struct flight_conn fl;
	bool parked;
	bool waited;              /* the request being answered waited */
	uint64_t wait_start_ms, wait_end_ms; /* its wait_ms ends at wait_end_ms */
	uint64_t wake_at_ms;      /* parked: run again at the latest then */
};

/* Queues a reply whose body_len bytes the caller writes at the returned
 * pointer; NULL when out of memory (the connection must close). */
uint8_t *conn_reply(struct conn *c, int status, size_t body_len);
/* Queues an error reply with a message, also logged with the peer. 0 when
 * queued, -1 when the connection must close. */
int conn_fail(struct conn *c, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* conn_fail for refusals a client can repeat at will: the caller logs
 * them (rate-limited). */
int conn_fail_quiet(struct conn *c, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The message for a decoder's PD_E_MALFORMED or PD_E_LIMIT. */
const char *conn_decode_error(int rc);
void conn_close_fds(int *fds, int *n);

/* Requests (request.c): each answers with a reply or conn_fail. 0, or -1
 * to close the connection. */
int req_hello(struct conn *c);
int req_match(struct conn *c);
int req_release(struct conn *c);
int req_publish(struct conn *c);
/* Ends every lease and the group of a connection that closes. */
void req_end(struct conn *c);

/* Admin requests (admin.c, transfer.c). Statistics, listing, eviction
 * and pins are for every user, on their own chains (and the daemon's user
 * and root on everyone's); export and import for the daemon's user and
 * root only. */
int admin_stats(struct conn *c);
int admin_list(struct conn *c);
int admin_evict(struct conn *c);
int admin_pin(struct conn *c);
int admin_unpin(struct conn *c);
int admin_export(struct conn *c);
int admin_import(struct conn *c);

/* The peer's role in the shared namespace (shared.h), looked up once. */
enum shared_role conn_shared_role(struct conn *c);

/* 0 when the peer may administer; else the refusal is queued (see
 * conn_fail: 0 queued, -1 close), returned as 1 or -1. */
int admin_admitted(struct conn *c, const char *what);
/* Returns from the request unless the peer may administer. */
#define ADMIT(c, what)                                   \
	do {                                             \
		int admit_rc_ = admin_admitted(c, what);  \
		if (admit_rc_)                           \
			return admit_rc_ < 0 ? -1 : 0;   \
	} while (0)

#endif
