/* SPDX-License-Identifier: MIT */
/*
 * Sharing across real processes: prefix-run processes on one private
 * prefixd, checked against the transformers fixtures, the daemon's
 * counters (through prefixctl) and each process's own report.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon_util.h"
#include "helpers.h"

static struct test_daemon td;
static char csv_head[1024], csv_all[1024];
static int32_t *tok;
static size_t ntok;

#define MODEL "llama-tiny-gqa"
#define HEAD 24 /* tokens process A runs: 6 blocks of 4 */

static void setup(void)
{
	const char *args[] = { "--block-tokens", "4", "--memory", "64M", NULL };
	cr_assert_eq(td_start(&td, args), 0);
	tok = expected_i32(MODEL, "tokens", &ntok);
	char *c = tokens_csv(tok, HEAD);
	snprintf(csv_head, sizeof(csv_head), "%s", c);
	free(c);
	c = tokens_csv(tok, ntok);
	snprintf(csv_all, sizeof(csv_all), "%s", c);
	free(c);
}

static void teardown(void)
{
	free(tok);
	cr_expect_eq(td_stop(&td), 0, "prefixd stops cleanly");
}

TestSuite(share, .init = setup, .fini = teardown);

/* One counter from prefixctl stats --json. */
static unsigned long long counter(const char *key)
{
	char cmd[2 * PATH_MAX + 64], want[64];
	snprintf(cmd, sizeof(cmd), "%s --socket %s stats --json", PREFIXCTL, td.sock);
	FILE *p = popen(cmd, "r");
	cr_assert(p);
	char out[4096];
	size_t n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = 0;
	cr_assert_eq(pclose(p), 0, "prefixctl failed: %s", out);
	snprintf(want, sizeof(want), "\"%s\":", key);
	const char *at = strstr(out, want);
	cr_assert(at, "no %s in %s", key, out);
	return strtoull(at + strlen(want), NULL, 10);
}

Test(share, a_second_process_attaches_and_matches_transformers)
{
	char out[PATH_MAX + 32];
	snprintf(out, sizeof(out), "%s/a.npy", td.dir);
	struct cmd_result a = run("logits --model %s/" MODEL " --block-tokens 4 --socket %s --tokens %s --out %s",
				  fixtures_dir(), td.sock, csv_head, out);
	cr_assert_eq(a.status, 0, "%s", a.out);
	cr_expect(strstr(a.out, "0 attached from the cache, 24 computed; 6 new blocks published"), "%s", a.out);
	unlink(out);
	snprintf(out, sizeof(out), "%s/b.npy", td.dir);
	struct cmd_result b = run("logits --model %s/" MODEL " --block-tokens 4 --socket %s --tokens %s --out %s",
				  fixtures_dir(), td.sock, csv_all, out);
	cr_assert_eq(b.status, 0, "%s", b.out);
	cr_expect(strstr(b.out, "24 attached from the cache, 24 computed"), "%s", b.out);
	cr_expect_eq(counter("hits"), 1);
	cr_expect_eq(counter("hit_tokens"), HEAD);
	cr_expect_eq(counter("blocks"), 12, "B published its own 6 new blocks");
	size_t nl;
	float *ref = expected_f32(MODEL, "logits_full", &nl);
	size_t V = nl / ntok, rows = ntok - HEAD;
	float *got = read_npy(out, rows, V);
	float d = max_abs_diff(got, ref + HEAD * V, rows * V);
	cr_expect_leq(d, TOL_LOGITS, "attached-prefix logits vs transformers: %g", d);
	unlink(out);
	free(got);
	free(ref);
}

Test(share, other_models_and_salts_never_hit)
{
	char out[PATH_MAX + 32];
	snprintf(out, sizeof(out), "%s/x.npy", td.dir);
	struct cmd_result a = run("logits --model %s/neox-tiny --block-tokens 4 --socket %s --tokens %s --out %s",
				  fixtures_dir(), td.sock, csv_all, out);
	cr_assert_eq(a.status, 0, "%s", a.out);
	struct cmd_result b = run("logits --model %s/" MODEL " --block-tokens 4 --socket %s --tokens %s --out %s",
				  fixtures_dir(), td.sock, csv_all, out);
	cr_assert_eq(b.status, 0, "%s", b.out);
	cr_expect(strstr(b.out, " 0 attached from the cache"), "another model: %s", b.out);
	struct cmd_result c = run("logits --model %s/" MODEL " --block-tokens 4 --socket %s --salt tenant2 --tokens %s --out %s",
				  fixtures_dir(), td.sock, csv_all, out);
	cr_assert_eq(c.status, 0, "%s", c.out);
	cr_expect(strstr(c.out, " 0 attached from the cache"), "another salt: %s", c.out);
	cr_expect_eq(counter("hits"), 0);
	unlink(out);
}

Test(share, generation_through_the_cache_matches_transformers)
{
	size_t np, no;
	int32_t *prompt = expected_i32(MODEL, "greedy_prompt", &np);
	int32_t *ref = expected_i32(MODEL, "greedy_out", &no);
	char *csv = tokens_csv(prompt, np), *want = malloc(no * 12 + 1), *p = want;
	for (size_t i = 0; i < no; i++)
		p += sprintf(p, "%s%d", i ? " " : "", ref[i]);
	for (int round = 0; round < 2; round++) {
		struct cmd_result r = run("generate --model %s/" MODEL " --block-tokens 4 --socket %s --tokens %s --max-new %zu",
					  fixtures_dir(), td.sock, csv, no);
		cr_assert_eq(r.status, 0, "%s", r.out);
		cr_expect(strstr(r.out, want), "round %d: %s", round, r.out);
		cr_expect(strstr(r.out, round ? "8 attached" : "0 attached"), "round %d: %s", round, r.out);
	}
	free(csv);
	free(want);
	free(prompt);
	free(ref);
}

Test(share, without_a_daemon_a_process_computes_alone)
{
	struct cmd_result r = run("generate --model %s/" MODEL " --block-tokens 4 --socket %s/nothing --tokens 1,2,3,4,5,6,7,8,9 --max-new 2",
				  fixtures_dir(), td.dir);
	cr_expect_eq(r.status, 0, "%s", r.out);
	cr_expect(strstr(r.out, "computing alone"), "%s", r.out);
	cr_expect_eq(counter("connections"), 1, "only prefixctl's");
}
