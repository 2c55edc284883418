/* SPDX-License-Identifier: MIT */
/*
 * Bandwidth-bound matrix-vector products. One row of W at a time keeps the
 * access pattern a single sequential stream, which the hardware prefetcher
 * follows best. Measured on the development machine (2 threads, 49152 x
 * 576): 8-row blocking 26 GB/s, this kernel 31 GB/s, streaming read test
 * 31 GB/s. The AVX-512 kernel issues no software prefetch: in whole decode
 * steps (ops.c streaming each thread's share in 64 KiB chunks), prefetching
 * 8 or 16 KiB ahead made steps 5-9% slower than leaving it to the hardware
 * (4 interleaved A/B runs of 80-160 tokens). The AVX2 one keeps its
 * prefetch, unmeasured without it.
 */
#include "kernels.h"

#include "exp512.h"
#include "vec_avx2.h"
#include "wload.h"

#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define PREFETCH_BYTES 8192 /* the f32 kernel's 2048 floats ahead */

static float finish(float acc, float beta, const float *y)
{
	return beta == 0.0f ? acc : acc + beta * *y;
}

/* The kernels below are written once for every weight type WT and row
 * count T, constants in each instance (gemv_fn), so the conversion is one
 * instruction a load and the T x 2 accumulators stay in registers (with T
 * a variable, -O2 kept them on the stack: a load and a store around every
 * FMA, which 16-bit weights, streaming twice as fast, could not hide). */
__attribute__((target("avx512f,fma"), always_inline))
static inline void gemv_avx512(const enum kern_wtype WT, int T, int n, int k, const void *W,
			       const float *x, int ldx, float beta, float *y, int ldy)
{
	for (int i = 0; i < n; i++) {
		size_t r = (size_t)i * k;
		__m512 acc[GEMV_MAX_T][2];
#pragma GCC unroll 4
		for (int t = 0; t < T; t++)
			acc[t][0] = acc[t][1] = _mm512_setzero_ps();
		int j = 0;
		for (; j + 32 <= k; j += 32) {
			__m512 w0 = w_load16(W, WT, r + j), w1 = w_load16(W, WT, r + j + 16);
#pragma GCC unroll 4
			for (int t = 0; t < T; t++) {
				const float *xt = x + (size_t)t * ldx + j;
				acc[t][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xt), acc[t][0]);
				acc[t][1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xt + 16), acc[t][1]);
			}
		}
#pragma GCC unroll 4
		for (int t = 0; t < T; t++) {
			const float *xt = x + (size_t)t * ldx;
			float s = _mm512_reduce_add_ps(_mm512_add_ps(acc[t][0], acc[t][1]));
			for (int jj = j; jj < k; jj++)
				s += w_elem(W, WT, r + jj) * xt[jj];
			float *yt = y + (size_t)t * ldy + i;
			*yt = finish(s, beta, yt);
		}
	}
}

__attribute__((target("avx2,fma,f16c"), always_inline))
static inline void gemv_avx2(const enum kern_wtype WT, int T, int n, int k, const void *W,
			     const float *x, int ldx, float beta, float *y, int ldy)
{
	const size_t esz = kern_wtype_size(WT);
	for (int i = 0; i < n; i++) {
		size_t r = (size_t)i * k;
		__m256 acc[GEMV_MAX_T][2];
#pragma GCC unroll 4
		for (int t = 0; t < T; t++)
			acc[t][0] = acc[t][1] = _mm256_setzero_ps();
		int j = 0;
		for (; j + 16 <= k; j += 16) {
			_mm_prefetch((const char *)W + (r + j) * esz + PREFETCH_BYTES, _MM_HINT_T0);
			__m256 w0 = w_load8(W, WT, r + j), w1 = w_load8(W, WT, r + j + 8);
#pragma GCC unroll 4
			for (int t = 0; t < T; t++) {
				const float *xt = x + (size_t)t * ldx + j;
				acc[t][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xt), acc[t][0]);
				acc[t][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xt + 8), acc[t][1]);
			}
		}
#pragma GCC unroll 4
		for (int t = 0; t < T; t++) {
			const float *xt = x + (size_t)t * ldx;
			__m256 v = _mm256_add_ps(acc[t][0], acc[t][1]);
			__m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
			h = _mm_add_ps(h, _mm_movehl_ps(h, h));
			h = _mm_add_ss(h, _mm_movehdup_ps(h));
			float s = _mm_cvtss_f32(h);
			for (int jj = j; jj < k; jj++)
				s += w_elem(W, WT, r + jj) * xt[jj];
			float *yt = y + (size_t)t * ldy + i;
			*yt = finish(s, beta, yt);
		}
	}
}

static void gemv_scalar(enum kern_wtype wt, int T, int n, int k, const void *W, const float *x,
			int ldx, float beta, float *y, int ldy)
{
	for (int i = 0; i < n; i++)
		for (int t = 0; t < T; t++) {
			const float *xt = x + (size_t)t * ldx;
			float s = 0;
			for (int j = 0; j < k; j++)
				s += w_elem(W, wt, (size_t)i * k + j) * xt[j];
			float *yt = y + (size_t)t * ldy + i;
			*yt = finish(s, beta, yt);
		}
}

typedef void (*gemv_fn)(int T, int n, int k, const void *W, const float *x, int ldx, float beta,
			float *y, int ldy);

#define GEMV_INSTANCES(isa, isa_target, WT, name)                                              \
	__attribute__((target(isa_target))) static void gemv_##isa##_##name(                  \
		int T, int n, int k, const void *W, const float *x, int ldx, float beta, float *y, \
		int ldy)                                                                         \
	{                                                                                        \
		switch (T) {                                                                     \
		case 1: gemv_##isa(WT, 1, n, k, W, x, ldx, beta, y, ldy); break;                 \
		case 2: gemv_##isa(WT, 2, n, k, W, x, ldx, beta, y, ldy); break;                 \
		case 3: gemv_##isa(WT, 3, n, k, W, x, ldx, beta, y, ldy); break;                 \
		default: gemv_##isa(WT, GEMV_MAX_T, n, k, W, x, ldx, beta, y, ldy); break;        \
		}                                                                                \
	}
GEMV_INSTANCES(avx512, "avx512f,fma", KERN_W_F32, f32)
GEMV_INSTANCES(avx512, "avx512f,fma", KERN_W_F16, f16)
GEMV_INSTANCES(avx512, "avx512f,fma", KERN_W_BF16, bf16)
GEMV_INSTANCES(avx2, "avx2,fma,f16c", KERN_W_F32, f32)
GEMV_INSTANCES(avx2, "avx2,fma,f16c", KERN_W_F16, f16)
GEMV_INSTANCES(avx2, "avx2,fma,f16c", KERN_W_BF16, bf16)

static const gemv_fn gemv_avx512_of[3] = { gemv_avx512_f32, gemv_avx512_f16, gemv_avx512_bf16 };
static const gemv_fn gemv_avx2_of[3] = { gemv_avx2_f32, gemv_avx2_f16, gemv_avx2_bf16 };

void kern_gemv(int T, int n, int k, struct kern_wmat W, const float *x, int ldx, float beta,
	       float *y, int ldy)
{
	/* Decided once per process (cpu.c). */
	if (kern_cpu_avx512())
		gemv_avx512_of[W.type](T, n, k, W.p, x, ldx, beta, y, ldy);
	else if (kern_cpu_avx2())
		gemv_avx2_of[W.type](T, n, k, W.p, x, ldx, beta, y, ldy);
	else
		gemv_scalar(W.type, T, n, k, W.p, x, ldx, beta, y, ldy);
}

/* ==== Decode attention and activations ==== */

/* Lanes [0, left) of a 16-float vector, for tails of rows not a multiple of 16. */
__attribute__((target("avx512f")))
static __mmask16 tail_mask(int left)
{
	return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
}

/*
 * The horizontal sums of 8 vectors as one 8-float vector (lane i: the sum
 * of v[i]): pairs within 128-bit lanes, then across them.
 */
__attribute__((target("avx512f"), always_inline))
static inline __m256 hsum8(const __m512 v[8])
{
	__m512 p[4];
#pragma GCC unroll 4
	for (int i = 0; i < 4; i++)
		p[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
				     _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
	/* each 128-bit lane: partial sums of v0..v3, then of v4..v7 */
	__m512 a = _mm512_add_ps(_mm512_shuffle_ps(p[0], p[1], 0x44), _mm512_shuffle_ps(p[0], p[1], 0xee));
	__m512 b = _mm512_add_ps(_mm512_shuffle_ps(p[2], p[3], 0x44), _mm512_shuffle_ps(p[2], p[3], 0xee));
	/* 128-bit lanes: a0 + a2, a1 + a3, b0 + b2, b1 + b3 */
	__m512 x = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xee));
	__m512 y = _mm512_add_ps(_mm512_shuffle_f32x4(x, x, 0x08), _mm512_shuffle_f32x4(x, x, 0x0d));
	return _mm512_castps512_ps256(y);
}

/*
 * Scores of GB (a constant once inlined, at most DOTS_HEADS) query heads
 * on 8 keys of d = 16 x dc dims: each line of the keys is loaded once, for
 * all GB heads (the queries are read from L1). A kernel that passed over
 * the keys once per query head read them from memory at half the rate of
 * the values: the passes after the first wait on the same missing lines
 * and fill the reorder buffer, so the loads of the next keys issue late
 * (one thread, keys not in cache, SmolLM's 3 heads of 64 dims: 14-16 GB/s
 * against 31 GB/s for this one).
 *
 * Even so, with ~8 instructions a cache line the reorder buffer holds only
 * ~2 KiB of loads, and in a decode step (where the hardware prefetcher
 * finds runs of 16 KiB between streams of weights) the scores took as long
 * as a plain read of keys and values together. Each line is prefetched
 * into L2 (T1) DOTS_AHEAD bytes ahead: attention 37.6-41.5 -> 31.7-34.8 us
 * a layer at a 52-57 GB/s probe, 37.4-39.0 -> 32.1-34.7 at 30-34 (bf16
 * SmolLM shape, 512-612 keys, with the value pass's prefetch below also
 * into L2; 4 KiB beat 8 and 16, and T0 gained nothing). The address may
 * lie past the keys: a prefetch never faults.
 */
#define DOTS_KEYS 8
#define DOTS_HEADS 3
#define DOTS_AHEAD 4096

__attribute__((target("avx512f,fma"), always_inline))
static inline void dots_keys(const int GB, int dc, const float *q, int ldq, const float *k,
			     float scale, float *s, int lds)
{
	const int d = 16 * dc;
	__m512 acc[DOTS_HEADS][DOTS_KEYS];
#pragma GCC unroll 3
	for (int g = 0; g < GB; g++)
#pragma GCC unroll 8
		for (int t = 0; t < DOTS_KEYS; t++)
			acc[g][t] = _mm512_setzero_ps();
#pragma GCC unroll 8
	for (int t = 0; t < DOTS_KEYS; t++)
		for (int c = 0; c < dc; c++) {
			_mm_prefetch((const char *)((uintptr_t)(k + (size_t)t * d + 16 * c) + DOTS_AHEAD),
				     _MM_HINT_T1);
			__m512 kv = _mm512_loadu_ps(k + (size_t)t * d + 16 * c);
#pragma GCC unroll 3
			for (int g = 0; g < GB; g++)
				acc[g][t] = _mm512_fmadd_ps(kv, _mm512_loadu_ps(q + (size_t)g * ldq + 16 * c),
							    acc[g][t]);
		}
#pragma GCC unroll 3
	for (int g = 0; g < GB; g++)
		_mm256_storeu_ps(s + (size_t)g * lds, _mm256_mul_ps(_mm256_set1_ps(scale), hsum8(acc[g])));
}

typedef void (*dots_fn)(int dc, const float *q, int ldq, const float *k, float scale, float *s,
			int lds);
#define DOTS(GB)                                                                               \
	__attribute__((target("avx512f,fma"))) static void dots_keys_##GB(                    \
		int dc, const float *q, int ldq, const float *k, float scale, float *s, int lds) \
	{                                                                                      \
		dots_keys(GB, dc, q, ldq, k, scale, s, lds);                                   \
	}
DOTS(1)
DOTS(2)
DOTS(3)

/* Scores of G query heads on n keys: runs of DOTS_KEYS keys for heads of a
 * multiple of 16 dims, one key at a time for the rest. */
__attribute__((target("avx512f,fma")))
static void dots_avx512(int G, int n, int d, const float *q, int ldq, const float *K, float scale,
			float *s, int lds)
{
	static const dots_fn fn[DOTS_HEADS] = { dots_keys_1, dots_keys_2, dots_keys_3 };
	int t0 = 0;
	if (d % 16 == 0)
		for (; t0 + DOTS_KEYS <= n; t0 += DOTS_KEYS)
			for (int g0 = 0; g0 < G; g0 += DOTS_HEADS) {
				int gb = G - g0 < DOTS_HEADS ? G - g0 : DOTS_HEADS;
				fn[gb - 1](d / 16, q + (size_t)g0 * ldq, ldq, K + (size_t)t0 * d, scale,
					   s + (size_t)g0 * lds + t0, lds);
			}
	for (int t = t0; t < n; t++) {
		const float *k = K + (size_t)t * d;
		for (int g = 0; g < G; g++) {
			const float *qg = q + (size_t)g * ldq;
			__m512 acc = _mm512_setzero_ps();
			for (int j = 0; j < d; j += 16) {
				__mmask16 m = tail_mask(d - j);
				acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, qg + j),
						      _mm512_maskz_loadu_ps(m, k + j), acc);
			}
			s[(size_t)g * lds + t] = scale * _mm512_reduce_add_ps(acc);
		}
	}
}

/*
 * GN (a constant once inlined) heads x 64 dims of output in registers while
 * V streams by once; the weights are broadcast straight from memory. Each
 * GN has a function of its own (axpys_fn): with the four inlined into one,
 * the register allocator kept the accumulators on the stack, and the
 * values took twice as long as reading them (2 threads at 768 keys of the
 * SmolLM shape). The loops over heads and columns are unrolled by pragma:
 * without it gcc 12 stored all 16 accumulators to the stack after every
 * key, and the kernel computed 26 GB/s of values in cache instead of 65
 * (one thread). Rows 16 ahead are prefetched: V is read in runs of one
 * block (64 keys, 16 KiB), each a new stream for the hardware prefetcher
 * (1.2-1.3 -> 1.0 ms for those keys' values, one thread); into L2, as the
 * keys are (dots_keys).
 */
#define AXPYS_AHEAD 16

__attribute__((target("avx512f,fma"), always_inline))
static inline void axpys_block(const int GN, int n, int d, int j0, const float *p, int ldp,
			       const float *V, float *o, int ldo)
{
	__m512 acc[4][4];
	__mmask16 m[4];
#pragma GCC unroll 4
	for (int c = 0; c < 4; c++)
		m[c] = j0 + 16 * c < d ? tail_mask(d - j0 - 16 * c) : 0;
#pragma GCC unroll 4
	for (int g = 0; g < GN; g++)
#pragma GCC unroll 4
		for (int c = 0; c < 4; c++)
			acc[g][c] = _mm512_maskz_loadu_ps(m[c], o + (size_t)g * ldo + j0 + 16 * c);
	for (int t = 0; t < n; t++) {
		const float *v = V + (size_t)t * d + j0;
		if (t + AXPYS_AHEAD < n)
#pragma GCC unroll 4
			for (int c = 0; c < 4; c++)
				if (m[c])
					_mm_prefetch((const char *)(v + AXPYS_AHEAD * (size_t)d + 16 * c),
						     _MM_HINT_T1);
		__m512 vv[4];
#pragma GCC unroll 4
		for (int c = 0; c < 4; c++)
			vv[c] = _mm512_maskz_loadu_ps(m[c], v + 16 * c);
#pragma GCC unroll 4
		for (int g = 0; g < GN; g++) {
			__m512 w = _mm512_set1_ps(p[(size_t)g * ldp + t]);
#pragma GCC unroll 4
			for (int c = 0; c < 4; c++)
				acc[g][c] = _mm512_fmadd_ps(w, vv[c], acc[g][c]);
		}
	}
#pragma GCC unroll 4
	for (int g = 0; g < GN; g++)
#pragma GCC unroll 4
		for (int c = 0; c < 4; c++)
			_mm512_mask_storeu_ps(o + (size_t)g * ldo + j0 + 16 * c, m[c], acc[g][c]);
}

typedef void (*axpys_fn)(int n, int d, int j0, const float *p, int ldp, const float *V, float *o,
			 int ldo);
#define AXPYS(GN)                                                                              \
	__attribute__((target("avx512f,fma"))) static void axpys_##GN(                        \
		int n, int d, int j0, const float *p, int ldp, const float *V, float *o, int ldo) \
	{                                                                                      \
		axpys_block(GN, n, d, j0, p, ldp, V, o, ldo);                                  \
	}
AXPYS(1)
AXPYS(2)
AXPYS(3)
AXPYS(4)

/* Wider heads, or more than 4 per KV head, take further passes over V
 * (by then in cache). */
static void axpys_avx512(int G, int n, int d, const float *p, int ldp, const float *V, float *o,
			 int ldo)
{
	static const axpys_fn fn[4] = { axpys_1, axpys_2, axpys_3, axpys_4 };
	for (int g0 = 0; g0 < G; g0 += 4) {
		int gn = G - g0 < 4 ? G - g0 : 4;
		for (int j0 = 0; j0 < d; j0 += 64)
			fn[gn - 1](n, d, j0, p + (size_t)g0 * ldp, ldp, V, o + (size_t)g0 * ldo, ldo);
	}
}

__attribute__((target("avx512f,fma")))
static float exp_sum_avx512(float *x, int n, float *max_out)
{
	__m512 mv = _mm512_set1_ps(-INFINITY);
	for (int i = 0; i < n; i += 16)
		mv = _mm512_max_ps(mv, _mm512_mask_loadu_ps(mv, tail_mask(n - i), x + i));
	float mx = _mm512_reduce_max_ps(mv);
	__m512 sum = _mm512_setzero_ps(), shift = _mm512_set1_ps(mx);
	for (int i = 0; i < n; i += 16) {
		__mmask16 m = tail_mask(n - i);
		__m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), shift));
		_mm512_mask_storeu_ps(x + i, m, e);
		sum = _mm512_mask_add_ps(sum, m, sum, e);
	}
	*max_out = mx;
	return _mm512_reduce_add_ps(sum);
}

/* Column by column in the registers of TV vectors, row by row in memory:
 * rows of S are 16 TV floats, so each pass reads S once, in order. */
__attribute__((target("avx512f,fma"), always_inline))
static inline void softmax_cols_avx512(const int TV, float *S, int n, int ld, const int *valid,
				       float *inv)
{
	__m512i lim[4];
	__m512 mx[4], sum[4];
	for (int v = 0; v < TV; v++) {
		lim[v] = _mm512_loadu_si512(valid + 16 * v);
		mx[v] = _mm512_set1_ps(-INFINITY);
		sum[v] = _mm512_setzero_ps();
	}
	for (int j = 0; j < n; j++)
		for (int v = 0; v < TV; v++) {
			__mmask16 m = _mm512_cmpgt_epi32_mask(lim[v], _mm512_set1_epi32(j));
			mx[v] = _mm512_mask_max_ps(mx[v], m, mx[v], _mm512_loadu_ps(S + (size_t)j * ld + 16 * v));
		}
	for (int j = 0; j < n; j++)
		for (int v = 0; v < TV; v++) {
			__mmask16 m = _mm512_cmpgt_epi32_mask(lim[v], _mm512_set1_epi32(j));
			float *row = S + (size_t)j * ld + 16 * v;
			__m512 e = _mm512_maskz_mov_ps(m, exp512(_mm512_sub_ps(_mm512_loadu_ps(row), mx[v])));
			_mm512_storeu_ps(row, e);
			sum[v] = _mm512_add_ps(sum[v], e);
		}
	for (int v = 0; v < TV; v++)
		_mm512_storeu_ps(inv + 16 * v, _mm512_div_ps(_mm512_set1_ps(1.0f), sum[v]));
}

#define SOFTMAX_COLS(TV)                                                                       \
	__attribute__((target("avx512f,fma"))) static void softmax_cols_##TV(                 \
		float *S, int n, int ld, const int *valid, float *inv)                        \
	{                                                                                      \
		softmax_cols_avx512(TV, S, n, ld, valid, inv);                                 \
	}
SOFTMAX_COLS(1)
SOFTMAX_COLS(2)
SOFTMAX_COLS(3)
SOFTMAX_COLS(4)

__attribute__((target("avx512f,fma")))
static void silu_mul_avx512(float *y, const float *up, int n)
{
	const __m512 one = _mm512_set1_ps(1.0f);
	for (int i = 0; i < n; i += 16) {
		__mmask16 m = tail_mask(n - i);
		__m512 v = _mm512_maskz_loadu_ps(m, y + i);
		__m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), v));
		__m512 r = _mm512_mul_ps(_mm512_div_ps(v, _mm512_add_ps(one, e)),
					 _mm512_maskz_loadu_ps(m, up + i));
		_mm512_mask_storeu_ps(y + i, m, r);
	}
}

void kern_dots(int G, int n, int d, const float *q, int ldq, const float *K, float scale, float *s,
	       int lds)
{
	if (kern_cpu_avx512()) {
		dots_avx512(G, n, d, q, ldq, K, scale, s, lds);
		return;
	}
	if (kern_cpu_avx2()) {
		kern_dots_avx2(G, n, d, q, ldq, K, scale, s, lds);
		return;
	}
	for (int t = 0; t < n; t++)
		for (int g = 0; g < G; g++) {
			float acc = 0;
			for (int j = 0; j < d; j++)
				acc += q[(size_t)g * ldq + j] * K[(size_t)t * d + j];
			s[(size_t)g * lds + t] = scale * acc;
		}
}

void kern_axpys(int G, int n, int d, const float *p, int ldp, const float *V, float *o, int ldo)
{
	if (kern_cpu_avx512()) {
		axpys_avx512(G, n, d, p, ldp, V, o, ldo);
		return;
	}
	if (kern_cpu_avx2()) {
		kern_axpys_avx2(G, n, d, p, ldp, V, o, ldo);
		return;
	}
	for (int g = 0; g < G; g++)
		for (int t = 0; t < n; t++)
			for (int j = 0; j < d; j++)
				o[(size_t)g * ldo + j] += p[(size_t)g * ldp + t] * V[(size_t)t * d + j];
}

float kern_exp_sum(float *x, int n, float *max_out)
{
	if (kern_cpu_avx512())
		return exp_sum_avx512(x, n, max_out);
	if (kern_cpu_avx2())
		return kern_exp_sum_avx2(x, n, max_out);
	float mx = -INFINITY, sum = 0;
	for (int i = 0; i < n; i++)
		mx = x[i] > mx ? x[i] : mx;
	for (int i = 0; i < n; i++) {
		x[i] = expf(x[i] - mx);
		sum += x[i];
	}
	*max_out = mx;
	return sum;
}

void kern_softmax_cols(float *S, int n, int ld, const int *valid, float *inv)
{
	static void (*const fn[4])(float *, int, int, const int *, float *) = {
		softmax_cols_1, softmax_cols_2, softmax_cols_3, softmax_cols_4,
	};
	if (kern_cpu_avx512() && ld % 16 == 0 && ld <= 64) {
		fn[ld / 16 - 1](S, n, ld, valid, inv);
		return;
	}
	/* Attention calls this only where the vector path runs: the loop is
	 * the reference, and what other widths get. */
	for (int t = 0; t < ld; t++) {
		float mx = -INFINITY, sum = 0;
		for (int j = 0; j < valid[t] && j < n; j++)
			mx = fmaxf(mx, S[(size_t)j * ld + t]);
		for (int j = 0; j < n; j++) {
			float *e = &S[(size_t)j * ld + t];
			*e = j < valid[t] ? expf(*e - mx) : 0.0f;
			sum += *e;
		}
		inv[t] = 1.0f / sum;
	}
}

void kern_silu_mul(float *y, const float *up, int n)
{
	if (kern_cpu_avx512()) {
		silu_mul_avx512(y, up, n);
		return;
	}
	if (kern_cpu_avx2()) {
		kern_silu_mul_avx2(y, up, n);
		return;
	}
	for (int i = 0; i < n; i++)
		y[i] = y[i] / (1.0f + expf(-y[i])) * up[i];
}

/*
 * Over eight running sums: with one, the chain of dependent adds made a
 * norm of one decode row (hidden 576) take 0.95-1.04 us, with eight
 * 0.62-0.68 (AMD EPYC, timed op by op). A decode step runs 61 such norms
 * on one thread while the other waits.
 */
double kern_row_sum(const float *x, int n, double shift, bool square)
{
	double s[8] = { 0 };
	int i = 0;
	for (; i + 8 <= n; i += 8)
		for (int k = 0; k < 8; k++) {
			double v = x[i + k] - shift;
			s[k] += square ? v * v : v;
		}
	for (int k = 0; i < n; i++, k++) {
		double v = x[i] - shift;
		s[k] += square ? v * v : v;
	}
	return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}
