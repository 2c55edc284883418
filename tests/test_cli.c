/* SPDX-License-Identifier: MIT */
/* prefix-run as users call it: outputs, files and error messages. */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"

Test(cli, logits_uncached_and_split_match_transformers)
{
	const char *name = "llama-tiny-gqa";
	size_t n, nl;
	int32_t *tok = expected_i32(name, "tokens", &n);
	float *ref = expected_f32(name, "logits_full", &nl);
	char *csv = tokens_csv(tok, n);
	char tmpl[] = "/tmp/pfx-cli-XXXXXX";
	cr_assert(mkdtemp(tmpl));
	for (int split = 0; split <= 32; split += 32) {
		char out[256], extra[32] = "";
		snprintf(out, sizeof(out), "%s/l%d.npy", tmpl, split);
		if (split)
			snprintf(extra, sizeof(extra), "--split %d", split);
		struct cmd_result r = run("logits --model %s/%s --tokens %s --out %s %s", fixtures_dir(),
				      name, csv, out, extra);
		cr_assert_eq(r.status, 0, "%s", r.out);
		float *got = read_npy(out, n, 512);
		float d = max_abs_diff(got, ref, nl);
		cr_expect(d <= TOL_LOGITS, "split %d: %g", split, d);
		free(got);
		unlink(out);
	}
	/* @FILE with white space and newlines. */
	char tf[256], out[256];
	snprintf(tf, sizeof(tf), "%s/tokens.txt", tmpl);
	snprintf(out, sizeof(out), "%s/f.npy", tmpl);
	FILE *fp = fopen(tf, "w");
	for (size_t i = 0; i < n; i++)
		fprintf(fp, "%d%s", tok[i], i % 5 == 4 ? "\n" : " ");
	fclose(fp);
	struct cmd_result r = run("logits --model %s/%s --tokens @%s --out %s", fixtures_dir(), name, tf, out);
	cr_assert_eq(r.status, 0, "%s", r.out);
	float *got = read_npy(out, n, 512);
	cr_expect(max_abs_diff(got, ref, nl) <= TOL_LOGITS);
	free(got);
	unlink(out);
	unlink(tf);
	rmdir(tmpl);
	free(csv);
	free(ref);
	free(tok);
}

Test(cli, generate_greedy_matches_transformers)
{
	const char *name = "neox-tiny-seq";
	size_t np, no;
	int32_t *prompt = expected_i32(name, "greedy_prompt", &np);
	int32_t *ref = expected_i32(name, "greedy_out", &no);
	char *csv = tokens_csv(prompt, np);
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "%s generate --model %s/%s --tokens %s --max-new %zu 2>/dev/null",
		 PREFIX_RUN, fixtures_dir(), name, csv, no);
	FILE *p = popen(cmd, "r");
	for (size_t i = 0; i < no; i++) {
		int t = -1;
		cr_assert_eq(fscanf(p, "%d", &t), 1, "token %zu missing", i);
		cr_expect_eq(t, ref[i], "token %zu", i);
	}
	cr_expect_eq(pclose(p), 0);
	free(csv);
	free(ref);
	free(prompt);
}

Test(cli, generate_sampling_is_seeded)
{
	struct cmd_result a = run("generate --model %s/neox-tiny --tokens 1,2,3 --max-new 12 "
			      "--temperature 1.5 --top-k 50 --top-p 0.95 --seed 4 2>/dev/null", fixtures_dir());
	struct cmd_result b = run("generate --model %s/neox-tiny --tokens 1,2,3 --max-new 12 "
			      "--temperature 1.5 --top-k 50 --top-p 0.95 --seed 4 2>/dev/null", fixtures_dir());
	struct cmd_result c = run("generate --model %s/neox-tiny --tokens 1,2,3 --max-new 12 "
			      "--temperature 1.5 --top-k 50 --top-p 0.95 --seed 5 2>/dev/null", fixtures_dir());
	cr_assert_eq(a.status, 0, "%s", a.out);
	cr_expect_str_eq(a.out, b.out);
	cr_expect_str_neq(a.out, c.out);
}

Test(cli, info_reports_shapes_fingerprint_and_kv)
{
	struct cmd_result r = run("info --model %s/llama-tiny-gqa", fixtures_dir());
	cr_assert_eq(r.status, 0, "%s", r.out);
	const char *want[] = { "LlamaForCausalLM", "key/value heads 2", "fingerprint",
			       "KV per token     512 bytes", "KV for 512        262144 bytes",
			       "KV for 2048       1048576 bytes", "KV for 8192       4194304 bytes",
			       "BLAS kernels", "own kernels" };
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		cr_expect(strstr(r.out, want[i]), "info lacks '%s':\n%s", want[i], r.out);
}

Test(cli, info_says_when_the_own_kernels_are_turned_off)
{
	setenv("PFX_NO_AVX512", "1", 1);
	struct cmd_result r = run("info --model %s/llama-tiny-gqa", fixtures_dir());
	cr_assert_eq(r.status, 0, "%s", r.out);
	cr_expect(strstr(r.out, __builtin_cpu_supports("avx512f")
					? "own kernels      portable (PFX_NO_AVX512 is set)"
					: "own kernels      portable (no AVX-512 on this CPU)"),
		  "%s", r.out);
}

Test(cli, errors_are_clear)
{
	const struct {
		const char *args;
		int status;
		const char *msg;
	} cases[] = {
		{ "", 2, "usage" },
		{ "frobnicate", 2, "unknown command 'frobnicate'" },
		{ "info", 2, "--model is required" },
		{ "info --model /nonexistent", 1, "/nonexistent" },
		{ "logits --model M --tokens 1,2 --out /tmp/x.npy --max-new 3", 2, "not an option of 'logits'" },
		{ "logits --model M --tokens 1,x,2 --out /tmp/x.npy", 2, "not a non-negative integer" },
		{ "logits --model M --tokens 1,512 --out /tmp/x.npy", 1, "outside the vocabulary" },
		{ "logits --model M --tokens 1,2 --split 2 --out /tmp/x.npy", 1, "--split 2 must be between 1 and 1" },
		{ "logits --model M --tokens 1,2 --out /nonexistent/dir/x.npy", 1, "cannot create" },
		{ "logits --model M --tokens @/nonexistent --out /tmp/x.npy", 2, "cannot read token file" },
		{ "generate --model M --tokens 1 --max-new 0", 2, "--max-new takes a whole number" },
		{ "generate --model M --tokens 1 --max-new 2 --top-k 5", 2, "need --temperature" },
		{ "generate --model M --tokens 1 --max-new 2 --temperature 1 --top-p 2", 2, "--top-p" },
		{ "info --model M --block-tokens 3", 2, "power of two" },
		{ "info --model M --threads 0", 2, "--threads" },
		{ "info --model M --bogus", 2, "unknown option" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char args[512];
		const char *m = strstr(cases[i].args, " M ");
		if (m)
			snprintf(args, sizeof(args), "%.*s %s/neox-tiny %s", (int)(m - cases[i].args),
				 cases[i].args, fixtures_dir(), m + 3);
		else
			snprintf(args, sizeof(args), "%s", cases[i].args);
		struct cmd_result r = run("%s", args);
		cr_expect_eq(r.status, cases[i].status, "'%s' exited %d:\n%s", args, r.status, r.out);
		cr_expect(strstr(r.out, cases[i].msg), "'%s' lacks '%s':\n%s", args, cases[i].msg, r.out);
	}
}
