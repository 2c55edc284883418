/* SPDX-License-Identifier: MIT */
/*
 * Attention of a short suffix over a long context, the split path against
 * the reference (runtime/attention.c, att_split_set), in one process: a
 * random SmolLM-135M-shaped model, a session holding the prefix, then
 * rounds of a suffix run (not committed) on each path in turn, the caches
 * flushed before each, the order swapped every round. Prints the medians
 * of attention's process CPU and wall milliseconds of each path and their
 * ratio, and the largest logit difference between them.
 *
 *   attention [--prefix TOKENS] [--rows N] [--rounds N] [--layers N]
 *             [--kv f32|f16|bf16] [--flush MB] [--only split|ref]
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "forward.h"
#include "opts.h"
#include "profile.h"
#include "random_model.h"
#include "session.h"

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The value after --name, or NULL. */
static const char *sarg(int argc, char **argv, const char *name)
{
	for (int i = 1; i + 1 < argc; i++)
		if (!strcmp(argv[i], name))
			return argv[i + 1];
	return NULL;
}

/* A whole number option in [min, max] (opts.c refuses anything else). */
static long arg(int argc, char **argv, const char *name, long def, long min, long max)
{
	const char *v = sarg(argc, argv, name);
	return v ? opt_int("attention", name + 2, v, min, max) : def;
}

int main(int argc, char **argv)
{
	static const char *const known[] = { "--prefix", "--rows", "--rounds", "--layers",
					     "--flush", "--kv", "--only" };
	for (int i = 1; i < argc; i += 2) {
		bool ok = i + 1 < argc;
		for (size_t k = 0; ok && k < sizeof(known) / sizeof(known[0]) && strcmp(argv[i], known[k]); k++)
			ok = k + 1 < sizeof(known) / sizeof(known[0]);
		if (!ok) {
			fprintf(stderr, "usage: attention [--prefix TOKENS] [--rows 2..%d] [--rounds N] "
					"[--layers N] [--kv f32|f16|bf16] [--flush MB] [--only split|ref]\n",
				ATT_FEW_MAX_ROWS);
			return 2;
		}
	}
	long prefix = arg(argc, argv, "--prefix", 2048, 1, 65536);
	long rows = arg(argc, argv, "--rows", 32, 2, ATT_FEW_MAX_ROWS);
	int rounds = (int)arg(argc, argv, "--rounds", 11, 1, 99);
	int layers = (int)arg(argc, argv, "--layers", 30, 1, 64);
	size_t flush = (size_t)arg(argc, argv, "--flush", 512, 0, 65536) << 20;
	const char *kv = sarg(argc, argv, "--kv") ? sarg(argc, argv, "--kv") : "f32";
	/* --only split|ref: one path every time (for a profiler) */
	const char *only = sarg(argc, argv, "--only") ? sarg(argc, argv, "--only") : "";
	if ((strcmp(kv, "f32") && strcmp(kv, "f16") && strcmp(kv, "bf16")) ||
	    (*only && strcmp(only, "split") && strcmp(only, "ref"))) {
		fprintf(stderr, "attention: --kv must be f32, f16 or bf16 and --only split or ref\n");
		return 2;
	}
	char tmp[] = "/tmp/prefixd-bench-att-XXXXXX", p[96];
	struct pfx_error err = { "" };
	struct pfx_config sc = pfx_config_smollm135m();
	sc.n_layers = layers;
	if (sc.max_positions < prefix + rows)
		sc.max_positions = (int)(prefix + rows);
	if (!mkdtemp(tmp) || pfx_random_checkpoint(tmp, &sc, "BF16", 1, &err)) {
		fprintf(stderr, "attention: cannot write the random model: %s\n", err.msg);
		return 1;
	}
	enum pfx_kv_dtype kt = !strcmp(kv, "f16") ? PFX_KV_F16 : !strcmp(kv, "bf16") ? PFX_KV_BF16
										     : PFX_KV_F32;
	struct pfx_model_opts mo = { .threads = 2, .block_tokens = 64, .kv_dtype = kt };
	struct pfx_model *m;
	int rc = pfx_model_load(tmp, &mo, &m, &err);
	snprintf(p, sizeof(p), "%s/model.safetensors", tmp);
	unlink(p);
	snprintf(p, sizeof(p), "%s/config.json", tmp);
	unlink(p);
	rmdir(tmp);
	if (rc) {
		fprintf(stderr, "attention: %s\n", err.msg);
		return 1;
	}
	size_t n = (size_t)(prefix + rows), V = (size_t)sc.vocab;
	int32_t *tok = malloc(n * sizeof(*tok));
	float *lg[2] = { malloc(V * sizeof(float)), malloc(V * sizeof(float)) };
	char *junk = malloc(flush ? flush : 1);
	for (size_t i = 0; i < n; i++)
		tok[i] = (int32_t)((i * 2654435761u) % V);
	struct pfx_session *s;
	if (pfx_session_new(m, &s, &err) ||
	    pfx_session_append(s, tok, (size_t)prefix, PFX_LOGITS_NONE, NULL, &err)) {
		fprintf(stderr, "attention: %s\n", err.msg);
		return 1;
	}
	double cpu[2][99], wall[2][99], diff = 0;
	volatile char sink = 0;
	const enum att_split mode[2] = { ATT_SPLIT_OFF, ATT_SPLIT_ON };
	for (int r = 0; r < rounds; r++)
		for (int k = 0; k < 2; k++) {
			int v = (r + k) % 2;
			memset(junk, r + k, flush); /* the KV out of the caches, as an attach's */
			for (size_t i = 0; i < flush; i += 4096)
				sink ^= junk[i];
			att_split_set(!strcmp(only, "split") ? ATT_SPLIT_ON
				      : !strcmp(only, "ref") ? ATT_SPLIT_OFF : mode[v]);
			struct pfx_profile prof = { 0 };
			pfx_model_set_profile(m, &prof);
			if (pfx_session_run(s, tok + prefix, (size_t)rows, PFX_LOGITS_LAST, lg[v], &err)) {
				fprintf(stderr, "attention: %s\n", err.msg);
				return 1;
			}
			pfx_model_set_profile(m, NULL);
			cpu[v][r] = prof.attention_cpu_s * 1e3;
			wall[v][r] = prof.attention_s * 1e3;
			if (k == 1)
				for (size_t i = 0; i < V; i++)
					diff = fmax(diff, fabs((double)lg[0][i] - lg[1][i]));
		}
	double c0 = median(cpu[0], rounds), c1 = median(cpu[1], rounds);
	double w0 = median(wall[0], rounds), w1 = median(wall[1], rounds);
	printf("{\"prefix\": %ld, \"rows\": %ld, \"layers\": %d, \"kv\": \"%s\", \"rounds\": %d, "
	       "\"ref_cpu_ms\": %.1f, \"split_cpu_ms\": %.1f, \"cpu_ratio\": %.3f, "
	       "\"ref_wall_ms\": %.1f, \"split_wall_ms\": %.1f, \"wall_ratio\": %.3f, "
	       "\"max_logit_diff\": %.3g}\n",
	       prefix, rows, layers, kv, rounds, c0, c1, c0 / c1, w0, w1, w0 / w1, diff);
	pfx_session_free(s);
	pfx_model_free(m);
	free(junk);
	free(lg[0]);
	free(lg[1]);
	free(tok);
	return 0;
}
