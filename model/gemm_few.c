/* SPDX-License-Identifier: MIT */
/*
 * Kernels of gemm_few.h. A block of NR rows of W against all T rows of x:
 * for each p, TV vectors of 16 values of xT (its column p: every token's
 * p-th input) times NR broadcast weights W[i][p], NR x TV accumulators in
 * registers, each 16 outputs of one weight row. No horizontal sums, no
 * packing; the NR rows of W are read once, as NR sequential streams.
 * Block sizes measured single-threaded on 1536 x 576 weights streaming from
 * memory (GFLOP/s, OpenBLAS in brackets): T=16 NR=12 76 (46); T=32 NR=8 92
 * (64); T=48 NR=8 97 (75); T=64 NR=6 103 (81).
 */
#include "gemm_few.h"

#include <immintrin.h>
#include <stddef.h>

int pfx_gemm_few_ok(void) { return __builtin_cpu_supports("avx512f"); }

int pfx_gemm_few_ld(int T) { return (T + 15) & ~15; }

/* r[i] = column i of the 16 x 16 matrix whose rows were r[0..15]. */
__attribute__((target("avx512f"), always_inline)) static inline void transpose16(__m512 r[16])
{
	__m512 t[16];
	for (int i = 0; i < 16; i += 2) {
		t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
		t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
	}
	for (int i = 0; i < 16; i += 4) {
		r[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
		r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
		r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
		r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
	}
	for (int i = 0; i < 4; i++) {
		t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
		t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
		t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
		t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
	}
	for (int i = 0; i < 8; i++) {
		r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
		r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
	}
}

/* 16 x 16 tiles transposed in registers: the scalar loop (and gathers)
 * took ~40 us a call, 3% of a warm prefill on the calling thread alone.
 * The padding rows are zero so that the unused lanes compute on numbers. */
__attribute__((target("avx512f"))) void pfx_gemm_few_transpose(int T, int k, const float *x,
								int ldx, float *xT)
{
	int ld = pfx_gemm_few_ld(T);
	for (int t0 = 0; t0 < ld; t0 += 16)
		for (int p0 = 0; p0 < k; p0 += 16) {
			__mmask16 m = k - p0 >= 16 ? 0xffff : (__mmask16)((1u << (k - p0)) - 1);
			__m512 r[16];
			for (int i = 0; i < 16; i++)
				r[i] = t0 + i < T ? _mm512_maskz_loadu_ps(m, x + (size_t)(t0 + i) * ldx + p0)
						  : _mm512_setzero_ps();
			transpose16(r);
			for (int i = 0; i < 16 && p0 + i < k; i++)
				_mm512_storeu_ps(xT + (size_t)(p0 + i) * ld + t0, r[i]);
		}
}

__attribute__((target("avx512f,fma"), always_inline)) static inline void
block(const int TV, const int NR, int T, int k, const float *xT, int ld, const float *w,
      float beta, float *y, int ldy)
{
	__m512 acc[12][4];
#pragma GCC unroll 12
	for (int j = 0; j < NR; j++)
#pragma GCC unroll 4
		for (int v = 0; v < TV; v++)
			acc[j][v] = _mm512_setzero_ps();
	for (int p = 0; p < k; p++) {
		__m512 xv[4];
#pragma GCC unroll 4
		for (int v = 0; v < TV; v++)
			xv[v] = _mm512_loadu_ps(xT + (size_t)p * ld + 16 * v);
#pragma GCC unroll 12
		for (int j = 0; j < NR; j++) {
			__m512 wb = _mm512_set1_ps(w[(size_t)j * k + p]);
#pragma GCC unroll 4
			for (int v = 0; v < TV; v++)
				acc[j][v] = _mm512_fmadd_ps(wb, xv[v], acc[j][v]);
		}
	}
	float out[12][64];
#pragma GCC unroll 12
	for (int j = 0; j < NR; j++)
#pragma GCC unroll 4
		for (int v = 0; v < TV; v++)
			_mm512_storeu_ps(&out[j][16 * v], acc[j][v]);
	for (int t = 0; t < T; t++) {
		float *yt = y + (size_t)t * ldy;
		for (int j = 0; j < NR; j++)
			yt[j] = beta == 0.0f ? out[j][t] : out[j][t] + beta * yt[j];
	}
}

/* One instance per (TV, NR) the dispatcher uses: NR main, 1 for the tail. */
#define BLOCK(TV, NR)                                                                      \
	__attribute__((target("avx512f,fma"))) static void block_##TV##_##NR(              \
		int T, int k, const float *xT, int ld, const float *w, float beta, float *y,   \
		int ldy)                                                                     \
	{                                                                                    \
		block(TV, NR, T, k, xT, ld, w, beta, y, ldy);                                \
	}
BLOCK(1, 12)
BLOCK(1, 1)
BLOCK(2, 8)
BLOCK(2, 1)
BLOCK(3, 8)
BLOCK(3, 1)
BLOCK(4, 6)
BLOCK(4, 1)

typedef void (*block_fn)(int, int, const float *, int, const float *, float, float *, int);

static const struct {
	int nr;
	block_fn main, tail;
} blocks[4] = {
	{ 12, block_1_12, block_1_1 },
	{ 8, block_2_8, block_2_1 },
	{ 8, block_3_8, block_3_1 },
	{ 6, block_4_6, block_4_1 },
};

void pfx_gemm_few(int T, int n, int k, const float *xT, const float *W, float beta, float *y,
		  int ldy)
{
	int ld = pfx_gemm_few_ld(T), tv = ld / 16, nr = blocks[tv - 1].nr, i = 0;
	for (; i + nr <= n; i += nr)
		blocks[tv - 1].main(T, k, xT, ld, W + (size_t)i * k, beta, y + i, ldy);
	for (; i < n; i++)
		blocks[tv - 1].tail(T, k, xT, ld, W + (size_t)i * k, beta, y + i, ldy);
}
