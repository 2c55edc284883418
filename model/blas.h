/* SPDX-License-Identifier: MIT */
/* OpenBLAS set-up: best kernels for this CPU, one BLAS thread per caller. */
#ifndef PFX_BLAS_H
#define PFX_BLAS_H

/* Idempotent and thread-safe. */
void pfx_blas_init(void);

#endif
