/* SPDX-License-Identifier: MIT */
/* prefixd under concurrent clients, shared by Criterion and the TSan driver.
 * Returns 0, or -1 with why filled in. */
#ifndef PFX_DAEMON_CASES_H
#define PFX_DAEMON_CASES_H

#include <stddef.h>

int case_daemon_many_clients(char *why, size_t len);
/* The same with a disk tier that writes, evicts to and restores from disk
 * meanwhile; then again after a restart. */
int case_daemon_many_clients_disk(char *why, size_t len);

#endif
