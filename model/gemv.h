/* SPDX-License-Identifier: MIT */
/*
 * Matrix times a few vectors, for decode steps: y_t = W x_t (+ beta y_t)
 * for t < T <= GEMV_MAX_T, with W row-major (n, k). Streams W once, in
 * order, with software prefetch: at one token per step this is bound by
 * memory bandwidth, where OpenBLAS's sgemv reaches only ~80% of it here.
 */
#ifndef PFX_GEMV_H
#define PFX_GEMV_H

#define GEMV_MAX_T 4

void pfx_gemv(int T, int n, int k, const float *W, const float *x, int ldx, float beta, float *y,
	      int ldy);

#endif
