/* SPDX-License-Identifier: MIT */
/*
 * Attention's split path for a few rows over many keys (runtime/attention.c,
 * few_task; kernels/att_few.c): the online softmax step against one softmax
 * over all keys, the plan, and the whole path against the reference path on
 * every fixture architecture, block size and KV dtype.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "forward.h"
#include "helpers.h"
#include "kernels.h"

static uint64_t rng_state = 31;
static unsigned rnd(unsigned n)
{
	rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
	return (unsigned)(rng_state >> 33) % n;
}

static float rndf(void)
{
	return (float)rnd(2001) / 1000.0f - 1.0f;
}

/*
 * kern_att_online over the blocks of n keys, then each block's values
 * weighted by its scores, equals one softmax over each row's keys [lo, hi)
 * (rows without keys stay empty: sum 0, output 0). ld 16..64 run the
 * AVX-512 code where there is AVX-512, 8 and 24 the plain C one.
 */
Test(att_split, online_steps_equal_one_softmax)
{
	const int lds[] = { 8, 16, 24, 32, 48, 64 }, hd = 12;
	for (size_t li = 0; li < sizeof(lds) / sizeof(lds[0]); li++)
		for (int n = 1; n <= 150; n += 37) {
			int ld = lds[li], B = 16 + (int)rnd(49), lo[64], hi[64], blo[64], bhi[64];
			float *S = malloc((size_t)n * ld * sizeof(float)), *V = malloc((size_t)n * hd * 4);
			float *Sb = malloc((size_t)B * ld * sizeof(float)), *OT = calloc((size_t)hd * ld, 4);
			float m[64], l[64];
			for (int i = 0; i < n * ld; i++)
				S[i] = 8.0f * rndf();
			for (int i = 0; i < n * hd; i++)
				V[i] = rndf();
			for (int t = 0; t < ld; t++) {
				lo[t] = (int)rnd((unsigned)n + 1) - 2;
				hi[t] = t % 7 == 3 ? lo[t] : lo[t] + (int)rnd((unsigned)n + 3);
				m[t] = -INFINITY;
				l[t] = 0;
			}
			for (int j0 = 0; j0 < n; j0 += B) {
				int kb = n - j0 < B ? n - j0 : B;
				memcpy(Sb, S + (size_t)j0 * ld, (size_t)kb * ld * sizeof(float));
				for (int t = 0; t < ld; t++) {
					blo[t] = lo[t] - j0;
					bhi[t] = hi[t] - j0;
				}
				kern_att_online(Sb, kb, ld, blo, bhi, m, l, OT, hd, V, (size_t)n * hd * 4);
				for (int j = 0; j < kb; j++)
					for (int t = 0; t < ld; t++) {
						float w = Sb[(size_t)j * ld + t];
						for (int d = 0; d < hd; d++)
							OT[(size_t)d * ld + t] += w * V[(size_t)(j0 + j) * hd + d];
					}
			}
			for (int t = 0; t < ld; t++) {
				int a = lo[t] < 0 ? 0 : lo[t], b = hi[t] > n ? n : hi[t];
				double mx = -INFINITY, sum = 0, out[12] = { 0 };
				for (int j = a; j < b; j++)
					mx = fmax(mx, S[(size_t)j * ld + t]);
				for (int j = a; j < b; j++) {
					double w = exp(S[(size_t)j * ld + t] - mx);
					sum += w;
					for (int d = 0; d < hd; d++)
						out[d] += w * V[(size_t)j * hd + d];
				}
				if (a >= b) {
					cr_expect(l[t] == 0 && m[t] == -INFINITY,
						  "ld %d n %d row %d: no keys, sum %g", ld, n, t, l[t]);
					for (int d = 0; d < hd; d++)
						cr_expect(OT[(size_t)d * ld + t] == 0);
					continue;
				}
				double got_sum = l[t] * exp(m[t] - mx);
				cr_expect(fabs(got_sum - sum) <= 1e-5 * sum,
					  "ld %d n %d row %d: sum %g, want %g", ld, n, t, got_sum, sum);
				for (int d = 0; d < hd; d++) {
					double got = OT[(size_t)d * ld + t] / l[t], want = out[d] / sum;
					cr_expect(fabs(got - want) <= 1e-5,
						  "ld %d n %d row %d dim %d: %g, want %g", ld, n, t, d, got,
						  want);
				}
			}
			free(S);
			free(V);
			free(Sb);
			free(OT);
		}
}

/* The tasks the split path plans for n new rows after len keys. */
static int plan(struct pfx_model *m, struct pfx_session *s, size_t n, struct att_task *tasks)
{
	static const int32_t tok[ATT_FEW_MAX_ROWS] = { 0 };
	struct fwd f = { .m = m, .c = pfx_model_config(m) };
	struct pfx_batch_item it = { .s = s, .tokens = tok, .n = n };
	return att_plan(&f, &it, 1, tasks);
}

/*
 * Where the kernels run, a few rows take the split path on request (unasked
 * only past 512 keys of context; at 300 the reference runs). Its tasks cover
 * every KV head, every row once and, for each group of rows, the keys from
 * the first any of them sees to the last, in order, each once (as finely as
 * allowed: in 16 splits on 300 keys in blocks of 4). Where the kernels do
 * not run (portable runs), the reference path runs whatever is asked.
 */
Test(att_split, plan_covers_every_key_once)
{
	struct pfx_model *m = load_fixture_model_bt("llama-tiny-gqa", 4);
	const struct pfx_config *c = pfx_model_config(m);
	cr_assert_eq(c->sliding_window, 0);
	struct pfx_session *s;
	struct pfx_error err;
	int32_t tok[300];
	for (int i = 0; i < 300; i++)
		tok[i] = (int32_t)rnd((unsigned)c->vocab);
	cr_assert_eq(pfx_session_new(m, &s, &err), 0);
	cr_assert_eq(pfx_session_append(s, tok, 300, PFX_LOGITS_NONE, NULL, &err), 0, "%s", err.msg);
	const enum att_split modes[] = { ATT_SPLIT_OFF, ATT_SPLIT_AUTO, ATT_SPLIT_ON, ATT_SPLIT_MOST };
	for (size_t mi = 0; mi < 4; mi++)
		for (size_t n = 1; n <= ATT_FEW_MAX_ROWS; n += 9) {
			att_split_set(modes[mi]);
			int nt = plan(m, s, n, NULL);
			struct att_task *t = calloc((size_t)nt, sizeof(*t));
			cr_assert_eq(plan(m, s, n, t), nt);
			bool want = kern_gemm_few_ok() && n > 1 && modes[mi] >= ATT_SPLIT_ON;
			int rows = 0;
			for (int i = 0; i < nt; i++) {
				cr_expect_eq(t[i].few, want, "mode %d, %zu rows: task %d few %d", modes[mi], n, i,
					     t[i].few);
				if (!t[i].few || t[i].split)
					continue;
				int k = 0; /* no window */
				for (int j = 0; j < t[i].nsplit; j++) {
					const struct att_task *a = &t[i + j];
					cr_expect(a->head == t[i].head && a->r0 == t[i].r0 && a->split == j &&
						  a->k0 == k && a->k1 > a->k0);
					k = a->k1;
				}
				cr_expect_eq(k, 300 + t[i].r1);
				if (modes[mi] == ATT_SPLIT_MOST)
					cr_expect_gt(t[i].nsplit, 1);
				rows += t[i].r1 - t[i].r0;
			}
			if (want)
				cr_expect_eq(rows, (int)n * c->n_kv_heads);
			free(t);
		}
	att_split_set(ATT_SPLIT_AUTO);
	pfx_session_free(s);
	pfx_model_free(m);
}

static const char *models[] = { "neox-tiny", "llama-tiny-gqa", "qwen2-tiny", "mistral-tiny-swa",
				"phi3-tiny", "gemma-tiny" };
#define NMODELS (sizeof(models) / sizeof(models[0]))

/*
 * The split path gives the reference path's logits, on random tokens: every
 * fixture architecture (grouped queries, a sliding window of 16), blocks of
 * 4, 16 and 64 keys, f32, f16 and bf16 KV, 1 to 64 new rows after a
 * context that is no multiple of the block, keys split as planned and as
 * finely as allowed. 16-bit KV: the paths' last-bit differences may round
 * a stored value to its neighbour, as in test_kv16.
 */
Test(att_split, split_path_equals_reference, .timeout = 120)
{
	const int bts[] = { 4, 16, 64 };
	const enum pfx_kv_dtype dts[] = { PFX_KV_F32, PFX_KV_F16, PFX_KV_BF16 };
	const double tol[] = { TOL_SELF, 1e-2, 5e-2 };
	const size_t rows[] = { 1, 2, 5, 16, 33, 64 };
	for (size_t mi = 0; mi < NMODELS; mi++)
		for (size_t bi = 0; bi < 3; bi++)
			for (size_t di = 0; di < 3; di++) {
				struct pfx_model_opts o = { .threads = 2, .block_tokens = bts[bi],
							    .kv_dtype = dts[di] };
				struct pfx_model *m = load_model_opts(models[mi], &o);
				int V = pfx_model_config(m)->vocab;
				size_t len = 257 + rnd(60), n = len + ATT_FEW_MAX_ROWS;
				int32_t *tok = malloc(n * sizeof(int32_t));
				float *ref = malloc((size_t)ATT_FEW_MAX_ROWS * V * sizeof(float));
				float *got = malloc((size_t)ATT_FEW_MAX_ROWS * V * sizeof(float));
				for (size_t i = 0; i < n; i++)
					tok[i] = (int32_t)rnd((unsigned)V);
				struct pfx_session *s;
				struct pfx_error err;
				att_split_set(ATT_SPLIT_OFF);
				cr_assert_eq(pfx_session_new(m, &s, &err), 0);
				cr_assert_eq(pfx_session_append(s, tok, len, PFX_LOGITS_NONE, NULL, &err), 0,
					     "%s", err.msg);
				for (size_t ri = 0; ri < sizeof(rows) / sizeof(rows[0]); ri++) {
					size_t r = rows[ri];
					att_split_set(ATT_SPLIT_OFF);
					cr_assert_eq(pfx_session_run(s, tok + len, r, PFX_LOGITS_ALL, ref, &err), 0,
						     "%s", err.msg);
					for (int most = 0; most < 2; most++) {
						att_split_set(most ? ATT_SPLIT_MOST : ATT_SPLIT_ON);
						cr_assert_eq(pfx_session_run(s, tok + len, r, PFX_LOGITS_ALL, got, &err),
							     0, "%s", err.msg);
						float d = max_abs_diff(ref, got, r * V);
						cr_expect(d <= tol[di], "%s, blocks of %d, %s KV, %zu + %zu rows%s: %g",
							  models[mi], bts[bi], pfx_kv_dtype_name(dts[di]), len, r,
							  most ? ", keys split finely" : "", d);
					}
				}
				att_split_set(ATT_SPLIT_AUTO);
				pfx_session_free(s);
				free(tok);
				free(ref);
				free(got);
				pfx_model_free(m);
			}
}
