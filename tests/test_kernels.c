/* SPDX-License-Identifier: MIT */
/* The hand-written kernels against plain double-precision loops, over
 * every row count they serve and widths with tails. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels.h"

static float val(uint32_t *seed)
{
	*seed = *seed * 1664525u + 1013904223u;
	return (float)((*seed >> 9) % 2001) / 1000.0f - 1.0f;
}

Test(kernels, few_row_products_equal_the_plain_sum)
{
	if (!kern_gemm_few_ok())
		cr_skip_test("no AVX-512 here: sgemm serves these shapes");
	enum { MAXN = 37, MAXK = 70 };
	static float W[MAXN * MAXK], x[GEMM_FEW_MAX_T * (MAXK + 1)], xt[GEMM_FEW_MAX_T * MAXK];
	static float y[GEMM_FEW_MAX_T * (MAXN + 3)], y0[GEMM_FEW_MAX_T * (MAXN + 3)];
	uint32_t seed = 1;
	const int ns[] = { 1, 6, 13, 22, MAXN }, ks[] = { 1, 16, 17, MAXK };
	/* From 1 row: the layer products use them past GEMV_MAX_T, but any
	 * T <= GEMM_FEW_MAX_T is allowed (kernels.h). */
	for (int T = 1; T <= GEMM_FEW_MAX_T; T++)
		for (int a = 0; a < 5; a++)
			for (int b = 0; b < 4; b++)
				for (int beta = 0; beta < 2; beta++) {
					int n = ns[a], k = ks[b], ldy = n + 3, ldx = k + 1;
					for (int i = 0; i < n * k; i++)
						W[i] = val(&seed);
					for (int i = 0; i < T * ldx; i++)
						x[i] = val(&seed);
					for (int i = 0; i < T * ldy; i++)
						y[i] = y0[i] = val(&seed);
					kern_gemm_few_transpose(T, k, x, ldx, xt);
					int ld = kern_gemm_few_ld(T);
					for (int p = 0; p < k; p++)
						for (int t = 0; t < ld; t++)
							cr_assert_eq(xt[p * ld + t], t < T ? x[t * ldx + p] : 0.0f,
								     "T=%d k=%d: xT[%d][%d]", T, k, p, t);
					kern_gemm_few(T, n, k, xt, W, (float)beta, y, ldy);
					for (int t = 0; t < T; t++)
						for (int i = 0; i < ldy; i++) {
							double want = y0[t * ldy + i];
							if (i < n) {
								double s = 0;
								for (int p = 0; p < k; p++)
									s += (double)W[i * k + p] * x[t * ldx + p];
								want = s + beta * want;
							}
							cr_assert(fabs(y[t * ldy + i] - want) <= 1e-5 * (1 + k),
								  "T=%d n=%d k=%d beta=%d: y[%d][%d] = %g, not %g",
								  T, n, k, beta, t, i, y[t * ldy + i], want);
						}
				}
}

/* bf16 W widened in registers gives exactly the products of its f32
 * values (the same sums in the same order), at every row count and odd
 * widths, with tails of each block size. */
Test(kernels, few_row_products_on_bf16_weights_equal_those_on_their_f32_values)
{
	if (!kern_gemm_few_ok())
		cr_skip_test("no AVX-512 here: sgemm serves these shapes");
	enum { MAXN = 61, MAXK = 577 };
	static uint16_t W16[MAXN * MAXK];
	static float W[MAXN * MAXK], x[GEMM_FEW_MAX_T * MAXK], xt[GEMM_FEW_MAX_T * MAXK];
	static float y[GEMM_FEW_MAX_T * (MAXN + 3)], y16[GEMM_FEW_MAX_T * (MAXN + 3)];
	uint32_t seed = 3;
	const int Ts[] = { 5, 16, 17, 31, 32, 33, 48, 63, 64 }, ns[] = { 1, 7, 13, 25, MAXN };
	const int ks[] = { 3, 64, 577 };
	for (int a = 0; a < 9; a++)
		for (int b = 0; b < 5; b++)
			for (int c = 0; c < 3; c++)
				for (int beta = 0; beta < 2; beta++) {
					int T = Ts[a], n = ns[b], k = ks[c], ldy = n + 3;
					for (int i = 0; i < n * k; i++) {
						W16[i] = kern_f32_to_bf16(val(&seed));
						W[i] = kern_bf16_to_f32(W16[i]);
					}
					for (int i = 0; i < T * k; i++)
						x[i] = val(&seed);
					for (int i = 0; i < T * ldy; i++)
						y[i] = y16[i] = val(&seed);
					kern_gemm_few_transpose(T, k, x, k, xt);
					kern_gemm_few(T, n, k, xt, W, (float)beta, y, ldy);
					kern_gemm_few_bf16(T, n, k, xt, W16, (float)beta, y16, ldy);
					cr_assert_eq(memcmp(y, y16, sizeof(float) * (size_t)(T * ldy)), 0,
						     "T=%d n=%d k=%d beta=%d: the bf16 products differ", T,
						     n, k, beta);
				}
}

/* Both layouts attention uses: K's rows (scores), V's columns (outputs). */
Test(kernels, transposed_products_equal_the_plain_sum)
{
	if (!kern_gemm_few_ok())
		cr_skip_test("no AVX-512 here: attention takes sgemm");
	enum { MAXN = 37, MAXK = 70, LDY = GEMM_FEW_MAX_T + 16 };
	static float W[(MAXN + 2) * (MAXK + 2)], xt[MAXK * GEMM_FEW_MAX_T];
	static float y[MAXN * LDY], y0[MAXN * LDY];
	uint32_t seed = 2;
	const int ns[] = { 1, 6, 13, 22, MAXN }, ks[] = { 1, 16, 17, MAXK };
	for (int T = 1; T <= GEMM_FEW_MAX_T; T++)
		for (int a = 0; a < 5; a++)
			for (int b = 0; b < 4; b++)
				for (int cols = 0; cols < 2; cols++)
					for (int beta = 0; beta < 2; beta++) {
						int n = ns[a], k = ks[b], ld = kern_gemm_few_ld(T);
						int sn = cols ? 1 : k + 2, sk = cols ? n + 2 : 1;
						for (size_t i = 0; i < sizeof(W) / sizeof(*W); i++)
							W[i] = val(&seed);
						for (int i = 0; i < k * ld; i++)
							xt[i] = i % ld < T ? val(&seed) : 0.0f;
						for (int i = 0; i < MAXN * LDY; i++)
							y[i] = y0[i] = val(&seed);
						kern_gemm_few_t(T, n, k, xt, W, sn, sk, (float)beta, y, LDY);
						for (int i = 0; i < MAXN; i++)
							for (int t = 0; t < LDY; t++) {
								double want = y0[i * LDY + t];
								if (i < n && t < ld) {
									double s = 0;
									for (int p = 0; p < k; p++)
										s += (double)W[i * sn + p * sk] *
										     xt[p * ld + t];
									want = s + beta * want;
								}
								cr_assert(fabs(y[i * LDY + t] - want) <= 1e-5 * (1 + k),
									  "T=%d n=%d k=%d cols=%d beta=%d: yT[%d][%d] = %g, not %g",
									  T, n, k, cols, beta, i, t, y[i * LDY + t], want);
							}
					}
}

/* Each column over its valid rows, including one row and all of them; 20
 * columns take the portable loop. */
Test(kernels, column_softmax_equals_the_plain_one)
{
	enum { N = 75, MAXLD = 64 };
	static float S[N * MAXLD], S0[N * MAXLD];
	float inv[MAXLD];
	int valid[MAXLD];
	uint32_t seed = 3;
	const int lds[] = { 16, 20, 32, 48, 64 };
	for (int a = 0; a < 5; a++) {
		int ld = lds[a];
		for (int n = 1; n <= N; n += 37) {
			for (int i = 0; i < n * ld; i++)
				S[i] = S0[i] = 8.0f * val(&seed);
			for (int t = 0; t < ld; t++)
				valid[t] = t == 0 ? 1 : t == 1 ? n : 1 + (int)((seed = seed * 1664525u + 1013904223u) % (uint32_t)n);
			kern_softmax_cols(S, n, ld, valid, inv);
			for (int t = 0; t < ld; t++) {
				double mx = -INFINITY, sum = 0;
				for (int j = 0; j < valid[t]; j++)
					mx = fmax(mx, S0[j * ld + t]);
				for (int j = 0; j < valid[t]; j++)
					sum += exp(S0[j * ld + t] - mx);
				cr_assert(fabs(inv[t] * sum - 1) <= 1e-5, "ld=%d n=%d: column %d's 1/sum %g, not %g",
					  ld, n, t, inv[t], 1 / sum);
				for (int j = 0; j < n; j++) {
					double want = j < valid[t] ? exp(S0[j * ld + t] - mx) : 0;
					cr_assert(fabs(S[j * ld + t] - want) <= 1e-6 * (1 + want),
						  "ld=%d n=%d: S[%d][%d] = %g, not %g (valid %d)", ld, n, j,
						  t, S[j * ld + t], want, valid[t]);
				}
			}
		}
	}
}

/* Weights of each type (kernels.h) as the kernels must see them: the f32
 * value of element i, through the scalar conversions. */
static void make_weights(enum kern_wtype t, int n, uint32_t *seed, void *w, float *f)
{
	for (int i = 0; i < n; i++) {
		float v = val(seed);
		if (t == KERN_W_F32) {
			((float *)w)[i] = f[i] = v;
		} else if (t == KERN_W_F16) {
			uint16_t h = kern_f32_to_f16(v);
			((uint16_t *)w)[i] = h;
			f[i] = kern_f16_to_f32(h);
		} else {
			uint16_t h = kern_f32_to_bf16(v);
			((uint16_t *)w)[i] = h;
			f[i] = kern_bf16_to_f32(h);
		}
	}
}

/* Decode products, every row count and each width up to two vector blocks
 * and a tail, for f32, f16 and bf16 weights (the -portable run: AVX2 and
 * plain C). */
Test(kernels, decode_products_equal_the_plain_sum_for_every_weight_type)
{
	enum { MAXN = 7, MAXK = 70, LDX = MAXK + 3, LDY = MAXN + 2 };
	static float Wf[MAXN * MAXK], x[GEMV_MAX_T * LDX], y[GEMV_MAX_T * LDY], y0[GEMV_MAX_T * LDY];
	static uint32_t W[MAXN * MAXK]; /* room for either width */
	uint32_t seed = 4;
	for (int t = KERN_W_F32; t <= KERN_W_BF16; t++)
		for (int T = 1; T <= GEMV_MAX_T; T++)
			for (int n = 1; n <= MAXN; n += 3)
				for (int k = 1; k <= MAXK; k++)
					for (int beta = 0; beta < 2; beta++) {
						make_weights((enum kern_wtype)t, n * k, &seed, W, Wf);
						for (int i = 0; i < T * LDX; i++)
							x[i] = val(&seed);
						for (int i = 0; i < T * LDY; i++)
							y[i] = y0[i] = val(&seed);
						struct kern_wmat w = { W, (enum kern_wtype)t };
						kern_gemv(T, n, k, w, x, LDX, (float)beta, y, LDY);
						for (int r = 0; r < T; r++)
							for (int i = 0; i < LDY; i++) {
								double want = y0[r * LDY + i];
								if (i < n) {
									double s = 0;
									for (int p = 0; p < k; p++)
										s += (double)Wf[i * k + p] * x[r * LDX + p];
									want = s + beta * want;
								}
								cr_assert(fabs(y[r * LDY + i] - want) <= 1e-5 * (1 + k),
									  "type %d T=%d n=%d k=%d beta=%d: y[%d][%d] = %g, not %g",
									  t, T, n, k, beta, r, i, y[r * LDY + i], want);
							}
					}
}

/* Rows converted for the f32 kernels (embeddings, panels): each length up
 * to two vectors and a tail, equal to the scalar conversion. */
Test(kernels, rows_convert_exactly)
{
	enum { N = 40 };
	static uint32_t W[N];
	float f[N], got[N + 1];
	uint32_t seed = 5;
	for (int t = KERN_W_F32; t <= KERN_W_BF16; t++)
		for (int n = 0; n <= N; n++) {
			make_weights((enum kern_wtype)t, N, &seed, W, f);
			got[n] = -7.0f;
			kern_wmat_to_f32((struct kern_wmat){ W, (enum kern_wtype)t }, (size_t)n, got);
			for (int i = 0; i < n; i++)
				cr_assert_eq(got[i], f[i], "type %d n=%d: element %d is %g, not %g", t, n, i,
					     got[i], f[i]);
			cr_assert_eq(got[n], -7.0f, "type %d: wrote past %d elements", t, n);
		}
}

/* The scalar conversions against values whose encodings are known,
 * subnormals, infinities and rounding ties included. */
Test(kernels, sixteen_bit_conversions_are_exact)
{
	const struct { uint16_t h; float f; } f16[] = {
		{ 0x0000, 0.0f }, { 0x8000, -0.0f }, { 0x3c00, 1.0f }, { 0xc000, -2.0f },
		{ 0x7bff, 65504.0f }, { 0x0001, 0x1p-24f }, { 0x03ff, 0x3ffp-24f },
		{ 0x0400, 0x1p-14f }, { 0x7c00, INFINITY }, { 0xfc00, -INFINITY },
	};
	for (size_t i = 0; i < sizeof(f16) / sizeof(f16[0]); i++) {
		cr_expect_eq(kern_f16_to_f32(f16[i].h), f16[i].f, "f16 %#x", f16[i].h);
		cr_expect_eq(kern_f32_to_f16(f16[i].f), f16[i].h, "to f16 %g", f16[i].f);
		float v;
		kern_wmat_to_f32((struct kern_wmat){ &f16[i].h, KERN_W_F16 }, 1, &v);
		cr_expect_eq(v, f16[i].f, "row conversion of f16 %#x", f16[i].h);
	}
	cr_expect(isnan(kern_f16_to_f32(0x7e00)));
	cr_expect_eq(kern_f32_to_bf16(1.0f), 0x3f80);
	cr_expect_eq(kern_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80, "a tie rounds to even (down)");
	cr_expect_eq(kern_f32_to_bf16(1.0f + 0x3p-8f), 0x3f82, "a tie rounds to even (up)");
	cr_expect_eq(kern_bf16_to_f32(0xc0a0), -5.0f);
	cr_expect(isnan(kern_bf16_to_f32(kern_f32_to_bf16(NAN))), "NaN stays NaN");
	cr_expect_eq(kern_f32_to_f16(1.0f + 0x1p-11f), 0x3c00, "f16 ties round to even");
}

/* A positive 16-bit code's value, decoded here: f16 by its fields, bf16 as
 * the top half of an f32. The largest code stands for where rounding
 * overflows to it: infinity rounds like 2^16 (f16) or 2^128 (bf16). */
static double code_value(int t, uint32_t h)
{
	if (t == KERN_W_F16) {
		uint32_t e = h >> 10 & 31, m = h & 1023;
		return e == 31 ? 65536.0 : e ? ldexp(1024 + m, (int)e - 25) : ldexp(m, -24);
	}
	if (h >= 0x7f80)
		return ldexp(1, 128);
	uint32_t u = h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* The 16-bit code nearest f, ties to the even code: round to nearest even
 * by its definition, independent of runtime/kernels/weight.c. */
static uint16_t nearest_code(int t, float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	uint32_t sign = u >> 31 ? 0x8000u : 0, top = t == KERN_W_F16 ? 0x7c00u : 0x7f80u;
	double x = fabs((double)f);
	uint32_t lo = 0, hi = top; /* code_value(lo) <= x, found by bisection */
	if (x >= code_value(t, top))
		return (uint16_t)(sign | top);
	while (hi - lo > 1) {
		uint32_t mid = (lo + hi) / 2;
		if (code_value(t, mid) <= x)
			lo = mid;
		else
			hi = mid;
	}
	double dlo = x - code_value(t, lo), dhi = code_value(t, lo + 1) - x;
	uint32_t h = dlo < dhi ? lo : dhi < dlo ? lo + 1 : (lo & 1 ? lo + 1 : lo);
	return (uint16_t)(sign | h);
}

static bool is_nan_code(int t, uint16_t h)
{
	return t == KERN_W_F16 ? (h & 0x7c00) == 0x7c00 && (h & 0x3ff)
			      : (h & 0x7f80) == 0x7f80 && (h & 0x7f);
}

/* The scalar f32 -> 16-bit conversions against the row conversion (the
 * CPU's own vcvtps2ph and the integer bf16 rounding with AVX-512), and both
 * against round-to-nearest-even written above, over bit patterns of every
 * exponent: normals, subnormals, overflow, NaN. In the plain C run the row
 * conversion is the scalar one, so there the rounding written here is what
 * checks it. */
Test(kernels, scalar_and_vector_rounding_agree)
{
	enum { N = 1 << 16 };
	static float src[N];
	static uint16_t got[N];
	uint32_t seed = 6;
	for (int i = 0; i < N; i++) {
		seed = seed * 1664525u + 1013904223u;
		/* exponents 90..150 (the f16 range and either side), any sign
		 * and mantissa; every 64th a tie (low 13 bits 0x1000) */
		uint32_t u = (seed & 0x807fffffu) | (90u + (seed >> 8) % 61) << 23;
		if (i % 64 == 0)
			u = (u & ~0x1fffu) | 0x1000u;
		if (i == 1)
			u = 0x7fc00001u;
		memcpy(&src[i], &u, 4);
	}
	for (int t = KERN_W_F16; t <= KERN_W_BF16; t++) {
		kern_f32_to_wtype((enum kern_wtype)t, src, N, got);
		for (int i = 0; i < N; i++) {
			uint16_t want = t == KERN_W_F16 ? kern_f32_to_f16(src[i]) : kern_f32_to_bf16(src[i]);
			cr_assert_eq(got[i], want, "type %d: %a is %#x, not %#x", t, (double)src[i],
				     got[i], want);
			if (isnan(src[i])) {
				cr_assert(is_nan_code(t, want), "type %d: NaN became %#x", t, want);
				continue;
			}
			uint16_t ref = nearest_code(t, src[i]);
			cr_assert_eq(want, ref, "type %d: %a rounds to %#x, the nearest (ties to even) is %#x",
				     t, (double)src[i], want, ref);
		}
	}
}

/* Decode attention: scores of G heads over n keys of d dims, and their
 * weighted sum of values, for head counts, key counts and widths with
 * tails of every vector form (AVX-512 16, AVX2 8) and whole heads of 16, 48
 * and 64 dims (the AVX-512 kernel's runs of keys). */
Test(kernels, attention_products_equal_the_plain_sums)
{
	enum { MAXG = 5, MAXN = 35, MAXD = 70, LDQ = MAXD + 1, LDS = MAXN + 3, LDO = MAXD + 2 };
	static float q[MAXG * LDQ], K[MAXN * MAXD], s[MAXG * LDS], o[MAXG * LDO], o0[MAXG * LDO];
	uint32_t seed = 9;
	for (int G = 1; G <= MAXG; G++)
		for (int n = 1; n <= MAXN; n += 2)
			for (int d = 1; d <= MAXD; d += (d < 20 ? 1 : d == 62 ? 2 : 7)) {
				for (int i = 0; i < MAXG * LDQ; i++)
					q[i] = val(&seed);
				for (int i = 0; i < n * d; i++)
					K[i] = val(&seed);
				for (int i = 0; i < MAXG * LDO; i++)
					o[i] = o0[i] = val(&seed);
				memset(s, 0, sizeof(s));
				kern_dots(G, n, d, q, LDQ, K, 0.5f, s, LDS);
				/* The scores as weights: K stands in for V. */
				kern_axpys(G, n, d, s, LDS, K, o, LDO);
				for (int g = 0; g < G; g++) {
					for (int t = 0; t < n; t++) {
						double want = 0;
						for (int j = 0; j < d; j++)
							want += (double)q[g * LDQ + j] * K[t * d + j];
						cr_assert(fabs(s[g * LDS + t] - 0.5 * want) <= 1e-5 * (1 + d),
							  "dots G=%d n=%d d=%d: s[%d][%d] = %g, not %g", G, n, d,
							  g, t, s[g * LDS + t], 0.5 * want);
					}
					for (int j = 0; j < LDO; j++) {
						double want = o0[g * LDO + j];
						for (int t = 0; t < n && j < d; t++)
							want += (double)s[g * LDS + t] * K[t * d + j];
						cr_assert(fabs(o[g * LDO + j] - want) <= 1e-5 * (1 + n * d),
							  "axpys G=%d n=%d d=%d: o[%d][%d] = %g, not %g", G, n, d,
							  g, j, o[g * LDO + j], want);
					}
				}
			}
}

/* The same kernels on keys that end where an unmapped page begins: a tail
 * read past the last key's last dim would fault, which the sums above, on
 * keys inside a larger array, cannot see. */
Test(kernels, attention_products_never_read_past_the_keys)
{
	enum { MAXG = 4, MAXN = 9, MAXD = 70, LD = MAXD + 1 };
	long page = sysconf(_SC_PAGESIZE);
	char *map = mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			 -1, 0);
	cr_assert(map != MAP_FAILED);
	cr_assert(!mprotect(map + page, (size_t)page, PROT_NONE));
	static float q[MAXG * LD], s[MAXG * LD], o[MAXG * LD];
	uint32_t seed = 5;
	for (int i = 0; i < MAXG * LD; i++)
		q[i] = val(&seed);
	for (int d = 1; d <= MAXD; d += (d < 20 ? 1 : 7))
		for (int n = 1; n <= MAXN; n += 2) {
			float *K = (float *)(map + page) - (size_t)n * d; /* ends at the guard page */
			for (int i = 0; i < n * d; i++)
				K[i] = val(&seed);
			for (int G = 1; G <= MAXG; G++) {
				kern_dots(G, n, d, q, LD, K, 1.0f, s, LD);
				kern_axpys(G, n, d, s, LD, K, o, LD);
			}
		}
	munmap(map, 2 * (size_t)page);
}

/* exp and its sum after the max (a softmax's numerators), and SiLU(y) * up,
 * for every length up to two vectors and a tail, over inputs from -100 to
 * 100, with what lies past the end untouched. */
Test(kernels, exponentials_equal_the_plain_ones)
{
	enum { MAXN = 40 };
	float x[MAXN + 1], x0[MAXN + 1], y[MAXN + 1], up[MAXN + 1];
	uint32_t seed = 3;
	for (int n = 1; n <= MAXN; n++)
		for (int scale = 1; scale <= 100; scale *= 10) {
			for (int i = 0; i <= MAXN; i++) {
				x[i] = x0[i] = val(&seed) * (float)scale;
				up[i] = val(&seed);
			}
			memcpy(y, x, sizeof(x));
			float mx;
			float sum = kern_exp_sum(x, n, &mx);
			double want_mx = -INFINITY, want_sum = 0;
			for (int i = 0; i < n; i++)
				want_mx = fmax(want_mx, x0[i]);
			for (int i = 0; i < n; i++) {
				double e = exp(x0[i] - want_mx);
				want_sum += e;
				cr_assert(fabs(x[i] - e) <= 2e-7 + 1e-6 * e, "exp n=%d: x[%d] = %g, not %g", n,
					  i, x[i], e);
			}
			cr_assert_eq(mx, (float)want_mx, "max n=%d", n);
			cr_assert(fabs(sum - want_sum) <= 1e-6 * want_sum * n, "sum n=%d: %g, not %g", n,
				  sum, want_sum);
			cr_assert_eq(x[n], x0[n], "exp_sum n=%d wrote past the end", n);
			kern_silu_mul(y, up, n);
			for (int i = 0; i < n; i++) {
				double v = x0[i], want = v / (1 + exp(-v)) * up[i];
				cr_assert(fabs(y[i] - want) <= 1e-6 * (1 + fabs(want)),
					  "silu n=%d: y[%d] = %g, not %g (x %g)", n, i, y[i], want, v);
			}
			cr_assert_eq(y[n], x0[n], "silu_mul n=%d wrote past the end", n);
		}
}

/* The norms' sums, for every length up to five runs of eight and a tail,
 * with and without a shift and a square. */
Test(kernels, row_sums_equal_the_plain_ones)
{
	enum { MAXN = 41 };
	float x[MAXN];
	uint32_t seed = 5;
	for (int i = 0; i < MAXN; i++)
		x[i] = val(&seed) * 10.0f;
	for (int n = 0; n <= MAXN; n++)
		for (int square = 0; square < 2; square++)
			for (double shift = -0.5; shift <= 0.5; shift += 0.5) {
				double want = 0, mag = 0;
				for (int i = 0; i < n; i++) {
					double v = x[i] - shift;
					want += square ? v * v : v;
					mag += fabs(square ? v * v : v);
				}
				double got = kern_row_sum(x, n, shift, square);
				cr_assert(fabs(got - want) <= 1e-12 * (1 + mag),
					  "n=%d square=%d shift=%g: %.17g, not %.17g", n, square, shift, got,
					  want);
			}
}
