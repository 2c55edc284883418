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

/* Lane i: the sum of v[i]'s lanes. */
AVX2 static inline __m256 hsum8(const __m256 v[8])
{
	__m256 t0 = _mm256_hadd_ps(v[0], v[1]), t1 = _mm256_hadd_ps(v[2], v[3]);
	__m256 t2 = _mm256_hadd_ps(v[4], v[5]), t3 = _mm256_hadd_ps(v[6], v[7]);
	__m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
	return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

AVX2 static float hsum(__m256 v)
{
	__m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	h = _mm_add_ps(h, _mm_movehl_ps(h, h));
	return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

AVX2 void pfx_dots_avx2(int G, int n, int d, const float *q, int ldq, const float *K, float scale,
			float *s, int lds)
{
	const __m256i m = tail8(d % 8);
	const int whole = d - d % 8;
	int t0 = 0;
	for (; t0 + 8 <= n; t0 += 8) {
		const float *k = K + (size_t)t0 * d;
		for (int g = 0; g < G; g++) {
			const float *qg = q + (size_t)g * ldq;
			__m256 acc[8];
			for (int t = 0; t < 8; t++)
				acc[t] = _mm256_setzero_ps();
			for (int j = 0; j < whole; j += 8) {
				__m256 qv = _mm256_loadu_ps(qg + j);
				for (int t = 0; t < 8; t++) {
					if (g == 0 && j % 16 == 0) /* the next 8 keys, a line each */
						_mm_prefetch((const char *)(k + (size_t)(8 + t) * d + j), _MM_HINT_T0);
					acc[t] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + (size_t)t * d + j), acc[t]);
				}
			}
			if (whole < d) {
				__m256 qv = _mm256_maskload_ps(qg + whole, m);
				for (int t = 0; t < 8; t++)
					acc[t] = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k + (size_t)t * d + whole, m),
								 acc[t]);
			}
			_mm256_storeu_ps(s + (size_t)g * lds + t0,
					 _mm256_mul_ps(_mm256_set1_ps(scale), hsum8(acc)));
		}
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
 * GN heads (a constant once inlined) x 32 dims of output in registers
 * while V's rows stream by: 4 GN accumulators, a row's 4 vectors and the
 * GN weights fit AVX2's 16 registers for GN up to 2. Rows AXPYS_AHEAD
 * ahead are prefetched, as in gemv.c's AVX-512 form (V comes in runs of
 * one block, each a new stream for the hardware prefetcher).
 */
#define AXPYS_AHEAD 16

AVX2 __attribute__((always_inline)) static inline void
axpys_block(const int GN, int n, int d, int j0, const float *p, int ldp, const float *V, float *o,
	    int ldo)
{
	__m256 acc[2][4];
	__m256i m[4];
	for (int c = 0; c < 4; c++)
		m[c] = tail8(d - j0 - 8 * c);
	for (int g = 0; g < GN; g++)
		for (int c = 0; c < 4; c++)
			acc[g][c] = _mm256_maskload_ps(o + (size_t)g * ldo + j0 + 8 * c, m[c]);
	for (int t = 0; t < n; t++) {
		const float *v = V + (size_t)t * d + j0;
		if (t + AXPYS_AHEAD < n)
			for (int c = 0; c < 4; c += 2)
				if (j0 + 8 * c < d)
					_mm_prefetch((const char *)(v + AXPYS_AHEAD * (size_t)d + 8 * c), _MM_HINT_T0);
		__m256 vv[4];
		for (int c = 0; c < 4; c++)
			vv[c] = _mm256_maskload_ps(v + 8 * c, m[c]);
		for (int g = 0; g < GN; g++) {
			__m256 w = _mm256_broadcast_ss(p + (size_t)g * ldp + t);
			for (int c = 0; c < 4; c++)
				acc[g][c] = _mm256_fmadd_ps(w, vv[c], acc[g][c]);
		}
	}
	for (int g = 0; g < GN; g++)
		for (int c = 0; c < 4; c++)
			_mm256_maskstore_ps(o + (size_t)g * ldo + j0 + 8 * c, m[c], acc[g][c]);
}

AVX2 static void axpys_1(int n, int d, int j0, const float *p, int ldp, const float *V, float *o,
			 int ldo)
{
	axpys_block(1, n, d, j0, p, ldp, V, o, ldo);
}

AVX2 static void axpys_2(int n, int d, int j0, const float *p, int ldp, const float *V, float *o,
			 int ldo)
{
	axpys_block(2, n, d, j0, p, ldp, V, o, ldo);
}

/* More heads, or wider ones, take further passes over V (by then in cache). */
void pfx_axpys_avx2(int G, int n, int d, const float *p, int ldp, const float *V, float *o, int ldo)
{
	for (int g0 = 0; g0 < G; g0 += 2)
		for (int j0 = 0; j0 < d; j0 += 32)
			(G - g0 >= 2 ? axpys_2 : axpys_1)(n, d, j0, p + (size_t)g0 * ldp, ldp, V,
							 o + (size_t)g0 * ldo, ldo);
}

AVX2 float pfx_exp_sum_avx2(float *x, int n, float *max_out)
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

AVX2 void pfx_silu_mul_avx2(float *y, const float *up, int n)
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
