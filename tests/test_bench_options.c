/* SPDX-License-Identifier: MIT */
/*
 * The benchmarks refuse a malformed or out-of-range option value (exit
 * status 2, a message naming the option and its range) before they start
 * anything, rather than run with what atoi made of it.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "daemon_util.h"

struct refusal {
	const char *bench, *args, *says;
};

static const struct refusal cases[] = {
	{ "forward", "--threads 2x", "--threads must be a whole number from 1 to 64, not '2x'" },
	{ "forward", "--threads 0", "--threads must be a whole number from 1 to 64, not '0'" },
	{ "forward", "--block-tokens ''", "--block-tokens must be a whole number" },
	{ "forward", "--matmul f8", "--matmul must be f32 or bf16, not 'f8'" },
	{ "daemon", "--clients eight", "--clients must be a whole number from 1 to 64, not 'eight'" },
	{ "daemon", "--seconds 1e9", "--seconds must be a number from 0.1 to 60, not '1e9'" },
	{ "daemon", "--seconds nan", "--seconds must be a number from 0.1 to 60, not 'nan'" },
	{ "daemon", "--users -1", "--users must be a whole number from 0 to 32, not '-1'" },
	{ "admin", "--blocks -5", "--blocks must be a whole number from 1000 to 10000000, not '-5'" },
	{ "admin", "--blocks 99999999999999999999", "--blocks must be a whole number" },
	{ "admin", "--ls-runs 6", "--ls-runs must be a whole number from 7 to 64, not '6'" },
	{ "memory", "--clients 17", "--clients must be a whole number from 1 to 16, not '17'" },
	{ "tokenize", "--mb 5x", "--mb must be a number from 0.01 to 64, not '5x'" },
	{ "tokenize", "--only gpt2", "--only must be one of neox, smollm, tinyllama, llama3, qwen3, not 'gpt2'" },
	{ "tokenize", "extra", "unexpected argument 'extra'" },
	{ "attack", "--seconds 5s", "--seconds must be a number from 1 to 600, not '5s'" },
	{ "disk", "--prefixes 3", "--prefixes must be a whole number from 4 to 16, not '3'" },
	{ "share", "--prefix 2048", "--prefix must be a whole number from 1 to 256, not '2048'" },
	{ "share", "--runs 2", "--runs must be a whole number from 3 to 15, not '2'" },
	{ "attention", "--rows 65", "--rows must be a whole number from 2 to 64, not '65'" },
	{ "attention", "--kv f8", "--kv must be f32, f16 or bf16" },
	{ "attention", "--row 3", "usage: attention" },
	{ "disk", "--rounds 2.5", "--rounds must be a whole number from 1 to 15, not '2.5'" },
	{ "remote", "--rounds 3", "[--tiny | --fetch | --fetch-unix]" },
	{ "serve", "--workload mixed", "--workload must be one of both, shared, distinct, not 'mixed'" },
	{ "serve", "--rounds 16", "--rounds must be a whole number from 1 to 15, not '16'" },
	{ "serve", "--workload distinct --overhead-only", "--overhead-only runs no workload" },
};

Test(bench_options, a_malformed_or_out_of_range_value_is_refused_with_status_2)
{
	static char out[1 << 14];
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct refusal *c = &cases[i];
		/* timeout: a bench that takes the value runs for minutes. */
		int st = td_sh(out, sizeof(out), "timeout 20 %s/%s %s", BENCH_DIR, c->bench, c->args);
		cr_expect_eq(st, 2, "%s %s: exit status %d, not 2: %s", c->bench, c->args, st, out);
		cr_expect(strstr(out, c->says), "%s %s says '%s', not '%s'", c->bench, c->args, out,
			  c->says);
		cr_expect(!strchr(out, '{'), "%s %s printed figures: %s", c->bench, c->args, out);
	}
}

Test(bench_options, a_stray_argument_is_refused_with_status_2)
{
	static char out[1 << 14];
	int st = td_sh(out, sizeof(out), "timeout 20 %s/daemon --clients 2 extra", BENCH_DIR);
	cr_expect_eq(st, 2, "exit status %d, not 2: %s", st, out);
	cr_expect(strstr(out, "usage: daemon"), "%s", out);
}
