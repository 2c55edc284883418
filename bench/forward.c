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

struct sgemm_ref {
	const struct pfx_config *c;
	int m;
	float *a, *w, *y;
};

static void sgemm_ref_init(struct sgemm_ref *r, const struct pfx_config *c, int m)
{
	size_t big = (size_t)c->intermediate * c->hidden, rows = (size_t)m * c->intermediate;
	*r = (struct sgemm_ref){ c, m, malloc(rows * 4), malloc(big * 4), malloc(rows * 4) };
	for (size_t i = 0; i < rows; i++)
		r->a[i] = (float)(i % 13) * 0.01f;
	for (size_t i = 0; i < big; i++)
		r->w[i] = (float)(i % 7) * 0.01f;
}

/* One pass of cblas_sgemm, with OpenBLAS's own threads, over the shapes of
 * a layer's projections at m rows; GFLOP/s. */
static double sgemm_ref_run(struct sgemm_ref *r, int threads)
{
	const struct pfx_config *c = r->c;
	int H = c->hidden, q = c->n_heads * c->head_dim, kv = c->n_kv_heads * c->head_dim;
	int inter = c->intermediate;
	const int shapes[][2] = { { q, H }, { kv, H }, { kv, H }, { H, q }, { inter, H }, { inter, H }, { H, inter } };
	double flops = 0;
	openblas_set_num_threads(threads);
	double t0 = bench_now();
	for (int s = 0; s < 7; s++) {
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r->m, shapes[s][0], shapes[s][1],
			    1.0f, r->a, shapes[s][1], r->w, shapes[s][1], 0.0f, r->y, shapes[s][0]);
		flops += 2.0 * r->m * shapes[s][0] * shapes[s][1];
	}
	double gf = flops / (bench_now() - t0) / 1e9;
	openblas_set_num_threads(1); /* the runtime's setting (blas.c) */
	return gf;
}

static void sgemm_ref_release(struct sgemm_ref *r)
{
	free(r->a);
	free(r->w);
	free(r->y);
}

/* Seconds to prefill n tokens in a fresh session (logits of the last). */
static double prefill_once(struct pfx_model *m, const int32_t *tok, int n, float *l)
{
	struct pfx_session *s;
	if (pfx_session_new(m, &s, NULL))
		abort();
	double t0 = bench_now();
	if (pfx_session_append(s, tok, (size_t)n, PFX_LOGITS_LAST, l, NULL))
		abort();
	double t = bench_now() - t0;
	pfx_session_free(s);
	return t;
}

/* Seconds of `steps` decode steps after ctx, then rewinds. */
static double decode_once(struct pfx_session *s, const int32_t *tok, int ctx, int steps, float *l)
{
	double t0 = bench_now();
	for (int i = 0; i < steps; i++)
		if (pfx_session_decode(s, tok[ctx + i], l, NULL))
			abort();
	double t = bench_now() - t0;
	pfx_session_rewind(s, (size_t)ctx, NULL);
	return t;
}

/*
 * One decode round: DECODE_SLICES times a pass of the bandwidth probe then
 * DECODE_STEPS steps. The machine's bandwidth drifts within a second by
 * more than the differences we look for, so the reference is sampled in
 * the same stretch of time as the decode it is compared with, not before.
 * Returns tokens per second; *bw the probe's GB/s over the same round.
 */
enum { DECODE_SLICES = 16, DECODE_STEPS = 2 };

static double decode_round(struct pfx_session *s, const int32_t *tok, float *l,
			   struct bw_probe *probe, int threads, double *bw)
{
	double dt = 0, bytes_s = 0;
	for (int i = 0; i < DECODE_SLICES; i++) {
		/* The pool's workers spin ~0.5 ms after a step before sleeping;
		 * the probe should not share a CPU with them. */
		usleep(2000);
		bytes_s += 1.0 / bw_probe_run(probe, threads); /* seconds per GB */
		dt += decode_once(s, tok, 512, DECODE_STEPS, l);
	}
	*bw = DECODE_SLICES / bytes_s; /* GB over total seconds, not a mean of rates */
	return DECODE_SLICES * DECODE_STEPS / dt;
}

static double spread(double *v, int n, double med)
{
	double lo = v[0], hi = v[0];
	for (int i = 1; i < n; i++) {
		lo = v[i] < lo ? v[i] : lo;
		hi = v[i] > hi ? v[i] : hi;
	}
	return (hi - lo) / med;
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

	float *l = malloc((size_t)cfg->vocab * sizeof(float));
	struct bw_probe *probe = bw_probe_new();
	struct sgemm_ref ref;
	sgemm_ref_init(&ref, cfg, 512);
	if (!l || !probe) {
		fprintf(stderr, "forward: out of memory\n");
		return 1;
	}
	prefill_once(m, tok, 64, l); /* warm up pages and pools */

	/* Each round measures a reference right next to the runtime, so the
	 * ratios compare like with like while the machine's load drifts. */
	enum { ROUNDS = 7 };
	const int lens[3] = { 128, 512, 2048 }, runs[3] = { 7, ROUNDS, 3 };
	double pre[3][ROUNDS], pre_med[3], sg[ROUNDS], pre_ratio[ROUNDS];
	double attn512 = attention_flops(cfg, 512);
	double flops512 = layer_flops_per_token(cfg) * 512 + attn512 + 2.0 * cfg->hidden * cfg->vocab;
	for (int r = 0; r < ROUNDS; r++) {
		sg[r] = sgemm_ref_run(&ref, threads);
		double gf = flops512 / prefill_once(m, tok, 512, l) / 1e9;
		pre[1][r] = gf * 1e9 / flops512 * 512;
		pre_ratio[r] = gf / sg[r];
	}
	for (int i = 0; i < 3; i += 2)
		for (int r = 0; r < runs[i]; r++)
			pre[i][r] = lens[i] / prefill_once(m, tok, lens[i], l);
	double sp[3];
	for (int i = 0; i < 3; i++) {
		pre_med[i] = bench_median(pre[i], runs[i]);
		sp[i] = spread(pre[i], runs[i], pre_med[i]);
	}

	struct pfx_session *s;
	if (pfx_session_new(m, &s, NULL) ||
	    pfx_session_append(s, tok, 512, PFX_LOGITS_NONE, NULL, NULL))
		abort();
	double wbytes = weight_bytes_per_token(cfg), bw[ROUNDS], dec[ROUNDS], dec_ratio[ROUNDS];
	double others, steal;
	struct bench_cpu cpu0;
	bench_cpu_now(&cpu0);
	for (int r = 0; r < ROUNDS; r++) {
		dec[r] = decode_round(s, tok, l, probe, threads, &bw[r]);
		dec_ratio[r] = dec[r] / (bw[r] * 1e9 / wbytes);
	}
	bench_cpu_since(&cpu0, &others, &steal);
	pfx_session_free(s);
	double sg_med = bench_median(sg, ROUNDS), bw_med = bench_median(bw, ROUNDS);
	double dec_med = bench_median(dec, ROUNDS), dec_sp = spread(dec, ROUNDS, dec_med);
	double pre_gf = flops512 / (512 / pre_med[1]) / 1e9;

	printf("{\n");
	printf("  \"model\": \"%s\",\n", model == tmp ? "random SmolLM-135M shape (f32)" : model);
	printf("  \"params\": %lld,\n", (long long)pfx_model_params(m));
	printf("  \"threads\": %d,\n  \"block_tokens\": %d,\n", threads, pfx_model_block_tokens(m));
	printf("  \"blas_core\": \"%s\",\n", pfx_blas_corename());
	printf("  \"prefill_tok_s\": {\"128\": %.1f, \"512\": %.1f, \"2048\": %.1f},\n", pre_med[0],
	       pre_med[1], pre_med[2]);
	printf("  \"prefill_spread\": {\"128\": %.3f, \"512\": %.3f, \"2048\": %.3f},\n", sp[0], sp[1],
	       sp[2]);
	printf("  \"decode_tok_s\": %.2f,\n  \"decode_spread\": %.3f,\n", dec_med, dec_sp);
	printf("  \"prefill_gflops\": %.1f,\n", pre_gf);
	printf("  \"sgemm_gflops\": %.1f,\n  \"sgemm_spread\": %.3f,\n", sg_med, spread(sg, ROUNDS, sg_med));
	printf("  \"membw_gbs\": %.2f,\n  \"membw_spread\": %.3f,\n", bw_med, spread(bw, ROUNDS, bw_med));
	printf("  \"weight_bytes_per_token\": %.0f,\n", wbytes);
	printf("  \"decode_bound_tok_s\": %.2f,\n", bw_med * 1e9 / wbytes);
	printf("  \"prefill_sgemm_ratio\": %.3f,\n", bench_median(pre_ratio, ROUNDS));
	printf("  \"decode_bound_ratio\": %.3f,\n", bench_median(dec_ratio, ROUNDS));
	printf("  \"decode_other_cpus\": %.2f,\n  \"decode_steal_cpus\": %.2f,\n", others, steal);
	printf("  \"ratios_note\": \"medians of per-round ratios; each round measures the reference next to the runtime, "
	       "decode rounds alternate probe passes and decode steps; other_cpus/steal_cpus: CPUs taken by other processes "
	       "or the hypervisor during the decode rounds (figures are unreliable when they are not ~0)\"\n");
	printf("}\n");
	bw_probe_free(probe);
	sgemm_ref_release(&ref);
	free(l);
	free(tok);
	pfx_model_free(m);
	return 0;
}
