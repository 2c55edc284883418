/* SPDX-License-Identifier: MIT */
/*
 * Which of our own kernels this process runs. The AVX-512 ones (gemv.c,
 * gemm_few.c) serve where the CPU has them, unless PFX_NO_AVX512 is set to
 * anything but "" or "0" when the process first needs them (it is read
 * once): then our portable paths run (AVX2 or plain C, and sgemm where the
 * AVX-512 kernels replace it), as on a CPU without AVX-512, so that those
 * paths are tested and compared on this one. OpenBLAS keeps its own kernel
 * choice (OPENBLAS_CORETYPE, blas.c).
 */
#ifndef PFX_CPU_H
#define PFX_CPU_H

#include <stdbool.h>

bool pfx_cpu_avx512(void);
/* AVX2, FMA and F16C: the portable vector paths (decided once), unless
 * PFX_NO_AVX2 is set as PFX_NO_AVX512 is: with both, the plain C paths run,
 * as on a CPU without either, so that they are tested here too. */
bool pfx_cpu_avx2(void);
/* Which of them run, and why, for humans: "AVX-512", "AVX2 (...)" or
 * "portable, plain C (...)". */
const char *pfx_cpu_kernels(void);

#endif
