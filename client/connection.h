/* SPDX-License-Identifier: MIT */
/* Internals of a libprefixd connection, shared by client.c and admin.c. */
#ifndef PD_CONNECTION_H
#define PD_CONNECTION_H

#include <pthread.h>
#include <stdint.h>

#include "buf.h"
#include "prefixd.h"
#include "prompt.h"
#include "wire.h"

struct mapped {
	const uint8_t *base;
	uint64_t size;
};

struct prefixd {
	int fd;
	pthread_mutex_t lock;
	uint32_t opaque;
	int has_layout;
	uint32_t block_tokens;
	uint64_t block_bytes;
	uint32_t max_hashes;
	struct prefixd_limits limits; /* from the HELLO reply */
	struct mapped *arenas;  /* by arena id */
	uint32_t narenas;
	/* The last prompt: a prompt is matched and then published, or asked
	 * for again, and hashing is a quarter of a client's time per MATCH
	 * (bench/daemon). */
	struct prefixd_prompt *memo;
	struct pd_buf req; /* request bodies */
	/* Leases this connection holds: RELEASE is one-way (no round trip;
	 * bench/daemon), so an unknown lease is caught here instead. */
	uint64_t *leases;
	size_t nleases, cap_leases;
	/* The staging memfd of this connection's publishes (-1 until the
	 * first): kept, so that only the first publish pays for its pages. */
	int staging;
};

/*
 * One request and its reply; the caller holds c->lock. On a daemon error
 * the message it sent becomes prefixd_errmsg(). The reply body (malloc'd)
 * and descriptors go to the caller only on success; fds may be NULL when
 * none are expected.
 */
int pd_call(struct prefixd *c, int op, const uint8_t *body, size_t len, int sfd,
	    uint8_t **rbody, uint32_t *rlen, int *fds, int *nfds);
/* pd_call with header flags (PD_FLAG_LEASE on a PUBLISH). */
int pd_call_flags(struct prefixd *c, int op, uint8_t flags, const uint8_t *body, size_t len,
		  int sfd, uint8_t **rbody, uint32_t *rlen, int *fds, int *nfds);

#endif
