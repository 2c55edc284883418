/* SPDX-License-Identifier: MIT */
/*
 * Sharing across real processes: prefix-run processes on one private
 * prefixd, checked against the transformers fixtures, the daemon's
 * counters (through prefixctl) and each process's own report.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon_asserts.h"
#include "cache.h"
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
	t_start(&td, args, NULL);
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
	t_stop(&td);
}

TestSuite(share, .init = setup, .fini = teardown);

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
	cr_expect_eq(t_counter(&td, "hits"), 1);
	cr_expect_eq(t_counter(&td, "hit_tokens"), HEAD);
	cr_expect_eq(t_counter(&td, "blocks"), 12, "B published its own 6 new blocks");
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

/* Attention prefetches the next attached block (attention.c): B's logits
 * over the attached prefix are the same bits with and without. */
Test(share, prefetching_attached_kv_changes_no_logit)
{
	char out[PATH_MAX + 32];
	size_t nl;
	free(expected_f32(MODEL, "logits_full", &nl));
	/* Fewer new tokens than a block: B publishes nothing, so that both
	 * runs attach the same HEAD tokens. */
	size_t V = nl / ntok, rows = 3;
	/* A prompt of its own: the suite's daemon holds the others' blocks. */
	int32_t *mine = malloc(ntok * sizeof(*mine));
	for (size_t i = 0; i < ntok; i++)
		mine[i] = (int32_t)(((size_t)tok[i] + 7) % V);
	char *head = tokens_csv(mine, HEAD), *all = tokens_csv(mine, HEAD + rows);
	snprintf(out, sizeof(out), "%s/pf.npy", td.dir);
	struct cmd_result a = run("logits --model %s/" MODEL " --block-tokens 4 --socket %s --tokens %s --out %s",
				  fixtures_dir(), td.sock, head, out);
	cr_assert_eq(a.status, 0, "%s", a.out);
	unlink(out);
	float *got[2];
	for (int off = 0; off < 2; off++) {
		if (off)
			setenv("PFX_NO_KV_PREFETCH", "1", 1);
		struct cmd_result b = run("logits --model %s/" MODEL " --block-tokens 4 --socket %s --tokens %s --out %s",
					  fixtures_dir(), td.sock, all, out);
		unsetenv("PFX_NO_KV_PREFETCH");
		cr_assert_eq(b.status, 0, "%s", b.out);
		cr_expect(strstr(b.out, "24 attached from the cache, 3 computed"), "%s", b.out);
		got[off] = read_npy(out, rows, V);
		unlink(out);
	}
	cr_expect_eq(memcmp(got[0], got[1], rows * V * sizeof(float)), 0,
		     "the logits with and without the prefetches differ");
	free(got[0]);
	free(got[1]);
	free(head);
	free(all);
	free(mine);
}

/* Every other architecture the same way: A publishes 24 tokens in blocks
 * of 4, B attaches them and computes the rest, which transformers' logits
 * confirm (mistral-tiny-swa: B's rows see only their window of 16, from
 * attached blocks and computed ones). */
Test(share, every_architecture_attaches_and_matches_transformers)
{
	static const char *const models[] = { "neox-tiny", "llama3-tiny-ropescaled", "qwen2-tiny",
					      "mistral-tiny-swa", "phi3-tiny", "gemma-tiny" };
	char out[PATH_MAX + 32];
	snprintf(out, sizeof(out), "%s/m.npy", td.dir);
	for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++) {
		size_t n, nl;
		int32_t *t = expected_i32(models[i], "tokens", &n);
		char *head = tokens_csv(t, HEAD), *all = tokens_csv(t, n);
		struct cmd_result a = run("logits --model %s/%s --block-tokens 4 --socket %s --tokens %s --out %s",
					  fixtures_dir(), models[i], td.sock, head, out);
		cr_assert_eq(a.status, 0, "%s: %s", models[i], a.out);
		struct cmd_result b = run("logits --model %s/%s --block-tokens 4 --socket %s --tokens %s --out %s",
					  fixtures_dir(), models[i], td.sock, all, out);
		cr_assert_eq(b.status, 0, "%s: %s", models[i], b.out);
		cr_expect(strstr(b.out, "24 attached from the cache, 24 computed"), "%s: %s", models[i], b.out);
		float *ref = expected_f32(models[i], "logits_full", &nl);
		size_t V = nl / n, rows = n - HEAD;
		float *got = read_npy(out, rows, V);
		float d = max_abs_diff(got, ref + HEAD * V, rows * V);
		cr_expect_leq(d, TOL_LOGITS, "%s: attached-prefix logits vs transformers: %g", models[i], d);
		unlink(out);
		free(got);
		free(ref);
		free(head);
		free(all);
		free(t);
	}
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
	cr_expect_eq(t_counter(&td, "hits"), 0);
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
		/* The reference was made with EOS disabled (fixtures/README). */
		struct cmd_result r = run("generate --model %s/" MODEL " --block-tokens 4 --socket %s --tokens %s --max-new %zu --ignore-eos",
					  fixtures_dir(), td.sock, csv, no);
		cr_assert_eq(r.status, 0, "%s", r.out);
		cr_expect(strstr(r.out, want), "round %d: %s", round, r.out);
		/* A prompt of whole blocks: all but its last token attached. */
		cr_expect(strstr(r.out, round ? "11 attached" : "0 attached"), "round %d: %s", round, r.out);
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
	cr_expect_eq(t_counter(&td, "connections"), 1, "only prefixctl's");
}

/* Attached blocks outlive the session that attached them and the caller's
 * close of the cache: a fork keeps the lease until it is freed. */
Test(share, forks_keep_attached_blocks_until_they_are_freed)
{
	struct pfx_model *m = load_fixture_model_bt(MODEL, 4);
	struct pfx_error err = { "" }, cerr = { "" };
	struct pfx_cache *c;
	cr_assert_eq(pfx_cache_open(m, td.sock, NULL, 0, &c, &err), 0, "%s", err.msg);
	size_t V = (size_t)pfx_model_config(m)->vocab;
	float *logits = malloc(ntok * V * sizeof(float));
	struct pfx_session *a, *b, *f;
	struct pfx_prefill_info info;
	cr_assert_eq(pfx_session_new(m, &a, &err), 0);
	cr_assert_eq(pfx_session_prefill(a, c, tok, HEAD, PFX_LOGITS_LAST, logits, &info, &cerr, &err), 0);
	cr_expect_eq(info.published, HEAD / 4);
	pfx_session_free(a);
	cr_assert_eq(pfx_session_new(m, &b, &err), 0);
	cr_assert_eq(pfx_session_prefill(b, c, tok, HEAD + 1, PFX_LOGITS_LAST, logits, &info, &cerr, &err), 0);
	cr_assert_eq(info.attached, HEAD);
	cr_expect_eq(pfx_session_frozen(b), HEAD, "attached tokens are frozen");
	cr_expect_neq(pfx_session_rewind(b, HEAD - 1, &err), 0, "no rewind into attached blocks");
	cr_assert_eq(pfx_session_fork(b, &f, &err), 0);
	pfx_session_free(b);
	pfx_cache_close(c);
	cr_expect_eq(t_counter(&td, "leases"), 1, "the fork holds the lease");
	/* The fork continues on the attached blocks and matches transformers. */
	cr_assert_eq(pfx_session_append(f, tok + HEAD + 1, ntok - HEAD - 1, PFX_LOGITS_ALL, logits, &err), 0);
	size_t nl;
	float *ref = expected_f32(MODEL, "logits_full", &nl);
	float d = max_abs_diff(logits, ref + (HEAD + 1) * V, (ntok - HEAD - 1) * V);
	cr_expect_leq(d, TOL_LOGITS, "%g", d);
	pfx_session_free(f);
	unsigned long long leases = 1;
	for (int i = 0; i < 200 && (leases = t_counter(&td, "leases")); i++)
		usleep(10000);
	cr_expect_eq(leases, 0, "freeing the last fork released the lease and closed the connection");
	free(ref);
	free(logits);
	pfx_model_free(m);
}

Test(share, generate_finds_a_daemon_at_the_default_socket)
{
	struct test_daemon d2;
	const char *args[] = { "--block-tokens", "4", "--memory", "64M", NULL };
	cr_assert_eq(td_start_named(&d2, "prefixd.sock", args), 0);
	setenv("XDG_RUNTIME_DIR", d2.dir, 1);
	for (int round = 0; round < 2; round++) {
		struct cmd_result r = run("generate --model %s/" MODEL " --block-tokens 4 --tokens %s --max-new 1",
					  fixtures_dir(), csv_head);
		cr_assert_eq(r.status, 0, "%s", r.out);
		cr_expect(strstr(r.out, round ? "23 attached" : "0 attached"), "round %d: %s", round, r.out);
	}
	cr_expect_eq(td_stop(&d2), 0);
	struct cmd_result r = run("generate --model %s/" MODEL " --block-tokens 4 --tokens 1,2,3 --max-new 1",
				  fixtures_dir());
	cr_expect(strstr(r.out, "no prefixd running at"), "said once when none runs: %s", r.out);
	unsetenv("XDG_RUNTIME_DIR");
}

Test(share, prefixd_socket_names_the_default_socket_before_the_runtime_dir)
{
	struct test_daemon d2;
	const char *args[] = { "--block-tokens", "4", "--memory", "64M", NULL };
	cr_assert_eq(td_start_named(&d2, "system.sock", args), 0);
	setenv("XDG_RUNTIME_DIR", "/nonexistent", 1);
	setenv("PREFIXD_SOCKET", d2.sock, 1);
	struct cmd_result r = run("generate --model %s/" MODEL " --block-tokens 4 --tokens %s --max-new 1",
				  fixtures_dir(), csv_head);
	cr_expect_eq(r.status, 0, "%s", r.out);
	cr_expect(strstr(r.out, "0 attached") && !strstr(r.out, "no prefixd"), "found it: %s", r.out);
	char cmd[PATH_MAX + 64];
	snprintf(cmd, sizeof(cmd), "%s stats --json >/dev/null", PREFIXCTL);
	cr_expect_eq(system(cmd), 0, "prefixctl found it too");
	unsetenv("PREFIXD_SOCKET");
	unsetenv("XDG_RUNTIME_DIR");
	cr_expect_eq(td_stop(&d2), 0);
}

/* What prefixd_connect(NULL) and prefix-run's default socket mean, as one
 * call of libprefixd's. */
Test(share, prefixd_default_socket_follows_the_environment)
{
	char b[PREFIXD_SOCKET_PATH_MAX], longdir[200];
	unsetenv("PREFIXD_SOCKET");
	unsetenv("XDG_RUNTIME_DIR");
	cr_assert_eq(prefixd_default_socket(b, sizeof(b)), 0);
	cr_expect_str_eq(b, "/run/prefixd.sock");
	setenv("XDG_RUNTIME_DIR", "/run/user/7", 1);
	cr_assert_eq(prefixd_default_socket(b, sizeof(b)), 0);
	cr_expect_str_eq(b, "/run/user/7/prefixd.sock");
	setenv("PREFIXD_SOCKET", "/srv/p.sock", 1);
	cr_assert_eq(prefixd_default_socket(b, sizeof(b)), 0);
	cr_expect_str_eq(b, "/srv/p.sock");
	unsetenv("PREFIXD_SOCKET");
	memset(longdir, 'd', sizeof(longdir) - 1);
	longdir[0] = '/';
	longdir[sizeof(longdir) - 1] = 0;
	setenv("XDG_RUNTIME_DIR", longdir, 1);
	cr_expect_eq(prefixd_default_socket(b, sizeof(b)), -ENAMETOOLONG);
	cr_expect(strstr(prefixd_errmsg(), "too long for a socket path"), "%s", prefixd_errmsg());
	struct prefixd *c;
	cr_expect_eq(prefixd_connect(NULL, NULL, &c), -ENAMETOOLONG, "connect says the same");
	unsetenv("XDG_RUNTIME_DIR");
}

/* The prefill's two halves apart: attach, compute in the caller's own
 * pieces, publish. A second session attaches what the first published,
 * its logits match transformers', and its publish continues the lease
 * (only its own new blocks counted). */
Test(share, attach_and_publish_apart_match_a_prefill)
{
	struct pfx_model *m = load_fixture_model_bt(MODEL, 4);
	struct pfx_error err = { "" }, cerr = { "" };
	struct pfx_cache *c;
	cr_assert_eq(pfx_cache_open(m, td.sock, NULL, 0, &c, &err), 0, "%s", err.msg);
	size_t V = (size_t)pfx_model_config(m)->vocab;
	float *logits = malloc(ntok * V * sizeof(float));
	struct pfx_session *a, *b;
	struct pfx_prefill_info info;
	cr_assert_eq(pfx_session_new(m, &a, &err), 0);
	cr_assert_eq(pfx_session_attach(a, c, tok, HEAD, &info, &cerr, &err), 0, "%s", err.msg);
	cr_expect_eq(info.attached, 0);
	cr_expect_eq(info.computed, HEAD);
	cr_expect_eq(info.cache_rc, 0, "%s", cerr.msg);
	cr_expect_eq(pfx_session_publish(a, c, tok, HEAD, &info, &cerr, &err), -EINVAL,
		     "nothing computed yet");
	cr_assert_eq(pfx_session_append(a, tok, 10, PFX_LOGITS_NONE, NULL, &err), 0);
	cr_assert_eq(pfx_session_append(a, tok + 10, HEAD - 10, PFX_LOGITS_NONE, NULL, &err), 0);
	cr_assert_eq(pfx_session_publish(a, c, tok, HEAD, &info, &cerr, &err), 0, "%s", err.msg);
	cr_expect_eq(info.published, HEAD / 4);
	cr_expect_eq(info.unpublished, 0);
	cr_expect_eq(pfx_session_attach(a, c, tok, HEAD, &info, &cerr, &err), -EINVAL,
		     "a session that is not empty");
	pfx_session_free(a);

	cr_assert_eq(pfx_session_new(m, &b, &err), 0);
	cr_assert_eq(pfx_session_attach(b, c, tok, ntok, &info, &cerr, &err), 0, "%s", err.msg);
	cr_expect_eq(info.attached, HEAD);
	cr_expect_eq(info.computed, ntok - HEAD);
	cr_expect_eq(pfx_session_frozen(b), HEAD);
	cr_assert_eq(pfx_session_append(b, tok + HEAD, ntok - HEAD, PFX_LOGITS_ALL, logits, &err), 0);
	size_t nl;
	float *ref = expected_f32(MODEL, "logits_full", &nl);
	float d = max_abs_diff(logits, ref + HEAD * V, (ntok - HEAD) * V);
	cr_expect_leq(d, TOL_LOGITS, "%g", d);
	unsigned long long before = t_counter(&td, "blocks"), dedup = t_counter(&td, "dedup");
	cr_assert_eq(pfx_session_publish(b, c, tok, ntok, &info, &cerr, &err), 0, "%s", err.msg);
	cr_expect_eq(info.published, ntok / 4 - HEAD / 4);
	cr_expect_eq(info.deduplicated, 0);
	cr_expect_eq(t_counter(&td, "blocks"), before + ntok / 4 - HEAD / 4);
	cr_expect_eq(t_counter(&td, "dedup"), dedup,
		     "continued the lease: the attached blocks not sent again");
	pfx_session_free(b);
	pfx_cache_close(c);
	free(ref);
	free(logits);
	pfx_model_free(m);
}

/* A fork of part of an attached prefix holds the lease's blocks it took,
 * continues on them (logits as transformers'), and publishes from the
 * prompt's beginning since it cannot continue the lease. */
Test(share, a_fork_of_an_attached_prefix_keeps_its_blocks_and_publishes)
{
	struct pfx_model *m = load_fixture_model_bt(MODEL, 4);
	struct pfx_error err = { "" }, cerr = { "" };
	struct pfx_cache *c;
	cr_assert_eq(pfx_cache_open(m, td.sock, NULL, 0, &c, &err), 0, "%s", err.msg);
	size_t V = (size_t)pfx_model_config(m)->vocab;
	float *logits = malloc(ntok * V * sizeof(float));
	struct pfx_session *a, *b, *f;
	struct pfx_prefill_info info;
	cr_assert_eq(pfx_session_new(m, &a, &err), 0);
	cr_assert_eq(pfx_session_prefill(a, c, tok, HEAD, PFX_LOGITS_LAST, logits, &info, &cerr, &err), 0);
	pfx_session_free(a);
	cr_assert_eq(pfx_session_new(m, &b, &err), 0);
	cr_assert_eq(pfx_session_attach(b, c, tok, HEAD + 1, &info, &cerr, &err), 0);
	cr_assert_eq(info.attached, HEAD);
	cr_expect_eq(pfx_session_fork_prefix(b, 6, &f, &err), -EINVAL, "not whole blocks");
	cr_expect_eq(pfx_session_fork_prefix(b, HEAD + 4, &f, &err), -EINVAL, "past the frozen length");
	cr_assert_eq(pfx_session_fork_prefix(b, 16, &f, &err), 0, "%s", err.msg);
	cr_expect_eq(pfx_session_length(f), 16);
	cr_expect_eq(pfx_session_frozen(f), 16);
	pfx_session_free(b);
	pfx_cache_close(c);
	cr_expect_eq(t_counter(&td, "leases"), 1, "the fork holds the lease");
	cr_assert_eq(pfx_session_append(f, tok + 16, ntok - 16, PFX_LOGITS_ALL, logits, &err), 0);
	size_t nl;
	float *ref = expected_f32(MODEL, "logits_full", &nl);
	float d = max_abs_diff(logits, ref + 16 * V, (ntok - 16) * V);
	cr_expect_leq(d, TOL_LOGITS, "%g", d);
	struct pfx_cache *c2;
	cr_assert_eq(pfx_cache_open(m, td.sock, NULL, 0, &c2, &err), 0, "%s", err.msg);
	unsigned long long before = t_counter(&td, "blocks"), dedup = t_counter(&td, "dedup");
	cr_assert_eq(pfx_session_publish(f, c2, tok, ntok, &info, &cerr, &err), 0, "%s", err.msg);
	cr_expect_eq(t_counter(&td, "dedup"), dedup + HEAD / 4,
		     "from the beginning: the 4 attached blocks sent again, and 2 computed here");
	cr_expect_eq(info.publish_rc, 0, "%s", cerr.msg);
	cr_expect_eq(info.published + info.deduplicated, ntok / 4 - 4,
		     "the blocks computed here: %u + %u", info.published, info.deduplicated);
	cr_expect_eq(info.deduplicated, HEAD / 4 - 4, "those the daemon had");
	cr_expect_eq(t_counter(&td, "blocks"), before + info.published);
	pfx_cache_close(c2);
	pfx_session_free(f);
	unsigned long long leases = 1;
	for (int i = 0; i < 200 && (leases = t_counter(&td, "leases")); i++)
		usleep(10000);
	cr_expect_eq(leases, 0, "freeing the fork released the lease");
	free(ref);
	free(logits);
	pfx_model_free(m);
}

/* 20 blocks of 4 tokens against a budget of 16: the run's own chain holds
 * the memory (a block being extended is never evicted), so 4 blocks are
 * refused, and the process says so, with the reason, apart from its
 * result. */
Test(share, a_publish_cut_short_by_the_budget_says_why)
{
	struct test_daemon small;
	const char *args[] = { "--block-tokens", "4", "--memory", "64K", NULL };
	cr_assert_eq(td_start_named(&small, "small.sock", args), 0);
	char csv[512];
	count_csv(csv, sizeof(csv), 81);
	struct cmd_result r = run("generate --model %s/" MODEL " --block-tokens 4 --socket %s --tokens %s --max-new 1",
				  fixtures_dir(), small.sock, csv);
	cr_expect_eq(r.status, 0, "%s", r.out);
	cr_expect(strstr(r.out, "16 new blocks published"), "%s", r.out);
	cr_expect(strstr(r.out, "4 new blocks not published") && strstr(r.out, "memory budget"),
		  "%s", r.out);
	cr_expect_not(strstr(r.out, "computed alone"), "the cache was used: %s", r.out);
	cr_expect_eq(td_stop(&small), 0);
}

Test(share, warm_publishes_and_pins_a_prefix_ahead_of_time)
{
	struct cmd_result r = run("warm --model %s/" MODEL " --block-tokens 4 --socket %s --tokens %s --pin --ttl 600",
				  fixtures_dir(), td.sock, csv_head);
	cr_expect_eq(r.status, 0, "%s", r.out);
	cr_expect(strstr(r.out, "6 new blocks published"), "%s", r.out);
	cr_expect(strstr(r.out, "pinned 24 tokens"), "%s", r.out);
	cr_expect_eq(t_counter(&td, "pins"), 1);
	cr_expect_eq(t_counter(&td, "pinned_bytes"), 6 * 4096);
	r = run("generate --model %s/" MODEL " --block-tokens 4 --socket %s --tokens %s --max-new 1",
		fixtures_dir(), td.sock, csv_all);
	cr_expect_eq(r.status, 0, "%s", r.out);
	cr_expect(strstr(r.out, "24 attached"), "%s", r.out);
	r = run("warm --model %s/" MODEL " --block-tokens 4 --socket %s --tokens 1,2,3", fixtures_dir(),
		td.sock);
	cr_expect_eq(r.status, 1, "%s", r.out);
	cr_expect(strstr(r.out, "less than one 4-token block"), "%s", r.out);
	r = run("warm --model %s/" MODEL " --block-tokens 4 --socket %s --tokens %s --ttl 5",
		fixtures_dir(), td.sock, csv_head);
	cr_expect_eq(r.status, 2, "--ttl without --pin: %s", r.out);
}
