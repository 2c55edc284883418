/* SPDX-License-Identifier: MIT */
/* 16-bit weights to f32: scalar conversions and the row conversion. */
#include "kernels.h"

#include "wload.h"

#include <immintrin.h>
#include <string.h>

float kern_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
	uint32_t bits;
	if (exp == 0x1f) {
		bits = sign | 0x7f800000u | man << 13;
	} else if (exp) {
		bits = sign | (exp + 112) << 23 | man << 13;
	} else if (man) { /* subnormal: normalise */
		int e = -1;
		do {
			man <<= 1;
			e++;
		} while (!(man & 0x400));
		bits = sign | (uint32_t)(112 - e) << 23 | (man & 0x3ff) << 13;
	} else {
		bits = sign;
	}
	float f;
	memcpy(&f, &bits, 4);
	return f;
}

float kern_bf16_to_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* By hand rather than a _Float16 cast: clang 14 (the fuzz build) lowers
 * that to a libgcc helper it does not link. */
uint16_t kern_f32_to_f16(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	uint16_t sign = (uint16_t)(x >> 16 & 0x8000);
	uint32_t ax = x & 0x7fffffffu;
	if (ax > 0x7f800000u) /* NaN: quiet, keeping the payload's top bits */
		return (uint16_t)(sign | 0x7e00 | (ax >> 13 & 0x3ff));
	if (ax >= 0x477ff000u) /* 65520 and up round to infinity */
		return (uint16_t)(sign | 0x7c00);
	if (ax >= 0x38800000u) { /* normal: round the mantissa to 10 bits, rebias */
		uint32_t r = ax + 0xfffu + (ax >> 13 & 1);
		return (uint16_t)(sign | (r - 0x38000000u) >> 13);
	}
	if (ax < 0x33000000u) /* below 2^-25 (a tie at it goes to even: 0) */
		return sign;
	/* subnormal: the 24-bit significand in units of 2^-24, rounded */
	uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, shift = 126 - e;
	uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
	q += rem > half || (rem == half && (q & 1));
	return (uint16_t)(sign | q);
}

uint16_t kern_f32_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)(u >> 16 | 0x40); /* NaN stays a (quiet) NaN */
	return (uint16_t)((u + 0x7fffu + (u >> 16 & 1)) >> 16);
}

__attribute__((target("avx512f")))
static void to_f32_avx512(struct kern_wmat w, size_t n, float *d)
{
	size_t i = 0;
	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(d + i, w_load16(w.p, w.type, i));
	for (; i < n; i++)
		d[i] = w_elem(w.p, w.type, i);
}

/* 16 floats as 16-bit values of type t, rounded as the scalar functions do. */
__attribute__((target("avx512f"), always_inline))
static inline __m256i to16_avx512(__m512 v, enum kern_wtype t)
{
	if (t == KERN_W_F16)
		return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	return w_round16_bf16(v);
}

__attribute__((target("avx512f")))
static void from_f32_avx512(enum kern_wtype t, const float *src, size_t n, void *dst)
{
	size_t i = 0;
	for (; i + 16 <= n; i += 16)
		_mm256_storeu_si256((__m256i *)((uint16_t *)dst + i), to16_avx512(_mm512_loadu_ps(src + i), t));
	for (; i < n; i++) {
		uint16_t h = t == KERN_W_F16 ? kern_f32_to_f16(src[i]) : kern_f32_to_bf16(src[i]);
		memcpy((uint16_t *)dst + i, &h, 2);
	}
}

__attribute__((target("avx2,f16c")))
static void to_f32_avx2(struct kern_wmat w, size_t n, float *d)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(d + i, w_load8(w.p, w.type, i));
	for (; i < n; i++)
		d[i] = w_elem(w.p, w.type, i);
}

/* 8 floats as 16-bit values of type t, rounded as the scalar functions do. */
__attribute__((target("avx2,f16c"), always_inline))
static inline __m128i to16_avx2(__m256 v, enum kern_wtype t)
{
	if (t == KERN_W_F16)
		return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256i u = _mm256_castps_si256(v);
	__m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
	__m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
	/* NaN: the top half, made quiet. Signed compares: abs(u) is below 2^31. */
	__m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
					 _mm256_set1_epi32(0x7f800000));
	__m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
	r = _mm256_blendv_epi8(r, q, nan);
	return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

__attribute__((target("avx2,f16c")))
static void from_f32_avx2(enum kern_wtype t, const float *src, size_t n, void *dst)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm_storeu_si128((__m128i *)((uint16_t *)dst + i), to16_avx2(_mm256_loadu_ps(src + i), t));
	for (; i < n; i++) {
		uint16_t h = t == KERN_W_F16 ? kern_f32_to_f16(src[i]) : kern_f32_to_bf16(src[i]);
		memcpy((uint16_t *)dst + i, &h, 2);
	}
}

void kern_f32_to_wtype(enum kern_wtype t, const float *src, size_t n, void *dst)
{
	if (t == KERN_W_F32) {
		memcpy(dst, src, n * sizeof(float));
		return;
	}
	if (kern_cpu_avx512()) {
		from_f32_avx512(t, src, n, dst);
		return;
	}
	if (kern_cpu_avx2()) {
		from_f32_avx2(t, src, n, dst);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		uint16_t h = t == KERN_W_F16 ? kern_f32_to_f16(src[i]) : kern_f32_to_bf16(src[i]);
		memcpy((char *)dst + 2 * i, &h, 2);
	}
}

void kern_wmat_to_f32(struct kern_wmat w, size_t n, float *dst)
{
	if (w.type == KERN_W_F32) {
		memcpy(dst, w.p, n * sizeof(float));
		return;
	}
	if (kern_cpu_avx512()) {
		to_f32_avx512(w, n, dst);
		return;
	}
	if (kern_cpu_avx2()) {
		to_f32_avx2(w, n, dst);
		return;
	}
	for (size_t i = 0; i < n; i++)
		dst[i] = w_elem(w.p, w.type, i);
}
