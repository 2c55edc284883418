/* SPDX-License-Identifier: MIT */
/*
 * Weight matrices as the model holds them: f32, or a checkpoint's f16 and
 * bf16 values kept as they are, which the kernels convert to f32 as they
 * read them (bf16: a shift; f16: F16C). Every product then sees exactly the
 * f32 values an upcast copy would hold, at half the bytes read.
 */
#ifndef PFX_WEIGHT_H
#define PFX_WEIGHT_H

#include <stddef.h>
#include <stdint.h>

enum pfx_wtype { PFX_W_F32, PFX_W_F16, PFX_W_BF16 };

struct pfx_wmat {
	const void *p;         /* row-major (out, in) elements of type */
	enum pfx_wtype type;
};

static inline size_t pfx_wtype_size(enum pfx_wtype t)
{
	return t == PFX_W_F32 ? 4 : 2;
}

/* The matrix from element `elems` on (a row offset times the row length). */
static inline struct pfx_wmat pfx_wmat_at(struct pfx_wmat w, size_t elems)
{
	return (struct pfx_wmat){ (const char *)w.p + elems * pfx_wtype_size(w.type), w.type };
}

float pfx_f16_to_f32(uint16_t h);
float pfx_bf16_to_f32(uint16_t h);
/* Round to nearest even, as PyTorch's .to(float16 / bfloat16) does. */
uint16_t pfx_f32_to_f16(float f);
uint16_t pfx_f32_to_bf16(float f);

/* dst[i] = w's element i as f32, for i < n: rows of a 16-bit matrix for the
 * products that read f32 (embeddings, panels for sgemm), KV for attention. */
void pfx_wmat_to_f32(struct pfx_wmat w, size_t n, float *dst);
/* The other way, rounding to nearest even: n values of src stored at dst
 * as elements of type t (the KV a forward pass writes). */
void pfx_f32_to_wtype(enum pfx_wtype t, const float *src, size_t n, void *dst);

#endif
