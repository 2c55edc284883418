/* SPDX-License-Identifier: MIT */
/* What every worker of one prefixd shares. */
#ifndef PD_DAEMON_H
#define PD_DAEMON_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "admission.h"
#include "index.h"
#include "partition.h"
#include "shared.h"

struct tier;
struct flight;
struct remote;

/*
 * Errors: a call returns 0 or -errno, and one that can say more sets a
 * `const char **why` to a static phrase of what was wrong ("payload
 * checksum", "cannot open the disk directory"). The caller, which has the
 * context (the path, the peer, the request), makes it one line for the
 * log (pd_log) or for a reply (conn_fail), with strerror(-rc) when there
 * is no why. Why not a buffer: no size to pick, nothing to truncate or
 * format on the paths that hostile input reaches (records, imports, the
 * restores of a MATCH), and tests and fuzzers compare the phrase. A
 * detail only the callee knows goes back as data, not prose (tier_open's
 * holder, shared_parse_publishers' at).
 */

/*
 * Locks (docs/DESIGN.md, "Locks", has them all): the index's lock (index.c)
 * is the outer one. Under it run the stores' callbacks (no lock of their
 * own) and the tier's callbacks, which take the tier's mutex (tier.c): so
 * index -> tier, never the other way (the tier's writer calls into the
 * index without its mutex). The partitions' lock and admission's are
 * leaves: nothing is taken under them, and neither is taken under another.
 */
struct daemon {
	struct partitions parts;  /* arenas, and the budget */
	struct idx *idx;          /* every block of every user and model */
	struct tier *tier;        /* the disk tier; NULL: none */
	struct remote *remote;    /* the remote tier (Redis); NULL: none */
	struct flight *flight;    /* single flight's claims and waiters */
	struct idx_limits lim;
	uint32_t block_tokens;
	uid_t admin_uid;          /* the daemon's own user; root is admin too */
	struct shared_cfg shared; /* the shared namespace; shared.on 0: none */
	struct admission adm;     /* connections and request memory */
	uint64_t request_timeout_ms; /* for a frame, and for a first request */
	uint64_t idle_timeout_ms;    /* for a served connection with no lease; 0: none */
	_Atomic uint64_t connections, matches, errors;
};

/* One line on stderr with the time and its level ("info", "warn", "error"; log.c),
 * or a syslog priority prefix when stderr is the journal. pd_err is for
 * what stops the daemon or a worker. */
void pd_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void pd_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void pd_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Lines of one kind that a client can cause at will: at most one a
 * second, then how many were left out. */
struct pd_log_limit {
	_Atomic int64_t last_s;
	_Atomic uint64_t skipped;
};
void pd_log_limited(struct pd_log_limit *l, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif
