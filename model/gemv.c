/* SPDX-License-Identifier: MIT */
/*
 * Bandwidth-bound matrix-vector products. One row of W at a time keeps the
 * access pattern a single sequential stream, which the hardware prefetcher
 * follows best; an explicit prefetch 8 KiB ahead keeps enough requests in
 * flight for one core to draw most of the machine's bandwidth. Measured on
 * the development machine (2 threads, 49152 x 576): 8-row blocking 26 GB/s,
 * this kernel 31 GB/s, streaming read test 31 GB/s.
 */
#include "gemv.h"

#include <immintrin.h>
#include <stddef.h>

#define PREFETCH_FLOATS 2048

static float finish(float acc, float beta, const float *y)
{
	return beta == 0.0f ? acc : acc + beta * *y;
}

__attribute__((target("avx512f,fma")))
static void gemv_avx512(int T, int n, int k, const float *W, const float *x, int ldx, float beta,
			float *y, int ldy)
{
	for (int i = 0; i < n; i++) {
		const float *r = W + (size_t)i * k;
		__m512 acc[GEMV_MAX_T][2];
		for (int t = 0; t < T; t++)
			acc[t][0] = acc[t][1] = _mm512_setzero_ps();
		int j = 0;
		for (; j + 32 <= k; j += 32) {
			_mm_prefetch((const char *)(r + j + PREFETCH_FLOATS), _MM_HINT_T0);
			_mm_prefetch((const char *)(r + j + PREFETCH_FLOATS + 16), _MM_HINT_T0);
			__m512 w0 = _mm512_loadu_ps(r + j), w1 = _mm512_loadu_ps(r + j + 16);
			for (int t = 0; t < T; t++) {
				const float *xt = x + (size_t)t * ldx + j;
				acc[t][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xt), acc[t][0]);
				acc[t][1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xt + 16), acc[t][1]);
			}
		}
		for (int t = 0; t < T; t++) {
			const float *xt = x + (size_t)t * ldx;
			float s = _mm512_reduce_add_ps(_mm512_add_ps(acc[t][0], acc[t][1]));
			for (int jj = j; jj < k; jj++)
				s += r[jj] * xt[jj];
			float *yt = y + (size_t)t * ldy + i;
			*yt = finish(s, beta, yt);
		}
	}
}

__attribute__((target("avx2,fma")))
static void gemv_avx2(int T, int n, int k, const float *W, const float *x, int ldx, float beta,
		      float *y, int ldy)
{
	for (int i = 0; i < n; i++) {
		const float *r = W + (size_t)i * k;
		__m256 acc[GEMV_MAX_T][2];
		for (int t = 0; t < T; t++)
			acc[t][0] = acc[t][1] = _mm256_setzero_ps();
		int j = 0;
		for (; j + 16 <= k; j += 16) {
			_mm_prefetch((const char *)(r + j + PREFETCH_FLOATS), _MM_HINT_T0);
			__m256 w0 = _mm256_loadu_ps(r + j), w1 = _mm256_loadu_ps(r + j + 8);
			for (int t = 0; t < T; t++) {
				const float *xt = x + (size_t)t * ldx + j;
				acc[t][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xt), acc[t][0]);
				acc[t][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xt + 8), acc[t][1]);
			}
		}
		for (int t = 0; t < T; t++) {
			const float *xt = x + (size_t)t * ldx;
			__m256 v = _mm256_add_ps(acc[t][0], acc[t][1]);
			__m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
			h = _mm_add_ps(h, _mm_movehl_ps(h, h));
			h = _mm_add_ss(h, _mm_movehdup_ps(h));
			float s = _mm_cvtss_f32(h);
			for (int jj = j; jj < k; jj++)
				s += r[jj] * xt[jj];
			float *yt = y + (size_t)t * ldy + i;
			*yt = finish(s, beta, yt);
		}
	}
}

static void gemv_scalar(int T, int n, int k, const float *W, const float *x, int ldx, float beta,
			float *y, int ldy)
{
	for (int i = 0; i < n; i++)
		for (int t = 0; t < T; t++) {
			const float *r = W + (size_t)i * k, *xt = x + (size_t)t * ldx;
			float s = 0;
			for (int j = 0; j < k; j++)
				s += r[j] * xt[j];
			float *yt = y + (size_t)t * ldy + i;
			*yt = finish(s, beta, yt);
		}
}

void pfx_gemv(int T, int n, int k, const float *W, const float *x, int ldx, float beta, float *y,
	      int ldy)
{
	/* The CPU cannot change under us; the checks are cached by libgcc. */
	if (__builtin_cpu_supports("avx512f"))
		gemv_avx512(T, n, k, W, x, ldx, beta, y, ldy);
	else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		gemv_avx2(T, n, k, W, x, ldx, beta, y, ldy);
	else
		gemv_scalar(T, n, k, W, x, ldx, beta, y, ldy);
}
