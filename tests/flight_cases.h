/* SPDX-License-Identifier: MIT */
/* Single flight under concurrent clients, shared by Criterion
 * (test_flight.c) and the TSan driver. Each starts its own prefixd and
 * returns 0, or -1 with why filled in. */
#ifndef PFX_FLIGHT_CASES_H
#define PFX_FLIGHT_CASES_H

#include <stddef.h>

/* n clients behind a barrier match one prompt with a wait: exactly one
 * claims and publishes it in two parts, the others wait and attach it. */
int case_flight_one_computes(int n, char *why, size_t len);
/* The claimant (a child process) is killed with SIGKILL while 3 clients
 * wait: one inherits at once and publishes, the others attach. */
int case_flight_claimant_killed(char *why, size_t len);
/* The claimant stalls without publishing: after --claim-timeout one
 * waiter inherits, once, and the others attach what it publishes. */
int case_flight_claimant_stalls(char *why, size_t len);

#endif
