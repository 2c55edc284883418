/* SPDX-License-Identifier: MIT */
/* prefix-run as users call it: outputs, files and error messages. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon_asserts.h"
#include "helpers.h"

Test(prefix_run, logits_uncached_and_split_match_transformers)
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

Test(prefix_run, generate_greedy_matches_transformers)
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

Test(prefix_run, generate_sampling_is_seeded)
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

Test(prefix_run, info_reports_shapes_fingerprint_and_kv)
{
	struct cmd_result r = run("info --model %s/llama-tiny-gqa", fixtures_dir());
	cr_assert_eq(r.status, 0, "%s", r.out);
	const char *want[] = { "LlamaForCausalLM", "key/value heads 2", "fingerprint",
			       "KV per token     512 bytes",
			       "KV for 512        262144 bytes (256.00 KiB), 8 full blocks charged 256.00 KiB",
			       "BLAS kernels", "own kernels", "in 2 MiB pages   " };
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		cr_expect(strstr(r.out, want[i]), "info lacks '%s':\n%s", want[i], r.out);
	/* Its context is 512 positions: no longer prompt is priced. */
	cr_expect(!strstr(r.out, "KV for 2048") && !strstr(r.out, "KV for 8192"),
		  "info prices prompts past the model's context:\n%s", r.out);
}

/* With a daemon: its limits, and how many prefixes of each priced length
 * they hold, in whole pages a block as the daemon charges them. neox-tiny
 * with a context of 4096 positions: 512, 2048 and 4096 tokens are priced. */
Test(prefix_run, info_prices_prefixes_against_the_daemons_limits)
{
	struct test_daemon d;
	const char *args[] = { "--block-tokens", "4", "--memory", "64M", "--quota", "16M",
			       "--pin-max", "4M", NULL };
	cr_assert_eq(td_start(&d, args), 0);
	char model[] = "/tmp/prefix-run-info-XXXXXX", out[256];
	cr_assert(mkdtemp(model));
	cr_assert_eq(td_sh(out, sizeof(out),
			   "ln -s %s/neox-tiny/model.safetensors %s/ && "
			   "sed 's/\"max_position_embeddings\": 512/\"max_position_embeddings\": 4096/' "
			   "%s/neox-tiny/config.json > %s/config.json && grep -q '\": 4096' %s/config.json",
			   fixtures_dir(), model, fixtures_dir(), model, model),
		     0, "%s", out);
	/* neox-tiny: 2 layers, 4 kv heads of 16: 1 KiB a token, 4 KiB a block. */
	const unsigned long page = (unsigned long)sysconf(_SC_PAGESIZE);
	const unsigned long block = (4096 + page - 1) / page * page;
	struct cmd_result r = run("info --model %s --block-tokens 4 --socket %s 2>&1", model, d.sock);
	cr_assert_eq(r.status, 0, "%s", r.out);
	cr_expect(strstr(r.out, "prefixd          ") &&
			  strstr(r.out, ": memory budget 64.00 MiB, quota per user 16.00 MiB, pin-max 4.00 MiB"),
		  "%s", r.out);
	cr_expect(!strstr(r.out, "KV for 8192") && !strstr(r.out, "fit 8192"),
		  "a prompt past the model's context is priced: %s", r.out);
	static const unsigned tokens[] = { 512, 2048, 4096 };
	for (int i = 0; i < 3; i++) {
		char want[160];
		unsigned long each = tokens[i] / 4 * block;
		snprintf(want, sizeof(want),
			 "fit %-5u        %lu in the budget, %lu in the quota, %lu under pin-max\n",
			 tokens[i], (64ul << 20) / each, (16ul << 20) / each, (4ul << 20) / each);
		cr_expect(strstr(r.out, want), "wants '%s' in:\n%s", want, r.out);
		snprintf(want, sizeof(want), "KV for %-5u      %u bytes", tokens[i], tokens[i] * 1024);
		cr_expect(strstr(r.out, want), "wants '%s' in:\n%s", want, r.out);
	}
	if (page == 4096)
		cr_expect(strstr(r.out, "fit 512          128 in the budget, 32 in the quota, 8 under pin-max"),
			  "%s", r.out);
	/* f16 KV: blocks of half the size, twice as many (the budget's 64 MiB
	 * of 2 KiB blocks when pages are 4 KiB are still charged a page). */
	r = run("info --model %s --block-tokens 4 --kv-dtype f16 --socket %s 2>&1", model, d.sock);
	cr_assert_eq(r.status, 0, "%s", r.out);
	cr_expect(strstr(r.out, "KV block         4 tokens, 2.00 KiB, charged"), "%s", r.out);
	/* Another block size than the daemon's: the model's figures, then why
	 * the limits did not come. */
	r = run("info --model %s --socket %s 2>&1", model, d.sock);
	cr_expect_eq(r.status, 1, "%s", r.out);
	cr_expect(strstr(r.out, "KV block         64 tokens, 64.00 KiB"), "%s", r.out);
	cr_expect(strstr(r.out, "cannot ask prefixd at") &&
			  strstr(r.out, "give info the daemon's --block-tokens"),
		  "%s", r.out);
	/* A socket nobody listens at, given: an error. None at the default
	 * socket: said, and no error. */
	r = run("info --model %s --block-tokens 4 --socket %s.none 2>&1", model, d.sock);
	cr_expect_eq(r.status, 1, "%s", r.out);
	cr_expect(strstr(r.out, "cannot connect to prefixd at"), "%s", r.out);
	cr_assert_eq(setenv("PREFIXD_SOCKET", "/nonexistent/prefixd.sock", 1), 0);
	r = run("info --model %s --block-tokens 4 2>&1", model);
	unsetenv("PREFIXD_SOCKET");
	cr_expect_eq(r.status, 0, "%s", r.out);
	cr_expect(strstr(r.out, "prefixd          none at /nonexistent/prefixd.sock"), "%s", r.out);
	cr_expect_eq(td_stop(&d), 0);
	cr_expect_eq(td_sh(out, sizeof(out), "rm -r %s", model), 0, "%s", out);
}

Test(prefix_run, info_says_when_the_own_kernels_are_turned_off)
{
	setenv("PFX_NO_AVX512", "1", 1);
	struct cmd_result r = run("info --model %s/llama-tiny-gqa", fixtures_dir());
	cr_assert_eq(r.status, 0, "%s", r.out);
	cr_expect(strstr(r.out, __builtin_cpu_supports("avx512f")
					? "own kernels      AVX2 (PFX_NO_AVX512 is set)"
					: "own kernels      AVX2 (no AVX-512 on this CPU)"),
		  "%s", r.out);
}

Test(prefix_run, errors_are_clear)
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
		{ "logits --model M --tokens 1,,3 --out /tmp/x.npy", 2, "token 1 (counting from 0) is empty, at character 3: two commas" },
		{ "logits --model M --tokens ,1 --out /tmp/x.npy", 2, "token 0 (counting from 0) is empty, at character 1: a comma with no id before it" },
		{ "logits --model M --tokens 1,2, --out /tmp/x.npy", 2, "token 2 (counting from 0) is empty, at character 5: a comma with no id after it" },
		{ "logits --model M --tokens '1, ,2' --out /tmp/x.npy", 2, "token 1 (counting from 0) is empty" },
		{ "info --model M/config.json", 1, "neox-tiny/config.json is not a directory (give the checkpoint's directory" },
		{ "generate --model M --tokens 1 --max-new 2 --force", 2, "not an option of 'generate' (prefix-run generate --help lists its options)" },
		{ "generate --model M --tokens 1 --max-new 0", 2, "--max-new takes a whole number" },
		{ "generate --model M --tokens 1 --max-new 2 --top-k 5", 2, "need --temperature" },
		{ "generate --model M --tokens 1 --max-new 2 --temperature 1 --top-p 2", 2, "--top-p" },
		{ "info --model M --block-tokens 3", 2, "power of two" },
		{ "info --model M --threads 0", 2, "--threads" },
		{ "info --model M --bogus", 2, "unknown option" },
		{ "recache", 2, "--model is required" },
		{ "recache --model /nonexistent", 1, "prefix-run recache: /nonexistent" },
		{ "recache --model M --block-tokens 64", 2, "not an option of 'recache'" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char args[512];
		const char *m = strstr(cases[i].args, " M ");
		if (!m)
			m = strstr(cases[i].args, " M/");
		if (m)
			snprintf(args, sizeof(args), "%.*s %s/neox-tiny%s%s", (int)(m - cases[i].args),
				 cases[i].args, fixtures_dir(), m[2] == '/' ? "" : " ", m + 2 + (m[2] == ' '));
		else
			snprintf(args, sizeof(args), "%s", cases[i].args);
		struct cmd_result r = run("%s", args);
		cr_expect_eq(r.status, cases[i].status, "'%s' exited %d:\n%s", args, r.status, r.out);
		cr_expect(strstr(r.out, cases[i].msg), "'%s' lacks '%s':\n%s", args, cases[i].msg, r.out);
	}
}

/* ==== The model's context, checked before generating ==== */

/* neox-tiny has 512 positions: a prompt of 3 leaves room for 510 new
 * tokens (the last one is printed, never run). More is refused up front,
 * not after printing hundreds of ids. */
Test(prefix_run, generate_refuses_a_max_new_past_the_context_up_front)
{
	struct cmd_result r = run("generate --model %s/neox-tiny --tokens 1,2,3 --max-new 600",
				  fixtures_dir());
	cr_expect_eq(r.status, 2, "%s", r.out);
	cr_expect(strstr(r.out, "a prompt of 3 tokens and --max-new 600 need 602 positions, more than the model's context of 512"),
		  "%s", r.out);
	cr_expect(strstr(r.out, "--max-new is at most 510 here"), "%s", r.out);
	cr_expect_not(strstr(r.out, "exceed"), "no failure half-way: %s", r.out);
	r = run("generate --model %s/neox-tiny --tokens 1,2,3 --max-new 600 2>/dev/null", fixtures_dir());
	cr_expect_str_empty(r.out, "no ids printed");
	/* Exactly the bound fits. */
	r = run("generate --model %s/neox-tiny --tokens 1,2,3 --max-new 510 --ignore-eos 2>/dev/null",
		fixtures_dir());
	cr_expect_eq(r.status, 0, "%s", r.out);
	size_t ids = 0;
	for (char *p = r.out; *p; ids++) {
		while (*p == ' ' || *p == '\n')
			p++;
		if (!*p)
			break;
		strtol(p, &p, 10);
	}
	cr_expect_eq(ids, 510, "%s", r.out);
	/* A prompt longer than the context. */
	char *csv = malloc(513 * 4 + 1), *p = csv;
	for (int i = 0; i < 513; i++)
		p += sprintf(p, "%s%d", i ? "," : "", 1 + i % 400);
	r = run("generate --model %s/neox-tiny --tokens %s --max-new 1", fixtures_dir(), csv);
	free(csv);
	cr_expect_eq(r.status, 2, "%s", r.out);
	cr_expect(strstr(r.out, "the prompt's 513 tokens do not fit the model's context of 512 positions"),
		  "%s", r.out);
}

/* ==== End of sequence ==== */

/* The llama fixture ships eos_token_id 2, and its greedy reference (made
 * with EOS disabled) has 2 as its 4th token. */
Test(prefix_run, generate_stops_after_the_eos_token_of_generation_config)
{
	const char *name = "llama-tiny-gqa";
	size_t np, no;
	int32_t *prompt = expected_i32(name, "greedy_prompt", &np);
	int32_t *ref = expected_i32(name, "greedy_out", &no);
	cr_assert_eq(ref[3], 2, "the fixture's greedy output holds its EOS");
	char *csv = tokens_csv(prompt, np), want[64], all[512], *p = all;
	snprintf(want, sizeof(want), "%d %d %d 2\n", ref[0], ref[1], ref[2]);
	for (size_t i = 0; i < no; i++)
		p += sprintf(p, "%s%d", i ? " " : "", ref[i]);
	struct cmd_result r = run("generate --model %s/%s --tokens %s --max-new %zu 2>/dev/null",
				  fixtures_dir(), name, csv, no);
	cr_expect_eq(r.status, 0);
	cr_expect_str_eq(r.out, want);
	r = run("generate --model %s/%s --tokens %s --max-new %zu", fixtures_dir(), name, csv, no);
	cr_expect(strstr(r.out, "stopped at the end-of-sequence token 2 (eos_token_id in generation_config.json) after 4 of at most 20 new tokens"),
		  "%s", r.out);
	cr_expect(strstr(r.out, "3 more tokens in"), "%s", r.out);
	/* One or two tokens: said right, and no rate of nothing. */
	r = run("generate --model %s/%s --tokens %s --max-new 1", fixtures_dir(), name, csv);
	cr_expect_eq(r.status, 0, "%s", r.out);
	cr_expect(strstr(r.out, "time to first token") && !strstr(r.out, "more token") &&
			  !strstr(r.out, "tok/s"),
		  "one token has no 'more tokens' nor a rate: %s", r.out);
	r = run("generate --model %s/%s --tokens %s --max-new 2", fixtures_dir(), name, csv);
	cr_expect(strstr(r.out, "; 1 more token in ") && strstr(r.out, "tok/s)"), "%s", r.out);
	r = run("generate --model %s/%s --tokens %d --max-new 1", fixtures_dir(), name, prompt[0]);
	cr_expect(strstr(r.out, "(prompt of 1 token)"), "%s", r.out);
	r = run("generate --model %s/%s --tokens %s --max-new %zu --ignore-eos 2>/dev/null",
		fixtures_dir(), name, csv, no);
	cr_expect_eq(r.status, 0);
	cr_expect(!strncmp(r.out, all, strlen(all)) && r.out[strlen(all)] == '\n',
		  "--ignore-eos goes on like transformers with EOS disabled:\n%s\n%s", r.out, all);
	free(csv);
	free(ref);
	free(prompt);
}

static void write_file(const char *dir, const char *name, const char *text)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *fp = fopen(path, "w");
	cr_assert(fp, "%s", path);
	fputs(text, fp);
	fclose(fp);
}

/* A copy of fixtures/neox-tiny (weights linked) with config.json's
 * eos_token_id set to eos and no generation_config.json. */
static void copy_neox_tiny(char *dir, int eos)
{
	char src[512], dst[512];
	cr_assert(mkdtemp(dir));
	snprintf(src, sizeof(src), "%s/neox-tiny/model.safetensors", fixtures_dir());
	snprintf(dst, sizeof(dst), "%s/model.safetensors", dir);
	cr_assert_eq(symlink(src, dst), 0);
	snprintf(src, sizeof(src), "%s/neox-tiny/config.json", fixtures_dir());
	FILE *fp = fopen(src, "r");
	cr_assert(fp);
	char cfg[8192];
	size_t n = fread(cfg, 1, sizeof(cfg) - 1, fp);
	fclose(fp);
	cfg[n] = 0;
	char *at = strstr(cfg, "\"eos_token_id\": 2,");
	cr_assert(at, "%s", cfg);
	char out[8300];
	snprintf(out, sizeof(out), "%.*s\"eos_token_id\": %d,%s", (int)(at - cfg), cfg, eos,
		 at + strlen("\"eos_token_id\": 2,"));
	write_file(dir, "config.json", out);
}

static void remove_copy(const char *dir)
{
	const char *files[] = { "model.safetensors", "config.json", "generation_config.json" };
	for (size_t i = 0; i < 3; i++) {
		char path[512];
		snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
		unlink(path);
	}
	rmdir(dir);
}

Test(prefix_run, generate_reads_eos_ids_from_generation_config_then_config)
{
	/* The first greedy token, to make it the EOS. */
	struct cmd_result r = run("generate --model %s/neox-tiny --tokens 5,6,7 --max-new 3 --ignore-eos 2>/dev/null",
				  fixtures_dir());
	cr_assert_eq(r.status, 0, "%s", r.out);
	int first = atoi(r.out);
	char dir[] = "/tmp/pfx-cli-eos-XXXXXX", gen[128], want[32];
	snprintf(want, sizeof(want), "%d\n", first);
	copy_neox_tiny(dir, first == 7 ? 8 : 7);
	/* A list in generation_config.json wins over config.json. */
	snprintf(gen, sizeof(gen), "{\"eos_token_id\": [%d, %d]}\n", first == 500 ? 501 : 500, first);
	write_file(dir, "generation_config.json", gen);
	r = run("generate --model %s --tokens 5,6,7 --max-new 3 2>/dev/null", dir);
	cr_expect_eq(r.status, 0);
	cr_expect_str_eq(r.out, want, "stops after the first token");
	r = run("generate --model %s --tokens 5,6,7 --max-new 3", dir);
	cr_expect(strstr(r.out, "(eos_token_id in generation_config.json) after 1 of at most 3"), "%s", r.out);
	/* Without eos_token_id there, config.json's. */
	write_file(dir, "generation_config.json", "{\"bos_token_id\": 0}\n");
	r = run("generate --model %s --tokens 5,6,7 --max-new 3", dir);
	cr_expect_not(strstr(r.out, "end-of-sequence"), "config.json's EOS is not the first token: %s", r.out);
	char cfg_dir[] = "/tmp/pfx-cli-eos-XXXXXX";
	copy_neox_tiny(cfg_dir, first);
	r = run("generate --model %s --tokens 5,6,7 --max-new 3 2>/dev/null", cfg_dir);
	cr_expect_eq(r.status, 0);
	cr_expect_str_eq(r.out, want);
	r = run("generate --model %s --tokens 5,6,7 --max-new 3", cfg_dir);
	cr_expect(strstr(r.out, "(eos_token_id in config.json) after 1 of at most 3"), "%s", r.out);
	remove_copy(cfg_dir);
	/* A bad one is refused up front; --ignore-eos does not read it. */
	write_file(dir, "generation_config.json", "{\"eos_token_id\": \"</s>\"}\n");
	r = run("generate --model %s --tokens 5,6,7 --max-new 3", dir);
	cr_expect_eq(r.status, 1, "%s", r.out);
	cr_expect(strstr(r.out, "generation_config.json: eos_token_id must be a token id from 0 to 511 or a list of them, not \"<\\/s>\" (fix it, or give --ignore-eos)"),
		  "%s", r.out);
	write_file(dir, "generation_config.json", "{\"eos_token_id\": [1,\n");
	r = run("generate --model %s --tokens 5,6,7 --max-new 3", dir);
	cr_expect_eq(r.status, 1, "%s", r.out);
	cr_expect(strstr(r.out, "generation_config.json: malformed JSON"), "%s", r.out);
	r = run("generate --model %s --tokens 5,6,7 --max-new 3 --ignore-eos", dir);
	cr_expect_eq(r.status, 0, "%s", r.out);
	remove_copy(dir);
}

/* ==== The cache report ==== */

/* The stderr line that holds needle (copied to line), and how many lines
 * begin with "prefix-run: prompt of". */
static int report_line(const char *out, const char *needle, char *line, size_t cap)
{
	int reports = 0;
	line[0] = 0;
	for (const char *p = out; *p;) {
		const char *end = strchr(p, '\n');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		if (!strncmp(p, "prefix-run: prompt of", 21))
			reports++;
		char buf[4096];
		snprintf(buf, sizeof(buf), "%.*s", (int)len, p);
		if (strstr(buf, needle))
			snprintf(line, cap, "%s", buf);
		p += len + (end != NULL);
	}
	return reports;
}

/* 20 blocks of 4 tokens against a budget of 16: the report is one line
 * whose counts are the daemon's, in the run that fills the budget and in
 * the next, which attaches what the first stored. */
Test(prefix_run, a_publish_cut_short_is_reported_on_one_truthful_line)
{
	struct test_daemon d;
	const char *args[] = { "--block-tokens", "4", "--memory", "64K", NULL };
	cr_assert_eq(td_start(&d, args), 0);
	char csv[512], line[4096];
	count_csv(csv, sizeof(csv), 81);
	struct cmd_result r = run("generate --model %s/llama-tiny-gqa --block-tokens 4 --socket %s --tokens %s --max-new 1",
				  fixtures_dir(), d.sock, csv);
	cr_expect_eq(r.status, 0, "%s", r.out);
	cr_expect_eq(report_line(r.out, "not published", line, sizeof(line)), 1, "%s", r.out);
	cr_expect_str_eq(line, "prefix-run: prompt of 81 tokens: 0 attached from the cache, 81 computed; 16 new blocks published, 0 already there; then publishing stopped: 4 new blocks not published (prefixd's memory budget is full of leased or pinned blocks)",
			 "%s", r.out);
	cr_expect_not(strstr(r.out, "computed alone"), "the cache was used: %s", r.out);
	cr_expect_eq(t_counter(&d, "blocks"), 16, "the daemon stored what the line says");
	r = run("generate --model %s/llama-tiny-gqa --block-tokens 4 --socket %s --tokens %s --max-new 1",
		fixtures_dir(), d.sock, csv);
	cr_expect_eq(r.status, 0, "%s", r.out);
	cr_expect_eq(report_line(r.out, "not published", line, sizeof(line)), 1, "%s", r.out);
	cr_expect_str_eq(line, "prefix-run: prompt of 81 tokens: 64 attached from the cache, 17 computed; 0 new blocks published, 0 already there; then publishing stopped: 4 new blocks not published (prefixd's memory budget is full of leased or pinned blocks)",
			 "%s", r.out);
	cr_expect_not(strstr(r.out, "computed alone"), "%s", r.out);
	cr_expect_eq(t_counter(&d, "blocks"), 16);
	/* warm fails when the daemon did not take every block. */
	r = run("warm --model %s/llama-tiny-gqa --block-tokens 4 --socket %s --tokens %s", fixtures_dir(),
		d.sock, csv);
	cr_expect_eq(r.status, 1, "%s", r.out);
	cr_expect_eq(report_line(r.out, "then publishing stopped", line, sizeof(line)), 1, "%s", r.out);
	cr_expect_eq(td_stop(&d), 0);
}

/* A prompt of exactly one block, cached, attaches all but its last token
 * (the block copied) and computes that token, whose logits are the
 * answer. With --no-wait it leaves that block to compute, and says why
 * rather than showing a bare "0 attached, 1 already there". */
Test(prefix_run, a_prompt_on_a_block_boundary_computes_its_last_token_only)
{
	struct test_daemon d;
	const char *args[] = { "--block-tokens", "4", "--memory", "64M", NULL };
	cr_assert_eq(td_start(&d, args), 0);
#define GEN "generate --model %s/llama-tiny-gqa --block-tokens 4 --socket %s --tokens %s --max-new 1"
	struct cmd_result r = run(GEN, fixtures_dir(), d.sock, "1,2,3,4");
	cr_expect(strstr(r.out, "0 attached from the cache, 4 computed; 1 new block published, 0 already there\n"),
		  "%s", r.out);
	cr_expect_not(strstr(r.out, "the prompt is one block"), "not cached yet: %s", r.out);
	char first[64] = "";
	const char *nl = strchr(r.out, '\n');
	if (nl)
		snprintf(first, sizeof(first), "\n%.*s", (int)strcspn(nl + 1, "\n"), nl + 1);
	r = run(GEN, fixtures_dir(), d.sock, "1,2,3,4");
	cr_expect(strstr(r.out, "3 attached from the cache, 1 computed; 0 new blocks published, 0 already there\n"),
		  "%s", r.out);
	cr_expect(strstr(r.out, first), "the same token as computed alone (%s): %s", first, r.out);
	cr_expect_not(strstr(r.out, "one block"), "%s", r.out);
	r = run(GEN " --no-wait", fixtures_dir(), d.sock, "1,2,3,4");
	cr_expect(strstr(r.out, "0 attached from the cache, 4 computed; 0 new blocks published, 1 already there\n"),
		  "%s", r.out);
	cr_expect(strstr(r.out, "prefix-run: the prompt is one block (4 tokens), already cached, but its last token must be computed, so nothing is attached; prompts longer than a block attach all their full blocks"),
		  "%s", r.out);
	r = run(GEN, fixtures_dir(), d.sock, "1,2,3,4,5");
	cr_expect(strstr(r.out, "4 attached from the cache, 1 computed"), "%s", r.out);
	cr_expect_not(strstr(r.out, "block boundary"), "%s", r.out);
	cr_expect_not(strstr(r.out, "one block"), "%s", r.out);
	r = run(GEN, fixtures_dir(), d.sock, "1,2,3,4,5,6,7,8");
	r = run(GEN " --no-wait", fixtures_dir(), d.sock, "1,2,3,4,5,6,7,8");
	cr_expect(strstr(r.out, "4 attached from the cache, 4 computed; 0 new blocks published, 1 already there\n"),
		  "%s", r.out);
	cr_expect(strstr(r.out, "the prompt ends on a block boundary: its last block (4 tokens) is cached but computed again"),
		  "%s", r.out);
	r = run(GEN, fixtures_dir(), d.sock, "1,2,3,4,5,6,7,8");
	cr_expect(strstr(r.out, "7 attached from the cache, 1 computed; 0 new blocks published, 0 already there\n"),
		  "%s", r.out);
	cr_expect_eq(td_stop(&d), 0);
#undef GEN
}

/* prefix-run as uid (group nogroup, and group too when not 0). */
static struct cmd_result run_as(unsigned uid, unsigned group, const char *args)
{
	char groups[32];
	if (group)
		snprintf(groups, sizeof(groups), "65534,%u", group);
	else
		snprintf(groups, sizeof(groups), "65534");
	struct cmd_result r = { 0 };
	r.status = td_sh(r.out, sizeof(r.out), "setpriv --reuid %u --regid 65534 --groups %s %s %s",
			 uid, groups, PREFIX_RUN, args);
	cr_assert_geq(r.status, 0, "popen failed");
	return r;
}

/* warm --shared as root publishes a system prompt into the shared
 * namespace; generate --shared as a member of the shared group attaches
 * it, and without --shared does not; a member that is no publisher is
 * told that its publish was refused; a user outside the group is refused
 * the namespace and computes alone. */
Test(prefix_run, shared_attaches_what_a_publisher_warmed_for_the_group)
{
	cr_assert_eq(geteuid(), 0, "this test changes uid: run it as root");
	struct test_daemon d;
	const char *args[] = { "--block-tokens", "4", "--memory", "64M", "--group", "65534",
			       "--shared-group", "60100", NULL };
	cr_assert_eq(td_start(&d, args), 0);
	cr_assert_eq(td_share_dir(&d), 0);
	char a[3 * PATH_MAX];
	struct cmd_result r = run("warm --model %s/llama-tiny-gqa --block-tokens 4 --socket %s --shared --pin --tokens 1,2,3,4,5,6,7,8",
				  fixtures_dir(), d.sock);
	cr_expect_eq(r.status, 0, "%s", r.out);
	cr_expect(strstr(r.out, "2 new blocks published") && strstr(r.out, "pinned 8 tokens"), "%s",
		  r.out);
	cr_expect_eq(t_counter(&d, "pinned_bytes"), t_counter(&d, "bytes_used"),
		     "the shared chain is the one pinned");
	/* prefixctl ls names its namespace. */
	char out[8192];
	cr_expect_eq(td_sh(out, sizeof(out), "%s --socket %s ls --user shared", PREFIXCTL, d.sock), 0,
		     "%s", out);
	cr_expect(strstr(out, " shared ") && strstr(out, "1 chain\n"), "the USER column: %s", out);
	cr_expect_eq(td_sh(out, sizeof(out), "%s --socket %s ls --json", PREFIXCTL, d.sock), 0, "%s",
		     out);
	cr_expect(strstr(out, "\"user\":4294967295,") && strstr(out, "\"namespace\":\"shared\""),
		  "--json: %s", out);
	snprintf(a, sizeof(a), "generate --model %s/llama-tiny-gqa --block-tokens 4 --socket %s --shared --tokens 1,2,3,4,5,6,7,8,9 --max-new 1",
		 fixtures_dir(), d.sock);
	r = run_as(60002, 60100, a);
	cr_expect_eq(r.status, 0, "%s", r.out);
	cr_expect(strstr(r.out, "8 attached from the cache, 1 computed"), "a member attaches it: %s",
		  r.out);
	/* A member publishes nothing into the shared namespace. */
	snprintf(a, sizeof(a), "generate --model %s/llama-tiny-gqa --block-tokens 4 --socket %s --shared --tokens 1,2,3,4,5,6,7,8,9,10,11,12,13 --max-new 1",
		 fixtures_dir(), d.sock);
	r = run_as(60002, 60100, a);
	cr_expect_eq(r.status, 0, "the run itself succeeds: %s", r.out);
	cr_expect(strstr(r.out, "8 attached from the cache") &&
		  strstr(r.out, "1 new block not published") && strstr(r.out, "not publish into it"),
		  "a member's publish is refused, and it says so: %s", r.out);
	/* An outsider is refused the namespace. */
	r = run_as(60003, 0, a);
	cr_expect_eq(r.status, 0, "%s", r.out);
	cr_expect(strstr(r.out, "not using prefixd") && strstr(r.out, "neither a member"),
		  "an outsider: %s", r.out);
	cr_expect_eq(t_counter(&d, "blocks"), 2, "only the publisher's blocks are cached");
	/* Its own namespace does not have it (and now gets it). */
	snprintf(a, sizeof(a), "generate --model %s/llama-tiny-gqa --block-tokens 4 --socket %s --tokens 1,2,3,4,5,6,7,8,9 --max-new 1",
		 fixtures_dir(), d.sock);
	r = run_as(60002, 60100, a);
	cr_expect_eq(r.status, 0, "%s", r.out);
	cr_expect(strstr(r.out, "0 attached from the cache"), "by choice only: %s", r.out);
	/* A user pins their own prefix (warm --pin). */
	snprintf(a, sizeof(a), "warm --model %s/llama-tiny-gqa --block-tokens 4 --socket %s --pin --tokens 20,21,22,23",
		 fixtures_dir(), d.sock);
	r = run_as(60002, 0, a);
	cr_expect_eq(r.status, 0, "%s", r.out);
	cr_expect(strstr(r.out, "pinned 4 tokens"), "%s", r.out);
	cr_expect_eq(t_counter(&d, "pins"), 2, "the shared chain's and the user's");
	cr_expect_eq(td_stop(&d), 0);
}

/* --no-cache never uses the daemon, even one at the socket the
 * environment names (which the same run without it does use). */
Test(prefix_run, no_cache_never_uses_the_daemon)
{
	struct test_daemon d;
	const char *args[] = { "--block-tokens", "4", "--memory", "64M", NULL };
	cr_assert_eq(td_start(&d, args), 0);
	cr_assert_eq(setenv("PREFIXD_SOCKET", d.sock, 1), 0);
#define GEN "generate --model %s/llama-tiny-gqa --block-tokens 4 --tokens 1,2,3,4,5,6,7,8,9 --max-new 1"
	struct cmd_result r = run(GEN, fixtures_dir());
	cr_assert_eq(r.status, 0, "%s", r.out);
	cr_assert(strstr(r.out, "0 attached from the cache, 9 computed; 2 new blocks published"),
		  "PREFIXD_SOCKET leads to the daemon: %s", r.out);
	unsigned long long matches = t_counter(&d, "matches"), blocks = t_counter(&d, "blocks");
	r = run(GEN " --no-cache", fixtures_dir());
	cr_expect_eq(r.status, 0, "%s", r.out);
	cr_expect_not(strstr(r.out, "attached"), "%s", r.out);
	cr_expect_not(strstr(r.out, "prefixd"), "not even a word of prefixd: %s", r.out);
	cr_expect_eq(t_counter(&d, "matches"), matches, "--no-cache asked the daemon: %s", r.out);
	cr_expect_eq(t_counter(&d, "blocks"), blocks);
	unsetenv("PREFIXD_SOCKET");
	cr_expect_eq(td_stop(&d), 0);
#undef GEN
}

/* ==== The command line ==== */

Test(prefix_run, tokens_from_standard_input)
{
	char path[] = "/tmp/pfx-cli-stdin-XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, "5, 6\n7\n", 7), 7);
	close(fd);
	struct cmd_result a = run("generate --model %s/neox-tiny --tokens @- --max-new 4 --ignore-eos < %s 2>/dev/null",
				  fixtures_dir(), path);
	struct cmd_result b = run("generate --model %s/neox-tiny --tokens 5,6,7 --max-new 4 --ignore-eos 2>/dev/null",
				  fixtures_dir());
	cr_expect_eq(a.status, 0, "%s", a.out);
	cr_expect_eq(b.status, 0, "%s", b.out);
	cr_expect_str_eq(a.out, b.out);
	/* Positions in a file are lines and columns. */
	fd = open(path, O_WRONLY | O_TRUNC);
	cr_assert_eq(write(fd, "5, 6,\n,7\n", 9), 9);
	close(fd);
	a = run("generate --model %s/neox-tiny --tokens @- --max-new 4 < %s", fixtures_dir(), path);
	cr_expect_eq(a.status, 2, "%s", a.out);
	cr_expect(strstr(a.out, "--tokens @-: token 2 (counting from 0) is empty, at line 2, column 1: two commas with no id between them"),
		  "%s", a.out);
	unlink(path);
	a = run("generate --model %s/neox-tiny --tokens @- --max-new 4 < /dev/null", fixtures_dir());
	cr_expect_eq(a.status, 2, "%s", a.out);
	cr_expect(strstr(a.out, "--tokens @-: no tokens given"), "%s", a.out);
}

Test(prefix_run, a_command_with_help_prints_its_own_help)
{
	const char *cmds[] = { "info", "recache", "logits", "generate", "demo", "warm", "random-model",
			       "tokenize", "detokenize" };
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		char want[64];
		snprintf(want, sizeof(want), "usage: prefix-run %s ", cmds[i]);
		struct cmd_result r = run("%s --help", cmds[i]);
		cr_expect_eq(r.status, 0, "%s", r.out);
		cr_expect(!strncmp(r.out, want, strlen(want)), "%s --help:\n%s", cmds[i], r.out);
		cr_expect_not(strstr(r.out, "commands:"), "not the global help: %s", r.out);
		struct cmd_result h = run("help %s", cmds[i]);
		cr_expect_str_eq(h.out, r.out, "help %s", cmds[i]);
	}
	struct cmd_result r = run("generate --help");
	cr_expect(strstr(r.out, "--ignore-eos") && strstr(r.out, "--max-new N") &&
		  strstr(r.out, "@- from standard input"), "%s", r.out);
	/* Whatever else the line holds. */
	r = run("generate --max-new 0 --bogus -h");
	cr_expect_eq(r.status, 0, "%s", r.out);
	cr_expect(!strncmp(r.out, "usage: prefix-run generate ", 27), "%s", r.out);
	r = run("random-model --help");
	cr_expect(strstr(r.out, "--force"), "%s", r.out);
	r = run("--help");
	cr_expect(strstr(r.out, "commands:"), "%s", r.out);
	r = run("help frobnicate");
	cr_expect_eq(r.status, 2, "%s", r.out);
	cr_expect(strstr(r.out, "unknown command 'frobnicate' (info, recache, logits, generate, demo, random-model, warm, tokenize, detokenize;"),
		  "%s", r.out);
}

Test(prefix_run, recache_reads_the_checkpoint_in_again_and_says_how)
{
	struct cmd_result r = run("recache --model %s/llama-tiny-gqa", fixtures_dir());
	cr_assert_eq(r.status, 0, "%s", r.out);
	cr_expect(strstr(r.out, " of the weights' ") && strstr(r.out, " in 2 MiB pages\n"), "%s", r.out);
}

/* Two demo models of different seeds are two models: other weights, so
 * another fingerprint; the same seed writes the same file. */
Test(prefix_run, random_model_seeds_give_other_weights)
{
	char dir[] = "/tmp/pfx-cli-seed-XXXXXX", out[512];
	cr_assert(mkdtemp(dir));
	static const char *const seeds[] = { "1", "1", "2", NULL /* default */ };
	for (int i = 0; i < 4; i++) {
		char sub[300], seed[32] = "";
		snprintf(sub, sizeof(sub), "%s/%d", dir, i);
		if (seeds[i])
			snprintf(seed, sizeof(seed), "--seed %s", seeds[i]);
		struct cmd_result r = run("random-model --out %s --dtype bf16 %s", sub, seed);
		cr_assert_eq(r.status, 0, "%s", r.out);
	}
	cr_expect_eq(td_sh(out, sizeof(out), "cmp -s %s/0/model.safetensors %s/1/model.safetensors", dir, dir), 0,
		     "the same seed, the same weights");
	cr_expect_neq(td_sh(out, sizeof(out), "cmp -s %s/0/model.safetensors %s/2/model.safetensors", dir, dir), 0,
		      "--seed 2 draws other weights than --seed 1");
	cr_expect_neq(td_sh(out, sizeof(out), "cmp -s %s/0/model.safetensors %s/3/model.safetensors", dir, dir), 0,
		      "--seed 1 is not the default");
	struct cmd_result r = run("random-model --out %s/4 --seed x", dir);
	cr_expect_eq(r.status, 2, "%s", r.out);
	cr_expect_eq(td_sh(out, sizeof(out), "rm -r %s", dir), 0, "%s", out);
}

Test(prefix_run, random_model_refuses_a_directory_that_is_not_empty)
{
	char dir[] = "/tmp/pfx-cli-rm-XXXXXX", path[256];
	cr_assert(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/notes.txt", dir);
	write_file(dir, "notes.txt", "mine\n");
	struct cmd_result r = run("random-model --out %s", dir);
	cr_expect_eq(r.status, 2, "%s", r.out);
	cr_expect(strstr(r.out, "is not empty (1 entry, 'notes.txt'); give a new or empty directory, or --force"),
		  "%s", r.out);
	cr_expect_eq(access(path, F_OK), 0, "untouched");
	char cfg[256];
	snprintf(cfg, sizeof(cfg), "%s/config.json", dir);
	cr_expect_neq(access(cfg, F_OK), 0, "nothing written");
	/* --force goes ahead: config.json is a directory here, so the write
	 * fails at once (rather than writing a 100 MB model). */
	cr_assert_eq(mkdir(cfg, 0755), 0);
	r = run("random-model --out %s --force", dir);
	cr_expect_eq(r.status, 1, "%s", r.out);
	cr_expect_not(strstr(r.out, "not empty"), "%s", r.out);
	cr_expect(strstr(r.out, "config.json: cannot write"), "%s", r.out);
	rmdir(cfg);
	r = run("random-model --out %s", path);
	cr_expect_eq(r.status, 2, "%s", r.out);
	cr_expect(strstr(r.out, "is a file, not a directory"), "%s", r.out);
	unlink(path);
	rmdir(dir);
}
