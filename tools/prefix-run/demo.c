/* SPDX-License-Identifier: MIT */
/*
 * prefix-run demo: one long prefix computed once and frozen, then several
 * different suffixes run on top of it without committing, each timed
 * against recomputing prefix + suffix from scratch.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "prefix_run.h"
#include "random_model.h"
#include "session.h"

/* Small enough to write and load in a blink, big enough to time. */
static struct pfx_config demo_config(void)
{
	return (struct pfx_config){
		.arch = "LlamaForCausalLM", .hidden = 384, .n_layers = 12, .n_heads = 6,
		.n_kv_heads = 2, .head_dim = 64, .intermediate = 1024, .vocab = 16384,
		.max_positions = 4096, .rope_base = 10000.0f, .norm_eps = 1e-5f,
	};
}

static void random_tokens(int32_t *t, int n, int vocab, uint64_t *x)
{
	for (int i = 0; i < n; i++) {
		*x = *x * 6364136223846793005ull + 1442695040888963407ull;
		t[i] = (int32_t)((*x >> 33) % (uint64_t)vocab);
	}
}

int cmd_demo(struct run_args *a)
{
	char tmp[] = "/tmp/prefixd-demo-XXXXXX";
	struct run_args la = *a;
	struct pfx_error err = { "" };
	if (!a->model) {
		struct pfx_config c = demo_config();
		if (!mkdtemp(tmp)) {
			perror("prefix-run demo: mkdtemp");
			return 1;
		}
		printf("No --model given: writing a random-weight Llama (hidden %d, %d layers, "
		       "%d heads, %d KV heads, vocab %d) to %s\n",
		       c.hidden, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab, tmp);
		if (pfx_random_checkpoint(tmp, &c, "F32", 42, &err)) {
			fprintf(stderr, "prefix-run demo: %s\n", err.msg);
			return 1;
		}
		la.model = tmp;
	}
	struct pfx_model *m;
	int rc = load_model(&la, &m);
	if (!a->model) {
		char p[64];
		snprintf(p, sizeof(p), "%s/model.safetensors", tmp);
		unlink(p);
		snprintf(p, sizeof(p), "%s/config.json", tmp);
		unlink(p);
		rmdir(tmp);
	}
	if (rc)
		return 1;
	/* A folder with a tokenizer: questions in text, answers in text. */
	struct pfx_tokenizer *tz = NULL;
	if (a->model && text_load(a->model, 0, &tz)) {
		pfx_model_free(m);
		return 1;
	}
	if (tz) {
		rc = text_check_vocab(tz, pfx_model_config(m)->vocab, a->model) ? 1
		     : cmd_demo_text(a, m, tz);
		pfx_tokenizer_free(tz);
		pfx_model_free(m);
		return rc;
	}
	const struct pfx_config *c = pfx_model_config(m);
	int P = a->prefix, S = a->suffix, N = a->nsuffixes, V = c->vocab;
	if (P + S > c->max_positions) {
		fprintf(stderr, "prefix-run demo: prefix %d + suffix %d exceed the model's %d positions\n",
			P, S, c->max_positions);
		pfx_model_free(m);
		return 2;
	}
	int32_t *tok = malloc((size_t)(P + S) * sizeof(*tok));
	float *l1 = malloc((size_t)V * sizeof(float)), *l2 = malloc((size_t)V * sizeof(float));
	uint64_t seed = 7;
	random_tokens(tok, P, V, &seed);
	struct pfx_session *s = NULL, *fresh = NULL;
	rc = 1;
	if (pfx_session_new(m, &s, &err))
		goto fail;
	printf("\nModel: %s, %lld parameters, %d threads, BLAS kernels %s\n", c->arch,
	       (long long)pfx_model_params(m), pfx_model_threads(m), pfx_blas_corename());
	double t0 = cli_now();
	if (pfx_session_append(s, tok, (size_t)P, PFX_LOGITS_NONE, NULL, &err) ||
	    pfx_session_freeze(s, &err))
		goto fail;
	double t_prefix = cli_now() - t0;
	printf("Shared prefix: %d tokens computed once in %.1f ms, then frozen\n\n", P,
	       t_prefix * 1e3);
	printf("%-8s %14s %16s %9s %14s\n", "suffix", "on prefix ms", "from scratch ms", "speedup",
	       "max |diff|");
	double sum_c = 0, sum_s = 0;
	for (int i = 0; i < N; i++) {
		random_tokens(tok + P, S, V, &seed);
		t0 = cli_now();
		if (pfx_session_run(s, tok + P, (size_t)S, PFX_LOGITS_LAST, l1, &err))
			goto fail;
		double tc = cli_now() - t0;
		t0 = cli_now();
		if (pfx_session_new(m, &fresh, &err) ||
		    pfx_session_append(fresh, tok, (size_t)(P + S), PFX_LOGITS_LAST, l2, &err))
			goto fail;
		double ts = cli_now() - t0;
		pfx_session_free(fresh);
		fresh = NULL;
		float d = 0;
		for (int j = 0; j < V; j++)
			d = fmaxf(d, fabsf(l1[j] - l2[j]));
		printf("#%-7d %14.2f %16.2f %8.1fx %14.2e\n", i + 1, tc * 1e3, ts * 1e3, ts / tc, d);
		sum_c += tc;
		sum_s += ts;
	}
	char b1[32], b2[32], b3[32];
	size_t kv = pfx_kv_bytes_per_token(c, pfx_model_kv_dtype(m));
	printf("\n%d suffixes of %d tokens: %.1f ms on the frozen prefix vs %.1f ms from scratch "
	       "(%.1fx)\n", N, S, sum_c * 1e3, sum_s * 1e3, sum_s / sum_c);
	printf("KV size: %zu bytes per token; the %d-token prefix holds %s, kept once instead of "
	       "%d times (%s); 2048 tokens would take %s\n",
	       kv, P, cli_bytes(kv * (size_t)P, b1), N, cli_bytes(kv * (size_t)P * N, b2),
	       cli_bytes(kv * 2048, b3));
	rc = 0;
	goto out;
fail:
	fprintf(stderr, "prefix-run demo: %s\n", err.msg[0] ? err.msg : "out of memory");
out:
	pfx_session_free(fresh);
	pfx_session_free(s);
	free(tok);
	free(l1);
	free(l2);
	pfx_model_free(m);
	return rc;
}

int cmd_random_model(struct run_args *a)
{
	struct pfx_config c;
	if (!a->shape || !strcmp(a->shape, "demo")) {
		c = demo_config();
	} else if (!strcmp(a->shape, "smollm")) {
		c = pfx_config_smollm135m();
	} else {
		fprintf(stderr, "prefix-run random-model: --shape is demo or smollm, not '%s'\n", a->shape);
		return 2;
	}
	struct pfx_error err = { "" };
	const char *dtype = !a->dtype ? "F32" : !strcmp(a->dtype, "f16") ? "F16"
			    : !strcmp(a->dtype, "bf16") ? "BF16" : "F32";
	if (pfx_random_checkpoint(a->out, &c, dtype, a->seed, &err)) {
		fprintf(stderr, "prefix-run random-model: %s\n", err.msg);
		return 1;
	}
	return 0;
}
