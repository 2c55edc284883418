/* SPDX-License-Identifier: MIT */
/*
 * The AVX2 (with FMA) forms of the decode step's attention and activation
 * kernels (vec_avx2.h), for CPUs without AVX-512: on an AMD EPYC of family
 * 25 (Zen 3) the plain C loops took 18% of a bf16 decode step's time
 * against gemv's 35% (perf, 512-token context), enough to keep decode far
 * from its bandwidth bound. Tails are masked loads and stores, which
 * cannot fault past the end.
 */
#include "vec_avx2.h"

#include <immintrin.h>
#include <math.h>

#define AVX2 __attribute__((target("avx2,fma")))

/* Lanes [0, left) of an 8-float vector. */
AVX2 static __m256i tail8(int left)
{
	const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	return _mm256_cmpgt_epi32(_mm256_set1_epi32(left), lane);
}

/*
 * e^x for 8 lanes: x = n ln2 + r with |r| <= ln2 / 2, e^r by the Cephes
 * single-precision polynomial (about 1 ulp), 2^n built in the exponent
 * field. x is clamped to [-87.3, 88.3] so 2^n stays a normal float: below
 * that e^x is ~1e-38 rather than smaller or 0, which a softmax's sum (at
 * least 1) or SiLU cannot tell apart.
 */
AVX2 static __m256 exp256(__m256 x)
{
	x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.3762626647949f)),
			  _mm256_set1_ps(-87.3365447504f));
	__m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
				   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
	__m256 p = _mm256_set1_ps(1.9875691500e-4f);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
	p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
	__m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
	return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

AVX2 static float hsum(__m256 v)
{
	__m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	h = _mm_add_ps(h, _mm_movehl_ps(h, h));
	return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

/* Lanes 0..3: the sums of v[0..3]'s lanes. */
AVX2 static inline __m128 hsum4(const __m256 v[4])
{
	__m256 u = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
	return _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1));
}

/*
 * Scores of GB (a constant once inlined, at most DOTS_HEADS) query heads on
 * DOTS_KEYS keys: each piece of a key is loaded once for all GB heads, as
 * in gemv.c's AVX-512 form, whose notes say why (a pass over the keys per
 * head read them at half the rate). 12 accumulators, a piece of a key and
 * the same piece of 3 queries fill AVX2's 16 registers. Each line
 * of the keys is prefetched into L2 DOTS_AHEAD bytes ahead, as there.
 */
#define DOTS_HEADS 3
#define DOTS_KEYS 4
#define DOTS_AHEAD 4096

AVX2 __attribute__((always_inline)) static inline void
dots_keys(const int GB, int d, const float *q, int ldq, const float *k, float scale, float *s,
	  int lds)
{
	const __m256i m = tail8(d % 8);
	const int whole = d - d % 8;
	__m256 acc[DOTS_HEADS][DOTS_KEYS];
#pragma GCC unroll 3
	for (int g = 0; g < GB; g++)
#pragma GCC unroll 4
		for (int t = 0; t < DOTS_KEYS; t++)
			acc[g][t] = _mm256_setzero_ps();
	for (int j = 0; j < whole; j += 8) {
#pragma GCC unroll 4
		for (int t = 0; t < DOTS_KEYS; t++) {
			const float *kt = k + (size_t)t * d + j;
			if (j % 16 == 0)
				_mm_prefetch((const char *)kt + DOTS_AHEAD, _MM_HINT_T1);
			__m256 kv = _mm256_loadu_ps(kt);
#pragma GCC unroll 3
			for (int g = 0; g < GB; g++)
				acc[g][t] = _mm256_fmadd_ps(_mm256_loadu_ps(q + (size_t)g * ldq + j), kv,
							    acc[g][t]);
		}
	}
	if (whole < d)
#pragma GCC unroll 4
		for (int t = 0; t < DOTS_KEYS; t++) {
			__m256 kv = _mm256_maskload_ps(k + (size_t)t * d + whole, m);
#pragma GCC unroll 3
			for (int g = 0; g < GB; g++)
				acc[g][t] = _mm256_fmadd_ps(_mm256_maskload_ps(q + (size_t)g * ldq + whole, m),
							    kv, acc[g][t]);
		}
#pragma GCC unroll 3
	for (int g = 0; g < GB; g++)
		_mm_storeu_ps(s + (size_t)g * lds, _mm_mul_ps(_mm_set1_ps(scale), hsum4(acc[g])));
}

#define DOTS_INSTANCE(GB)                                                                     \
	AVX2 static void dots_keys_##GB(int d, const float *q, int ldq, const float *k,         \
					float scale, float *s, int lds)                          \
	{                                                                                        \
		dots_keys(GB, d, q, ldq, k, scale, s, lds);                                      \
	}
DOTS_INSTANCE(1)
DOTS_INSTANCE(2)
DOTS_INSTANCE(3)

AVX2 void kern_dots_avx2(int G, int n, int d, const float *q, int ldq, const float *K, float scale,
			float *s, int lds)
{
	typedef void (*dots_fn)(int, const float *, int, const float *, float, float *, int);
	static const dots_fn fn[DOTS_HEADS] = { dots_keys_1, dots_keys_2, dots_keys_3 };
	const __m256i m = tail8(d % 8);
	const int whole = d - d % 8;
	int t0 = 0;
	for (; t0 + DOTS_KEYS <= n; t0 += DOTS_KEYS)
		for (int g0 = 0; g0 < G; g0 += DOTS_HEADS) {
			int gb = G - g0 < DOTS_HEADS ? G - g0 : DOTS_HEADS;
			fn[gb - 1](d, q + (size_t)g0 * ldq, ldq, K + (size_t)t0 * d, scale,
				   s + (size_t)g0 * lds + t0, lds);
		}
	for (int t = t0; t < n; t++) {
		const float *k = K + (size_t)t * d;
		for (int g = 0; g < G; g++) {
			const float *qg = q + (size_t)g * ldq;
			__m256 acc = _mm256_setzero_ps();
			for (int j = 0; j < whole; j += 8)
				acc = _mm256_fmadd_ps(_mm256_loadu_ps(qg + j), _mm256_loadu_ps(k + j), acc);
			if (whole < d)
				acc = _mm256_fmadd_ps(_mm256_maskload_ps(qg + whole, m),
						      _mm256_maskload_ps(k + whole, m), acc);
			s[(size_t)g * lds + t] = scale * hsum(acc);
		}
	}
}

/*
 * GN heads (a constant once inlined, at most AXPYS_HEADS) x 32 dims of
 * output in registers while rows of V stream by: 12 accumulators, a piece
 * of the row and its 3 weights fill AVX2's 16 registers. The loops are
 * unrolled by pragma so the accumulators stay in registers: without it gcc
 * kept them in memory and stored them after every row, as gemv.c's notes
 * tell of the AVX-512 form.
 * TAIL (a constant) masks the dims past d. Rows AXPYS_AHEAD ahead are
 * prefetched, as there (V comes in runs of one block, each a new stream for
 * the hardware prefetcher).
 */
#define AXPYS_HEADS 3
#define AXPYS_ROWS 16 /* rows a call: both 32-dim halves of them while in L1 */
#define AXPYS_AHEAD 16

AVX2 __attribute__((always_inline)) static inline void
axpys_block(const int GN, const int TAIL, int n, int d, int j0, const float *p, int ldp,
	    const float *V, int vend, float *o, int ldo)
{
	__m256 acc[AXPYS_HEADS][4];
	__m256i m[4];
#pragma GCC unroll 4
	for (int c = 0; c < 4; c++)
		m[c] = tail8(d - j0 - 8 * c);
#pragma GCC unroll 3
	for (int g = 0; g < GN; g++)
#pragma GCC unroll 4
		for (int c = 0; c < 4; c++)
			acc[g][c] = _mm256_maskload_ps(o + (size_t)g * ldo + j0 + 8 * c, m[c]);
	for (int t = 0; t < n; t++) {
		const float *v = V + (size_t)t * d + j0;
		if (t + AXPYS_AHEAD < vend)
#pragma GCC unroll 2
			for (int c = 0; c < 4; c += 2)
				_mm_prefetch((const char *)(v + AXPYS_AHEAD * (size_t)d + 8 * c), _MM_HINT_T0);
#pragma GCC unroll 4
		for (int c = 0; c < 4; c++) {
			__m256 vv = TAIL ? _mm256_maskload_ps(v + 8 * c, m[c]) : _mm256_loadu_ps(v + 8 * c);
#pragma GCC unroll 3
			for (int g = 0; g < GN; g++)
				acc[g][c] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + (size_t)g * ldp + t), vv,
							    acc[g][c]);
		}
	}
#pragma GCC unroll 3
	for (int g = 0; g < GN; g++)
#pragma GCC unroll 4
		for (int c = 0; c < 4; c++)
			_mm256_maskstore_ps(o + (size_t)g * ldo + j0 + 8 * c, m[c], acc[g][c]);
}

typedef void (*axpys_fn)(int n, int d, int j0, const float *p, int ldp, const float *V, int vend,
			 float *o, int ldo);

#define AXPYS_INSTANCE(GN, TAIL)                                                               \
	AVX2 static void axpys_##GN##_##TAIL(int n, int d, int j0, const float *p, int ldp,     \
					      const float *V, int vend, float *o, int ldo)       \
	{                                                                                        \
		axpys_block(GN, TAIL, n, d, j0, p, ldp, V, vend, o, ldo);                        \
	}
AXPYS_INSTANCE(1, 0)
AXPYS_INSTANCE(2, 0)
AXPYS_INSTANCE(3, 0)
AXPYS_INSTANCE(1, 1)
AXPYS_INSTANCE(2, 1)
AXPYS_INSTANCE(3, 1)

/* V is read in order, AXPYS_ROWS rows at a time for all 32-dim pieces of
 * them; more than AXPYS_HEADS heads take further passes (by then in cache). */
void kern_axpys_avx2(int G, int n, int d, const float *p, int ldp, const float *V, float *o, int ldo)
{
	static const axpys_fn fn[2][AXPYS_HEADS] = { { axpys_1_0, axpys_2_0, axpys_3_0 },
						     { axpys_1_1, axpys_2_1, axpys_3_1 } };
	for (int g0 = 0; g0 < G; g0 += AXPYS_HEADS) {
		int gn = G - g0 < AXPYS_HEADS ? G - g0 : AXPYS_HEADS;
		for (int t0 = 0; t0 < n; t0 += AXPYS_ROWS) {
			int rows = n - t0 < AXPYS_ROWS ? n - t0 : AXPYS_ROWS;
			for (int j0 = 0; j0 < d; j0 += 32)
				fn[d - j0 < 32][gn - 1](rows, d, j0, p + (size_t)g0 * ldp + t0, ldp,
							V + (size_t)t0 * d, n - t0,
							o + (size_t)g0 * ldo, ldo);
		}
	}
}

AVX2 float kern_exp_sum_avx2(float *x, int n, float *max_out)
{
	__m256 mv = _mm256_set1_ps(-INFINITY);
	int i = 0;
	for (; i + 8 <= n; i += 8)
		mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
	__m128 h = _mm_max_ps(_mm256_castps256_ps128(mv), _mm256_extractf128_ps(mv, 1));
	h = _mm_max_ps(h, _mm_movehl_ps(h, h));
	float mx = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
	for (; i < n; i++)
		mx = x[i] > mx ? x[i] : mx;
	__m256 sum = _mm256_setzero_ps(), shift = _mm256_set1_ps(mx);
	for (i = 0; i < n; i += 8) {
		__m256i m = tail8(n - i);
		__m256 e = _mm256_and_ps(exp256(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), shift)),
					 _mm256_castsi256_ps(m));
		_mm256_maskstore_ps(x + i, m, e);
		sum = _mm256_add_ps(sum, e);
	}
	*max_out = mx;
	return hsum(sum);
}

AVX2 void kern_silu_mul_avx2(float *y, const float *up, int n)
{
	const __m256 one = _mm256_set1_ps(1.0f);
	for (int i = 0; i < n; i += 8) {
		__m256i m = tail8(n - i);
		__m256 v = _mm256_maskload_ps(y + i, m);
		__m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), v));
		__m256 r = _mm256_mul_ps(_mm256_div_ps(v, _mm256_add_ps(one, e)),
					 _mm256_maskload_ps(up + i, m));
		_mm256_maskstore_ps(y + i, m, r);
	}
}
