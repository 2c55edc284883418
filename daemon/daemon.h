/* SPDX-License-Identifier: MIT */
/* What every worker of one prefixd shares. */
#ifndef PD_DAEMON_H
#define PD_DAEMON_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "partition.h"

struct daemon {
	struct partitions parts;
	uint32_t block_tokens;
	uid_t admin_uid;          /* the daemon's own user; root is admin too */
	_Atomic uint64_t connections, matches, errors;
};

/* One line on stderr, prefixed with "prefixd: ". */
void pd_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
