/* SPDX-License-Identifier: MIT */
/* The hand-written kernels against plain double-precision loops, over
 * every row count they serve and widths with tails. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "gemm_few.h"
#include "gemv.h"

static float val(uint32_t *seed)
{
	*seed = *seed * 1664525u + 1013904223u;
	return (float)((*seed >> 9) % 2001) / 1000.0f - 1.0f;
}

Test(kernels, few_row_products_equal_the_plain_sum)
{
	if (!pfx_gemm_few_ok())
		cr_skip_test("no AVX-512 here: sgemm serves these shapes");
	enum { MAXN = 37, MAXK = 70 };
	static float W[MAXN * MAXK], x[GEMM_FEW_MAX_T * (MAXK + 1)], xt[GEMM_FEW_MAX_T * MAXK];
	static float y[GEMM_FEW_MAX_T * (MAXN + 3)], y0[GEMM_FEW_MAX_T * (MAXN + 3)];
	uint32_t seed = 1;
	const int ns[] = { 1, 6, 13, 22, MAXN }, ks[] = { 1, 16, 17, MAXK };
	for (int T = GEMV_MAX_T + 1; T <= GEMM_FEW_MAX_T; T++)
		for (int a = 0; a < 5; a++)
			for (int b = 0; b < 4; b++)
				for (int beta = 0; beta < 2; beta++) {
					int n = ns[a], k = ks[b], ldy = n + 3, ldx = k + 1;
					for (int i = 0; i < n * k; i++)
						W[i] = val(&seed);
					for (int i = 0; i < T * ldx; i++)
						x[i] = val(&seed);
					for (int i = 0; i < T * ldy; i++)
						y[i] = y0[i] = val(&seed);
					pfx_gemm_few_transpose(T, k, x, ldx, xt);
					int ld = pfx_gemm_few_ld(T);
					for (int p = 0; p < k; p++)
						for (int t = 0; t < ld; t++)
							cr_assert_eq(xt[p * ld + t], t < T ? x[t * ldx + p] : 0.0f,
								     "T=%d k=%d: xT[%d][%d]", T, k, p, t);
					pfx_gemm_few(T, n, k, xt, W, (float)beta, y, ldy);
					for (int t = 0; t < T; t++)
						for (int i = 0; i < ldy; i++) {
							double want = y0[t * ldy + i];
							if (i < n) {
								double s = 0;
								for (int p = 0; p < k; p++)
									s += (double)W[i * k + p] * x[t * ldx + p];
								want = s + beta * want;
							}
							cr_assert(fabs(y[t * ldy + i] - want) <= 1e-5 * (1 + k),
								  "T=%d n=%d k=%d beta=%d: y[%d][%d] = %g, not %g",
								  T, n, k, beta, t, i, y[t * ldy + i], want);
						}
				}
}

/* Both layouts attention uses: K's rows (scores), V's columns (outputs). */
Test(kernels, transposed_products_equal_the_plain_sum)
{
	if (!pfx_gemm_few_ok())
		cr_skip_test("no AVX-512 here: attention takes sgemm");
	enum { MAXN = 37, MAXK = 70, LDY = GEMM_FEW_MAX_T + 16 };
	static float W[(MAXN + 2) * (MAXK + 2)], xt[MAXK * GEMM_FEW_MAX_T];
	static float y[MAXN * LDY], y0[MAXN * LDY];
	uint32_t seed = 2;
	const int ns[] = { 1, 6, 13, 22, MAXN }, ks[] = { 1, 16, 17, MAXK };
	for (int T = 1; T <= GEMM_FEW_MAX_T; T++)
		for (int a = 0; a < 5; a++)
			for (int b = 0; b < 4; b++)
				for (int cols = 0; cols < 2; cols++)
					for (int beta = 0; beta < 2; beta++) {
						int n = ns[a], k = ks[b], ld = pfx_gemm_few_ld(T);
						int sn = cols ? 1 : k + 2, sk = cols ? n + 2 : 1;
						for (size_t i = 0; i < sizeof(W) / sizeof(*W); i++)
							W[i] = val(&seed);
						for (int i = 0; i < k * ld; i++)
							xt[i] = i % ld < T ? val(&seed) : 0.0f;
						for (int i = 0; i < MAXN * LDY; i++)
							y[i] = y0[i] = val(&seed);
						pfx_gemm_few_t(T, n, k, xt, W, sn, sk, (float)beta, y, LDY);
						for (int i = 0; i < MAXN; i++)
							for (int t = 0; t < LDY; t++) {
								double want = y0[i * LDY + t];
								if (i < n && t < ld) {
									double s = 0;
									for (int p = 0; p < k; p++)
										s += (double)W[i * sn + p * sk] *
										     xt[p * ld + t];
									want = s + beta * want;
								}
								cr_assert(fabs(y[i * LDY + t] - want) <= 1e-5 * (1 + k),
									  "T=%d n=%d k=%d cols=%d beta=%d: yT[%d][%d] = %g, not %g",
									  T, n, k, cols, beta, i, t, y[i * LDY + t], want);
							}
					}
}

/* Each column over its valid rows, including one row and all of them; 20
 * columns take the portable loop. */
Test(kernels, column_softmax_equals_the_plain_one)
{
	enum { N = 75, MAXLD = 64 };
	static float S[N * MAXLD], S0[N * MAXLD];
	float inv[MAXLD];
	int valid[MAXLD];
	uint32_t seed = 3;
	const int lds[] = { 16, 20, 32, 48, 64 };
	for (int a = 0; a < 5; a++) {
		int ld = lds[a];
		for (int n = 1; n <= N; n += 37) {
			for (int i = 0; i < n * ld; i++)
				S[i] = S0[i] = 8.0f * val(&seed);
			for (int t = 0; t < ld; t++)
				valid[t] = t == 0 ? 1 : t == 1 ? n : 1 + (int)((seed = seed * 1664525u + 1013904223u) % (uint32_t)n);
			pfx_softmax_cols(S, n, ld, valid, inv);
			for (int t = 0; t < ld; t++) {
				double mx = -INFINITY, sum = 0;
				for (int j = 0; j < valid[t]; j++)
					mx = fmax(mx, S0[j * ld + t]);
				for (int j = 0; j < valid[t]; j++)
					sum += exp(S0[j * ld + t] - mx);
				cr_assert(fabs(inv[t] * sum - 1) <= 1e-5, "ld=%d n=%d: column %d's 1/sum %g, not %g",
					  ld, n, t, inv[t], 1 / sum);
				for (int j = 0; j < n; j++) {
					double want = j < valid[t] ? exp(S0[j * ld + t] - mx) : 0;
					cr_assert(fabs(S[j * ld + t] - want) <= 1e-6 * (1 + want),
						  "ld=%d n=%d: S[%d][%d] = %g, not %g (valid %d)", ld, n, j,
						  t, S[j * ld + t], want, valid[t]);
				}
			}
		}
	}
}
