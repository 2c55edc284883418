/* SPDX-License-Identifier: MIT */
/*
 * Which hand-written kernels this process runs. The AVX-512 ones (gemv.c,
 * gemm_few.c) serve where the CPU has them, unless PFX_NO_AVX512 is set in
 * the environment: then the portable paths run (AVX2 or plain C, and
 * OpenBLAS), as on a CPU without AVX-512, so that those paths are tested
 * and compared on this one.
 */
#ifndef PFX_CPU_H
#define PFX_CPU_H

#include <stdbool.h>

bool pfx_cpu_avx512(void);
/* Which of them run, and why, for humans: "AVX-512" or "portable (...)". */
const char *pfx_cpu_kernels(void);

#endif
