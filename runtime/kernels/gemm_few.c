/* SPDX-License-Identifier: MIT */
/*
 * The few-row products of kernels.h. A block of NR rows of W against all T rows of x:
 * for each p, TV vectors of 16 values of xT (its column p: every token's
 * p-th input) times NR broadcast weights W[i][p], NR x TV accumulators in
 * registers, each 16 outputs of one weight row. No horizontal sums, no
 * packing; the NR rows of W are read once, as NR sequential streams.
 * Block sizes measured single-threaded on 1536 x 576 weights streaming from
 * memory (GFLOP/s, OpenBLAS in brackets): T=16 NR=12 76 (46); T=32 NR=8 92
 * (64); T=48 NR=8 97 (75); T=64 NR=6 103 (81).
 */
#include "kernels.h"
#include "transpose16.h"

#include <immintrin.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

int kern_gemm_few_ok(void) { return kern_cpu_avx512(); }

int kern_gemm_few_ld(int T) { return (T + 15) & ~15; }

/* 16 x 16 tiles transposed in registers: the scalar loop (and gathers)
 * took ~40 us a call, 3% of a warm prefill on the calling thread alone.
 * The padding rows are zero so that the unused lanes compute on numbers. */
__attribute__((target("avx512f"))) void kern_gemm_few_transpose(int T, int k, const float *x,
								int ldx, float *xT)
{
	int ld = kern_gemm_few_ld(T);
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

/*
 * NR rows of W (row i at w + i * sn, its p-th element at p * sk) against
 * xT. Out 0 stores y[t][i], transposed in registers: the layer
 * products' rows of tokens. Out 1 stores each accumulator as it is,
 * yT[i][16 v ..]: attention's scores and outputs, whose k is short (a
 * head's 64 dims, a block's 64 keys) so that the transposed store would
 * cost a quarter of the time.
 */
/* W's element i: f32, or bf16 widened exactly (its bits are the f32's top
 * half), so that a bf16 W gives the products of its f32 values. */
__attribute__((target("avx512f"), always_inline)) static inline __m512
weight(const int bf16, const void *w, ptrdiff_t i)
{
	if (bf16)
		return _mm512_castsi512_ps(
			_mm512_set1_epi32((int)((uint32_t)((const uint16_t *)w)[i] << 16)));
	return _mm512_set1_ps(((const float *)w)[i]);
}

__attribute__((target("avx512f,fma"), always_inline)) static inline void
block_w(const int bf16, const int TV, const int NR, const int out, int T, int k, const float *xT,
	int ld, const void *w, ptrdiff_t sn, ptrdiff_t sk, float beta, float *y, int ldy)
{
	const int esz = bf16 ? 2 : 4, line = 64 / esz; /* elements a cache line */
	/* Rows of W in place (sk == 1, the layer products and the keys) are
	 * read NR short streams at a time, each a row of a few KiB: too short
	 * for the hardware prefetchers to reach ahead. Asking for the next
	 * block's rows a line at a time as this block walks its own took a
	 * 32-row warm prefill's products from 143 to 114 CPU-ms (SmolLM-135M
	 * shape, f32 weights from memory, 2 threads, 15 alternating rounds;
	 * docs/perf/2026-11-28-warm-path.md). The layer products' into L2, not
	 * L1 (attention's keys, a block's 16 KiB, keep theirs): x transposed
	 * (73 KiB at 576 inputs) already overflows L1, and single-threaded
	 * 1536 x 576 products from memory ran 99-105 GFLOP/s so against 83-99
	 * (2026-11-29-warm-products.md). Past W's end it prefetches what
	 * follows, which a prefetch may: it never faults. */
	const int pf = sk == 1;
	__m512 acc[12][4];
#pragma GCC unroll 12
	for (int j = 0; j < NR; j++)
#pragma GCC unroll 4
		for (int v = 0; v < TV; v++)
			acc[j][v] = _mm512_setzero_ps();
	for (int p = 0; p < k; p++) {
		__m512 xv[4];
		if (pf && (p & (line - 1)) == 0)
#pragma GCC unroll 12
			for (int j = 0; j < NR; j++) {
				const char *a = (const char *)w + ((NR + j) * sn + p) * esz;
				if (out) /* attention's keys: as measured there (L1) */
					__builtin_prefetch(a, 0, 3);
				else
					__builtin_prefetch(a, 0, 2);
			}
#pragma GCC unroll 4
		for (int v = 0; v < TV; v++)
			xv[v] = _mm512_loadu_ps(xT + (size_t)p * ld + 16 * v);
#pragma GCC unroll 12
		for (int j = 0; j < NR; j++) {
			__m512 wb = weight(bf16, w, j * sn + p * sk);
#pragma GCC unroll 4
			for (int v = 0; v < TV; v++)
				acc[j][v] = _mm512_fmadd_ps(wb, xv[v], acc[j][v]);
		}
	}
	if (out) {
#pragma GCC unroll 12
		for (int j = 0; j < NR; j++)
#pragma GCC unroll 4
			for (int v = 0; v < TV; v++) {
				float *yv = y + (size_t)j * ldy + 16 * v;
				__m512 a = acc[j][v];
				if (beta != 0.0f)
					a = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_loadu_ps(yv), a);
				_mm512_storeu_ps(yv, a);
			}
		return;
	}
	/* y[t][0..NR) is column t of the accumulators: transposed 16 tokens at
	 * a time in registers, each token's NR outputs one masked store (the
	 * scalar loop through a buffer cost ~5% of a block at k = 576). */
	const __mmask16 jm = (__mmask16)((1u << NR) - 1);
#pragma GCC unroll 4
	for (int v = 0; v < TV; v++) {
		__m512 r[16];
#pragma GCC unroll 16
		for (int j = 0; j < 16; j++)
			r[j] = j < NR ? acc[j][v] : _mm512_setzero_ps();
		transpose16(r);
		int tn = T - 16 * v < 16 ? T - 16 * v : 16;
#pragma GCC unroll 16
		for (int t = 0; t < 16; t++) {
			if (t >= tn)
				break;
			float *yt = y + (size_t)(16 * v + t) * ldy;
			__m512 a = r[t];
			if (beta != 0.0f)
				a = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(jm, yt), a);
			_mm512_mask_storeu_ps(yt, jm, a);
		}
	}
}

__attribute__((target("avx512f,fma"), always_inline)) static inline void
block(const int TV, const int NR, const int out, int T, int k, const float *xT, int ld,
      const float *w, ptrdiff_t sn, ptrdiff_t sk, float beta, float *y, int ldy)
{
	block_w(0, TV, NR, out, T, k, xT, ld, w, sn, sk, beta, y, ldy);
}

typedef void (*block_fn)(int T, int k, const float *xT, int ld, const float *w, ptrdiff_t s,
			 float beta, float *y, int ldy);
typedef void (*block16_fn)(int T, int k, const float *xT, int ld, const uint16_t *w,
			   ptrdiff_t s, float beta, float *y, int ldy);

/* Per (TV, NR) the dispatcher uses (NR main, 4 and 1 for the tail), one instance
 * per layout, with the stride that is 1 a constant: rows of W in the layer
 * products and the scores (K's rows), columns for the values (V^T). */
#define BLOCK(TV, NR)                                                                      \
	__attribute__((target("avx512f,fma"))) static void rows_##TV##_##NR(                \
		int T, int k, const float *xT, int ld, const float *w, ptrdiff_t s, float beta, \
		float *y, int ldy)                                                           \
	{                                                                                    \
		block(TV, NR, 0, T, k, xT, ld, w, s, 1, beta, y, ldy);                       \
	}                                                                                    \
	__attribute__((target("avx512f,fma"))) static void rows_t_##TV##_##NR(              \
		int T, int k, const float *xT, int ld, const float *w, ptrdiff_t s, float beta, \
		float *y, int ldy)                                                           \
	{                                                                                    \
		block(TV, NR, 1, T, k, xT, ld, w, s, 1, beta, y, ldy);                       \
	}                                                                                    \
	__attribute__((target("avx512f,fma"))) static void cols_t_##TV##_##NR(              \
		int T, int k, const float *xT, int ld, const float *w, ptrdiff_t s, float beta, \
		float *y, int ldy)                                                           \
	{                                                                                    \
		block(TV, NR, 1, T, k, xT, ld, w, 1, s, beta, y, ldy);                       \
	}                                                                                    \
	__attribute__((target("avx512f,fma"))) static void rows_bf16_##TV##_##NR(           \
		int T, int k, const float *xT, int ld, const uint16_t *w, ptrdiff_t s,         \
		float beta, float *y, int ldy)                                               \
	{                                                                                    \
		block_w(1, TV, NR, 0, T, k, xT, ld, w, s, 1, beta, y, ldy);                  \
	}
BLOCK(1, 12)
BLOCK(2, 8)
BLOCK(3, 8)
BLOCK(4, 6)
BLOCK(1, 4)
BLOCK(2, 4)
BLOCK(3, 4)
BLOCK(4, 4)
BLOCK(1, 1)
BLOCK(2, 1)
BLOCK(3, 1)
BLOCK(4, 1)

#define LAYOUTS(TV, NR) { rows_##TV##_##NR, rows_t_##TV##_##NR, cols_t_##TV##_##NR }
/* Rows of W in blocks of NR, then 4 (64 rows, a head's dims or a block's
 * keys, leave 4 after 12 or 6), then 1. */
#define KERNELS(TV, NR) { { NR, 4, 1 }, { LAYOUTS(TV, NR), LAYOUTS(TV, 4), LAYOUTS(TV, 1) } }
enum layout { ROWS, ROWS_T, COLS_T };
static const struct {
	int nr[3];
	block_fn fn[3][3];
} kernels[4] = { KERNELS(1, 12), KERNELS(2, 8), KERNELS(3, 8), KERNELS(4, 6) };

/* The layer products on bf16 W, the same blocks. */
#define BF16(TV, NR) { { NR, 4, 1 }, { rows_bf16_##TV##_##NR, rows_bf16_##TV##_4, rows_bf16_##TV##_1 } }
static const struct {
	int nr[3];
	block16_fn fn[3];
} kernels16[4] = { BF16(1, 12), BF16(2, 8), BF16(3, 8), BF16(4, 6) };

/* Block i of NR rows of W starts at W + i * sn; y's rows or columns step by
 * ystep. */
static void dispatch(enum layout l, int T, int n, int k, const float *xT, const float *W,
		     ptrdiff_t sn, ptrdiff_t s, float beta, float *y, int ldy, ptrdiff_t ystep)
{
	if (T < 1 || T > GEMM_FEW_MAX_T) {
		fprintf(stderr, "kern_gemm_few: %d rows, not 1 to %d\n", T, GEMM_FEW_MAX_T);
		abort();
	}
	int ld = kern_gemm_few_ld(T), tv = ld / 16, i = 0;
	for (int b = 0; b < 3; b++)
		for (int nr = kernels[tv - 1].nr[b]; i + nr <= n; i += nr)
			kernels[tv - 1].fn[b][l](T, k, xT, ld, W + i * sn, s, beta, y + i * ystep, ldy);
}

void kern_gemm_few(int T, int n, int k, const float *xT, const float *W, float beta, float *y,
		   int ldy)
{
	dispatch(ROWS, T, n, k, xT, W, k, k, beta, y, ldy, 1);
}

void kern_gemm_few_t(int T, int n, int k, const float *xT, const float *W, int sn, int sk,
		     float beta, float *yT, int ldy)
{
	if (sk == 1) {
		dispatch(ROWS_T, T, n, k, xT, W, sn, sn, beta, yT, ldy, ldy);
	} else if (sn == 1) {
		dispatch(COLS_T, T, n, k, xT, W, 1, sk, beta, yT, ldy, ldy);
	} else {
		fprintf(stderr, "kern_gemm_few_t: W strides %d and %d, neither 1\n", sn, sk);
		abort();
	}
}

void kern_gemm_few_bf16(int T, int n, int k, const float *xT, const uint16_t *W, float beta,
			float *y, int ldy)
{
	if (T < 1 || T > GEMM_FEW_MAX_T) {
		fprintf(stderr, "kern_gemm_few_bf16: %d rows, not 1 to %d\n", T, GEMM_FEW_MAX_T);
		abort();
	}
	int ld = kern_gemm_few_ld(T), tv = ld / 16, i = 0;
	for (int b = 0; b < 3; b++)
		for (int nr = kernels16[tv - 1].nr[b]; i + nr <= n; i += nr)
			kernels16[tv - 1].fn[b](T, k, xT, ld, W + (size_t)i * k, k, beta, y + i, ldy);
}
