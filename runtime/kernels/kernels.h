/* SPDX-License-Identifier: MIT */
/*
 * The kernels' boundary: what the rest of the runtime (the forward pass,
 * loading, the tools and tests) may call of kernels/. Everything here is
 * internal to libprefixd-runtime and named kern_*, apart from the exported
 * pfx_* API of include/prefixd-runtime/; the vector helpers behind it
 * (vec_avx2.h, wload.h) stay private to this folder.
 */
#ifndef PFX_KERNELS_H
#define PFX_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pfx_error.h"

/* ==== Weight matrices (weight.c) ==== */

/*
 * Weight matrices as the model holds them: f32, or a checkpoint's f16 and
 * bf16 values kept as they are, which the kernels convert to f32 as they
 * read them (bf16: a shift; f16: F16C). Every product then sees exactly the
 * f32 values an upcast copy would hold, at half the bytes read.
 */

enum kern_wtype { KERN_W_F32, KERN_W_F16, KERN_W_BF16 };

struct kern_wmat {
	const void *p;         /* row-major (out, in) elements of type */
	enum kern_wtype type;
};

static inline size_t kern_wtype_size(enum kern_wtype t)
{
	return t == KERN_W_F32 ? 4 : 2;
}

/* The matrix from element `elems` on (a row offset times the row length). */
static inline struct kern_wmat kern_wmat_at(struct kern_wmat w, size_t elems)
{
	return (struct kern_wmat){ (const char *)w.p + elems * kern_wtype_size(w.type), w.type };
}

float kern_f16_to_f32(uint16_t h);
float kern_bf16_to_f32(uint16_t h);
/* Round to nearest even, as PyTorch's .to(float16 / bfloat16) does. */
uint16_t kern_f32_to_f16(float f);
uint16_t kern_f32_to_bf16(float f);

/* dst[i] = w's element i as f32, for i < n: rows of a 16-bit matrix for the
 * products that read f32 (embeddings, panels for sgemm), KV for attention. */
void kern_wmat_to_f32(struct kern_wmat w, size_t n, float *dst);
/* The other way, rounding to nearest even: n values of src stored at dst
 * as elements of type t (the KV a forward pass writes). */
void kern_f32_to_wtype(enum kern_wtype t, const float *src, size_t n, void *dst);

/* ==== Which kernels run (cpu.c) ==== */

/* What the CPU can run, from CPUID and XGETBV: an instruction set counts
 * only when the OS also saves its registers. */
struct kern_cpu_isa {
	bool amd;  /* AMD or Hygon: AVX2 parts get OpenBLAS's Zen tuning */
	bool sse3, ssse3, sse41, sse42;
	bool avx, avx2, fma, f16c;
	bool avx512f, avx512dq, avx512bw, avx512vl, avx512cd, avx512_bf16;
	bool amx_bf16;  /* AMX tiles with BF16, registers saved by the OS */
};

void kern_cpu_isa_probe(struct kern_cpu_isa *isa);

/*
 * Which of our own kernels this process runs. The AVX-512 ones (gemv.c,
 * gemm_few.c) serve where the CPU has them, unless PFX_NO_AVX512 is set to
 * anything but "" or "0" when the process first needs them (it is read
 * once): then our portable paths run (AVX2 or plain C, and sgemm where the
 * AVX-512 kernels replace it), as on a CPU without AVX-512, so that those
 * paths are tested and compared on this one. OpenBLAS keeps its own kernel
 * choice (OPENBLAS_CORETYPE, blas.c).
 */

bool kern_cpu_avx512(void);
/* AVX2, FMA and F16C: the portable vector paths (decided once), unless
 * PFX_NO_AVX2 is set as PFX_NO_AVX512 is: with both, the plain C paths run,
 * as on a CPU without either, so that they are tested here too. */
bool kern_cpu_avx2(void);
/* Which of them run, and why, for humans: "AVX-512", "AVX2 (...)" or
 * "portable, plain C (...)". */
const char *kern_cpu_kernels(void);

/* ==== OpenBLAS (blas.c) ==== */

/* OpenBLAS set-up: best kernels for this CPU, one BLAS thread per caller. */

/* Idempotent and thread-safe; also run when the library is loaded. */
void kern_blas_init(void);

/*
 * The best OpenBLAS core type (OPENBLAS_CORETYPE spelling, e.g.
 * "SkylakeX") whose instructions isa has, among those has(core, ctx)
 * accepts (the cores this OpenBLAS was built with). NULL when none fits.
 * Pure: tests pass made-up feature sets.
 */
const char *kern_blas_best_core(const struct kern_cpu_isa *isa,
				bool (*has)(const char *core, void *ctx), void *ctx);

/* The core this process should run: the best for this CPU among those
 * this OpenBLAS has and accepts when asked (a core it refuses to switch to
 * gives way to the next best). NULL when it cannot tell (OpenBLAS built for
 * a single core, or a CPU older than every core). */
const char *kern_blas_expected_core(void);

/*
 * Whether the running core is the expected one. When it is not, returns
 * false and says why in why (e.g. "OPENBLAS_CORETYPE=Prescott is set"
 * or "OpenBLAS did not accept it"); true when they match or nothing is
 * expected.
 */
bool kern_blas_core_ok(struct pfx_error *why);

/* ==== A few vectors (gemv.c) ==== */

/*
 * Matrix times a few vectors, for decode steps: y_t = W x_t (+ beta y_t)
 * for t < T <= GEMV_MAX_T, with W row-major (n, k). Streams W once, in
 * order: at one token per step this is bound by memory bandwidth, where
 * OpenBLAS's sgemv reaches only ~80% of it here.
 */

#define GEMV_MAX_T 4

/* W of any weight type (weight.c above), converted to f32 in registers: the
 * results equal those of W's f32 values. */
void kern_gemv(int T, int n, int k, struct kern_wmat W, const float *x, int ldx, float beta,
	       float *y, int ldy);

/*
 * Decode attention reads every key and value once per step; these keep that
 * a single pass with vector loads instead of sgemm calls on 1..8-row shapes,
 * whose set-up costs more than the arithmetic.
 *
 * kern_dots: s[g * lds + t] = scale * (q_g . K_t) for g < G, t < n, where
 * q_g = q + g * ldq and K_t = K + t * d.
 * kern_axpys: o_g += sum_t p[g * ldp + t] * V_t (V_t = V + t * d, o_g = o + g * ldo).
 */
void kern_dots(int G, int n, int d, const float *q, int ldq, const float *K, float scale, float *s,
	       int lds);
void kern_axpys(int G, int n, int d, const float *p, int ldp, const float *V, float *o, int ldo);
/* x[i] = exp(x[i] - max x) for i < n (n >= 1); returns their sum, *max_out the max. */
float kern_exp_sum(float *x, int n, float *max_out);
/* Softmax down each column t < ld of S (n rows of ld floats) over its rows
 * [0, valid[t]), 1 <= valid[t] <= n; the rest of the column is set to 0, and
 * inv[t] is 1 / the column's sum, the normalisation left to whoever reads
 * the column. */
void kern_softmax_cols(float *S, int n, int ld, const int *valid, float *inv);
/* y[i] = silu(y[i]) * up[i]: SwiGLU's activation. */
void kern_silu_mul(float *y, const float *up, int n);
/* The sum of (x[i] - shift) squared for i < n, or of x[i] - shift when
 * square is false, in double: the norms' mean and variance. */
double kern_row_sum(const float *x, int n, double shift, bool square);

/* ==== A few dozen rows (gemm_few.c) ==== */

/*
 * Matrix products of a few dozen rows, y_t = W x_t (+ beta y_t) for
 * GEMV_MAX_T < T <= GEMM_FEW_MAX_T, W row-major (n, k): the shape of a short
 * suffix after an attached prefix. OpenBLAS packs all of W on every call,
 * which at 32 rows is a fifth of the time and leaves 60-70 GFLOP/s a core
 * here with weights streaming from memory; these kernels read W where it
 * is, one broadcast element at a time against x transposed, and reach
 * 90-100 (bench/forward's prefill figures, docs/perf/2026-11-22-forward-f32.md).
 */

#define GEMM_FEW_MAX_T 64

/* Whether the kernels run (AVX-512, not turned off: cpu.c); if not, use
 * sgemm. T may be 1 to GEMM_FEW_MAX_T in all of them; the layer products
 * use them from GEMV_MAX_T + 1 rows, attention from 1. */
int kern_gemm_few_ok(void);
/* Columns of x transposed: ld of xT for T rows (T rounded up to 16). */
int kern_gemm_few_ld(int T);
/* xT[p * ld + t] = x[t * ldx + p] for p < k, t < ld, zero for t >= T. */
void kern_gemm_few_transpose(int T, int k, const float *x, int ldx, float *xT);
/* y[t * ldy + i] = sum_p W[i * k + p] xT[p * ld + t] (+ beta y) for t < T, i < n. */
void kern_gemm_few(int T, int n, int k, const float *xT, const float *W, float beta, float *y,
		   int ldy);
/* The same with W in bf16, each element widened to its f32 value in a
 * register: equal to kern_gemm_few on W's f32 values, without converting
 * W into a buffer first (which at a few dozen rows cost as much as the
 * products). */
void kern_gemm_few_bf16(int T, int n, int k, const float *xT, const uint16_t *W, float beta,
			float *y, int ldy);
/* yT[i * ldy + t] = sum_p W[i * sn + p * sk] xT[p * ld + t] (+ beta yT) for
 * i < n and every t < ld, the padding lanes too (so ldy >= ld): the product
 * stored transposed, as attention keeps its scores and outputs. W's rows
 * (sk == 1: keys) or its columns (sn == 1: values, read as V^T) must be
 * contiguous. */
void kern_gemm_few_t(int T, int n, int k, const float *xT, const float *W, int sn, int sk,
		     float beta, float *yT, int ldy);

/* ==== bf16 products for prefill (gemm_bf16.c, gemm_amx.c) ==== */

/*
 * y = x W^T with W held in bf16 and x rounded to bf16 for the product
 * alone, every product summed in f32: what --matmul bf16 runs for the
 * layer products of more than GEMV_MAX_T rows. Three ways, one result up
 * to the order of the f32 sums:
 *   KERN_BF16_AMX: AMX tiles (TDPBF16PS), where the CPU has AMX-BF16 and
 *     the kernel grants the process its tile state (ARCH_REQ_XCOMP_PERM);
 *   KERN_BF16_AVX512: AVX512-BF16 dot products (VDPBF16PS);
 *   KERN_BF16_SGEMM: neither (or turned off): the caller rounds x
 *     (kern_bf16_round) and runs its f32 products on W's f32 values, at
 *     the speed of the f32 path.
 * Both dot-product paths read the same packed operands: x as bf16 rows
 * (kern_bf16_pack_a) and W in panels of 16 columns, pairs of consecutive
 * inputs side by side (kern_bf16_pack_b), the layout both instructions take.
 */
enum kern_bf16_path { KERN_BF16_SGEMM, KERN_BF16_AVX512, KERN_BF16_AMX };

/* Whether this CPU and OS can run path (AMX: asks for the tile state once).
 * Ignores the switches below, so that tests run every path there is. */
bool kern_bf16_can(enum kern_bf16_path p);
/*
 * The path --matmul bf16 runs, decided once: AMX, else AVX512-BF16, else
 * SGEMM. PFX_NO_AMX turns AMX off and PFX_NO_AVX512_BF16 the dot products
 * (set as PFX_NO_AVX512 is); PFX_NO_AVX512 turns both off, as on a CPU
 * without AVX-512, since their packing is AVX-512 code.
 */
enum kern_bf16_path kern_bf16_path(void);
/* "bf16, AMX-BF16 tiles", "bf16, AVX512-BF16 (why not AMX)", or why
 * neither runs, for humans (pfx_model_matmul). */
const char *kern_bf16_path_name(void);

/* Rows of packed x for m rows (a multiple of 32, the AMX block), and the
 * elements between its rows for k inputs (k rounded up to 32, and never a
 * multiple of 64 so that the rows of a tile fall in different cache sets). */
int kern_bf16_rows(int m);
int kern_bf16_lda(int k);
/* Rows [r0, r1) of packed x: a[r * lda + p] = bf16(x[r * ldx + p]) for
 * p < k, rounded to nearest even, 0 for p >= k and for rows r >= m. */
void kern_bf16_pack_a(int r0, int r1, int m, int k, const float *x, int ldx, uint16_t *a);
/* Elements of a panel of n rows of W (n rounded up to 16). */
size_t kern_bf16_panel_elems(int n, int k);
/* W's rows [0, n) (row-major, k elements each) as a panel: block b of 16
 * rows holds, for each pair q of inputs, W[16 b + i][2q], W[16 b + i][2q + 1]
 * for i < 16 at panel[(b * kp / 2 + q) * 32 + 2 i], kp = k rounded up to 32;
 * zero past n and k. */
void kern_bf16_pack_b(int n, int k, const uint16_t *w, uint16_t *panel);
/* y[i * ldy + j] = sum_p a[i][p] * W[j][p] (+ beta y) for i < m, j < n, from
 * packed a (kern_bf16_rows(m) rows) and a panel of W, on path p (AMX or
 * AVX512, and kern_bf16_can(p)). */
void kern_gemm_bf16(enum kern_bf16_path p, int m, int n, int k, const uint16_t *a,
		   const uint16_t *panel, float beta, float *y, int ldy);
/* dst[i] = src[i] rounded to the nearest bf16 (even on ties), as f32: the
 * SGEMM path's x, the values the other paths multiply. */
void kern_bf16_round(const float *src, size_t n, float *dst);

/* gemm_amx.c, for gemm_bf16.c: whether the process may use tiles (asked
 * once), and the product on them. */
bool kern_amx_granted(void);
void kern_gemm_amx(int m, int n, int k, const uint16_t *a, const uint16_t *panel, float beta,
		  float *y, int ldy);


/* ==== Attention of a few rows over many keys (att_few.c) ==== */

/*
 * One block's step of an online softmax, the block's scores S transposed
 * (n keys x ld rows, S[j * ld + t]), for attention.c's split path. Row t
 * sees the block's keys [lo[t], hi[t]) (clamped to [0, n); none: the row is
 * left as it was). m[t] is the row's running max, l[t] its running sum of
 * weights, OT (hd x ld, OT[d * ld + t]) its unnormalised output: the scores
 * become their weights exp(s - max) (0 where not seen), and l and OT are
 * scaled down where the max grew; the caller then adds the block's values
 * weighted by S to OT. AVX-512 for ld 16, 32, 48, 64; plain C otherwise.
 * Meanwhile it asks for the pf_bytes at pf (the block's values, next
 * read), a few lines a step: prefetches, which change nothing and never
 * fault.
 */
void kern_att_online(float *S, int n, int ld, const int *lo, const int *hi, float *m, float *l,
		     float *OT, int hd, const void *pf, size_t pf_bytes);

#endif
