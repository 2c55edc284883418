/* SPDX-License-Identifier: MIT */
/*
 * 16-bit weights held as they are stored: every fixture, and a checkpoint of
 * odd sizes, written in f16 and bf16 with the project's own safetensors
 * writer, run natively and upcast to f32 through every path of the runtime.
 * Both see the same f32 values of the weights, so they must agree up to
 * summation order (1e-5).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "random_model.h"
#include "safetensors.h"

#define TOL_16 1e-5

static char tmp[] = "/tmp/pfx-w16-XXXXXX";

static void setup(void)
{
	cr_assert(mkdtemp(tmp), "mkdtemp");
}

static void teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	cr_expect_eq(system(cmd), 0);
}

/* tmp/<name>-<dtype>: the f32 checkpoint src rewritten in dtype. */
static const char *write_16bit(const char *src, const char *name, const char *dtype)
{
	static char dir[600];
	snprintf(dir, sizeof(dir), "%s/%s-%s", tmp, name, dtype);
	return write_16bit_checkpoint(src, dir, dtype);
}

static struct pfx_model *load_as(const char *dir, enum pfx_weights w)
{
	struct pfx_model_opts o = { .threads = 2, .weights = w };
	return load_model_opts(dir, &o);
}

struct pair {
	struct pfx_model *m[2]; /* [0] native, [1] upcast */
	int V;
	const char *what;
};

static void expect_close(const struct pair *p, const char *path, const float *a, const float *b,
			 size_t n)
{
	float d = max_abs_diff(a, b, n);
	cr_expect(d <= TOL_16, "%s, %s: native and upcast weights differ by %g", p->what, path, d);
}

/* Tokens of a prompt long enough for sgemm (over GEMM_FEW_MAX_T rows). */
static int32_t *prompt(int n, int vocab)
{
	int32_t *t = malloc((size_t)n * sizeof(*t));
	for (int i = 0; i < n; i++)
		t[i] = (int32_t)((i * 7919 + 13) % vocab);
	return t;
}

/* Every path of the runtime, once per model of the pair: logits of the
 * same calls compared. */
static void check_paths(const struct pair *p)
{
	enum { N = 100, SPLIT = 37, NB = 20, GREEDY = 12 };
	const int V = p->V;
	int32_t *tok = prompt(N, V);
	float *out[2][6];
	int32_t greedy[2][GREEDY];
	struct pfx_error err;
	for (int k = 0; k < 2; k++) {
		struct pfx_model *m = p->m[k];
		struct pfx_session *s, *s2, *fork;
		for (int i = 0; i < 6; i++)
			out[k][i] = calloc((size_t)N * V, sizeof(float));
		/* uncached: all N rows (sgemm, and gemm_few where it runs) */
		float *l = logits_uncached(m, tok, N);
		memcpy(out[k][0], l, (size_t)N * V * sizeof(float));
		free(l);
		/* cached split: a frozen prefix, then the rest in one call */
		cr_assert_eq(pfx_session_new(m, &s, &err), 0);
		cr_assert_eq(pfx_session_append(s, tok, SPLIT, PFX_LOGITS_NONE, NULL, &err), 0, "%s", err.msg);
		cr_assert_eq(pfx_session_freeze(s, &err), 0, "%s", err.msg);
		cr_assert_eq(pfx_session_append(s, tok + SPLIT, N - SPLIT, PFX_LOGITS_ALL, out[k][1], &err), 0,
			     "%s", err.msg);
		/* rewind to 50 and run 5 again (a few rows: gemm_few or sgemm) */
		cr_assert_eq(pfx_session_rewind(s, 50, &err), 0, "%s", err.msg);
		cr_assert_eq(pfx_session_append(s, tok + 50, 5, PFX_LOGITS_ALL, out[k][2], &err), 0, "%s", err.msg);
		/* fork, then decode one token in each (the gemv path) */
		cr_assert_eq(pfx_session_fork(s, &fork, &err), 0, "%s", err.msg);
		cr_assert_eq(pfx_session_decode(fork, tok[55], out[k][3], &err), 0, "%s", err.msg);
		cr_assert_eq(pfx_session_decode(s, tok[56], out[k][3] + V, &err), 0, "%s", err.msg);
		pfx_session_free(fork);
		pfx_session_free(s);
		/* a ragged batch of two sequences */
		cr_assert_eq(pfx_session_new(m, &s, &err), 0);
		cr_assert_eq(pfx_session_new(m, &s2, &err), 0);
		struct pfx_batch_item items[2] = {
			{ s, tok, NB, true, PFX_LOGITS_ALL, out[k][4] },
			{ s2, tok + NB, N - NB, true, PFX_LOGITS_LAST, out[k][4] + (size_t)NB * V },
		};
		cr_assert_eq(pfx_forward(m, items, 2, &err), 0, "%s", err.msg);
		pfx_session_free(s2);
		/* greedy decoding from s */
		float *g = out[k][5];
		memcpy(g, out[k][4] + (size_t)(NB - 1) * V, (size_t)V * sizeof(float));
		for (int i = 0; i < GREEDY; i++) {
			greedy[k][i] = argmax(g, V);
			cr_assert_eq(pfx_session_decode(s, greedy[k][i], g, &err), 0, "%s", err.msg);
		}
		pfx_session_free(s);
	}
	expect_close(p, "uncached", out[0][0], out[1][0], (size_t)N * V);
	expect_close(p, "cached split", out[0][1], out[1][1], (size_t)(N - SPLIT) * V);
	expect_close(p, "rewind", out[0][2], out[1][2], 5 * (size_t)V);
	expect_close(p, "fork and decode", out[0][3], out[1][3], 2 * (size_t)V);
	expect_close(p, "ragged batch", out[0][4], out[1][4], (size_t)(NB + 1) * V);
	expect_close(p, "greedy", out[0][5], out[1][5], (size_t)V);
	for (int i = 0; i < GREEDY; i++)
		cr_expect_eq(greedy[0][i], greedy[1][i], "%s: greedy token %d: %d native, %d upcast",
			     p->what, i, greedy[0][i], greedy[1][i]);
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < 6; i++)
			free(out[k][i]);
	free(tok);
}

static void check_dir(const char *dir, const char *dtype)
{
	struct pair p = { .m = { load_as(dir, PFX_WEIGHTS_NATIVE), load_as(dir, PFX_WEIGHTS_F32) },
			  .what = dir };
	p.V = pfx_model_config(p.m[0])->vocab;
	cr_expect_str_eq(pfx_model_weight_dtype(p.m[0]), dtype);
	cr_expect_str_eq(pfx_model_weight_held(p.m[0]), dtype, "native keeps the checkpoint's dtype");
	cr_expect_str_eq(pfx_model_weight_held(p.m[1]), "F32");
	size_t b16 = pfx_model_weight_bytes(p.m[0]), b32 = pfx_model_weight_bytes(p.m[1]);
	cr_expect(b16 < b32 && b16 * 2 >= b32, "bytes held: %zu native, %zu upcast", b16, b32);
	cr_expect_arr_eq(pfx_model_fingerprint(p.m[0]), pfx_model_fingerprint(p.m[1]),
			 PFX_FINGERPRINT_BYTES, "how weights are held does not change the fingerprint");
	check_paths(&p);
	pfx_model_free(p.m[0]);
	pfx_model_free(p.m[1]);
}

static void check_fixture(const char *name, const char *dtype)
{
	char src[512];
	snprintf(src, sizeof(src), "%s/%s", fixtures_dir(), name);
	check_dir(write_16bit(src, name, dtype), dtype);
}

/* Sizes no fixture has: rows and widths off every vector multiple, so the
 * kernels' tails run; Llama with grouped-query attention and biases. */
static void check_odd(const char *arch, const char *dtype)
{
	struct pfx_config c = {
		.arch = arch, .hidden = 40, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
		.head_dim = 10, .intermediate = 88, .vocab = 203, .max_positions = 256,
		.rotary_dim = 10, .rope_base = 10000.0f, .norm_eps = 1e-5f,
		.norm = PFX_NORM_RMS, .act = PFX_ACT_SILU, .attn_bias = true, .mlp_bias = true,
	};
	if (!strcmp(arch, "GPTNeoXForCausalLM")) {
		c.n_heads = c.n_kv_heads = 5;
		c.head_dim = 8;
		c.rotary_dim = 4;
		c.norm = PFX_NORM_LAYER;
		c.act = PFX_ACT_GELU;
		c.parallel_residual = true;
		c.mlp_bias = false;
	}
	char dir[600];
	snprintf(dir, sizeof(dir), "%s/odd-%s-%s", tmp, arch, dtype);
	struct pfx_error err;
	cr_assert_eq(pfx_random_checkpoint(dir, &c, dtype, 7, &err), 0, "%s", err.msg);
	check_dir(dir, dtype);
}

TestSuite(weights16, .init = setup, .fini = teardown);

Test(weights16, neox_tiny_f16) { check_fixture("neox-tiny", "F16"); }
Test(weights16, neox_tiny_bf16) { check_fixture("neox-tiny", "BF16"); }
Test(weights16, neox_tiny_seq_f16) { check_fixture("neox-tiny-seq", "F16"); }
Test(weights16, neox_tiny_seq_bf16) { check_fixture("neox-tiny-seq", "BF16"); }
Test(weights16, llama_tiny_gqa_f16) { check_fixture("llama-tiny-gqa", "F16"); }
Test(weights16, llama_tiny_gqa_bf16) { check_fixture("llama-tiny-gqa", "BF16"); }
Test(weights16, odd_llama_f16) { check_odd("LlamaForCausalLM", "F16"); }
Test(weights16, odd_llama_bf16) { check_odd("LlamaForCausalLM", "BF16"); }
Test(weights16, odd_neox_f16) { check_odd("GPTNeoXForCausalLM", "F16"); }
Test(weights16, odd_neox_bf16) { check_odd("GPTNeoXForCausalLM", "BF16"); }

/* An f32 checkpoint is held as before: mapped, whatever the option. */
Test(weights16, f32_checkpoints_are_held_as_f32)
{
	struct pfx_model *a = load_as("llama-tiny-gqa", PFX_WEIGHTS_NATIVE);
	struct pfx_model *b = load_as("llama-tiny-gqa", PFX_WEIGHTS_F32);
	cr_expect_str_eq(pfx_model_weight_held(a), "F32");
	cr_expect_str_eq(pfx_model_weight_held(b), "F32");
	cr_expect_eq(pfx_model_weight_bytes(a), pfx_model_weight_bytes(b));
	pfx_model_free(a);
	pfx_model_free(b);
}

Test(weights16, an_unknown_weights_option_is_refused)
{
	struct pfx_model_opts o = { .weights = (enum pfx_weights)7 };
	expect_opts_refused(&o, "weights");
}
