/* SPDX-License-Identifier: MIT */
/*
 * Matrix products of a few dozen rows, y_t = W x_t (+ beta y_t) for
 * GEMV_MAX_T < T <= GEMM_FEW_MAX_T, W row-major (n, k): the shape of a short
 * suffix after an attached prefix. OpenBLAS packs all of W on every call,
 * which at 32 rows is a fifth of the time and leaves 60-70 GFLOP/s a core
 * here with weights streaming from memory; these kernels read W where it
 * is, one broadcast element at a time against x transposed, and reach
 * 90-100 (bench/forward's prefill figures, docs/perf/2026-11-22-forward-f32.md).
 */
#ifndef PFX_GEMM_FEW_H
#define PFX_GEMM_FEW_H

#define GEMM_FEW_MAX_T 64

/* Whether the kernels run (AVX-512, not turned off: cpu.h); if not, use
 * sgemm. T may be 1 to GEMM_FEW_MAX_T in all of them; the layer products
 * use them from GEMV_MAX_T + 1 rows, attention from 1. */
int pfx_gemm_few_ok(void);
/* Columns of x transposed: ld of xT for T rows (T rounded up to 16). */
int pfx_gemm_few_ld(int T);
/* xT[p * ld + t] = x[t * ldx + p] for p < k, t < ld, zero for t >= T. */
void pfx_gemm_few_transpose(int T, int k, const float *x, int ldx, float *xT);
/* y[t * ldy + i] = sum_p W[i * k + p] xT[p * ld + t] (+ beta y) for t < T, i < n. */
void pfx_gemm_few(int T, int n, int k, const float *xT, const float *W, float beta, float *y,
		  int ldy);
/* yT[i * ldy + t] = sum_p W[i * sn + p * sk] xT[p * ld + t] (+ beta yT) for
 * i < n and every t < ld, the padding lanes too (so ldy >= ld): the product
 * stored transposed, as attention keeps its scores and outputs. W's rows
 * (sk == 1: keys) or its columns (sn == 1: values, read as V^T) must be
 * contiguous. */
void pfx_gemm_few_t(int T, int n, int k, const float *xT, const float *W, int sn, int sk,
		    float beta, float *yT, int ldy);

#endif
