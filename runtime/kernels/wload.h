/* SPDX-License-Identifier: MIT */
/*
 * Vector loads of weights of any kern_wtype as f32, for the kernels: the
 * conversion happens in registers, so 16-bit weights are read at half the
 * bytes and never stored as f32. Inlined into the callers' target regions
 * with the type a constant, each kernel instance has a single load form.
 */
#ifndef PFX_WLOAD_H
#define PFX_WLOAD_H

#include <immintrin.h>
#include <string.h>

#include "kernels.h"

/* Element i of the weights at p. */
static inline float w_elem(const void *p, enum kern_wtype t, size_t i)
{
	uint16_t h;
	float f;
	switch (t) {
	case KERN_W_F32:
		memcpy(&f, (const char *)p + 4 * i, 4);
		return f;
	case KERN_W_F16:
		memcpy(&h, (const char *)p + 2 * i, 2);
		return kern_f16_to_f32(h);
	default:
		memcpy(&h, (const char *)p + 2 * i, 2);
		return kern_bf16_to_f32(h);
	}
}

/* 16 weights from element i. */
__attribute__((target("avx512f"), always_inline))
static inline __m512 w_load16(const void *p, enum kern_wtype t, size_t i)
{
	if (t == KERN_W_F32)
		return _mm512_loadu_ps((const float *)p + i);
	__m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i));
	if (t == KERN_W_F16)
		return _mm512_cvtph_ps(h);
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* 16 floats as bf16, rounded to nearest even; NaN stays a quiet NaN (as
 * kern_f32_to_bf16). Integer arithmetic, not VCVTNEPS2BF16, so that no
 * caller needs AVX512-BF16 (the AMX path, weight conversions). */
__attribute__((target("avx512f"), always_inline))
static inline __m256i w_round16_bf16(__m512 v)
{
	__m512i u = _mm512_castps_si512(v);
	__m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
	__m512i bias = _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff));
	__m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
	__mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
						 _mm512_set1_epi32(0x7f800000));
	r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
	return _mm512_cvtepi32_epi16(r);
}

/* 8 weights from element i (AVX2; f16 needs F16C). */
__attribute__((target("avx2,f16c"), always_inline))
static inline __m256 w_load8(const void *p, enum kern_wtype t, size_t i)
{
	if (t == KERN_W_F32)
		return _mm256_loadu_ps((const float *)p + i);
	__m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
	if (t == KERN_W_F16)
		return _mm256_cvtph_ps(h);
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

#endif
