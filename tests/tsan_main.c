/* SPDX-License-Identifier: MIT */
/* Runs the concurrency checks without Criterion, for ThreadSanitizer builds. */
#include <stdio.h>

#include "concurrency_cases.h"
#include "crashloop_case.h"
#include "daemon_cases.h"
#include "flight_cases.h"

int main(void)
{
	char why[256];
	int failed = 0;
	if (case_pool_runs_every_task_once(why, sizeof(why))) {
		printf("not ok 1 - pool_runs_every_task_once: %s\n", why);
		failed++;
	} else {
		printf("ok 1 - pool_runs_every_task_once\n");
	}
	if (case_one_model_many_threads(FIXTURES_DIR, why, sizeof(why))) {
		printf("not ok 2 - one_model_many_threads: %s\n", why);
		failed++;
	} else {
		printf("ok 2 - one_model_many_threads\n");
	}
	if (case_daemon_many_clients(why, sizeof(why))) {
		printf("not ok 3 - daemon_many_clients: %s\n", why);
		failed++;
	} else {
		printf("ok 3 - daemon_many_clients\n");
	}
	if (case_daemon_many_clients_disk(why, sizeof(why))) {
		printf("not ok 4 - daemon_many_clients_disk: %s\n", why);
		failed++;
	} else {
		printf("ok 4 - daemon_many_clients_disk\n");
	}
	int rounds = 0;
	if (case_crash_loop(why, sizeof(why), &rounds)) {
		printf("not ok 5 - crash_loop: %s\n", why);
		failed++;
	} else {
		printf("ok 5 - crash_loop (%d rounds)\n", rounds);
	}
	if (case_flight_one_computes(8, why, sizeof(why))) {
		printf("not ok 6 - flight_one_computes: %s\n", why);
		failed++;
	} else {
		printf("ok 6 - flight_one_computes\n");
	}
	if (case_flight_claimant_killed(why, sizeof(why))) {
		printf("not ok 7 - flight_claimant_killed: %s\n", why);
		failed++;
	} else {
		printf("ok 7 - flight_claimant_killed\n");
	}
	if (case_flight_claimant_stalls(why, sizeof(why))) {
		printf("not ok 8 - flight_claimant_stalls: %s\n", why);
		failed++;
	} else {
		printf("ok 8 - flight_claimant_stalls\n");
	}
	printf("1..8\n");
	return failed ? 1 : 0;
}
