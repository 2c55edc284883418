/* SPDX-License-Identifier: MIT */
/*
 * AVX2 forms of gemv.h's attention and activation kernels, same contracts
 * (gemv.h); only for a CPU where kern_cpu_avx2() holds.
 */
#ifndef PFX_VEC_AVX2_H
#define PFX_VEC_AVX2_H

void pfx_dots_avx2(int G, int n, int d, const float *q, int ldq, const float *K, float scale,
		   float *s, int lds);
void pfx_axpys_avx2(int G, int n, int d, const float *p, int ldp, const float *V, float *o,
		    int ldo);
float pfx_exp_sum_avx2(float *x, int n, float *max_out);
void pfx_silu_mul_avx2(float *y, const float *up, int n);

#endif
