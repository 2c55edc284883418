/* SPDX-License-Identifier: MIT */
/* NumPy .npy output for float32 matrices. */
#ifndef PFX_NPY_H
#define PFX_NPY_H

#include <stddef.h>

#include "pfx_error.h"

/* Writes a C-order float32 array of shape (rows, cols). 0 or -errno. */
int npy_write_f32(const char *path, const float *data, size_t rows, size_t cols,
		  struct pfx_error *err);

#endif
