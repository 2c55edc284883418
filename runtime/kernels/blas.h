/* SPDX-License-Identifier: MIT */
/* OpenBLAS set-up: best kernels for this CPU, one BLAS thread per caller. */
#ifndef PFX_BLAS_H
#define PFX_BLAS_H

#include <stdbool.h>
#include <stddef.h>

/* Idempotent and thread-safe; also run when the library is loaded. */
void pfx_blas_init(void);

/* What the CPU can run, from CPUID and XGETBV: an instruction set counts
 * only when the OS also saves its registers. */
struct pfx_cpu_isa {
	bool amd;  /* AMD or Hygon: AVX2 parts get OpenBLAS's Zen tuning */
	bool sse3, ssse3, sse41, sse42;
	bool avx, avx2, fma;
	bool avx512f, avx512dq, avx512bw, avx512vl, avx512cd, avx512_bf16;
	bool amx_bf16;  /* AMX tiles with BF16, registers saved by the OS */
};

void pfx_cpu_isa_probe(struct pfx_cpu_isa *isa);

/*
 * The best OpenBLAS core type (OPENBLAS_CORETYPE spelling, e.g.
 * "SkylakeX") whose instructions isa has, among those has(core, ctx)
 * accepts (the cores this OpenBLAS was built with). NULL when none fits.
 * Pure: tests pass made-up feature sets.
 */
const char *pfx_blas_best_core(const struct pfx_cpu_isa *isa,
			       bool (*has)(const char *core, void *ctx), void *ctx);

/* The core this process should run: the best for this CPU among those
 * this OpenBLAS has and accepts when asked (a core it refuses to switch to
 * gives way to the next best). NULL when it cannot tell (OpenBLAS built for
 * a single core, or a CPU older than every core). */
const char *pfx_blas_expected_core(void);

/*
 * Whether the running core is the expected one. When it is not, returns
 * false and writes why into buf (e.g. "OPENBLAS_CORETYPE=Prescott is set"
 * or "OpenBLAS did not accept it"); true when they match or nothing is
 * expected.
 */
bool pfx_blas_core_ok(char *buf, size_t cap);

#endif
