/* SPDX-License-Identifier: MIT */
/* The concurrency checks (concurrency_cases.c) under Criterion. */
#include <criterion/criterion.h>

#include "concurrency_cases.h"
#include "helpers.h"

Test(concurrency, pool_runs_every_task_once)
{
	char why[256];
	cr_expect_eq(case_pool_runs_every_task_once(why, sizeof(why)), 0, "%s", why);
}

Test(concurrency, one_model_many_threads)
{
	char why[256];
	cr_expect_eq(case_one_model_many_threads(fixtures_dir(), why, sizeof(why)), 0, "%s", why);
}
