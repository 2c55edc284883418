/* SPDX-License-Identifier: MIT */
/*
 * One block's step of an online softmax over scores stored transposed
 * (keys x rows), for attention of a few dozen rows over many keys
 * (attention.c's split path): kernels.h, kern_att_online.
 *
 * The scores of a 64-key block for up to 64 rows are 16 KiB and stay in
 * L1 from their product to their weighted sum of values; the whole score
 * matrix of a 2048-key context (400 KiB for 48 rows) went through L2, and
 * past ~8192 keys no longer fit in it.
 */
#include "kernels.h"
#include "exp512.h"

#include <immintrin.h>
#include <math.h>
#include <stddef.h>

/* Row t's keys [lo[t], hi[t]) of the block's [0, n), clamped. */
static int clamp(int v, int n)
{
	return v < 0 ? 0 : v > n ? n : v;
}

static void online_scalar(float *S, int n, int ld, const int *lo, const int *hi, float *m,
			  float *l, float *OT, int hd, const char *pf, size_t pf_bytes)
{
	for (size_t o = 0; o < pf_bytes; o += 64)
		__builtin_prefetch(pf + o, 0, 3);
	for (int t = 0; t < ld; t++) {
		int a = clamp(lo[t], n), b = clamp(hi[t], n);
		float bm = -INFINITY, sum = 0;
		for (int j = a; j < b; j++)
			bm = fmaxf(bm, S[(size_t)j * ld + t]);
		float mn = fmaxf(m[t], bm);
		/* No key of the row yet: nothing to scale, nothing to add. */
		float alpha = mn == -INFINITY ? 1.0f : expf(m[t] - mn);
		for (int j = 0; j < n; j++) {
			float *e = &S[(size_t)j * ld + t];
			*e = j >= a && j < b ? expf(*e - mn) : 0.0f;
			sum += *e;
		}
		l[t] = l[t] * alpha + sum;
		m[t] = mn;
		if (alpha != 1.0f)
			for (int d = 0; d < hd; d++)
				OT[(size_t)d * ld + t] *= alpha;
	}
}

__attribute__((target("avx512f,fma"), always_inline)) static inline void
online_avx512(const int TV, float *S, int n, const int *lo, const int *hi, float *m, float *l,
	      float *OT, int hd, const char *pf, size_t pf_bytes)
{
	/* pf's lines spread over both passes: a few a step, where a burst of
	 * them would fill the line fill buffers and stall. */
	size_t step = (pf_bytes / 64 + 2 * (size_t)n - 1) / (2 * (size_t)n) * 64, o = 0;
	const int ld = 16 * TV;
	const __m512 ninf = _mm512_set1_ps(-INFINITY), one = _mm512_set1_ps(1.0f);
	__m512i a[4], b[4];
	__m512 mx[4], sum[4];
	for (int v = 0; v < TV; v++) {
		a[v] = _mm512_loadu_si512(lo + 16 * v);
		b[v] = _mm512_loadu_si512(hi + 16 * v);
		mx[v] = _mm512_loadu_ps(m + 16 * v);
		sum[v] = _mm512_setzero_ps();
	}
	for (int j = 0; j < n; j++) {
		__m512i jv = _mm512_set1_epi32(j);
		for (size_t e = o + step; o < e && o < pf_bytes; o += 64)
			__builtin_prefetch(pf + o, 0, 3);
		for (int v = 0; v < TV; v++) {
			__mmask16 k = _mm512_cmple_epi32_mask(a[v], jv) & _mm512_cmpgt_epi32_mask(b[v], jv);
			mx[v] = _mm512_mask_max_ps(mx[v], k, mx[v], _mm512_loadu_ps(S + (size_t)j * ld + 16 * v));
		}
	}
	for (int j = 0; j < n; j++) {
		__m512i jv = _mm512_set1_epi32(j);
		for (size_t e = o + step; o < e && o < pf_bytes; o += 64)
			__builtin_prefetch(pf + o, 0, 3);
		for (int v = 0; v < TV; v++) {
			__mmask16 k = _mm512_cmple_epi32_mask(a[v], jv) & _mm512_cmpgt_epi32_mask(b[v], jv);
			float *row = S + (size_t)j * ld + 16 * v;
			__m512 e = _mm512_maskz_mov_ps(k, exp512(_mm512_sub_ps(_mm512_loadu_ps(row), mx[v])));
			_mm512_storeu_ps(row, e);
			sum[v] = _mm512_add_ps(sum[v], e);
		}
	}
	for (int v = 0; v < TV; v++) {
		__m512 old = _mm512_loadu_ps(m + 16 * v);
		/* Lanes whose max is still -inf (no key yet) keep a scale of 1:
		 * exp(-inf - -inf) would be NaN. */
		__mmask16 live = _mm512_cmp_ps_mask(mx[v], ninf, _CMP_NEQ_OQ);
		__m512 alpha = _mm512_mask_mov_ps(one, live, exp512(_mm512_sub_ps(old, mx[v])));
		_mm512_storeu_ps(l + 16 * v,
				 _mm512_fmadd_ps(_mm512_loadu_ps(l + 16 * v), alpha, sum[v]));
		_mm512_storeu_ps(m + 16 * v, mx[v]);
		/* Once a row's max has settled (most blocks), its output is not
		 * touched. */
		if (_mm512_cmp_ps_mask(alpha, one, _CMP_NEQ_UQ))
			for (int d = 0; d < hd; d++) {
				float *out = OT + (size_t)d * ld + 16 * v;
				_mm512_storeu_ps(out, _mm512_mul_ps(_mm512_loadu_ps(out), alpha));
			}
	}
}

#define ONLINE(TV)                                                                        \
	__attribute__((target("avx512f,fma"))) static void online_##TV(                      \
		float *S, int n, const int *lo, const int *hi, float *m, float *l, float *OT, \
		int hd, const char *pf, size_t pf_bytes)                                      \
	{                                                                                     \
		online_avx512(TV, S, n, lo, hi, m, l, OT, hd, pf, pf_bytes);                  \
	}
ONLINE(1)
ONLINE(2)
ONLINE(3)
ONLINE(4)

void kern_att_online(float *S, int n, int ld, const int *lo, const int *hi, float *m, float *l,
		     float *OT, int hd, const void *pf, size_t pf_bytes)
{
	static void (*const fn[4])(float *, int, const int *, const int *, float *, float *,
				   float *, int, const char *, size_t) = { online_1, online_2,
									   online_3, online_4 };
	if (kern_cpu_avx512() && ld % 16 == 0 && ld >= 16 && ld <= 64) {
		fn[ld / 16 - 1](S, n, lo, hi, m, l, OT, hd, pf, pf_bytes);
		return;
	}
	online_scalar(S, n, ld, lo, hi, m, l, OT, hd, pf, pf_bytes);
}
