/* SPDX-License-Identifier: MIT */
/*
 * bench/forward: prefill and decode speed of the runtime on a random-weight
 * Llama shaped like SmolLM-135M, against two references measured in the
 * same run: cblas_sgemm on the model's own matrix shapes (compute bound)
 * and streaming read bandwidth (memory bound). Prints one JSON object.
 *
 *   forward [--model DIR] [--threads N] [--block-tokens B]
 */
#include <cblas.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "random_model.h"
#include "session.h"

static void random_tokens(int32_t *t, int n, int vocab, uint64_t seed)
{
	for (int i = 0; i < n; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		t[i] = (int32_t)((seed >> 33) % (uint64_t)vocab);
	}
}

/* Matrix-product flops of one token through all layers (no attention). */
static double layer_flops_per_token(const struct pfx_config *c)
{
	double H = c->hidden, q = (double)c->n_heads * c->head_dim;
	double kv = (double)c->n_kv_heads * c->head_dim, inter = c->intermediate;
	return 2.0 * c->n_layers * (H * q + 2 * H * kv + q * H + 3 * H * inter);
}

/* Attention flops of a causal prefill of n tokens (QK^T and PV). */
static double attention_flops(const struct pfx_config *c, double n)
{
	return 2.0 * 2.0 * c->n_layers * c->n_heads * c->head_dim * n * (n + 1) / 2;
}

static double weight_bytes_per_token(const struct pfx_config *c)
{
	double H = c->hidden;
	return 4.0 * (layer_flops_per_token(c) / 2 + c->n_layers * 2 * H + H + (double)c->vocab * H);
}

/* cblas_sgemm with OpenBLAS's own threads on the layer shapes at m rows. */
static double sgemm_gflops(const struct pfx_config *c, int m, int threads)
{
	int H = c->hidden, q = c->n_heads * c->head_dim, kv = c->n_kv_heads * c->head_dim;
	int inter = c->intermediate;
	const int shapes[][2] = { { q, H }, { kv, H }, { kv, H }, { H, q }, { inter, H }, { inter, H }, { H, inter } };
	size_t big = (size_t)inter * H;
	float *a = malloc((size_t)m * inter * 4), *w = malloc(big * 4), *y = malloc((size_t)m * inter * 4);
	for (size_t i = 0; i < (size_t)m * inter; i++)
		a[i] = (float)(i % 13) * 0.01f;
	for (size_t i = 0; i < big; i++)
		w[i] = (float)(i % 7) * 0.01f;
	openblas_set_num_threads(threads);
	double flops = 0, samples[9];
	for (int s = 0; s < 7; s++)
		flops += 2.0 * m * shapes[s][0] * shapes[s][1];
	for (int r = 0; r < 9; r++) {
		double t0 = bench_now();
		for (int s = 0; s < 7; s++)
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, shapes[s][0], shapes[s][1],
				    1.0f, a, shapes[s][1], w, shapes[s][1], 0.0f, y, shapes[s][0]);
		samples[r] = flops / (bench_now() - t0) / 1e9;
	}
	openblas_set_num_threads(1); /* the runtime's setting (blas.c) */
	free(a);
	free(w);
	free(y);
	return bench_median(samples, 9);
}

static double prefill_tok_s(struct pfx_model *m, const int32_t *tok, int n, int runs,
			    double *spread)
{
	int V = pfx_model_config(m)->vocab;
	float *l = malloc((size_t)V * 4);
	double t[16];
	for (int r = 0; r < runs; r++) {
		struct pfx_session *s;
		pfx_session_new(m, &s, NULL);
		double t0 = bench_now();
		if (pfx_session_append(s, tok, (size_t)n, PFX_LOGITS_LAST, l, NULL))
			abort();
		t[r] = n / (bench_now() - t0);
		pfx_session_free(s);
	}
	free(l);
	double med = bench_median(t, runs);
	*spread = (t[runs - 1] - t[0]) / med;
	return med;
}

static double decode_tok_s(struct pfx_model *m, const int32_t *tok, int ctx, int steps, int runs,
			   double *spread)
{
	int V = pfx_model_config(m)->vocab;
	float *l = malloc((size_t)V * 4);
	struct pfx_session *s;
	pfx_session_new(m, &s, NULL);
	pfx_session_append(s, tok, (size_t)ctx, PFX_LOGITS_LAST, l, NULL);
	double t[16];
	for (int r = 0; r < runs; r++) {
		double t0 = bench_now();
		for (int i = 0; i < steps; i++)
			if (pfx_session_decode(s, tok[ctx + i], l, NULL))
				abort();
		t[r] = steps / (bench_now() - t0);
		pfx_session_rewind(s, (size_t)ctx, NULL);
	}
	pfx_session_free(s);
	free(l);
	double med = bench_median(t, runs);
	*spread = (t[runs - 1] - t[0]) / med;
	return med;
}

int main(int argc, char **argv)
{
	const char *model = NULL;
	int threads = 2, block = 0, c;
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "threads", required_argument, NULL, 't' },
		{ "block-tokens", required_argument, NULL, 'b' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c == 'm')
			model = optarg;
		else if (c == 't')
			threads = atoi(optarg);
		else if (c == 'b')
			block = atoi(optarg);
		else {
			fprintf(stderr, "usage: forward [--model DIR] [--threads N] [--block-tokens B]\n");
			return c == 'h' ? 0 : 2;
		}
	}
	if (threads < 1 || threads > 64) {
		fprintf(stderr, "forward: --threads must be 1..64\n");
		return 2;
	}
	char tmp[] = "/tmp/prefixd-bench-XXXXXX";
	struct pfx_error err = { "" };
	if (!model) {
		struct pfx_config sc = pfx_config_smollm135m();
		if (!mkdtemp(tmp) || pfx_random_checkpoint(tmp, &sc, "F32", 1, &err)) {
			fprintf(stderr, "forward: cannot write the random model: %s\n", err.msg);
			return 1;
		}
		model = tmp;
	}
	struct pfx_model_opts mo = { .threads = threads, .block_tokens = block };
	struct pfx_model *m;
	int rc = pfx_model_load(model, &mo, &m, &err);
	if (model == tmp) {
		char p[64];
		snprintf(p, sizeof(p), "%s/model.safetensors", tmp);
		unlink(p); /* the mapping keeps the data alive */
		snprintf(p, sizeof(p), "%s/config.json", tmp);
		unlink(p);
		rmdir(tmp);
	}
	if (rc) {
		fprintf(stderr, "forward: %s\n", err.msg);
		return 1;
	}
	const struct pfx_config *cfg = pfx_model_config(m);
	int32_t *tok = malloc(4096 * sizeof(*tok));
	random_tokens(tok, 4096, cfg->vocab, 3);

	const int lens[3] = { 128, 512, 2048 }, runs[3] = { 7, 5, 3 };
	double pre[3], spread[3], dec_spread;
	prefill_tok_s(m, tok, 64, 1, &spread[0]); /* warm up pages and pools */
	for (int i = 0; i < 3; i++)
		pre[i] = prefill_tok_s(m, tok, lens[i], runs[i], &spread[i]);
	double dec = decode_tok_s(m, tok, 512, 32, 5, &dec_spread);
	double sg = sgemm_gflops(cfg, 512, threads);
	double bw = bench_read_bandwidth(threads);
	double flops512 = layer_flops_per_token(cfg) * 512 + attention_flops(cfg, 512) +
			  2.0 * cfg->hidden * cfg->vocab;
	double pre_gf = flops512 / (512 / pre[1]) / 1e9;
	double wbytes = weight_bytes_per_token(cfg);
	double bound = bw * 1e9 / wbytes;

	printf("{\n");
	printf("  \"model\": \"%s\",\n", model == tmp ? "random SmolLM-135M shape (f32)" : model);
	printf("  \"params\": %lld,\n", (long long)pfx_model_params(m));
	printf("  \"threads\": %d,\n  \"block_tokens\": %d,\n", threads, pfx_model_block_tokens(m));
	printf("  \"blas_core\": \"%s\",\n", pfx_blas_corename());
	printf("  \"prefill_tok_s\": {\"128\": %.1f, \"512\": %.1f, \"2048\": %.1f},\n", pre[0], pre[1],
	       pre[2]);
	printf("  \"prefill_spread\": {\"128\": %.3f, \"512\": %.3f, \"2048\": %.3f},\n", spread[0],
	       spread[1], spread[2]);
	printf("  \"decode_tok_s\": %.2f,\n  \"decode_spread\": %.3f,\n", dec, dec_spread);
	printf("  \"prefill_gflops\": %.1f,\n", pre_gf);
	printf("  \"sgemm_gflops\": %.1f,\n", sg);
	printf("  \"membw_gbs\": %.2f,\n", bw);
	printf("  \"weight_bytes_per_token\": %.0f,\n", wbytes);
	printf("  \"decode_bound_tok_s\": %.2f,\n", bound);
	printf("  \"prefill_sgemm_ratio\": %.3f,\n", pre_gf / sg);
	printf("  \"decode_bound_ratio\": %.3f\n", dec / bound);
	printf("}\n");
	free(tok);
	pfx_model_free(m);
	return 0;
}
