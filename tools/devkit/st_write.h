/* SPDX-License-Identifier: MIT */
/* Writing safetensors files (random models for benchmarks, test checkpoints). */
#ifndef PFX_ST_WRITE_H
#define PFX_ST_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "pfx_error.h"

struct st_out {
	const char *name;
	const char *dtype;     /* written as is, so tests can write odd ones */
	int ndim;
	int64_t shape[8];
	const void *data;
	size_t nbytes;
};

/* Writes the tensors in order, header padded to 8 bytes. 0 or -errno. */
int st_write(const char *path, const struct st_out *t, size_t n, struct pfx_error *err);

#endif
