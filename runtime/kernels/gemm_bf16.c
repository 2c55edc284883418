/* SPDX-License-Identifier: MIT */
/*
 * bf16 products (kernels.h): the packing both dot-product paths share, and
 * the AVX512-BF16 one. VDPBF16PS adds to each of 16 f32 lanes the products
 * of a pair of bf16 inputs, so W is packed with pairs of consecutive inputs
 * of 16 outputs in one vector (a 16 x 16 transpose of 32-bit words), and x
 * rows as they are, a pair broadcast at a time. Blocks of 8 rows of x by 48
 * outputs (24 accumulators, 3 loads of W, 1 broadcast in registers): 8 rows
 * of x over K inputs stay in L1 while the panel (ops.c sizes it to L2)
 * streams past them. The AMX path is in gemm_amx.c.
 */
#include "kernels.h"
#include "transpose16.h"
#include "wload.h"

#include <immintrin.h>
#include <string.h>

int kern_bf16_rows(int m) { return (m + 31) & ~31; }

int kern_bf16_lda(int k)
{
	int kp = (k + 31) & ~31;
	return kp % 64 ? kp : kp + 32;
}

size_t kern_bf16_panel_elems(int n, int k)
{
	return (size_t)((n + 15) & ~15) * (size_t)((k + 31) & ~31);
}

__attribute__((target("avx512f,avx512bw"))) void kern_bf16_pack_a(int r0, int r1, int m, int k,
								   const float *x, int ldx,
								   uint16_t *a)
{
	int lda = kern_bf16_lda(k);
	for (int r = r0; r < r1; r++) {
		uint16_t *ar = a + (size_t)r * lda;
		if (r >= m) {
			memset(ar, 0, (size_t)lda * 2);
			continue;
		}
		const float *xr = x + (size_t)r * ldx;
		for (int p = 0; p < lda; p += 16) {
			int left = k - p;
			__mmask16 mk = left >= 16 ? 0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
			_mm256_storeu_si256((__m256i *)(ar + p),
					    w_round16_bf16(_mm512_maskz_loadu_ps(mk, xr + p)));
		}
	}
}

__attribute__((target("avx512f,avx512bw"))) void kern_bf16_pack_b(int n, int k, const uint16_t *w,
								   uint16_t *panel)
{
	int kp = (k + 31) & ~31;
	for (int b = 0; b < (n + 15) / 16; b++) {
		uint16_t *blk = panel + (size_t)b * kp * 16;
		for (int q0 = 0; q0 < kp / 2; q0 += 16) {
			int left = k - 2 * q0;
			__mmask32 mk = left >= 32 ? 0xffffffffu : left > 0 ? (__mmask32)((1u << left) - 1) : 0;
			__m512 r[16];
			for (int i = 0; i < 16; i++) {
				int j = 16 * b + i;
				r[i] = j < n ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(
						       mk, w + (size_t)j * k + 2 * q0))
					     : _mm512_setzero_ps();
			}
			transpose16(r);
			for (int i = 0; i < 16; i++)
				_mm512_storeu_ps((float *)(blk + (size_t)(q0 + i) * 32), r[i]);
		}
	}
}

/* Stores 16 sums of row y from column c of cols (beta: as kern_gemm_bf16). */
__attribute__((target("avx512f"), always_inline)) static inline void
put16(float *y, int c, int cols, __m512 v, float beta)
{
	int left = cols - c;
	__mmask16 mk = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
	if (beta != 0.0f)
		v = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(mk, y + c), v);
	_mm512_mask_storeu_ps(y + c, mk, v);
}

/* MR rows of a (rows of them stored) by NV blocks of 16 outputs (cols of
 * them stored), over kp inputs. */
__attribute__((target("avx512f,avx512bf16"), always_inline)) static inline void
dp_block(const int MR, const int NV, int rows, int cols, int kp, const uint16_t *a, int lda,
	 const uint16_t *b, float beta, float *y, int ldy)
{
	__m512 acc[8][3];
	const size_t bs = (size_t)kp * 16;
#pragma GCC unroll 8
	for (int i = 0; i < MR; i++)
#pragma GCC unroll 3
		for (int v = 0; v < NV; v++)
			acc[i][v] = _mm512_setzero_ps();
	for (int q = 0; q < kp / 2; q++) {
		__m512bh bv[3];
#pragma GCC unroll 3
		for (int v = 0; v < NV; v++)
			bv[v] = (__m512bh)_mm512_loadu_si512(b + v * bs + (size_t)q * 32);
#pragma GCC unroll 8
		for (int i = 0; i < MR; i++) {
			int32_t pair;
			memcpy(&pair, a + (size_t)i * lda + 2 * q, 4);
			__m512bh av = (__m512bh)_mm512_set1_epi32(pair);
#pragma GCC unroll 3
			for (int v = 0; v < NV; v++)
				acc[i][v] = _mm512_dpbf16_ps(acc[i][v], av, bv[v]);
		}
	}
#pragma GCC unroll 8
	for (int i = 0; i < MR; i++) {
		if (i >= rows)
			break;
#pragma GCC unroll 3
		for (int v = 0; v < NV; v++)
			if (16 * v < cols)
				put16(y + (size_t)i * ldy, 16 * v, cols, acc[i][v], beta);
	}
}

#define DP(NV)                                                                                  \
	__attribute__((target("avx512f,avx512bf16"))) static void dp_8_##NV(                    \
		int rows, int cols, int kp, const uint16_t *a, int lda, const uint16_t *b,        \
		float beta, float *y, int ldy)                                                    \
	{                                                                                         \
		dp_block(8, NV, rows, cols, kp, a, lda, b, beta, y, ldy);                         \
	}
DP(1)
DP(2)
DP(3)

static void gemm_avx512(int m, int n, int k, const uint16_t *a, const uint16_t *panel, float beta,
			float *y, int ldy)
{
	static void (*const fn[4])(int, int, int, const uint16_t *, int, const uint16_t *, float,
				    float *, int) = { NULL, dp_8_1, dp_8_2, dp_8_3 };
	int kp = (k + 31) & ~31, lda = kern_bf16_lda(k), nb = (n + 15) / 16;
	/* Packed a has kern_bf16_rows(m) rows, so 8 can always be read. */
	for (int m0 = 0; m0 < m; m0 += 8)
		for (int b0 = 0; b0 < nb; b0 += 3) {
			int nv = nb - b0 < 3 ? nb - b0 : 3;
			fn[nv](m - m0, n - 16 * b0, kp, a + (size_t)m0 * lda, lda,
			       panel + (size_t)b0 * kp * 16, beta, y + (size_t)m0 * ldy + 16 * b0, ldy);
		}
}

void kern_gemm_bf16(enum kern_bf16_path p, int m, int n, int k, const uint16_t *a,
		   const uint16_t *panel, float beta, float *y, int ldy)
{
	if (p == KERN_BF16_AMX)
		kern_gemm_amx(m, n, k, a, panel, beta, y, ldy);
	else
		gemm_avx512(m, n, k, a, panel, beta, y, ldy);
}

void kern_bf16_round(const float *src, size_t n, float *dst)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = kern_bf16_to_f32(kern_f32_to_bf16(src[i]));
}
