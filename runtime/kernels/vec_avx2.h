/* SPDX-License-Identifier: MIT */
/*
 * AVX2 forms of gemv.c's attention and activation kernels, same contracts
 * (kernels.h); only for a CPU where kern_cpu_avx2() holds.
 */
#ifndef PFX_VEC_AVX2_H
#define PFX_VEC_AVX2_H

void kern_dots_avx2(int G, int n, int d, const float *q, int ldq, const float *K, float scale,
		   float *s, int lds);
void kern_axpys_avx2(int G, int n, int d, const float *p, int ldp, const float *V, float *o,
		    int ldo);
float kern_exp_sum_avx2(float *x, int n, float *max_out);
void kern_silu_mul_avx2(float *y, const float *up, int n);

#endif
