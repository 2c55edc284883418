/* SPDX-License-Identifier: MIT */
/*
 * Matrix times a few vectors, for decode steps: y_t = W x_t (+ beta y_t)
 * for t < T <= GEMV_MAX_T, with W row-major (n, k). Streams W once, in
 * order: at one token per step this is bound by memory bandwidth, where
 * OpenBLAS's sgemv reaches only ~80% of it here.
 */
#ifndef PFX_GEMV_H
#define PFX_GEMV_H

#include <stdbool.h>

#include "weight.h"

#define GEMV_MAX_T 4

/* W of any weight type (weight.h), converted to f32 in registers: the
 * results equal those of W's f32 values. */
void pfx_gemv(int T, int n, int k, struct pfx_wmat W, const float *x, int ldx, float beta,
	      float *y, int ldy);

/*
 * Decode attention reads every key and value once per step; these keep that
 * a single pass with vector loads instead of sgemm calls on 1..8-row shapes,
 * whose set-up costs more than the arithmetic.
 *
 * pfx_dots: s[g * lds + t] = scale * (q_g . K_t) for g < G, t < n, where
 * q_g = q + g * ldq and K_t = K + t * d.
 * pfx_axpys: o_g += sum_t p[g * ldp + t] * V_t (V_t = V + t * d, o_g = o + g * ldo).
 */
void pfx_dots(int G, int n, int d, const float *q, int ldq, const float *K, float scale, float *s,
	      int lds);
void pfx_axpys(int G, int n, int d, const float *p, int ldp, const float *V, float *o, int ldo);
/* x[i] = exp(x[i] - max x) for i < n (n >= 1); returns their sum, *max_out the max. */
float pfx_exp_sum(float *x, int n, float *max_out);
/* Softmax down each column t < ld of S (n rows of ld floats) over its rows
 * [0, valid[t]), 1 <= valid[t] <= n; the rest of the column is set to 0, and
 * inv[t] is 1 / the column's sum, the normalisation left to whoever reads
 * the column. */
void pfx_softmax_cols(float *S, int n, int ld, const int *valid, float *inv);
/* y[i] = silu(y[i]) * up[i]: SwiGLU's activation. */
void pfx_silu_mul(float *y, const float *up, int n);
/* The sum of (x[i] - shift) squared for i < n, or of x[i] - shift when
 * square is false, in double: the norms' mean and variance. */
double pfx_row_sum(const float *x, int n, double shift, bool square);

#endif
