/* SPDX-License-Identifier: MIT */
/*
 * The crash loop of the disk tier (crashloop_case.c): a few seconds of
 * rounds by default, PREFIXD_CRASHLOOP_SECONDS=N for longer.
 */
#include <criterion/criterion.h>

#include "crashloop_case.h"

Test(crashloop, kills_at_random_lose_no_record_and_serve_no_wrong_byte_or_logit, .timeout = 600)
{
	char why[512];
	int rounds = 0;
	cr_expect_eq(case_crash_loop(why, sizeof(why), &rounds), 0, "%s", why);
	cr_expect_geq(rounds, 3, "a SIGTERM, a SIGKILL and a SIGKILL with --disk-sync at least");
}
