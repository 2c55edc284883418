/* SPDX-License-Identifier: MIT */
/*
 * bench/forward: prefill and decode speed of the runtime on a random-weight
 * Llama shaped like SmolLM-135M, against two references measured in the
 * same run: cblas_sgemm on the model's own matrix shapes (compute bound)
 * and streaming read bandwidth (memory bound). Prints one JSON object.
 *
 * The checkpoint is loaded twice: as it is (f16 and bf16 matrices held in
 * 16 bits) and upcast to f32 (PFX_WEIGHTS_F32). Both run in the same rounds,
 * back to back, so the speedup of 16-bit weights is measured against the
 * machine's state of the moment rather than against another run. With
 * --matmul bf16 the first load also runs prefill on the bf16 matmul
 * (pfx_model_opts.matmul), so prefill_speedup is that path's against f32.
 *
 * It first checks that OpenBLAS runs the best kernels this CPU supports
 * (kernels.h) and measures nothing, exiting 1, when it does not.
 *
 *   forward [--model DIR | --dtype bf16|f16|f32] [--matmul f32|bf16] [--threads N]
 *           [--block-tokens B]
 */
#include <cblas.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "bench_util.h"
#include "kernels.h"
#include "opts.h"
#include "random_model.h"
#include "report.h"
#include "session.h"

#define NAME "forward"
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

/* Bytes of weights one decode step reads: every matrix once (a tied
 * embedding as lm_head) at elem bytes an element, and the norms, which are
 * always held as f32. */
static double weight_bytes_per_token(const struct pfx_config *c, double elem)
{
	double H = c->hidden;
	return elem * (layer_flops_per_token(c) / 2 + (double)c->vocab * H) +
	       4.0 * (c->n_layers * 2 * H + H);
}

/* Bytes an element of the matrices as held ("F32", "BF16", "F16+F32"...).
 * A mix counts as f32: it overstates the bytes read rather than flatter
 * decode_bound_ratio. */
static double held_elem_bytes(const char *held)
{
	return strstr(held, "F32") ? 4 : 2;
}

/* The checkpoint dtype for --dtype's argument; NULL for anything else. */
static const char *checkpoint_dtype(const char *arg)
{
	static const char *const names[][2] = { { "f32", "F32" }, { "f16", "F16" }, { "bf16", "BF16" } };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcasecmp(arg, names[i][0]))
			return names[i][1];
	return NULL;
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

/* The two loads of one checkpoint every figure compares. */
enum { NATIVE, UPCAST };

/* The pools' workers spin ~0.5 ms after a job before sleeping: what runs
 * next (the other model's pool, the probe) should not share a CPU with them. */
static void let_workers_sleep(void)
{
	usleep(2000);
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

/* Tokens per second of a prefill of n tokens by each model, back to back;
 * which goes first alternates with run, so drift within a pair and the
 * state the first leaves behind hit both alike. */
static void prefill_pair(struct pfx_model *const m[2], const int32_t *tok, int n, float *l,
			 int run, double tok_s[2])
{
	for (int k = 0; k < 2; k++) {
		int j = k ^ (run & 1);
		let_workers_sleep();
		tok_s[j] = n / prefill_once(m[j], tok, n, l);
	}
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
 * DECODE_STEPS steps of each model's session (the first alternating). The
 * machine's bandwidth drifts within a second by more than the differences
 * we look for, so the reference and the other model are sampled in the
 * same stretch of time as the decode they are compared with, not before.
 * Sets tok_s[] to each session's tokens per second; *bw the probe's GB/s
 * over the same round.
 */
enum { DECODE_SLICES = 16, DECODE_STEPS = 2 };

static void decode_round(struct pfx_session *const s[2], const int32_t *tok, float *l,
			 struct bw_probe *probe, int threads, double tok_s[2], double *bw)
{
	double dt[2] = { 0, 0 }, bytes_s = 0;
	for (int i = 0; i < DECODE_SLICES; i++) {
		let_workers_sleep();
		bytes_s += 1.0 / bw_probe_run(probe, threads); /* seconds per GB */
		for (int k = 0; k < 2; k++) {
			int j = k ^ (i & 1);
			if (k)
				let_workers_sleep();
			dt[j] += decode_once(s[j], tok, 512, DECODE_STEPS, l);
		}
	}
	*bw = DECODE_SLICES / bytes_s; /* GB over total seconds, not a mean of rates */
	for (int j = 0; j < 2; j++)
		tok_s[j] = DECODE_SLICES * DECODE_STEPS / dt[j];
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

/* Loads dir as it is (NATIVE) and upcast to f32 (UPCAST); 0, or -errno
 * with err saying why. */
static int load_pair(const char *dir, int threads, int block, enum pfx_matmul mm,
		     struct pfx_model *m[2], struct pfx_error *err)
{
	struct pfx_model_opts mo = { .threads = threads, .block_tokens = block, .matmul = mm };
	int rc = pfx_model_load(dir, &mo, &m[NATIVE], err);
	if (rc)
		return rc;
	mo.weights = PFX_WEIGHTS_F32;
	mo.matmul = PFX_MATMUL_F32;
	if ((rc = pfx_model_load(dir, &mo, &m[UPCAST], err)))
		pfx_model_free(m[NATIVE]);
	return rc;
}

static const char usage[] =
	"usage: forward [--model DIR | --dtype bf16|f16|f32] [--matmul f32|bf16] [--threads N]\n"
	"               [--block-tokens B]\n"
	"  --model DIR  run the checkpoint in DIR instead of a random SmolLM-135M-shaped one\n"
	"  --dtype T    the random model's weight dtype (default f32); not with --model,\n"
	"               whose checkpoint runs in its own dtype\n"
	"  --matmul M   bf16: prefill the checkpoint as it is on the bf16 matmul (a bf16\n"
	"               checkpoint only; default f32)\n"
	"  --as-written run the random model from the page cache its writing left (small\n"
	"               pages, as a checkpoint downloaded a moment ago) instead of reading\n"
	"               it in again first (prefix-run recache); a --model checkpoint runs\n"
	"               from the page cache as found\n"
	"Either way the weights are also run upcast to f32, for the speedups.\n";

int main(int argc, char **argv)
{
	const char *model = NULL, *dtype_opt = NULL, *dtype = "F32";
	int threads = 2, block = 0, c;
	bool as_written = false;
	enum pfx_matmul mm = PFX_MATMUL_F32;
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "dtype", required_argument, NULL, 'd' },
		{ "threads", required_argument, NULL, 't' },
		{ "block-tokens", required_argument, NULL, 'b' },
		{ "as-written", no_argument, NULL, 'w' },
		{ "matmul", required_argument, NULL, 'x' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c == 'm')
			model = optarg;
		else if (c == 'd')
			dtype_opt = optarg;
		else if (c == 't')
			threads = opt_int(NAME, "threads", optarg, 1, 64);
		else if (c == 'b')
			block = opt_int(NAME, "block-tokens", optarg, 1, 65536);
		else if (c == 'w')
			as_written = true;
		else if (c == 'x' && (!strcmp(optarg, "f32") || !strcmp(optarg, "bf16")))
			mm = optarg[0] == 'b' ? PFX_MATMUL_BF16 : PFX_MATMUL_F32;
		else if (c == 'x') {
			fprintf(stderr, "forward: --matmul must be f32 or bf16, not '%s'\n", optarg);
			return 2;
		} else {
			fputs(usage, c == 'h' ? stdout : stderr);
			return c == 'h' ? 0 : 2;
		}
	}
	if (optind < argc) {
		fputs(usage, stderr);
		return 2;
	}
	if (dtype_opt && !(dtype = checkpoint_dtype(dtype_opt))) {
		fprintf(stderr, "forward: --dtype must be bf16, f16 or f32, not '%s'\n", dtype_opt);
		return 2;
	}
	if (as_written && model) {
		fprintf(stderr, "forward: --as-written is for the random model; a --model checkpoint "
				"runs from the page cache as found\n");
		return 2;
	}
	if (dtype_opt && model) {
		fprintf(stderr, "forward: --dtype sets the dtype of the random model; a --model "
				"checkpoint runs in its own dtype (drop --dtype)\n");
		return 2;
	}
	/* Before anything is measured: a figure from the wrong kernels (and
	 * a reference that ran the same wrong kernels) reads as normal. */
	struct pfx_error why = { "" };
	const char *want = kern_blas_expected_core(), *got = pfx_blas_corename();
	fprintf(stderr, "forward: blas_core %s, expected %s for this CPU\n", got,
		want ? want : "(none known)");
	if (!kern_blas_core_ok(&why)) {
		fprintf(stderr, "forward: OpenBLAS runs %s, not %s, the best this CPU supports (%s); "
				"nothing measured\n", got, want, why.msg);
		return 1;
	}
	char tmp[] = "/tmp/prefixd-bench-XXXXXX";
	struct pfx_error err = { "" };
	if (!model) {
		struct pfx_config sc = pfx_config_smollm135m();
		if (!mkdtemp(tmp) || pfx_random_checkpoint(tmp, &sc, dtype, 1, &err) ||
		    (!as_written && pfx_checkpoint_recache(tmp, &err))) {
			fprintf(stderr, "forward: cannot write or read in the random model: %s\n", err.msg);
			return 1;
		}
		model = tmp;
	}
	struct pfx_model *m[2];
	int rc = load_pair(model, threads, block, mm, m, &err);
	if (model == tmp) {
		char p[64];
		snprintf(p, sizeof(p), "%s/model.safetensors", tmp);
		unlink(p); /* the mappings keep the data alive */
		snprintf(p, sizeof(p), "%s/config.json", tmp);
		unlink(p);
		rmdir(tmp);
	}
	if (rc) {
		fprintf(stderr, "forward: %s\n", err.msg);
		return 1;
	}
	const struct pfx_config *cfg = pfx_model_config(m[NATIVE]);
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
	for (int j = 0; j < 2; j++)
		prefill_once(m[j], tok, 64, l); /* warm up pages and pools */

	/* Each round measures a reference right next to the runtime, so the
	 * ratios compare like with like while the machine's load drifts. */
	enum { ROUNDS = 7 };
	/* 5 runs at 2048, not 3: a median of 3 per-run speedups followed
	 * single bursts of the machine's noise. */
	const int lens[3] = { 128, 512, 2048 }, runs[3] = { 7, ROUNDS, 5 };
	double pre[2][3][ROUNDS], pre_med[2][3], pre_speedup[3][ROUNDS], sg[ROUNDS], pre_ratio[ROUNDS];
	double attn512 = attention_flops(cfg, 512);
	double flops512 = layer_flops_per_token(cfg) * 512 + attn512 + 2.0 * cfg->hidden * cfg->vocab;
	double pre_others, pre_steal;
	struct bench_cpu cpu0;
	bench_cpu_now(&cpu0);
	for (int i = 0; i < 3; i++)
		for (int r = 0; r < runs[i]; r++) {
			if (i == 1)
				sg[r] = sgemm_ref_run(&ref, threads);
			double t[2];
			prefill_pair(m, tok, lens[i], l, r, t);
			pre[NATIVE][i][r] = t[NATIVE];
			pre[UPCAST][i][r] = t[UPCAST];
			pre_speedup[i][r] = t[NATIVE] / t[UPCAST];
			if (i == 1)
				pre_ratio[r] = flops512 / (512 / t[NATIVE]) / 1e9 / sg[r];
		}
	bench_cpu_since(&cpu0, &pre_others, &pre_steal);
	double sp[3], pre_sp_med[3];
	for (int i = 0; i < 3; i++) {
		for (int j = 0; j < 2; j++)
			pre_med[j][i] = bench_median(pre[j][i], runs[i]);
		sp[i] = spread(pre[NATIVE][i], runs[i], pre_med[NATIVE][i]);
		pre_sp_med[i] = bench_median(pre_speedup[i], runs[i]);
	}

	struct pfx_session *s[2];
	for (int j = 0; j < 2; j++)
		if (pfx_session_new(m[j], &s[j], NULL) ||
		    pfx_session_append(s[j], tok, 512, PFX_LOGITS_NONE, NULL, NULL))
			abort();
	const char *held = pfx_model_weight_held(m[NATIVE]);
	double wbytes = weight_bytes_per_token(cfg, held_elem_bytes(held));
	/* A step also reads the KV of every key it attends to: 513 and 514
	 * keys, the two steps of a slice (decode_once). */
	double kvbytes = (double)pfx_kv_bytes_per_token(cfg, pfx_model_kv_dtype(m[NATIVE])) * 513.5;
	double bytes = wbytes + kvbytes, bytes32 = weight_bytes_per_token(cfg, 4) + kvbytes;
	double bw[ROUNDS], dec[2][ROUNDS], dec_ratio[ROUNDS], dec_speedup[ROUNDS], dec_ratio32[ROUNDS];
	double others, steal;
	bench_cpu_now(&cpu0);
	for (int r = 0; r < ROUNDS; r++) {
		double t[2];
		decode_round(s, tok, l, probe, threads, t, &bw[r]);
		dec[NATIVE][r] = t[NATIVE];
		dec[UPCAST][r] = t[UPCAST];
		dec_ratio[r] = t[NATIVE] / (bw[r] * 1e9 / bytes);
		dec_ratio32[r] = t[UPCAST] / (bw[r] * 1e9 / bytes32);
		dec_speedup[r] = t[NATIVE] / t[UPCAST];
	}
	bench_cpu_since(&cpu0, &others, &steal);
	for (int j = 0; j < 2; j++)
		pfx_session_free(s[j]);
	/* Round by round, before the medians sort them: the machine's bandwidth
	 * moves between states within minutes, and a median hides which rounds
	 * ran in which. */
	char rounds[1024];
	const char *names[3] = { "membw_gbs", "tok_s", "f32_tok_s" };
	const double *vals[3] = { bw, dec[NATIVE], dec[UPCAST] };
	size_t at = (size_t)snprintf(rounds, sizeof(rounds), "{");
	for (int k = 0; k < 3; k++) {
		at += (size_t)snprintf(rounds + at, sizeof(rounds) - at, "%s\"%s\": [", k ? ", " : "", names[k]);
		for (int r = 0; r < ROUNDS; r++)
			at += (size_t)snprintf(rounds + at, sizeof(rounds) - at, "%s%.1f", r ? ", " : "", vals[k][r]);
		at += (size_t)snprintf(rounds + at, sizeof(rounds) - at, "]");
	}
	snprintf(rounds + at, sizeof(rounds) - at, "}");
	double sg_med = bench_median(sg, ROUNDS), bw_med = bench_median(bw, ROUNDS);
	double dec_med = bench_median(dec[NATIVE], ROUNDS), dec_sp = spread(dec[NATIVE], ROUNDS, dec_med);
	double pre_gf = flops512 / (512 / pre_med[NATIVE][1]) / 1e9;

	report_begin(NAME);
	if (model == tmp)
		report_str("model", "random SmolLM-135M shape (%s)", dtype_opt ? dtype_opt : "f32");
	else
		report_str("model", "%s", model);
	report_str("dtype", "%s", pfx_model_weight_dtype(m[NATIVE]));
	report_str("weights_held", "%s", held);
	report_str("matmul", "%s", pfx_model_matmul(m[NATIVE]));
	report_fmt("params", "%lld", (long long)pfx_model_params(m[NATIVE]));
	report_fmt("threads", "%d", threads);
	report_fmt("block_tokens", "%d", pfx_model_block_tokens(m[NATIVE]));
	report_str("blas_core_expected", "%s", want ? want : "");
	report_str("page_cache", "%s",
		   model != tmp ? "as found" : as_written ? "as written" : "recached");
	report_fmt("weights_huge_bytes", "%zu", pfx_model_weight_huge_bytes(m[NATIVE]));
	report_fmt("f32_weights_huge_bytes", "%zu", pfx_model_weight_huge_bytes(m[UPCAST]));
	report_fmt("prefill_tok_s", "{\"128\": %.1f, \"512\": %.1f, \"2048\": %.1f}",
		   pre_med[NATIVE][0], pre_med[NATIVE][1], pre_med[NATIVE][2]);
	report_fmt("prefill_spread", "{\"128\": %.3f, \"512\": %.3f, \"2048\": %.3f}",
		   sp[0], sp[1], sp[2]);
	report_fmt("f32_prefill_tok_s", "{\"128\": %.1f, \"512\": %.1f, \"2048\": %.1f}",
		   pre_med[UPCAST][0], pre_med[UPCAST][1], pre_med[UPCAST][2]);
	report_fmt("prefill_speedup", "{\"128\": %.3f, \"512\": %.3f, \"2048\": %.3f}",
		   pre_sp_med[0], pre_sp_med[1], pre_sp_med[2]);
	report_fmt("decode_tok_s", "%.2f", dec_med);
	report_fmt("decode_spread", "%.3f", dec_sp);
	report_fmt("f32_decode_tok_s", "%.2f", bench_median(dec[UPCAST], ROUNDS));
	report_fmt("decode_speedup", "%.3f", bench_median(dec_speedup, ROUNDS));
	report_fmt("prefill_gflops", "%.1f", pre_gf);
	report_fmt("sgemm_gflops", "%.1f", sg_med);
	report_fmt("sgemm_spread", "%.3f", spread(sg, ROUNDS, sg_med));
	report_fmt("membw_gbs", "%.2f", bw_med);
	report_fmt("membw_spread", "%.3f", spread(bw, ROUNDS, bw_med));
	report_fmt("decode_rounds", "%s", rounds);
	report_fmt("weight_bytes_per_token", "%.0f", wbytes);
	report_fmt("kv_bytes_per_token", "%.0f", kvbytes);
	report_fmt("decode_bound_tok_s", "%.2f", bw_med * 1e9 / bytes);
	report_fmt("prefill_sgemm_ratio", "%.3f", bench_median(pre_ratio, ROUNDS));
	report_fmt("decode_bound_ratio", "%.3f", bench_median(dec_ratio, ROUNDS));
	report_fmt("f32_decode_bound_ratio", "%.3f", bench_median(dec_ratio32, ROUNDS));
	report_fmt("prefill_other_cpus", "%.2f", pre_others);
	report_fmt("prefill_steal_cpus", "%.2f", pre_steal);
	report_fmt("decode_other_cpus", "%.2f", others);
	report_fmt("decode_steal_cpus", "%.2f", steal);
	report_str("ratios_note", "medians of per-round ratios; each round measures the reference next to the runtime, decode rounds alternate probe passes and decode steps; weight_bytes_per_token counts the matrices at weights_held (2 bytes an element for f16/bf16, 4 if any is f32) and the norms as f32; kv_bytes_per_token the KV a decode step reads (its keys at 512 context); decode_bound_tok_s: membw over both; decode_rounds: each round's probe and decode figures, in order; f32_decode_bound_ratio: the upcast load's decode against its own bytes; page_cache: recached (the random model's files dropped from the page cache after writing and read in again by the load, as prefix-run recache does), as written (--as-written) or as found (--model); *weights_huge_bytes: the weights' bytes in 2 MiB pages; other_cpus/steal_cpus: CPUs taken by other processes or the hypervisor during the prefill or decode rounds (figures are unreliable when they are not ~0)");
	report_str("speedup_note", "f32_*: the same checkpoint loaded with its weights upcast to f32, run back to back with the native load in every round (which goes first alternates); *_speedup: medians of per-run ratios native/f32 tok/s, not ratios of the medians; with dtype F32 both loads are f32, so the speedups show the noise around 1");
	report_machine();
	report_end(NULL);
	bw_probe_free(probe);
	sgemm_ref_release(&ref);
	free(l);
	free(tok);
	for (int j = 0; j < 2; j++)
		pfx_model_free(m[j]);
	return 0;
}
