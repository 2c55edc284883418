/* SPDX-License-Identifier: MIT */
/* The hand-written product kernels against a plain double-precision loop,
 * over every row count they serve and widths with tails. */
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
	const int ns[] = { 1, 6, 13, MAXN }, ks[] = { 1, 16, 17, MAXK };
	for (int T = GEMV_MAX_T + 1; T <= GEMM_FEW_MAX_T; T++)
		for (int a = 0; a < 4; a++)
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
